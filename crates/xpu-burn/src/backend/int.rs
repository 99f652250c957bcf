//! burn's `IntTensorOps` on xpu.

use std::future::Future;

use burn_tensor::ops::{BoolTensor, Device, FloatTensor, IntElem, IntTensor, IntTensorOps};
use burn_tensor::{DType, Distribution, IntDType, Shape, Slice, TensorData};

use super::common::*;
use crate::dtype::is_float;
use crate::error::or_panic;
use crate::ops::reduce::{self, ReduceOp, ScanOp};
use crate::ops::{index, matmul, random};
use crate::runtime::ScalarValue;
use crate::Xpu;

fn i(v: i64) -> ScalarValue {
    ScalarValue::I(v)
}

fn is_int(d: DType) -> bool {
    !is_float(d) && d != DType::Bool && !matches!(d, DType::QFloat(_))
}

/// Integer division that never traps (x86 traps on `/ 0` and `MIN / -1`): `x / 0` is 0.
const INT_DIV: &str = "(B == 0 ? (TO)0 : (B == (T0)-1 ? (TO)(-a0) : (TO)(a0 / B)))";
/// Python's remainder (the sign of the divisor), never trapping: `x % 0` is 0.
const INT_REM: &str = "(B == 0 || B == (T0)-1 ? (TO)0 : ((a0 % B != 0 && ((a0 % B < 0) != (B < 0))) ? (TO)(a0 % B + B) : (TO)(a0 % B)))";

impl IntTensorOps<Self> for Xpu {
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        empty(shape, device.index, dtype.into())
    }

    fn int_into_data(tensor: IntTensor<Self>) -> impl Future<Output = TensorData> + Send {
        let data = into_data(&tensor);
        async move { data }
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        from_data(data, device.index, is_int, DType::I64)
    }

    fn int_device(tensor: &IntTensor<Self>) -> Device<Self> {
        crate::XpuDevice::new(tensor.device())
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        to_device(&tensor, device.index)
    }

    fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        reshape(&tensor, shape)
    }

    fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> {
        slice(&tensor, slices)
    }

    fn int_slice_assign(
        tensor: IntTensor<Self>,
        slices: &[Slice],
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        slice_assign(&tensor, slices, &value)
    }

    fn int_into_float(tensor: IntTensor<Self>) -> FloatTensor<Self> {
        cast(&tensor, DType::F32)
    }

    fn int_mask_where(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        source: IntTensor<Self>,
    ) -> IntTensor<Self> {
        mask_where(&tensor, &mask, &source)
    }

    fn int_mask_fill(
        tensor: IntTensor<Self>,
        mask: BoolTensor<Self>,
        value: IntElem<Self>,
    ) -> IntTensor<Self> {
        mask_fill(&tensor, &mask, i(value))
    }

    fn int_gather(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        or_panic(index::gather(dim, &tensor, &indices))
    }

    fn int_scatter(
        dim: usize,
        tensor: IntTensor<Self>,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        or_panic(index::scatter_add(dim, &tensor, &indices, &value))
    }

    fn int_select(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> IntTensor<Self> {
        or_panic(index::select(&tensor, dim, &indices))
    }

    fn int_select_assign(
        tensor: IntTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: IntTensor<Self>,
    ) -> IntTensor<Self> {
        or_panic(index::select_add(&tensor, dim, &indices, &value))
    }

    fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> {
        or_panic(index::cat(&tensors, dim))
    }

    fn int_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "==")
    }

    fn int_not_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "!=")
    }

    fn int_equal_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), "==")
    }

    fn int_not_equal_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), "!=")
    }

    fn int_greater(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, ">")
    }

    fn int_greater_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), ">")
    }

    fn int_greater_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, ">=")
    }

    fn int_greater_equal_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), ">=")
    }

    fn int_lower(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "<")
    }

    fn int_lower_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), "<")
    }

    fn int_lower_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "<=")
    }

    fn int_lower_equal_elem(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, i(rhs), "<=")
    }

    fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 + a1")
    }

    fn int_add_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 + s0")
    }

    fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 - a1")
    }

    fn int_sub_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 - s0")
    }

    fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 * a1")
    }

    fn int_mul_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 * s0")
    }

    fn int_div(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, &INT_DIV.replace('B', "a1"))
    }

    fn int_div_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), &INT_DIV.replace('B', "s0"))
    }

    fn int_remainder(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, &INT_REM.replace('B', "a1"))
    }

    fn int_remainder_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), &INT_REM.replace('B', "s0"))
    }

    fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        or_panic(matmul::matmul(&lhs, &rhs))
    }

    fn int_neg(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "-a0")
    }

    fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        full(shape, device.index, i(0), dtype.into())
    }

    fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        full(shape, device.index, i(1), dtype.into())
    }

    fn int_full(
        shape: Shape,
        fill_value: IntElem<Self>,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        full(shape, device.index, i(fill_value), dtype.into())
    }

    fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Sum, d))
    }

    fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Sum, d))
    }

    fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Prod, d))
    }

    fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Prod, d))
    }

    fn int_mean(tensor: IntTensor<Self>) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Mean, d))
    }

    fn int_mean_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Mean, d))
    }

    fn int_cumsum(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Sum))
    }

    fn int_cumprod(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Prod))
    }

    fn int_cummin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Min))
    }

    fn int_cummax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Max))
    }

    fn int_argmax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::reduce_dim(
            &tensor,
            dim,
            ReduceOp::ArgMax,
            DType::I64,
        ))
    }

    fn int_argmin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::reduce_dim(
            &tensor,
            dim,
            ReduceOp::ArgMin,
            DType::I64,
        ))
    }

    fn int_max(tensor: IntTensor<Self>) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Max, d))
    }

    fn int_max_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Max, d))
    }

    fn int_max_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::extreme_with_indices(&tensor, dim, true, DType::I64))
    }

    fn int_min(tensor: IntTensor<Self>) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Min, d))
    }

    fn int_min_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Min, d))
    }

    fn int_min_dim_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::extreme_with_indices(
            &tensor,
            dim,
            false,
            DType::I64,
        ))
    }

    fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "a0 < 0 ? -a0 : a0")
    }

    fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> {
        swap_dims(&tensor, dim1, dim2)
    }

    fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        permute(&tensor, axes)
    }

    fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> {
        flip(&tensor, axes)
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
    ) -> IntTensor<Self> {
        or_panic(random::random(
            device.index,
            &shape.dims,
            distribution,
            DType::I64,
        ))
    }

    fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> {
        expand(&tensor, shape)
    }

    fn int_sign(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "a0 > 0 ? (TO)1 : (a0 < 0 ? (TO)-1 : (TO)0)")
    }

    fn bitwise_and(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 & a1")
    }

    fn bitwise_and_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 & s0")
    }

    fn bitwise_or(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 | a1")
    }

    fn bitwise_or_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 | s0")
    }

    fn bitwise_xor(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 ^ a1")
    }

    fn bitwise_xor_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 ^ s0")
    }

    fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "~a0")
    }

    fn bitwise_left_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 << a1")
    }

    fn bitwise_left_shift_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 << s0")
    }

    fn bitwise_right_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        binary(&lhs, &rhs, "a0 >> a1")
    }

    fn bitwise_right_shift_scalar(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        scalar_op(&lhs, i(rhs), "a0 >> s0")
    }

    fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> {
        cast(&tensor, dtype.into())
    }

    fn int_unfold(
        tensor: IntTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> IntTensor<Self> {
        unfold(&tensor, dim, size, step)
    }

    fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        or_panic(reduce::sort(&tensor, dim, descending)).0
    }

    fn int_sort_with_indices(
        tensor: IntTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::sort(&tensor, dim, descending))
    }

    fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        or_panic(reduce::sort(&tensor, dim, descending)).1
    }
}
