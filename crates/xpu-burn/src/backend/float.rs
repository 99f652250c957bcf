//! burn's `FloatTensorOps` on xpu.

use burn_tensor::ops::{FloatElem, FloatTensor, FloatTensorOps};

use super::common::*;
use crate::dtype::is_float;
use crate::runtime::ScalarValue;
use crate::Xpu;

fn f(v: f32) -> ScalarValue {
    ScalarValue::F(v as f64)
}

/// Python's remainder (the sign of the divisor), as torch.remainder, for floats.
pub(crate) const FLOAT_REM: &str =
    "(fmod(a0, B) != 0 && ((fmod(a0, B) < 0) != (B < 0)) ? fmod(a0, B) + B : fmod(a0, B))";

impl FloatTensorOps<Self> for Xpu {
    kind_ops!(float, FloatTensor);
    numeric_ops!(
        float,
        FloatTensor,
        FloatElem,
        FloatDType,
        f,
        is_float,
        DType::F32
    );

    fn float_into_int(tensor: FloatTensor<Self>) -> IntTensor<Self> {
        cast(&tensor, DType::I64)
    }

    fn float_clamp_min(tensor: FloatTensor<Self>, min: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&tensor, f(min), "a0 < s0 ? (TO)s0 : a0")
    }

    fn float_clamp_max(tensor: FloatTensor<Self>, max: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&tensor, f(max), "a0 > s0 ? (TO)s0 : a0")
    }

    binary_ops! { FloatTensor, FloatElem, f;
        float_div, float_div_scalar => "/";
    }

    fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        binary(&lhs, &rhs, &FLOAT_REM.replace('B', "a1"))
    }

    fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: FloatElem<Self>) -> FloatTensor<Self> {
        scalar_op(&lhs, f(rhs), &FLOAT_REM.replace('B', "(T0)s0"))
    }

    fn float_cross(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        dim: usize,
    ) -> FloatTensor<Self> {
        super::extra::cross(&lhs, &rhs, dim)
    }

    fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        unary(&tensor, "(T0)1 / a0")
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

    fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let d = tensor.dtype;
        reduce_all(&tensor, ReduceOp::MaxAbs, d)
    }

    fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let d = tensor.dtype;
        reduce_dim(&tensor, dim, ReduceOp::MaxAbs, d)
    }

    fn float_any(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        reduce_all(&tensor, ReduceOp::Any, DType::Bool)
    }

    fn float_any_dim(tensor: FloatTensor<Self>, dim: usize) -> BoolTensor<Self> {
        reduce_dim(&tensor, dim, ReduceOp::Any, DType::Bool)
    }

    fn float_all(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        reduce_all(&tensor, ReduceOp::All, DType::Bool)
    }

    fn float_all_dim(tensor: FloatTensor<Self>, dim: usize) -> BoolTensor<Self> {
        reduce_dim(&tensor, dim, ReduceOp::All, DType::Bool)
    }

    fn float_is_nan(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        test(&tensor, "isnan(a0)")
    }

    fn float_is_inf(tensor: FloatTensor<Self>) -> BoolTensor<Self> {
        test(&tensor, "isinf(a0)")
    }
}
