//! burn's `IntTensorOps` on xpu.

use burn_tensor::ops::{FloatTensor, IntElem, IntTensorOps};

use super::common::*;
use crate::dtype::is_float;
use crate::runtime::ScalarValue;
use crate::Xpu;

fn i(v: i64) -> ScalarValue {
    ScalarValue::I(v)
}

fn is_int(d: DType) -> bool {
    !is_float(d) && d != DType::Bool && !matches!(d, DType::QFloat(_))
}

/// Integer division that never traps (x86 traps on `/ 0` and `MIN / -1`): `x / 0` is 0, and
/// a divisor of -1 negates. The -1 test is `B < 0 && B == -1`: an unsigned divisor is never
/// negative, so its all-ones maximum (which `(T0)-1` also is) divides as usual.
const INT_DIV: &str = "(B == 0 ? (TO)0 : ((B < 0 && B == (T0)-1) ? (TO)(-a0) : (TO)(a0 / B)))";
/// Python's remainder (the sign of the divisor), never trapping: `x % 0` and `x % -1` are 0
/// (the -1 test as in [`INT_DIV`]).
const INT_REM: &str = "(B == 0 || (B < 0 && B == (T0)-1) ? (TO)0 : ((a0 % B != 0 && ((a0 % B < 0) != (B < 0))) ? (TO)(a0 % B + B) : (TO)(a0 % B)))";

impl IntTensorOps<Self> for Xpu {
    kind_ops!(int, IntTensor);
    numeric_ops!(int, IntTensor, IntElem, IntDType, i, is_int, DType::I64);

    fn int_into_float(tensor: IntTensor<Self>) -> FloatTensor<Self> {
        cast(&tensor, DType::F32)
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

    fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "a0 < 0 ? -a0 : a0")
    }

    binary_ops! { IntTensor, IntElem, i;
        bitwise_and, bitwise_and_scalar => "&";
        bitwise_or, bitwise_or_scalar => "|";
        bitwise_xor, bitwise_xor_scalar => "^";
        bitwise_left_shift, bitwise_left_shift_scalar => "<<";
        bitwise_right_shift, bitwise_right_shift_scalar => ">>";
    }

    fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self> {
        unary(&tensor, "~a0")
    }
}
