//! Glue shared by the float, int and bool ops: burn's arguments to the op layer's, and the
//! element-wise ops every kind has.

use std::ops::Range;

use crate::ops::elementwise::{map, MapSpec};
use crate::ops::{data, layout};
use crate::runtime::ScalarValue;
use crate::tensor::XpuTensor;

// What the glue macros below ([`kind_ops`], [`numeric_ops`], [`binary_ops`]) name: the
// modules invoking them import `common::*`.
pub(crate) use std::future::Future;

pub(crate) use burn_tensor::ops::{BoolTensor, Device, IntTensor};
pub(crate) use burn_tensor::{DType, Distribution, FloatDType, IntDType, Shape, Slice, TensorData};

pub(crate) use crate::error::or_panic;
pub(crate) use crate::ops::reduce::{self, ReduceOp, ScanOp};
pub(crate) use crate::ops::{index, matmul, random};

/// `out = expr(a0)`, same type as `t`.
pub(crate) fn unary(t: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::builtin(expr, t.dtype), &[t], &[]))
}

/// `out = expr(a0, a1)` over the broadcast of `l` and `r`, of `l`'s type.
pub(crate) fn binary(l: &XpuTensor, r: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::builtin(expr, l.dtype), &[l, r], &[]))
}

/// `out = expr(a0, s0)`, of `l`'s type, the scalar passed in `l`'s type.
pub(crate) fn scalar_op(l: &XpuTensor, s: ScalarValue, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::builtin(expr, l.dtype), &[l], &[(s, l.dtype)]))
}

/// `out = expr(a0)` as a bool tensor.
pub(crate) fn test(t: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::builtin(expr, DType::Bool), &[t], &[]))
}

/// `out = a0 OP a1` as a bool tensor.
pub(crate) fn compare(l: &XpuTensor, r: &XpuTensor, op: &str) -> XpuTensor {
    let expr = format!("a0 {op} a1");
    or_panic(map(MapSpec::builtin(&expr, DType::Bool), &[l, r], &[]))
}

/// `out = a0 OP s0` as a bool tensor (the scalar in `l`'s type).
pub(crate) fn compare_scalar(l: &XpuTensor, s: ScalarValue, op: &str) -> XpuTensor {
    let expr = format!("a0 {op} s0");
    or_panic(map(
        MapSpec::builtin(&expr, DType::Bool),
        &[l],
        &[(s, l.dtype)],
    ))
}

/// `mask ? value : t`, of `t`'s type (all three broadcast).
pub(crate) fn mask_where(t: &XpuTensor, mask: &XpuTensor, value: &XpuTensor) -> XpuTensor {
    or_panic(map(
        MapSpec::builtin("a1 ? (TO)a2 : (TO)a0", t.dtype),
        &[t, mask, value],
        &[],
    ))
}

/// `mask ? s : t`, of `t`'s type.
pub(crate) fn mask_fill(t: &XpuTensor, mask: &XpuTensor, s: ScalarValue) -> XpuTensor {
    or_panic(map(
        MapSpec::builtin("a1 ? (TO)s0 : (TO)a0", t.dtype),
        &[t, mask],
        &[(s, t.dtype)],
    ))
}

/// `t` converted to `dtype`.
pub(crate) fn cast(t: &XpuTensor, dtype: DType) -> XpuTensor {
    or_panic(crate::ops::elementwise::cast(t, dtype))
}

/// burn's slices as the op layer's `(range, step)` per dimension.
pub(crate) fn ranges(shape: &[usize], slices: &[Slice]) -> Vec<(Range<usize>, isize)> {
    slices
        .iter()
        .zip(shape)
        .map(|(s, &n)| s.to_range_and_step(n))
        .collect()
}

pub(crate) fn slice(t: &XpuTensor, slices: &[Slice]) -> XpuTensor {
    or_panic(layout::slice(t, &ranges(&t.shape, slices)))
}

pub(crate) fn slice_assign(t: &XpuTensor, slices: &[Slice], value: &XpuTensor) -> XpuTensor {
    or_panic(index::slice_assign(t, &ranges(&t.shape, slices), value))
}

pub(crate) fn reshape(t: &XpuTensor, shape: Shape) -> XpuTensor {
    or_panic(layout::reshape(t, &shape.dims))
}

pub(crate) fn expand(t: &XpuTensor, shape: Shape) -> XpuTensor {
    or_panic(layout::expand(t, &shape.dims))
}

pub(crate) fn permute(t: &XpuTensor, axes: &[usize]) -> XpuTensor {
    or_panic(layout::permute(t, axes))
}

pub(crate) fn swap_dims(t: &XpuTensor, a: usize, b: usize) -> XpuTensor {
    or_panic(layout::swap_dims(t, a, b))
}

pub(crate) fn flip(t: &XpuTensor, axes: &[usize]) -> XpuTensor {
    or_panic(layout::flip(t, axes))
}

pub(crate) fn unfold(t: &XpuTensor, dim: usize, size: usize, step: usize) -> XpuTensor {
    or_panic(layout::unfold(t, dim, size, step))
}

/// The tensor's elements as burn's `TensorData` (blocking download).
pub(crate) fn into_data(t: &XpuTensor) -> TensorData {
    let bytes = or_panic(data::to_bytes(t));
    TensorData::from_bytes_vec(bytes, t.shape.clone(), t.dtype)
}

/// Uploads `data` (converted to `want` when its type is not `accept`ed).
pub(crate) fn from_data(
    data: TensorData,
    device: usize,
    accept: fn(DType) -> bool,
    want: DType,
) -> XpuTensor {
    let data = if accept(data.dtype) {
        data
    } else {
        data.convert_dtype(want)
    };
    or_panic(data::from_bytes(
        device,
        data.as_bytes(),
        &data.shape,
        data.dtype,
    ))
}

pub(crate) fn to_device(t: &XpuTensor, device: usize) -> XpuTensor {
    or_panic(data::to_device(t, device))
}

pub(crate) fn empty(shape: Shape, device: usize, dtype: DType) -> XpuTensor {
    or_panic(XpuTensor::empty(device, &shape.dims, dtype))
}

pub(crate) fn full(shape: Shape, device: usize, value: ScalarValue, dtype: DType) -> XpuTensor {
    or_panic(crate::ops::elementwise::full(
        device,
        &shape.dims,
        value,
        dtype,
    ))
}

/// `op` over all elements, one element of `dtype`.
pub(crate) fn reduce_all(t: &XpuTensor, op: ReduceOp, dtype: DType) -> XpuTensor {
    or_panic(reduce::reduce_all(t, op, dtype))
}

/// `op` along `dim` (kept with size 1), of `dtype`.
pub(crate) fn reduce_dim(t: &XpuTensor, dim: usize, op: ReduceOp, dtype: DType) -> XpuTensor {
    or_panic(reduce::reduce_dim(t, dim, op, dtype))
}

/// The max (`max`) or min along `dim` and its `i64` index.
pub(crate) fn extreme_with_indices(t: &XpuTensor, dim: usize, max: bool) -> (XpuTensor, XpuTensor) {
    or_panic(reduce::extreme_with_indices(t, dim, max, DType::I64))
}

/// `t` sorted along `dim` and the `i64` indices of the order.
pub(crate) fn sort(t: &XpuTensor, dim: usize, descending: bool) -> (XpuTensor, XpuTensor) {
    or_panic(reduce::sort(t, dim, descending))
}

/// The methods every tensor kind has with one body (views, device moves, downloads, `cat`):
/// `kind_ops!(float, FloatTensor)` writes `float_reshape`, `float_slice`, ... inside the
/// kind's `*TensorOps` impl.
macro_rules! kind_ops {
    ($k:ident, $T:ident) => {
        ::paste::paste! {
            fn [<$k _into_data>](
                tensor: $T<Self>,
            ) -> impl Future<Output = TensorData> + Send {
                let data = into_data(&tensor);
                async move { data }
            }

            fn [<$k _device>](tensor: &$T<Self>) -> Device<Self> {
                $crate::XpuDevice::new(tensor.device())
            }

            fn [<$k _to_device>](tensor: $T<Self>, device: &Device<Self>) -> $T<Self> {
                to_device(&tensor, device.index)
            }

            fn [<$k _reshape>](tensor: $T<Self>, shape: Shape) -> $T<Self> {
                reshape(&tensor, shape)
            }

            fn [<$k _slice>](tensor: $T<Self>, slices: &[Slice]) -> $T<Self> {
                slice(&tensor, slices)
            }

            fn [<$k _slice_assign>](
                tensor: $T<Self>,
                slices: &[Slice],
                value: $T<Self>,
            ) -> $T<Self> {
                slice_assign(&tensor, slices, &value)
            }

            fn [<$k _cat>](tensors: Vec<$T<Self>>, dim: usize) -> $T<Self> {
                or_panic(index::cat(&tensors, dim))
            }

            fn [<$k _swap_dims>](tensor: $T<Self>, dim1: usize, dim2: usize) -> $T<Self> {
                swap_dims(&tensor, dim1, dim2)
            }

            fn [<$k _permute>](tensor: $T<Self>, axes: &[usize]) -> $T<Self> {
                permute(&tensor, axes)
            }

            fn [<$k _flip>](tensor: $T<Self>, axes: &[usize]) -> $T<Self> {
                flip(&tensor, axes)
            }

            fn [<$k _expand>](tensor: $T<Self>, shape: Shape) -> $T<Self> {
                expand(&tensor, shape)
            }

            fn [<$k _unfold>](tensor: $T<Self>, dim: usize, size: usize, step: usize) -> $T<Self> {
                unfold(&tensor, dim, size, step)
            }
        }
    };
}
pub(crate) use kind_ops;

/// `name(lhs, rhs) = a0 OP a1` and `scalar_name(lhs, s) = a0 OP s0`, of `lhs`'s type, for each
/// `name, scalar_name => "OP"`; `$s` turns the kind's element into a [`ScalarValue`].
macro_rules! binary_ops {
    ($T:ident, $E:ident, $s:ident; $($name:ident, $scalar:ident => $op:literal;)*) => {
        $(
            fn $name(lhs: $T<Self>, rhs: $T<Self>) -> $T<Self> {
                binary(&lhs, &rhs, concat!("a0 ", $op, " a1"))
            }

            fn $scalar(lhs: $T<Self>, rhs: $E<Self>) -> $T<Self> {
                scalar_op(&lhs, $s(rhs), concat!("a0 ", $op, " s0"))
            }
        )*
    };
}
pub(crate) use binary_ops;

/// The methods floats and ints share with one body (arithmetic, comparisons, reductions,
/// scans, sorts, indexing, creation): `numeric_ops!(int, IntTensor, IntElem, IntDType, i,
/// is_int, DType::I64)` writes `int_add`, `int_sum_dim`, ... inside `IntTensorOps`; `$s` turns
/// the kind's element into a [`ScalarValue`], `$accept` tells the dtypes uploaded as they are
/// (others are converted to `$dtype`, also the dtype of random tensors). Indices and
/// arg-reductions are `i64` (burn's `IntElem`).
macro_rules! numeric_ops {
    ($k:ident, $T:ident, $E:ident, $D:ident, $s:ident, $accept:ident, $dtype:expr) => {
        ::paste::paste! {
            binary_ops! { $T, $E, $s;
                [<$k _add>], [<$k _add_scalar>] => "+";
                [<$k _sub>], [<$k _sub_scalar>] => "-";
                [<$k _mul>], [<$k _mul_scalar>] => "*";
            }
            numeric_ops!(@cmp $k, $T, $E, $s;
                equal "==", not_equal "!=", greater ">", greater_equal ">=", lower "<",
                lower_equal "<=");
            numeric_ops!(@reduce $k, $T;
                sum Sum, prod Prod, mean Mean, max Max, min Min);
            numeric_ops!(@scan $k, $T;
                cumsum Sum, cumprod Prod, cummin Min, cummax Max);

            fn [<$k _empty>](
                shape: Shape,
                device: &Device<Self>,
                dtype: $D,
            ) -> $T<Self> {
                empty(shape, device.index, dtype.into())
            }

            fn [<$k _from_data>](data: TensorData, device: &Device<Self>) -> $T<Self> {
                from_data(data, device.index, $accept, $dtype)
            }

            fn [<$k _random>](
                shape: Shape,
                distribution: Distribution,
                device: &Device<Self>,
            ) -> $T<Self> {
                or_panic(random::random(
                    device.index,
                    &shape.dims,
                    distribution,
                    $dtype,
                ))
            }

            numeric_ops!(@fill $k, $T, $D, $s; zeros 0u8, ones 1u8);

            fn [<$k _full>](
                shape: Shape,
                fill_value: $E<Self>,
                device: &Device<Self>,
                dtype: $D,
            ) -> $T<Self> {
                full(shape, device.index, $s(fill_value), dtype.into())
            }

            fn [<$k _cast>](tensor: $T<Self>, dtype: $D) -> $T<Self> {
                cast(&tensor, dtype.into())
            }

            fn [<$k _mask_where>](
                tensor: $T<Self>,
                mask: BoolTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                mask_where(&tensor, &mask, &value)
            }

            fn [<$k _mask_fill>](
                tensor: $T<Self>,
                mask: BoolTensor<Self>,
                value: $E<Self>,
            ) -> $T<Self> {
                mask_fill(&tensor, &mask, $s(value))
            }

            fn [<$k _gather>](dim: usize, tensor: $T<Self>, indices: IntTensor<Self>) -> $T<Self> {
                or_panic(index::gather(dim, &tensor, &indices))
            }

            fn [<$k _scatter>](
                dim: usize,
                tensor: $T<Self>,
                indices: IntTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                or_panic(index::scatter_add(dim, &tensor, &indices, &value))
            }

            fn [<$k _select>](tensor: $T<Self>, dim: usize, indices: IntTensor<Self>) -> $T<Self> {
                or_panic(index::select(&tensor, dim, &indices))
            }

            fn [<$k _select_assign>](
                tensor: $T<Self>,
                dim: usize,
                indices: IntTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                or_panic(index::select_add(&tensor, dim, &indices, &value))
            }

            fn [<$k _matmul>](lhs: $T<Self>, rhs: $T<Self>) -> $T<Self> {
                or_panic(matmul::matmul(&lhs, &rhs))
            }

            fn [<$k _neg>](tensor: $T<Self>) -> $T<Self> {
                unary(&tensor, "-a0")
            }

            fn [<$k _sign>](tensor: $T<Self>) -> $T<Self> {
                unary(&tensor, "a0 > 0 ? (TO)1 : (a0 < 0 ? (TO)-1 : (TO)0)")
            }

            fn [<$k _argmax>](tensor: $T<Self>, dim: usize) -> IntTensor<Self> {
                reduce_dim(&tensor, dim, ReduceOp::ArgMax, DType::I64)
            }

            fn [<$k _argmin>](tensor: $T<Self>, dim: usize) -> IntTensor<Self> {
                reduce_dim(&tensor, dim, ReduceOp::ArgMin, DType::I64)
            }

            fn [<$k _max_dim_with_indices>](
                tensor: $T<Self>,
                dim: usize,
            ) -> ($T<Self>, IntTensor<Self>) {
                extreme_with_indices(&tensor, dim, true)
            }

            fn [<$k _min_dim_with_indices>](
                tensor: $T<Self>,
                dim: usize,
            ) -> ($T<Self>, IntTensor<Self>) {
                extreme_with_indices(&tensor, dim, false)
            }

            fn [<$k _sort>](tensor: $T<Self>, dim: usize, descending: bool) -> $T<Self> {
                sort(&tensor, dim, descending).0
            }

            fn [<$k _sort_with_indices>](
                tensor: $T<Self>,
                dim: usize,
                descending: bool,
            ) -> ($T<Self>, IntTensor<Self>) {
                sort(&tensor, dim, descending)
            }

            fn [<$k _argsort>](tensor: $T<Self>, dim: usize, descending: bool) -> IntTensor<Self> {
                sort(&tensor, dim, descending).1
            }
        }
    };
    (@cmp $k:ident, $T:ident, $E:ident, $s:ident; $($name:ident $op:literal),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](lhs: $T<Self>, rhs: $T<Self>) -> BoolTensor<Self> {
                    compare(&lhs, &rhs, $op)
                }

                fn [<$k _ $name _elem>](lhs: $T<Self>, rhs: $E<Self>) -> BoolTensor<Self> {
                    compare_scalar(&lhs, $s(rhs), $op)
                }
            )*
        }
    };
    (@fill $k:ident, $T:ident, $D:ident, $s:ident; $($name:ident $value:literal),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](shape: Shape, device: &Device<Self>, dtype: $D) -> $T<Self> {
                    full(shape, device.index, $s($value.into()), dtype.into())
                }
            )*
        }
    };
    (@reduce $k:ident, $T:ident; $($name:ident $op:ident),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](tensor: $T<Self>) -> $T<Self> {
                    let d = tensor.dtype;
                    reduce_all(&tensor, ReduceOp::$op, d)
                }

                fn [<$k _ $name _dim>](tensor: $T<Self>, dim: usize) -> $T<Self> {
                    let d = tensor.dtype;
                    reduce_dim(&tensor, dim, ReduceOp::$op, d)
                }
            )*
        }
    };
    (@scan $k:ident, $T:ident; $($name:ident $op:ident),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](tensor: $T<Self>, dim: usize) -> $T<Self> {
                    or_panic(reduce::scan(&tensor, dim, ScanOp::$op))
                }
            )*
        }
    };
}
pub(crate) use numeric_ops;
