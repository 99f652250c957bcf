//! Review h68 of xpu-burn, probes that found nothing (they pass on c61c9e7): 9defa79's
//! `runtime::scalar_arg`, which refuses a scalar that the tensor's integer type cannot hold.
//! Legal calls with values at the ends of narrow types, and burn's default implementations
//! and tensor-level helpers that are built from scalar ops with constants (0, 1, -1,
//! element counts above 255), must still answer as burn's NdArray backend does: clamps,
//! comparisons, `mask_fill`, `full` / `zeros` / `ones`, division and remainder by the type's
//! extremes, `neg` / `sign` / `abs`, `any` / `all` over more than 255 elements of `U8` and
//! bool tensors, `mean` and `one_hot` of narrow tensors, float scalars on int tensors through
//! burn's API (converted to `i64` first), and float tensors' scalars. (Two calls that xpu
//! answers where NdArray refuses were left out, as no wrong refusal: `U32`
//! `remainder_scalar(u32::MAX)` answers `[0, 5, 0]`, `U8` `mean` of `[0, 3, 250, 128, 255]`
//! answers `[127]`; `U8` `one_hot(256)` is refused by both.)
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use burn::tensor::{Bool, Int, IntDType, Tensor, TensorData};
use burn_ndarray::{NdArray, NdArrayDevice};
use xpu_burn::{Xpu, XpuDevice};

type Nd = NdArray<f32>;

fn ints<B: burn::tensor::backend::Backend>(
    v: &[i64],
    dt: IntDType,
    d: &B::Device,
) -> Tensor<B, 1, Int> {
    Tensor::<B, 1, Int>::from_data(TensorData::new(v.to_vec(), [v.len()]), d).cast(dt)
}

fn iv<B: burn::tensor::backend::Backend>(t: Tensor<B, 1, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec::<i64>().unwrap()
}

fn bv<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D, Bool>) -> Vec<bool> {
    t.into_data().to_vec::<bool>().unwrap()
}

/// The panic of a refused call, as a message; the answer otherwise, as text.
fn outcome<T: std::fmt::Debug>(f: impl FnOnce() -> T) -> String {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => format!("{v:?}"),
        Err(_) => "refused (panic)".to_string(),
    }
}

/// Runs `$body` with `$b` the NdArray backend, then xpu's; notes a difference in `$bad`.
macro_rules! both {
    ($bad:ident, $what:expr, |$b:ident, $d:ident| $body:expr) => {{
        let nd = outcome(|| {
            type $b = Nd;
            let $d = NdArrayDevice::Cpu;
            $body
        });
        let xpu = outcome(|| {
            type $b = Xpu;
            let $d = XpuDevice::default();
            $body
        });
        if nd != xpu {
            $bad.push(format!("{}: xpu {:?}, ndarray {:?}", $what, xpu, nd));
        }
    }};
}

#[test]
fn legal_scalars_on_narrow_int_tensors_answer_as_ndarray() {
    let mut bad = Vec::new();
    let u8s = [0i64, 3, 250, 128, 255];
    let i8s = [-128i64, -1, 0, 5, 127];
    both!(bad, "U8 clamp(0, 255)", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .clamp(0, 255)));
    both!(bad, "U8 clamp(1, 254)", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .clamp(1, 254)));
    both!(bad, "U8 greater_elem(255)", |B, d| bv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .greater_elem(255)));
    both!(bad, "U8 lower_equal_elem(0)", |B, d| bv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .lower_equal_elem(0)));
    both!(bad, "U8 mask_fill 255", |B, d| {
        let t = ints::<B>(&u8s, IntDType::U8, &d);
        let m = t.clone().greater_elem(100);
        iv(t.mask_fill(m, 255))
    });
    both!(bad, "U8 div_scalar(255)", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .div_scalar(255)));
    both!(bad, "U8 remainder_scalar(7)", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .remainder_scalar(7)));
    both!(bad, "U8 add_scalar(0)", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .add_scalar(0)));
    both!(bad, "U8 sign", |B, d| iv(
        ints::<B>(&u8s, IntDType::U8, &d).sign()
    ));
    both!(bad, "U8 abs", |B, d| iv(
        ints::<B>(&u8s, IntDType::U8, &d).abs()
    ));
    both!(bad, "U8 float scalar mul 1.9", |B, d| iv(ints::<B>(
        &u8s,
        IntDType::U8,
        &d
    )
    .mul_scalar(1.9)));
    both!(bad, "I8 clamp(-128, 127)", |B, d| iv(ints::<B>(
        &i8s,
        IntDType::I8,
        &d
    )
    .clamp(-128, 127)));
    both!(bad, "I8 div_scalar(-1)", |B, d| iv(ints::<B>(
        &i8s[1..],
        IntDType::I8,
        &d
    )
    .div_scalar(-1)));
    both!(bad, "I8 mask_fill -128", |B, d| {
        let t = ints::<B>(&i8s, IntDType::I8, &d);
        let m = t.clone().equal_elem(0);
        iv(t.mask_fill(m, -128))
    });
    both!(bad, "I8 neg", |B, d| iv(ints::<B>(
        &i8s[1..],
        IntDType::I8,
        &d
    )
    .neg()));
    both!(bad, "I16 equal_elem(-32768)", |B, d| bv(ints::<B>(
        &[-32768, 0, 32767],
        IntDType::I16,
        &d
    )
    .equal_elem(-32768)));
    both!(bad, "U16 greater_equal_elem(65535)", |B, d| bv(ints::<B>(
        &[0, 65535, 7],
        IntDType::U16,
        &d
    )
    .greater_equal_elem(65535)));
    both!(bad, "I32 clamp(i32::MIN, i32::MAX)", |B, d| iv(ints::<B>(
        &[i64::from(i32::MIN), 0, i64::from(i32::MAX)],
        IntDType::I32,
        &d
    )
    .clamp(i32::MIN, i32::MAX)));
    both!(bad, "U64 div_scalar(i64::MAX)", |B, d| iv(ints::<B>(
        &[0, 5, i64::MAX],
        IntDType::U64,
        &d
    )
    .div_scalar(i64::MAX)));
    // Reductions and helpers built from scalar ops, over more than 255 elements.
    let many: Vec<i64> = (0..300).map(|i| 1 + i % 200).collect();
    both!(bad, "U8 all (300)", |B, d| bv(ints::<B>(
        &many,
        IntDType::U8,
        &d
    )
    .all()));
    both!(bad, "U8 any (300)", |B, d| bv(ints::<B>(
        &many,
        IntDType::U8,
        &d
    )
    .any()));
    both!(bad, "U8 not_equal_elem(0).all (300)", |B, d| bv(ints::<B>(
        &many,
        IntDType::U8,
        &d
    )
    .not_equal_elem(0)
    .all()));
    both!(bad, "bool any/all (300)", |B, d| {
        let t = ints::<B>(&many, IntDType::U8, &d).greater_elem(0);
        (bv(t.clone().any()), bv(t.all()))
    });
    both!(bad, "U8 one_hot(200)", |B, d| {
        let t: Tensor<B, 2, Int> = ints::<B>(&[0, 5, 255], IntDType::U8, &d).one_hot(200);
        t.into_data().convert::<i64>().to_vec::<i64>().unwrap()
    });
    both!(bad, "U8 zeros/ones/full", |B, d| {
        let z = Tensor::<B, 1, Int>::zeros([3], &d).cast(IntDType::U8);
        let o = Tensor::<B, 1, Int>::ones([3], &d).cast(IntDType::U8);
        (iv(z), iv(o))
    });
    both!(bad, "F32 float scalars", |B, d| {
        let t = Tensor::<B, 1>::from_floats([-1.5, 0.0, 2.5], &d);
        let v = t.clamp(-1e30, 1e30).mul_scalar(-1.0).add_scalar(0.5);
        v.into_data().to_vec::<f32>().unwrap()
    });
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
