//! Integer powers (`int_powi`, `int_powi_scalar`) are exact, as burn documents, not rounded through
//! f32.
//!
//! Review h62 (fresh eyes, the ops layer against burn's NdArray backend and hand-computed
//! values): what was found to give a wrong value on valid input. Each test fails on the
//! reviewed commit (fe07bcb); the comment above it says what it shows, what was observed
//! and in how many runs. The probes that found nothing (views of every op family, long
//! split reductions and scans, rank 7-8, conv/pool/interpolate with odd shapes and their
//! gradients, deformable convolution, a 3e9-element broadcast line, ops from many threads
//! beside `memory_cleanup` and `sync`) pass, in op_families_against_ndarray.rs.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.
//!
//! Fixed since: xpu-burn implements `int_powi` and `int_powi_scalar_impl` as an exact integer
//! power (wrapping on overflow, negative exponents truncated); both tests pass.

use burn::tensor::{Int, Tensor, TensorData};
use burn_ndarray::{NdArray, NdArrayDevice};
use xpu_burn::{Xpu, XpuDevice};

fn ints<B: burn::tensor::backend::Backend>(v: &[i64], d: &B::Device) -> Tensor<B, 1, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), d)
}

fn powi<B: burn::tensor::backend::Backend>(d: &B::Device) -> Vec<i64> {
    let base = ints::<B>(&[3, -3, 7, 10], d);
    let exp = ints::<B>(&[16, 15, 9, 12], d);
    base.powi(exp)
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .unwrap()
}

/// `Tensor<Int>::powi` (integer base, integer exponents) returns wrong integers once the
/// result needs more than f32's 24-bit significand. burn documents `powi` on Int tensors as
/// the integer power (burn-tensor api/numeric.rs: `[[1, -2, 3], [5, 9, 6]].powi([[2, 3, 4],
/// [1, 2, 3]])` = `[[1, -8, 81], [5, 81, 216]]`), and burn's NdArray backend computes it
/// exactly (`i64::pow`, burn-ndarray ops/int_tensor.rs:347). xpu-burn does not implement
/// `int_powi`, so burn-tensor's default runs (burn-tensor ops/int_tensor.rs:422:
/// `float_into_int(float_powi(int_into_float(lhs), rhs))`), and xpu-burn's `int_into_float`
/// is a cast to F32 (crates/xpu-burn/src/backend/int.rs:30) followed by `pow` in f32
/// (crates/xpu-burn/src/backend/float.rs:78): every intermediate is an f32.
///
/// Expected (NdArray, and exact arithmetic): `[43046721, -14348907, 40353607,
/// 1000000000000]`. Observed (3 of 3 runs): `[43046720, -14348907, 40353608,
/// 999999995904]` — 3^16, 7^9 and 10^12 rounded to f32. Also affects `int_powf`,
/// `int_powi_scalar` for exponents other than 0, 1, 2 (burn-tensor's defaults, same path;
/// there NdArray shares the loss for the scalar form).
#[test]
fn int_powi_is_exact_as_burn_documents() {
    let want = powi::<NdArray<f32>>(&NdArrayDevice::Cpu);
    assert_eq!(want, vec![43046721, -14348907, 40353607, 1_000_000_000_000]);
    let got = powi::<Xpu>(&XpuDevice::default());
    assert_eq!(got, want, "Int powi went through f32");
}

/// The scalar form and what `i64::pow` cannot say: `powi_scalar(13)` of `[3, -2, 10]` is
/// `[1594323, -8192, 10^13]` exactly (burn's default went through f32: 10^13 reads
/// 9,999,999,827,968 there), and negative exponents truncate `1 / b^-e`: `[1, -1, -1, 2, -5]`
/// to `[-3, -3, -2, -1, -1]` is `[1, -1, 1, 0, 0]`; a power past i64 wraps as Rust's
/// `wrapping_pow` (3^41). Written with the fix.
#[test]
fn int_powi_scalar_is_exact_and_negative_exponents_truncate() {
    let d = XpuDevice::default();
    let v = |t: Tensor<Xpu, 1, Int>| t.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    assert_eq!(
        v(ints::<Xpu>(&[3, -2, 10], &d).powi_scalar(13)),
        vec![1_594_323, -8192, 10_000_000_000_000]
    );
    assert_eq!(
        v(ints::<Xpu>(&[1, -1, -1, 2, -5], &d).powi(ints::<Xpu>(&[-3, -3, -2, -1, -1], &d))),
        vec![1, -1, 1, 0, 0]
    );
    assert_eq!(
        v(ints::<Xpu>(&[3], &d).powi_scalar(41)),
        vec![3i64.wrapping_pow(41)]
    );
}
