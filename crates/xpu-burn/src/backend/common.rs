//! Glue shared by the float, int and bool ops: burn's arguments to the op layer's, and the
//! element-wise ops every kind has.

use std::ops::Range;

use burn_tensor::{DType, Shape, Slice, TensorData};

use crate::error::or_panic;
use crate::ops::elementwise::{map, MapSpec};
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
