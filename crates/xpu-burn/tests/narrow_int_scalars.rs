//! Integer scalars on narrow integer tensors (`I32`, `U8`, ... through burn's `i64` scalars):
//! a scalar the tensor's type cannot hold is refused (as burn's NdArray refuses it), never
//! silently truncated, while legal scalars at the ends of narrow types, and burn's default
//! implementations built from scalar ops with constants, answer as NdArray does.
//!
//! Merged from two reviews' files: review h65's findings (the truncated scalars; top level,
//! formerly `review_h65.rs`) and review h68's probes of the fix, `runtime::scalar_arg`, that
//! found nothing (module `legal_scalars`, formerly `review_h68_probes.rs`, with its own
//! helpers), each as it was in its file.
//!
//! ## From `review_h65.rs`
//!
//! Review h65 (fresh eyes: integer ops, casts, sorts, indexing with wild indices, one_hot,
//! embedding, random distributions and seeds, autodiff gradients, transactions, two devices,
//! against burn's NdArray backend and hand-computed values): what was found to give a wrong
//! value. Each test fails on the reviewed commit (2043737); the comment above it says what it
//! shows, what was observed and in how many runs. The probes that found nothing pass, in
//! integer_casts_sorts_and_indexing.rs.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.
//!
//! Fixed since: `runtime::scalar_arg` refuses a scalar the tensor's integer type cannot hold
//! (`Error::Invalid`, a panic through burn's API, as NdArray's refusal); both tests pass.
//!
//! Found: an integer tensor of a narrower type than `i64` (`Tensor::cast(IntDType::I32)`,
//! `U8`, ...) takes burn's `i64` scalar truncated to its own type (`as i32`, `as u8`:
//! crates/xpu-burn/src/runtime.rs:265-271, reached from `compare_scalar`, `scalar_op` and
//! `mask_fill` in crates/xpu-burn/src/backend/common.rs:33-75, which pass the scalar "in
//! `l`'s type"). Comparisons, clamps, divisions and remainders by a scalar outside the
//! type's range then answer for another scalar, silently. burn's NdArray (and burn's CubeCL
//! backends, which convert with the same `ElementConversion::elem`) refuse such a scalar
//! with "Element cannot be represented in the target type". The tests accept either fix: a
//! clean panic, or the value of the comparison made in `i64`.
//!
//! ## From `review_h68_probes.rs` (module `legal_scalars`)
//!
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

fn bv<B: burn::tensor::backend::Backend>(t: Tensor<B, 1, Bool>) -> Vec<bool> {
    t.into_data().to_vec::<bool>().unwrap()
}

/// `f` either panics (a refusal, as NdArray's) or returns `want`; otherwise a line for the
/// failure report is added to `bad`.
fn refused_or<T: PartialEq + std::fmt::Debug>(
    bad: &mut Vec<String>,
    what: &str,
    want: T,
    f: impl FnOnce() -> T,
) {
    if let Ok(got) = catch_unwind(AssertUnwindSafe(f)) {
        if got != want {
            bad.push(format!("{what}: {got:?}, expected {want:?} or a refusal"));
        }
    }
}

/// What NdArray does with the same calls: it refuses (panics) every one of them.
fn ndarray_refuses<T>(f: impl FnOnce() -> T) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

/// Comparisons and clamps of an `I32` / `U8` tensor with an `i64` scalar outside the type:
/// the scalar is truncated to the tensor's type before the comparison. `[5, -5, 100,
/// 0]` (I32) `.clamp_max(i64::MAX)` must leave the tensor as it is (every element is below
/// `i64::MAX`); `.lower_elem(1 << 32)` is all true; `[0, 3, 250, 128]` (U8)
/// `.greater_elem(-1)` is all true, `.equal_elem(256)` all false, `.clamp(-5, 300)`
/// unchanged. NdArray panics on each ("Element cannot be represented in the target type:
/// "i64"(9223372036854775807) => "i32"").
///
/// Observed (3 of 3 runs, PoCL): `clamp_max(i64::MAX)` gives `[-1, -5, -1, -1]`
/// (`i64::MAX as i32` is -1); `lower_elem(1 << 32)` gives `[false, true, false, false]`
/// (`as i32` is 0); `greater_elem(-1)` gives all false (`-1 as u8` is 255); `equal_elem(256)`
/// gives `[true, false, false, false]` (`256 as u8` is 0); `clamp(-5, 300)` gives
/// `[251, 251, 251, 251]`.
///
/// Cause: crates/xpu-burn/src/runtime.rs:265-271 (`scalar_arg` converts with `as`), called
/// with the tensor's dtype by `compare_scalar` / `mask_fill` (backend/common.rs:49, :68);
/// burn's default `int_clamp_*` is `int_lower_elem`/`int_greater_elem` + `int_mask_fill`.
/// Fix: for a comparison pass the scalar as `long` (`S0` = `long`) and compare `(long)a0 OP
/// s0` (exact for every integer type but u64, which needs `a0 > (ulong)LONG_MAX` care); or
/// refuse, as NdArray, a scalar that `i64::try_into` the tensor's type rejects.
#[test]
fn narrow_int_tensors_compare_with_a_truncated_scalar() {
    let nd = NdArrayDevice::Cpu;
    assert!(ndarray_refuses(|| iv::<Nd>(
        ints::<Nd>(&[5, -5, 100, 0], IntDType::I32, &nd).clamp_max(i64::MAX)
    )));
    assert!(ndarray_refuses(|| bv::<Nd>(
        ints::<Nd>(&[0, 3, 250, 128], IntDType::U8, &nd).greater_elem(-1)
    )));

    let d = XpuDevice::default();
    let t32 = || ints::<Xpu>(&[5, -5, 100, 0], IntDType::I32, &d);
    let t8 = || ints::<Xpu>(&[0, 3, 250, 128], IntDType::U8, &d);
    let mut bad = Vec::new();
    refused_or(
        &mut bad,
        "I32 clamp_max(i64::MAX)",
        vec![5, -5, 100, 0],
        || iv(t32().clamp_max(i64::MAX)),
    );
    refused_or(&mut bad, "I32 lower_elem(1 << 32)", vec![true; 4], || {
        bv(t32().lower_elem(1i64 << 32))
    });
    refused_or(&mut bad, "U8 greater_elem(-1)", vec![true; 4], || {
        bv(t8().greater_elem(-1))
    });
    refused_or(&mut bad, "U8 equal_elem(256)", vec![false; 4], || {
        bv(t8().equal_elem(256))
    });
    refused_or(&mut bad, "U8 clamp(-5, 300)", vec![0, 3, 250, 128], || {
        iv(t8().clamp(-5, 300))
    });
    assert!(bad.is_empty(), "wrong values:\n{}", bad.join("\n"));
}

/// The same truncation in the scalar division and remainder of a narrow integer tensor:
/// `[5, -5, 100, 0]` (I32) `.div_scalar((1 << 32) + 1)` is `[0, 0, 0, 0]` (truncated
/// division: every |x| is below the divisor) and `.remainder_scalar(1 << 32)` is `[5,
/// 4294967291, 100, 0]` — not representable in I32, so only a refusal is right there; NdArray
/// panics on both.
///
/// Observed (3 of 3 runs, PoCL): `div_scalar((1 << 32) + 1)` gives `[5, -5, 100, 0]` (the
/// divisor became 1); `remainder_scalar(1 << 32)` gives `[0, 0, 0, 0]` (the divisor became
/// 0, which xpu-burn's remainder maps to 0).
///
/// Cause: as above (runtime.rs:265 via `scalar_op`, backend/common.rs:33; int.rs:65, :73).
/// Fix: refuse a scalar outside the tensor's type (or compute in `long` and narrow the
/// result only where it fits).
#[test]
fn narrow_int_tensors_divide_by_a_truncated_scalar() {
    let nd = NdArrayDevice::Cpu;
    assert!(ndarray_refuses(|| iv::<Nd>(
        ints::<Nd>(&[5, -5, 100, 0], IntDType::I32, &nd).div_scalar((1i64 << 32) + 1)
    )));

    let d = XpuDevice::default();
    let t32 = || ints::<Xpu>(&[5, -5, 100, 0], IntDType::I32, &d);
    let mut bad = Vec::new();
    refused_or(
        &mut bad,
        "I32 div_scalar(2^32 + 1)",
        vec![0, 0, 0, 0],
        || iv(t32().div_scalar((1i64 << 32) + 1)),
    );
    if let Ok(got) = catch_unwind(AssertUnwindSafe(|| iv(t32().remainder_scalar(1i64 << 32)))) {
        bad.push(format!(
            "I32 remainder_scalar(2^32): {got:?}, where the true remainders [5, 4294967291, \
             100, 0] do not fit I32 (a refusal expected)"
        ));
    }
    assert!(bad.is_empty(), "wrong values:\n{}", bad.join("\n"));
}

// ---- Formerly review_h68_probes.rs ----

mod legal_scalars {
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
}
