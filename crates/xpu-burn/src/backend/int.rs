//! burn's `IntTensorOps` on xpu.

use burn_tensor::ops::{FloatTensor, IntElem, IntTensorOps};

use super::common::*;
use crate::dtype::is_float;
use crate::ops::elementwise::{map, MapSpec};
use crate::runtime::ScalarValue;
use crate::{Xpu, XpuTensor};

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

/// An exact integer power, wrapping on overflow as Rust's `wrapping_pow` (unsigned arithmetic:
/// OpenCL C leaves signed overflow undefined); a negative exponent gives the truncated
/// `1 / b^-e` (1 for 1, ±1 for -1, else 0). At most 64 rounds. burn's default `int_powi`
/// went through f32 and lost every result past 24 bits (review h62: 3^16 read 43,046,720).
const INT_POW: &str = "long xpu_ipow(long b, long e) {
  if (e < 0) {
    return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
  }
  ulong r = 1;
  ulong x = (ulong)b;
  while (e > 0) {
    if (e & 1) r *= x;
    x *= x;
    e >>= 1;
  }
  return (long)r;
}
";

/// `out = base ^ exp` exactly over the broadcast of the two, as [`INT_POW`], of `base`'s type.
fn int_pow(base: &XpuTensor, exp: &XpuTensor) -> XpuTensor {
    let spec = MapSpec::builtin("(TO)xpu_ipow((long)a0, (long)a1)", base.dtype)
        .helpers_of_library(INT_POW);
    or_panic(map(spec, &[base, exp], &[]))
}

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

    fn int_powi(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> {
        int_pow(&lhs, &rhs)
    }

    fn int_powi_scalar_impl(lhs: IntTensor<Self>, rhs: IntElem<Self>) -> IntTensor<Self> {
        let spec = MapSpec::builtin("(TO)xpu_ipow((long)a0, (long)s0)", lhs.dtype)
            .helpers_of_library(INT_POW);
        or_panic(map(spec, &[&lhs], &[(i(rhs), DType::I64)]))
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
