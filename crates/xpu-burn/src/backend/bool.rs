//! burn's `BoolTensorOps` on xpu (bools stored as `uchar` 0 or 1).

use burn_tensor::ops::{BoolTensorOps, FloatTensor};

use super::common::*;
use crate::runtime::ScalarValue;
use crate::Xpu;

impl BoolTensorOps<Self> for Xpu {
    kind_ops!(bool, BoolTensor);

    /// Zeros (`false`s), as burn-ndarray: burn reads a bool tensor's bytes as `bool`s
    /// unchecked (`TensorData::to_vec` transmutes), so an uninitialized block, whose bytes
    /// may be anything its last tensor left, is no valid bool tensor.
    fn bool_empty(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        Self::bool_zeros(shape, device)
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        full(shape, device.index, ScalarValue::I(0), DType::Bool)
    }

    fn bool_ones(shape: Shape, device: &Device<Self>) -> BoolTensor<Self> {
        full(shape, device.index, ScalarValue::I(1), DType::Bool)
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
}
