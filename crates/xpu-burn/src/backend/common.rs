//! Glue shared by the float, int and bool ops: burn's arguments to the op layer's, and the
//! element-wise ops every kind has.

use std::ops::Range;

use burn_tensor::{DType, Shape, Slice, TensorData};

use crate::error::or_panic;
use crate::ops::elementwise::{map, MapSpec};
use crate::ops::reduce::{self, ReduceOp};
use crate::ops::{data, index, layout};
use crate::runtime::ScalarValue;
use crate::tensor::XpuTensor;

/// `out = expr(a0)`, same type as `t`.
pub(crate) fn unary(t: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::new(expr, t.dtype), &[t], &[]))
}

/// `out = expr(a0, a1)` over the broadcast of `l` and `r`, of `l`'s type.
pub(crate) fn binary(l: &XpuTensor, r: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::new(expr, l.dtype), &[l, r], &[]))
}

/// `out = expr(a0, s0)`, of `l`'s type, the scalar passed in `l`'s type.
pub(crate) fn scalar_op(l: &XpuTensor, s: ScalarValue, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::new(expr, l.dtype), &[l], &[(s, l.dtype)]))
}

/// `out = expr(a0)` as a bool tensor.
pub(crate) fn test(t: &XpuTensor, expr: &str) -> XpuTensor {
    or_panic(map(MapSpec::new(expr, DType::Bool), &[t], &[]))
}

/// `out = a0 OP a1` as a bool tensor.
pub(crate) fn compare(l: &XpuTensor, r: &XpuTensor, op: &str) -> XpuTensor {
    let expr = format!("a0 {op} a1");
    or_panic(map(MapSpec::new(&expr, DType::Bool), &[l, r], &[]))
}

/// `out = a0 OP s0` as a bool tensor (the scalar in `l`'s type).
pub(crate) fn compare_scalar(l: &XpuTensor, s: ScalarValue, op: &str) -> XpuTensor {
    let expr = format!("a0 {op} s0");
    or_panic(map(MapSpec::new(&expr, DType::Bool), &[l], &[(s, l.dtype)]))
}

/// `mask ? value : t`, of `t`'s type (all three broadcast).
pub(crate) fn mask_where(t: &XpuTensor, mask: &XpuTensor, value: &XpuTensor) -> XpuTensor {
    or_panic(map(
        MapSpec::new("a1 ? (TO)a2 : (TO)a0", t.dtype),
        &[t, mask, value],
        &[],
    ))
}

/// `mask ? s : t`, of `t`'s type.
pub(crate) fn mask_fill(t: &XpuTensor, mask: &XpuTensor, s: ScalarValue) -> XpuTensor {
    or_panic(map(
        MapSpec::new("a1 ? (TO)s0 : (TO)a0", t.dtype),
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
            ) -> impl ::std::future::Future<Output = ::burn_tensor::TensorData> + Send {
                let data = $crate::backend::common::into_data(&tensor);
                async move { data }
            }

            fn [<$k _device>](tensor: &$T<Self>) -> ::burn_tensor::ops::Device<Self> {
                $crate::XpuDevice::new(tensor.device())
            }

            fn [<$k _to_device>](tensor: $T<Self>, device: &::burn_tensor::ops::Device<Self>) -> $T<Self> {
                $crate::backend::common::to_device(&tensor, device.index)
            }

            fn [<$k _reshape>](tensor: $T<Self>, shape: ::burn_tensor::Shape) -> $T<Self> {
                $crate::backend::common::reshape(&tensor, shape)
            }

            fn [<$k _slice>](tensor: $T<Self>, slices: &[::burn_tensor::Slice]) -> $T<Self> {
                $crate::backend::common::slice(&tensor, slices)
            }

            fn [<$k _slice_assign>](
                tensor: $T<Self>,
                slices: &[::burn_tensor::Slice],
                value: $T<Self>,
            ) -> $T<Self> {
                $crate::backend::common::slice_assign(&tensor, slices, &value)
            }

            fn [<$k _cat>](tensors: Vec<$T<Self>>, dim: usize) -> $T<Self> {
                $crate::error::or_panic($crate::ops::index::cat(&tensors, dim))
            }

            fn [<$k _swap_dims>](tensor: $T<Self>, dim1: usize, dim2: usize) -> $T<Self> {
                $crate::backend::common::swap_dims(&tensor, dim1, dim2)
            }

            fn [<$k _permute>](tensor: $T<Self>, axes: &[usize]) -> $T<Self> {
                $crate::backend::common::permute(&tensor, axes)
            }

            fn [<$k _flip>](tensor: $T<Self>, axes: &[usize]) -> $T<Self> {
                $crate::backend::common::flip(&tensor, axes)
            }

            fn [<$k _expand>](tensor: $T<Self>, shape: ::burn_tensor::Shape) -> $T<Self> {
                $crate::backend::common::expand(&tensor, shape)
            }

            fn [<$k _unfold>](tensor: $T<Self>, dim: usize, size: usize, step: usize) -> $T<Self> {
                $crate::backend::common::unfold(&tensor, dim, size, step)
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
                $crate::backend::common::binary(&lhs, &rhs, concat!("a0 ", $op, " a1"))
            }

            fn $scalar(lhs: $T<Self>, rhs: $E<Self>) -> $T<Self> {
                $crate::backend::common::scalar_op(&lhs, $s(rhs), concat!("a0 ", $op, " s0"))
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
            $crate::backend::common::binary_ops! { $T, $E, $s;
                [<$k _add>], [<$k _add_scalar>] => "+";
                [<$k _sub>], [<$k _sub_scalar>] => "-";
                [<$k _mul>], [<$k _mul_scalar>] => "*";
            }
            $crate::backend::common::numeric_ops!(@cmp $k, $T, $E, $s;
                equal "==", not_equal "!=", greater ">", greater_equal ">=", lower "<",
                lower_equal "<=");
            $crate::backend::common::numeric_ops!(@reduce $k, $T;
                sum Sum, prod Prod, mean Mean, max Max, min Min);
            $crate::backend::common::numeric_ops!(@scan $k, $T;
                cumsum Sum, cumprod Prod, cummin Min, cummax Max);

            fn [<$k _empty>](
                shape: ::burn_tensor::Shape,
                device: &::burn_tensor::ops::Device<Self>,
                dtype: ::burn_tensor::$D,
            ) -> $T<Self> {
                $crate::backend::common::empty(shape, device.index, dtype.into())
            }

            fn [<$k _from_data>](data: ::burn_tensor::TensorData, device: &::burn_tensor::ops::Device<Self>) -> $T<Self> {
                $crate::backend::common::from_data(data, device.index, $accept, $dtype)
            }

            fn [<$k _random>](
                shape: ::burn_tensor::Shape,
                distribution: ::burn_tensor::Distribution,
                device: &::burn_tensor::ops::Device<Self>,
            ) -> $T<Self> {
                $crate::error::or_panic($crate::ops::random::random(
                    device.index,
                    &shape.dims,
                    distribution,
                    $dtype,
                ))
            }

            fn [<$k _zeros>](shape: ::burn_tensor::Shape, device: &::burn_tensor::ops::Device<Self>, dtype: ::burn_tensor::$D) -> $T<Self> {
                $crate::backend::common::full(shape, device.index, $s(0u8.into()), dtype.into())
            }

            fn [<$k _ones>](shape: ::burn_tensor::Shape, device: &::burn_tensor::ops::Device<Self>, dtype: ::burn_tensor::$D) -> $T<Self> {
                $crate::backend::common::full(shape, device.index, $s(1u8.into()), dtype.into())
            }

            fn [<$k _full>](
                shape: ::burn_tensor::Shape,
                fill_value: $E<Self>,
                device: &::burn_tensor::ops::Device<Self>,
                dtype: ::burn_tensor::$D,
            ) -> $T<Self> {
                $crate::backend::common::full(shape, device.index, $s(fill_value), dtype.into())
            }

            fn [<$k _cast>](tensor: $T<Self>, dtype: ::burn_tensor::$D) -> $T<Self> {
                $crate::backend::common::cast(&tensor, dtype.into())
            }

            fn [<$k _mask_where>](
                tensor: $T<Self>,
                mask: ::burn_tensor::ops::BoolTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                $crate::backend::common::mask_where(&tensor, &mask, &value)
            }

            fn [<$k _mask_fill>](tensor: $T<Self>, mask: ::burn_tensor::ops::BoolTensor<Self>, value: $E<Self>) -> $T<Self> {
                $crate::backend::common::mask_fill(&tensor, &mask, $s(value))
            }

            fn [<$k _gather>](dim: usize, tensor: $T<Self>, indices: ::burn_tensor::ops::IntTensor<Self>) -> $T<Self> {
                $crate::error::or_panic($crate::ops::index::gather(dim, &tensor, &indices))
            }

            fn [<$k _scatter>](
                dim: usize,
                tensor: $T<Self>,
                indices: ::burn_tensor::ops::IntTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                $crate::error::or_panic($crate::ops::index::scatter_add(dim, &tensor, &indices, &value))
            }

            fn [<$k _select>](tensor: $T<Self>, dim: usize, indices: ::burn_tensor::ops::IntTensor<Self>) -> $T<Self> {
                $crate::error::or_panic($crate::ops::index::select(&tensor, dim, &indices))
            }

            fn [<$k _select_assign>](
                tensor: $T<Self>,
                dim: usize,
                indices: ::burn_tensor::ops::IntTensor<Self>,
                value: $T<Self>,
            ) -> $T<Self> {
                $crate::error::or_panic($crate::ops::index::select_add(&tensor, dim, &indices, &value))
            }

            fn [<$k _matmul>](lhs: $T<Self>, rhs: $T<Self>) -> $T<Self> {
                $crate::error::or_panic($crate::ops::matmul::matmul(&lhs, &rhs))
            }

            fn [<$k _neg>](tensor: $T<Self>) -> $T<Self> {
                $crate::backend::common::unary(&tensor, "-a0")
            }

            fn [<$k _sign>](tensor: $T<Self>) -> $T<Self> {
                $crate::backend::common::unary(&tensor, "a0 > 0 ? (TO)1 : (a0 < 0 ? (TO)-1 : (TO)0)")
            }

            fn [<$k _argmax>](tensor: $T<Self>, dim: usize) -> ::burn_tensor::ops::IntTensor<Self> {
                $crate::backend::common::reduce_dim(&tensor, dim, $crate::ops::reduce::ReduceOp::ArgMax, ::burn_tensor::DType::I64)
            }

            fn [<$k _argmin>](tensor: $T<Self>, dim: usize) -> ::burn_tensor::ops::IntTensor<Self> {
                $crate::backend::common::reduce_dim(&tensor, dim, $crate::ops::reduce::ReduceOp::ArgMin, ::burn_tensor::DType::I64)
            }

            fn [<$k _max_dim_with_indices>](tensor: $T<Self>, dim: usize) -> ($T<Self>, ::burn_tensor::ops::IntTensor<Self>) {
                $crate::backend::common::extreme_with_indices(&tensor, dim, true)
            }

            fn [<$k _min_dim_with_indices>](tensor: $T<Self>, dim: usize) -> ($T<Self>, ::burn_tensor::ops::IntTensor<Self>) {
                $crate::backend::common::extreme_with_indices(&tensor, dim, false)
            }

            fn [<$k _sort>](tensor: $T<Self>, dim: usize, descending: bool) -> $T<Self> {
                $crate::backend::common::sort(&tensor, dim, descending).0
            }

            fn [<$k _sort_with_indices>](
                tensor: $T<Self>,
                dim: usize,
                descending: bool,
            ) -> ($T<Self>, ::burn_tensor::ops::IntTensor<Self>) {
                $crate::backend::common::sort(&tensor, dim, descending)
            }

            fn [<$k _argsort>](tensor: $T<Self>, dim: usize, descending: bool) -> ::burn_tensor::ops::IntTensor<Self> {
                $crate::backend::common::sort(&tensor, dim, descending).1
            }
        }
    };
    (@cmp $k:ident, $T:ident, $E:ident, $s:ident; $($name:ident $op:literal),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](lhs: $T<Self>, rhs: $T<Self>) -> ::burn_tensor::ops::BoolTensor<Self> {
                    $crate::backend::common::compare(&lhs, &rhs, $op)
                }

                fn [<$k _ $name _elem>](lhs: $T<Self>, rhs: $E<Self>) -> ::burn_tensor::ops::BoolTensor<Self> {
                    $crate::backend::common::compare_scalar(&lhs, $s(rhs), $op)
                }
            )*
        }
    };
    (@reduce $k:ident, $T:ident; $($name:ident $op:ident),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](tensor: $T<Self>) -> $T<Self> {
                    let d = tensor.dtype;
                    $crate::backend::common::reduce_all(&tensor, $crate::ops::reduce::ReduceOp::$op, d)
                }

                fn [<$k _ $name _dim>](tensor: $T<Self>, dim: usize) -> $T<Self> {
                    let d = tensor.dtype;
                    $crate::backend::common::reduce_dim(&tensor, dim, $crate::ops::reduce::ReduceOp::$op, d)
                }
            )*
        }
    };
    (@scan $k:ident, $T:ident; $($name:ident $op:ident),*) => {
        ::paste::paste! {
            $(
                fn [<$k _ $name>](tensor: $T<Self>, dim: usize) -> $T<Self> {
                    $crate::error::or_panic($crate::ops::reduce::scan(&tensor, dim, $crate::ops::reduce::ScanOp::$op))
                }
            )*
        }
    };
}
pub(crate) use numeric_ops;
