//! Random tensors, generated on the device by a counter-based generator.
//!
//! Element `i` of a call is a pure function of the device's seed, the call's number and `i`:
//! Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2,
//! 3", SC 2011) keyed by the 64-bit seed, on the 128-bit counter `(i, call)`, gives each
//! element four independent 32-bit words. The host keeps, per device, the seed and the number
//! of the next call under a lock; each call takes a number and advances it, so successive
//! calls draw from disjoint counters and differ. [`seed`] resets both (as burn's
//! `Backend::seed`): the same seed then reproduces the same sequence of tensors.
//!
//! Distributions (burn's [`Distribution`]): `Default` is uniform on `[0, 1)`, `Uniform(lo,
//! hi)` uniform on `[lo, hi)` (for integer types: uniform integers in `[lo, hi)`, the bounds
//! truncated toward zero), `Bernoulli(p)` is 1 with probability `p` (compared on 32 bits),
//! `Normal(mean, std)` by the Box-Muller transform. Floats use 24 random bits (`f32`, `f16`)
//! or 53 (`f64`); the integer `Default` is uniform on `[0, 255)` (what burn's tests state for
//! it in `unfold`'s `test_unfold_int`).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use burn_tensor::{DType, Distribution};
use parking_lot::Mutex;
use xpu::xpu_kernel::Arg;

use crate::dtype;
use crate::error::{Error, Result};
use crate::runtime;
use crate::tensor::XpuTensor;

/// A device's generator: the Philox key and the number of the next call.
#[derive(Debug, Clone, Copy)]
struct GenState {
    seed: u64,
    call: u64,
}

fn states() -> &'static Mutex<HashMap<usize, GenState>> {
    static STATES: OnceLock<Mutex<HashMap<usize, GenState>>> = OnceLock::new();
    STATES.get_or_init(Default::default)
}

/// Sets the seed of the device's generator (and restarts its sequence of calls), as burn's
/// `Backend::seed`: the tensors sampled after `seed(d, s)` are the same on every run.
pub fn seed(device: usize, seed: u64) {
    states().lock().insert(device, GenState { seed, call: 0 });
}

/// The seed and call number for the next call on `device`, advancing the device's state.
/// An unseeded device starts from a seed that differs per process (the standard library's
/// randomly keyed hasher).
fn next_call(device: usize) -> (u64, u64) {
    let mut map = states().lock();
    let st = map.entry(device).or_insert_with(|| GenState {
        seed: std::collections::hash_map::RandomState::new().hash_one(device),
        call: 0,
    });
    let taken = (st.seed, st.call);
    st.call = st.call.wrapping_add(1);
    taken
}

/// A tensor of `shape` and `dtype` sampled from `distribution`, on `device`.
///
/// # Errors
/// [`Error::Invalid`] for a bool `dtype`; [`Error::DType`] / [`Error::Unsupported`] for an
/// element type the device cannot store; allocation and kernel errors.
pub fn random(
    device: usize,
    shape: &[usize],
    distribution: Distribution,
    dtype: DType,
) -> Result<XpuTensor> {
    let dtype = dtype::canonical(dtype);
    if dtype == DType::Bool {
        return Err(Error::Invalid(
            "random bool tensors are not supported".into(),
        ));
    }
    let out = XpuTensor::empty(device, shape, dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let out_type = dtype::cl_type(dtype)?;
    let float = dtype::is_float(dtype);
    // The type continuous samples are computed in.
    let f = if dtype == DType::F64 {
        "double"
    } else {
        "float"
    };

    // Parameters: two reals (f0, f1), a signed and an unsigned integer (i0, u0).
    let (kind, f0, f1, i0, u0) = match distribution {
        Distribution::Default if float => ("uniform", 0.0, 1.0, 0, 0),
        Distribution::Default => ("uniform_int", 0.0, 0.0, 0, 255),
        Distribution::Uniform(lo, hi) if float => ("uniform", lo, hi, 0, 0),
        Distribution::Uniform(lo, hi) => {
            let (lo, hi) = (lo as i64, hi as i64);
            let range = if hi > lo {
                hi.wrapping_sub(lo) as u64
            } else {
                0
            };
            ("uniform_int", 0.0, 0.0, lo, range)
        }
        Distribution::Bernoulli(p) => {
            let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
            let threshold = ((p * 4_294_967_296.0).round() as u64).min(1 << 32);
            ("bernoulli", 0.0, 0.0, 0, threshold)
        }
        Distribution::Normal(mean, std) => ("normal", mean, std, 0, 0),
    };
    let key = format!("random|{kind}|{out_type}|{f}");
    let function =
        runtime::library_function(device, &key, "random", || source(kind, out_type, f, float))?;
    let (seed, call) = next_call(device);
    let (fa, fb) = if f == "double" {
        (Arg::from(f0), Arg::from(f1))
    } else {
        (Arg::from(f0 as f32), Arg::from(f1 as f32))
    };
    let args: Vec<Arg<'_>> = vec![
        Arg::from(out.storage.buffer()),
        Arg::from(n as i64),
        Arg::from(seed as u32),
        Arg::from((seed >> 32) as u32),
        Arg::from(call as u32),
        Arg::from((call >> 32) as u32),
        fa,
        fb,
        Arg::from(i0),
        Arg::from(u0),
    ];
    // SAFETY: `n` work-items; item `i < n` writes `out[i]` only (`out` holds `n` elements of
    // the output type, a fresh allocation no other tensor sees) and reads nothing from
    // memory; Philox runs a fixed 10 rounds, so the kernel terminates.
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(out)
}

/// The kernel `random` for one distribution `kind` and output type.
fn source(kind: &str, out_type: &str, f: &str, float: bool) -> String {
    let mut s = dtype::pragmas(&[out_type, f]);
    s.push_str(&format!("#define TO {out_type}\n#define F {f}\n"));
    s.push_str(
        r#"
/* Philox4x32-10: ten rounds of two 32x32->64 multiplications, the key bumped by the
   Weyl constants between rounds. */
uint4 philox4x32_10(uint4 c, uint k0, uint k1) {
  for (int r = 0; r < 10; r++) {
    uint hi0 = mul_hi(0xD2511F53u, c.x);
    uint lo0 = 0xD2511F53u * c.x;
    uint hi1 = mul_hi(0xCD9E8D57u, c.z);
    uint lo1 = 0xCD9E8D57u * c.z;
    c = (uint4)(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}
"#,
    );
    // A uniform sample on [0, 1) from one (float: 24 bits) or two (double: 53 bits) words.
    if f == "double" {
        s.push_str(
            "F unit(uint a, uint b) { return (F)((((ulong)a) << 21) ^ (ulong)(b >> 11)) * 0x1.0p-53; }\n",
        );
    } else {
        s.push_str("F unit(uint a, uint b) { return (F)(a >> 8) * 0x1.0p-24f; }\n");
    }
    s.push_str(
        r#"
__kernel void random(__global TO *out, long n, uint k0, uint k1, uint c2, uint c3,
                     F f0, F f1, long i0, ulong u0) {
  long i = get_global_id(0);
  if (i >= n) return;
  uint4 r = philox4x32_10((uint4)((uint)i, (uint)((ulong)i >> 32), c2, c3), k0, k1);
"#,
    );
    let body = match kind {
        "uniform" => {
            "  F v = f0 + (f1 - f0) * unit(r.x, r.y);\n  if (v >= f1 && f1 > f0) v = nextafter(f1, f0);\n"
        }
        "uniform_int" => {
            "  ulong x = (((ulong)r.x) << 32) | (ulong)r.y;\n  long v = i0 + (long)mul_hi(x, u0);\n"
        }
        "bernoulli" => "  int v = ((ulong)r.x < u0) ? 1 : 0;\n",
        // Box-Muller: u1 in (0, 1] keeps the logarithm finite.
        _ => {
            "  F u1 = (F)1 - unit(r.x, r.y);\n  F u2 = unit(r.z, r.w);\n  F v = f0 + f1 * (sqrt((F)-2 * log(u1)) * cospi((F)2 * u2));\n"
        }
    };
    s.push_str(body);
    let store = if kind == "normal" && !float {
        format!("  out[i] = convert_{out_type}_sat(v);\n}}\n")
    } else {
        "  out[i] = (TO)v;\n}\n".to_string()
    };
    s.push_str(&store);
    s
}
