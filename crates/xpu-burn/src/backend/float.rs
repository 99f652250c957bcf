//! burn's `FloatTensorOps` on xpu.

use std::future::Future;

use burn_tensor::ops::{BoolTensor, Device, FloatElem, FloatTensor, FloatTensorOps, IntTensor};
use burn_tensor::{DType, Distribution, FloatDType, Shape, Slice, TensorData};

use super::common::*;
use crate::dtype::is_float;
use crate::error::or_panic;
use crate::ops::reduce::{self, ReduceOp, ScanOp};
use crate::ops::{index, matmul, random};
use crate::runtime::ScalarValue;
use crate::Xpu;

fn f(v: f32) -> ScalarValue {
    ScalarValue::F(v as f64)
}

/// Python's remainder (the sign of the divisor), as torch.remainder, for floats.
pub(crate) const FLOAT_REM: &str =
    "(fmod(a0, B) != 0 && ((fmod(a0, B) < 0) != (B < 0)) ? fmod(a0, B) + B : fmod(a0, B))";

impl FloatTensorOps<Self> for Xpu {
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        from_data(data, device.index, is_float, DType::F32)
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
    ) -> FloatTensor<Self> {
        or_panic(random::random(
            device.index,
            &shape.dims,
            distribution,
            DType::F32,
        ))
    }

    fn float_into_data(tensor: FloatTensor<Self>) -> impl Future<Output = TensorData> + Send {
        let data = into_data(&tensor);
        async move { data }
    }

    fn float_device(tensor: &FloatTensor<Self>) -> Device<Self> {
        crate::XpuDevice::new(tensor.device())
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self> {
        to_device(&tensor, device.index)
    }

    fn float_into_int(tensor: FloatTensor<Self>) -> IntTensor<Self> {
        cast(&tensor, DType::I64)
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        empty(shape, device.index, dtype.into())
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        full(shape, device.index, ScalarValue::F(0.0), dtype.into())
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        full(shape, device.index, ScalarValue::F(1.0), dtype.into())
    }

    fn float_full(
        shape: Shape,
        fill_value: FloatElem<Self>,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        full(shape, device.index, f(fill_value), dtype.into())
    }

    fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, "a0 + a1")
    }

    fn float_add_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), "a0 + s0")
    }

    fn float_clamp_min(tensor: FloatTensor<Self>, min: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&tensor, f(min), "a0 < s0 ? (TO)s0 : a0")
    }

    fn float_clamp_max(tensor: FloatTensor<Self>, max: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&tensor, f(max), "a0 > s0 ? (TO)s0 : a0")
    }

    fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, "a0 - a1")
    }

    fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), "a0 - s0")
    }

    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, "a0 * a1")
    }

    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), "a0 * s0")
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, "a0 / a1")
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), "a0 / s0")
    }

    fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, &FLOAT_REM.replace('B', "a1"))
    }

    fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), &FLOAT_REM.replace('B', "(T0)s0"))
    }

    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        or_panic(matmul::matmul(&lhs, &rhs))
    }

    fn float_cross(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        dim: usize,
    ) -> FloatTensor<Self> {
        super::extra::cross(&lhs, &rhs, dim)
    }

    fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "-a0")
    }

    fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "(T0)1 / a0")
    }

    fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> {
        swap_dims(&tensor, dim1, dim2)
    }

    fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        permute(&tensor, axes)
    }

    fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> {
        flip(&tensor, axes)
    }

    fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        reshape(&tensor, shape)
    }

    fn float_gather(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(index::gather(dim, &tensor, &indices))
    }

    fn float_scatter(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(index::scatter_add(dim, &tensor, &indices, &value))
    }

    fn float_select(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(index::select(&tensor, dim, &indices))
    }

    fn float_select_assign(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(index::select_add(&tensor, dim, &indices, &value))
    }

    fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self> {
        slice(&tensor, slices)
    }

    fn float_slice_assign(
        tensor: FloatTensor<Self>,
        slices: &[Slice],
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        slice_assign(&tensor, slices, &value)
    }

    fn float_mask_where(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        mask_where(&tensor, &mask, &value)
    }

    fn float_mask_fill(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatElem<Self>,
    ) -> FloatTensor<Self> {
        mask_fill(&tensor, &mask, f(value))
    }

    fn float_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "==")
    }

    fn float_not_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "!=")
    }

    fn float_equal_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), "==")
    }

    fn float_not_equal_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), "!=")
    }

    fn float_greater(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, ">")
    }

    fn float_greater_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), ">")
    }

    fn float_greater_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, ">=")
    }

    fn float_greater_equal_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), ">=")
    }

    fn float_lower(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "<")
    }

    fn float_lower_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), "<")
    }

    fn float_lower_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "<=")
    }

    fn float_lower_equal_elem(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> BoolTensor<Self> {
        compare_scalar(&lhs, f(rhs), "<=")
    }

    fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Sum, d))
    }

    fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Sum, d))
    }

    fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Prod, d))
    }

    fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Prod, d))
    }

    fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Mean, d))
    }

    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Mean, d))
    }

    fn float_cumsum(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Sum))
    }

    fn float_cumprod(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Prod))
    }

    fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Min))
    }

    fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        or_panic(reduce::scan(&tensor, dim, ScanOp::Max))
    }

    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        cast(&tensor, dtype.into())
    }

    fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "exp(a0)")
    }

    fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "log(a0)")
    }

    fn float_log1p(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "log1p(a0)")
    }

    fn float_powf(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, "pow(a0, (T0)a1)")
    }

    fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: f32) -> FloatTensor<Self> {
        scalar_op(&tensor, f(value), "pow(a0, (T0)s0)")
    }

    fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "sqrt(a0)")
    }

    fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "fabs(a0)")
    }

    fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "cos(a0)")
    }

    fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "sin(a0)")
    }

    fn float_tan(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "tan(a0)")
    }

    fn float_cosh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "cosh(a0)")
    }

    fn float_sinh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "sinh(a0)")
    }

    fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "tanh(a0)")
    }

    fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "rint(a0)")
    }

    fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "floor(a0)")
    }

    fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "ceil(a0)")
    }

    fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "trunc(a0)")
    }

    fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "erf(a0)")
    }

    fn float_argmax(tensor: FloatTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::reduce_dim(
            &tensor,
            dim,
            ReduceOp::ArgMax,
            DType::I64,
        ))
    }

    fn float_argmin(tensor: FloatTensor<Self>, dim: usize) -> IntTensor<Self> {
        or_panic(reduce::reduce_dim(
            &tensor,
            dim,
            ReduceOp::ArgMin,
            DType::I64,
        ))
    }

    fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Max, d))
    }

    fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Max, d))
    }

    fn float_max_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::extreme_with_indices(&tensor, dim, true, DType::I64))
    }

    fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Min, d))
    }

    fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Min, d))
    }

    fn float_min_dim_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::extreme_with_indices(
            &tensor,
            dim,
            false,
            DType::I64,
        ))
    }

    fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_all(&tensor, ReduceOp::MaxAbs, d))
    }

    fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::MaxAbs, d))
    }

    fn float_any(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        or_panic(reduce::reduce_all(&tensor, ReduceOp::Any, DType::Bool))
    }

    fn float_any_dim(tensor: FloatTensor<Self>, dim: usize) -> BoolTensor<Self> {
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::Any, DType::Bool))
    }

    fn float_all(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        or_panic(reduce::reduce_all(&tensor, ReduceOp::All, DType::Bool))
    }

    fn float_all_dim(tensor: FloatTensor<Self>, dim: usize) -> BoolTensor<Self> {
        or_panic(reduce::reduce_dim(&tensor, dim, ReduceOp::All, DType::Bool))
    }

    fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "a0 > 0 ? (TO)1 : (a0 < 0 ? (TO)-1 : (TO)0)")
    }

    fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        expand(&tensor, shape)
    }

    fn float_unfold(
        tensor: FloatTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> FloatTensor<Self> {
        unfold(&tensor, dim, size, step)
    }

    fn float_is_nan(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        crate::error::or_panic(crate::ops::elementwise::map(
            crate::ops::elementwise::MapSpec::new("isnan(a0)", DType::Bool),
            &[&tensor],
            &[],
        ))
    }

    fn float_is_inf(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        crate::error::or_panic(crate::ops::elementwise::map(
            crate::ops::elementwise::MapSpec::new("isinf(a0)", DType::Bool),
            &[&tensor],
            &[],
        ))
    }

    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        or_panic(index::cat(&tensors, dim))
    }

    fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self> {
        or_panic(reduce::sort(&tensor, dim, descending)).0
    }

    fn float_sort_with_indices(
        tensor: FloatTensor<Self>,
        dim: usize,
        descending: bool,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        or_panic(reduce::sort(&tensor, dim, descending))
    }

    fn float_argsort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
        or_panic(reduce::sort(&tensor, dim, descending)).1
    }
}
