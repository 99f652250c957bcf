//! burn's `BoolTensorOps` on xpu (bools stored as `uchar` 0 or 1).

use std::future::Future;

use burn_tensor::ops::{BoolTensor, BoolTensorOps, Device, FloatTensor, IntTensor};
use burn_tensor::{DType, Shape, Slice, TensorData};

use super::common::*;
use crate::error::or_panic;
use crate::ops::index;
use crate::runtime::ScalarValue;
use crate::Xpu;

impl BoolTensorOps<Self> for Xpu {
    fn bool_empty(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        empty(shape, device.index, DType::Bool)
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        full(shape, device.index, ScalarValue::I(0), DType::Bool)
    }

    fn bool_ones(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        full(shape, device.index, ScalarValue::I(1), DType::Bool)
    }

    fn bool_into_data(tensor: BoolTensor<Self>) -> impl Future<Output = TensorData> + Send {
        let data = into_data(&tensor);
        async move { data }
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self> {
        from_data(data, device.index, |d| d == DType::Bool, DType::Bool)
    }

    fn bool_into_int(tensor: BoolTensor<Self>) -> IntTensor<Self> {
        cast(&tensor, DType::I64)
    }

    fn bool_into_float(tensor: BoolTensor<Self>) -> FloatTensor<Self> {
        cast(&tensor, DType::F32)
    }

    fn bool_device(tensor: &BoolTensor<Self>) -> Device<Self> {
        crate::XpuDevice::new(tensor.device())
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self> {
        to_device(&tensor, device.index)
    }

    fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        reshape(&tensor, shape)
    }

    fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self> {
        slice(&tensor, slices)
    }

    fn bool_slice_assign(
        tensor: BoolTensor<Self>,
        slices: &[Slice],
        value: BoolTensor<Self>,
    ) -> BoolTensor<Self> {
        slice_assign(&tensor, slices, &value)
    }

    fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self> {
        or_panic(index::cat(&tensors, dim))
    }

    fn bool_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        compare(&lhs, &rhs, "==")
    }

    fn bool_not(tensor: BoolTensor<Self>) -> BoolTensor<Self> {
        unary(&tensor, "!a0")
    }

    fn bool_and(tensor: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        binary(&tensor, &rhs, "a0 && a1")
    }

    fn bool_or(tensor: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> {
        binary(&tensor, &rhs, "a0 || a1")
    }

    fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self> {
        swap_dims(&tensor, dim1, dim2)
    }

    fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        permute(&tensor, axes)
    }

    fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> {
        flip(&tensor, axes)
    }

    fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> {
        expand(&tensor, shape)
    }

    fn bool_unfold(
        tensor: BoolTensor<Self>,
        dim: usize,
        size: usize,
        step: usize,
    ) -> BoolTensor<Self> {
        unfold(&tensor, dim, size, step)
    }
}
