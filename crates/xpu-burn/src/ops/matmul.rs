//! Batched matrix multiplication: one tiled OpenCL C kernel for every element type.
//!
//! Each work-group computes a `TS x TS` tile of one output matrix: it walks the shared
//! dimension in steps of `TS`, staging a `TS x TS` tile of each operand in `__local` memory
//! (zero-padded past the matrix edges), and each work-item accumulates one output element.
//! The operands are read through their strides (a transposed or broadcast view is read in
//! place, never copied); the batch dimensions broadcast as burn's `matmul` (numpy rules).
//! Floating-point products accumulate in `float` for `half`, in the element type otherwise;
//! integer products wrap on overflow as two's complement (what the device's integer
//! arithmetic does).

use burn_tensor::DType;
use xpu::xpu_kernel::Arg;

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::elementwise::{self, broadcast_shape};
use crate::runtime;
use crate::tensor::XpuTensor;

/// The edge of the square work-group tile for a device whose work-groups hold at most
/// `max_wg` work-items: 16 (256 work-items) where allowed, else the largest power of two
/// whose square fits.
fn tile_size(max_wg: usize) -> usize {
    let mut ts = 16;
    while ts > 1 && ts * ts > max_wg {
        ts /= 2;
    }
    ts
}

/// `lhs @ rhs` over the last two dimensions, batch dimensions broadcast (as burn's
/// `matmul`), for float and integer element types. The result has `lhs`'s element type
/// (`rhs` is converted to it when they differ) and shape `batch + [m, n]`, where `lhs` is
/// `[.., m, k]`, `rhs` is `[.., k, n]` and `batch` is the broadcast of their batch dims.
///
/// # Errors
/// [`Error::Invalid`] for a tensor of rank below 2, inner dimensions that differ, batch
/// dimensions that do not broadcast, tensors on different devices, or a bool tensor;
/// allocation and kernel errors.
pub fn matmul(lhs: &XpuTensor, rhs: &XpuTensor) -> Result<XpuTensor> {
    let device = lhs.device();
    if rhs.device() != device {
        return Err(Error::Invalid(format!(
            "matmul: tensors on devices {device} and {}",
            rhs.device()
        )));
    }
    let (ra, rb) = (lhs.shape.len(), rhs.shape.len());
    if ra < 2 || rb < 2 {
        return Err(Error::Invalid(format!(
            "matmul needs tensors of rank 2 or more, got shapes {:?} and {:?}",
            lhs.shape, rhs.shape
        )));
    }
    if lhs.dtype == DType::Bool {
        return Err(Error::Invalid("matmul of bool tensors".into()));
    }
    let (m, k) = (lhs.shape[ra - 2], lhs.shape[ra - 1]);
    let (k2, n) = (rhs.shape[rb - 2], rhs.shape[rb - 1]);
    if k != k2 {
        return Err(Error::Invalid(format!(
            "matmul: inner dimensions differ, shapes {:?} and {:?}",
            lhs.shape, rhs.shape
        )));
    }
    let rhs = if rhs.dtype != lhs.dtype {
        elementwise::cast(rhs, lhs.dtype)?
    } else {
        rhs.clone()
    };
    let batch = broadcast_shape(&[&lhs.shape[..ra - 2], &rhs.shape[..rb - 2]])?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let out = XpuTensor::empty(device, &out_shape, lhs.dtype)?;
    let nbatch: usize = batch.iter().product();
    if nbatch == 0 || m == 0 || n == 0 {
        return Ok(out);
    }

    let elem = dtype::cl_type(lhs.dtype)?;
    let acc = if elem == "half" { "float" } else { elem };
    let ts = tile_size(runtime::properties(device)?.max_work_group_size);
    let key = format!("matmul|{elem}|{acc}|{ts}");
    let function = runtime::function(device, &key, "matmul", || source(elem, acc, ts))?;

    // Metadata: the batch rank, the batch shape, then each operand's batch strides (0 on
    // the dimensions it broadcasts along).
    let br = batch.len();
    let mut meta: Vec<i64> = Vec::with_capacity(1 + 3 * br);
    meta.push(br as i64);
    meta.extend(batch.iter().map(|&s| s as i64));
    for t in [lhs, &rhs] {
        let tb = &t.shape[..t.shape.len() - 2];
        let pad = br - tb.len();
        meta.extend((0..br).map(|d| {
            if d < pad || tb[d - pad] == 1 {
                0
            } else {
                t.strides[d - pad] as i64
            }
        }));
    }
    let meta = runtime::upload_meta(device, &meta)?;

    let (tiles_m, tiles_n) = (m.div_ceil(ts), n.div_ceil(ts));
    let global = nbatch
        .checked_mul(tiles_m)
        .and_then(|g| g.checked_mul(tiles_n))
        .and_then(|g| g.checked_mul(ts * ts))
        .ok_or_else(|| Error::Invalid(format!("matmul of shape {out_shape:?} is too large")))?;
    let args: Vec<Arg<'_>> = vec![
        Arg::from(out.storage.buffer()),
        Arg::from(lhs.storage.buffer()),
        Arg::from(rhs.storage.buffer()),
        Arg::from(&meta),
        Arg::from(m as i64),
        Arg::from(n as i64),
        Arg::from(k as i64),
        Arg::from(tiles_n as i64),
        Arg::from((tiles_m * tiles_n) as i64),
        Arg::from(lhs.offset as i64),
        Arg::from(lhs.strides[ra - 2] as i64),
        Arg::from(lhs.strides[ra - 1] as i64),
        Arg::from(rhs.offset as i64),
        Arg::from(rhs.strides[rb - 2] as i64),
        Arg::from(rhs.strides[rb - 1] as i64),
    ];
    // SAFETY: `nbatch * tiles_m * tiles_n` work-groups of `ts * ts` work-items (`ts * ts` is
    // at most the device's work-group limit, and the global size is a multiple of it). Group
    // `g` computes tile `(g / tiles_n) % tiles_m, g % tiles_n` of batch `g / (tiles_m *
    // tiles_n) < nbatch`. Every read of `a` happens only for a row `< m` and a column `< k`,
    // at the lhs offset plus the dot product of the batch coordinates (each below its batch
    // size) with the lhs batch strides (0 where it broadcasts) plus row and column times the
    // lhs's last two strides: an element of the lhs view, which lies inside its storage;
    // the same holds for `b` (row `< k`, column `< n`). The write happens only for a row
    // `< m` and a column `< n` at `(batch * m + row) * n + col < nbatch * m * n`, the
    // elements of `out`, a fresh allocation no other tensor sees. `__local` accesses index
    // `[0, ts)` in both dimensions of arrays of `ts x ts` (`ts x (ts + 1)`). The metadata
    // holds `1 + 3 * br` longs, what the kernel indexes. Loops run `br` and `ceil(k / ts) *
    // ts` times, the same count for every work-item of a group (so every work-item reaches
    // every barrier): the kernel terminates.
    unsafe { runtime::launch(device, &function, &[global], Some(&[ts * ts]), &args)? };
    Ok(out)
}

fn source(elem: &str, acc: &str, ts: usize) -> String {
    let mut s = dtype::pragmas(&[elem, acc]);
    s.push_str(&format!(
        "#define T {elem}\n#define ACC {acc}\n#define TS {ts}\n"
    ));
    s.push_str(
        r#"
__kernel void matmul(__global T *out, __global const T *a, __global const T *b,
                     __global const long *meta, long m, long n, long k,
                     long tiles_n, long tiles_mn,
                     long a_off, long a_sm, long a_sk,
                     long b_off, long b_sk, long b_sn) {
  __local ACC as[TS][TS];
  __local ACC bs[TS][TS + 1];
  const long g = get_group_id(0);
  const int lid = (int)get_local_id(0);
  const int lr = lid / TS;
  const int lc = lid % TS;
  const long bat = g / tiles_mn;
  const long t = g % tiles_mn;
  const long row = (t / tiles_n) * TS + lr;
  const long col = (t % tiles_n) * TS + lc;
  const int br = (int)meta[0];
  long ao = a_off;
  long bo = b_off;
  long rem = bat;
  for (int d = br - 1; d >= 0; d--) {
    long sz = meta[1 + d];
    long c = rem % sz;
    rem /= sz;
    ao += c * meta[1 + br + d];
    bo += c * meta[1 + 2 * br + d];
  }
  ACC sum = (ACC)0;
  for (long p0 = 0; p0 < k; p0 += TS) {
    const long ka = p0 + lc;
    const long kb = p0 + lr;
    as[lr][lc] = (row < m && ka < k) ? (ACC)a[ao + row * a_sm + ka * a_sk] : (ACC)0;
    bs[lr][lc] = (kb < k && col < n) ? (ACC)b[bo + kb * b_sk + col * b_sn] : (ACC)0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = 0; p < TS; p++) {
      sum += as[lr][p] * bs[p][lc];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row < m && col < n) {
    out[(bat * m + row) * n + col] = (T)sum;
  }
}
"#,
    );
    s
}
