//! Batched matrix multiplication: one tiled OpenCL C kernel for every element type.
//!
//! Each work-group computes a `TS x TS` tile of one output matrix: it walks the shared
//! dimension in steps of `TS`, staging a `TS x TS` tile of each operand in `__local` memory
//! (zero-padded past the matrix edges), and each work-item accumulates one output element.
//! The operands are read through their strides (a transposed or broadcast view is read in
//! place, never copied); the batch dimensions broadcast as burn's `matmul` (numpy rules).
//! `f32` products of matrices large enough to amortise a foreign call go to CLBlast's SGEMM
//! where the library is installed (one call per batch matrix, through xpu-kernel's checked
//! [`clblast_sgemm`]; an operand whose rows are not unit-stride is made contiguous first).
//! Floating-point products accumulate in `float` for `half`, in the element type otherwise;
//! integer products accumulate in an unsigned type of at least 32 bits, so they wrap on
//! overflow (two's complement).

use std::ops::Range;

use burn_tensor::DType;
use xpu::xpu_alloc::DataPtr;
use xpu::xpu_device::foreign::clblast::Clblast;
use xpu::xpu_kernel::{
    clblast_sgemm, Arg, ClRegion, DeviceRegion, DeviceRegionMut, InteropError, KernelError,
    RowMajorSgemm, TempBuffer,
};

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::elementwise::{self, broadcast_shape};
use crate::ops::FOR_COORDS;
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
    let nbatch = crate::tensor::elem_count(&batch);
    if nbatch == 0 || m == 0 || n == 0 {
        return Ok(out);
    }

    if clblast_matmul(lhs, &rhs, &out, &batch, (m, n, k))? {
        return Ok(out);
    }

    let elem = dtype::cl_type(lhs.dtype)?;
    // The accumulator: `float` for `half`; for integers an unsigned type of at least 32
    // bits, so products and sums wrap (defined for unsigned types; signed overflow is
    // undefined in OpenCL C, as in C99) and no promotion to `int` overflows.
    let acc = match elem {
        "half" => "float",
        "long" | "ulong" => "ulong",
        "int" | "uint" | "short" | "ushort" | "char" | "uchar" => "uint",
        e => e,
    };
    let wg = tile_size(runtime::properties(device)?.max_work_group_size);
    // Register blocking (R x R outputs per work-item) pays off once the matrices fill the
    // larger tiles; small products keep one output per work-item.
    let r = if m.min(n) >= 4 * wg { 4 } else { 1 };
    let ts = wg * r;
    let key = format!("matmul|{elem}|{acc}|{wg}|{r}");
    let function = runtime::library_function(device, &key, "matmul", || source(elem, acc, wg, r))?;

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
        .and_then(|g| g.checked_mul(wg * wg))
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
    // SAFETY: `nbatch * tiles_m * tiles_n` work-groups of `wg * wg` work-items (`wg * wg`
    // is at most the device's work-group limit, and the global size is a multiple of it).
    // Group `g` computes the `ts x ts` tile `(g % (tiles_m * tiles_n)) / tiles_n, g %
    // tiles_n` of batch `g / (tiles_m * tiles_n) < nbatch`. Every read of `a` happens only
    // for a row `< m` and a column `< k`, at the lhs offset plus the dot product of the batch
    // coordinates (each below its batch size) with the lhs batch strides (0 where it
    // broadcasts) plus row and column times the lhs's last two strides: an element of the
    // lhs view, which lies inside its storage; the same holds for `b` (row `< k`, column
    // `< n`). A write happens only for a row `< m` and a column `< n`, at `(batch * m + row)
    // * n + col < nbatch * m * n`: an element of `out`, a fresh allocation no other tensor
    // sees. `__local` indices: the first below `wg`, the second below `ts = wg * r` (arrays
    // of `wg x (ts + 1)`); staging index `lid + q * wg * wg < r * wg * wg = wg * ts` splits
    // into `(idx / wg < ts, idx % wg)` and `(idx / ts < wg, idx % ts)`. The metadata holds
    // `1 + 3 * br` longs, what the kernel indexes. Loops run `br`, `r` and `ceil(k / wg) *
    // wg` times, the same counts for every work-item of a group (so every work-item reaches
    // every barrier): the kernel terminates.
    unsafe { runtime::launch(device, &function, &[global], Some(&[wg * wg]), &args)? };
    Ok(out)
}

/// A range of `f32` elements of a tensor's storage, as a region for CLBlast (a [`ClRegion`]
/// checks the range against the allocation).
struct F32Region<'a> {
    ptr: &'a DataPtr,
    elems: Range<usize>,
}

impl<'a> F32Region<'a> {
    /// `len` elements of `tensor`'s storage from element `offset`.
    fn new(tensor: &'a XpuTensor, offset: usize, len: usize) -> Self {
        Self {
            ptr: tensor.storage.buffer().data_ptr(),
            elems: offset..offset + len,
        }
    }
}

impl DeviceRegion<f32> for F32Region<'_> {
    fn data_ptr(&self) -> &DataPtr {
        self.ptr
    }
    fn offset(&self) -> usize {
        self.elems.start
    }
    fn len(&self) -> usize {
        self.elems.len()
    }
}

/// Only made for the matrices of a fresh output, one region per matrix, disjoint.
impl DeviceRegionMut<f32> for F32Region<'_> {}

/// Per-matrix work (`m * n * k` multiply-adds) from which one CLBlast call per matrix beats
/// the tiled kernel, and from which it does so for batches of more than
/// [`CLBLAST_SMALL_BATCH`] matrices too.
const CLBLAST_MIN_WORK: usize = 1 << 15;
const CLBLAST_BATCH_WORK: usize = 1 << 21;
const CLBLAST_SMALL_BATCH: usize = 8;

/// `t` (a `rows x cols` matrix in its last two dimensions) with unit-stride rows and its
/// leading dimension: itself when its rows already are, else a contiguous copy.
fn row_major(t: &XpuTensor, rows: usize, cols: usize) -> Result<(XpuTensor, usize)> {
    let r = t.shape.len();
    let (sr, sc) = (t.strides[r - 2], t.strides[r - 1]);
    if (cols == 1 || sc == 1) && (rows == 1 || sr >= cols as isize) {
        let ld = if rows == 1 { cols } else { sr as usize };
        return Ok((t.clone(), ld.max(1)));
    }
    Ok((elementwise::contiguous(t)?, cols.max(1)))
}

/// The element offset of each batch matrix of `t` (whose batch dimensions broadcast to
/// `batch`), in batch order.
fn batch_offsets(t: &XpuTensor, batch: &[usize]) -> Vec<usize> {
    let tb = &t.shape[..t.shape.len() - 2];
    let pad = batch.len() - tb.len();
    let nbatch = crate::tensor::elem_count(batch);
    (0..nbatch)
        .map(|q| {
            let (mut rem, mut off) = (q, t.offset as isize);
            for d in (0..batch.len()).rev() {
                let c = rem % batch[d];
                rem /= batch[d];
                if d >= pad && tb[d - pad] != 1 {
                    off += c as isize * t.strides[d - pad];
                }
            }
            // A view's elements lie inside its storage, so no offset is negative.
            off.max(0) as usize
        })
        .collect()
}

/// `out = lhs @ rhs` by CLBlast's SGEMM when the element type is `f32`, CLBlast is
/// installed and the matrices are large enough ([`CLBLAST_MIN_WORK`]); `Ok(false)` otherwise
/// (nothing done, or CLBlast failed with its own status: the caller's tiled kernel then
/// overwrites all of `out`).
fn clblast_matmul(
    lhs: &XpuTensor,
    rhs: &XpuTensor,
    out: &XpuTensor,
    batch: &[usize],
    (m, n, k): (usize, usize, usize),
) -> Result<bool> {
    let nbatch = crate::tensor::elem_count(batch);
    let work = m.saturating_mul(n).saturating_mul(k);
    if lhs.dtype != DType::F32
        || k == 0
        || work < CLBLAST_MIN_WORK
        || (nbatch > CLBLAST_SMALL_BATCH && work < CLBLAST_BATCH_WORK)
        || Clblast::get().is_err()
    {
        return Ok(false);
    }
    let (a, lda) = row_major(lhs, m, k)?;
    let (b, ldb) = row_major(rhs, k, n)?;
    let stream = runtime::stream(out.device())?;
    let (a_offs, b_offs) = (batch_offsets(&a, batch), batch_offsets(&b, batch));
    for (q, (&ao, &bo)) in a_offs.iter().zip(&b_offs).enumerate() {
        let ra = F32Region::new(&a, ao, (m - 1) * lda + k);
        let rb = F32Region::new(&b, bo, (k - 1) * ldb + n);
        let mut rc = F32Region::new(out, q * m * n, m * n);
        let ca = ClRegion::new(&ra).map_err(KernelError::from)?;
        let cb = ClRegion::new(&rb).map_err(KernelError::from)?;
        let cc = ClRegion::new_mut(&mut rc).map_err(KernelError::from)?;
        let g = RowMajorSgemm {
            a: (&ca, lda),
            b: (&cb, ldb),
            ..RowMajorSgemm::new((m, n, k), &ca, &cb, &cc)
        };
        match clblast_sgemm(&stream, &g, TempBuffer::AsNeeded) {
            Ok(_) => {}
            // CLBlast refused this device or shape (its own status): the tiled kernel, next on
            // the same in-order stream, then writes every element of `out`.
            Err(e @ (InteropError::Library { .. } | InteropError::Foreign(_))) => {
                tracing::debug!("xpu-burn matmul: CLBlast failed ({e}); using the tiled kernel");
                return Ok(false);
            }
            Err(e) => return Err(KernelError::from(e).into()),
        }
    }
    Ok(true)
}

fn source(elem: &str, acc: &str, wg: usize, r: usize) -> String {
    let mut s = dtype::pragmas(&[elem, acc]);
    s.push_str(&format!(
        "#define T {elem}\n#define ACC {acc}\n#define WG {wg}\n#define R {r}\n"
    ));
    s.push_str(FOR_COORDS);
    s.push_str(
        r#"
/* A work-group of WG x WG work-items computes a TM x TM output tile (TM = WG * R); each
   work-item the R x R outputs (lr + WG * i, lc + WG * j). The shared dimension is walked in
   steps of WG, the operands' tiles staged in __local memory, k-major, zero past the edges. */
#define TM (WG * R)
__kernel void matmul(__global T *out, __global const T *a, __global const T *b,
                     __global const long *meta, long m, long n, long k,
                     long tiles_n, long tiles_mn,
                     long a_off, long a_sm, long a_sk,
                     long b_off, long b_sk, long b_sn) {
  __local ACC as[WG][TM + 1];
  __local ACC bs[WG][TM + 1];
  const long g = get_group_id(0);
  const int lid = (int)get_local_id(0);
  const int lr = lid / WG;
  const int lc = lid % WG;
  const long bat = g / tiles_mn;
  const long t = g % tiles_mn;
  const long row0 = (t / tiles_n) * TM;
  const long col0 = (t % tiles_n) * TM;
  const int rank = (int)meta[0];
  __global const long *shape = meta + 1;
  long ao = a_off;
  long bo = b_off;
  FOR_COORDS(bat)
    ao += c * meta[1 + rank + d];
    bo += c * meta[1 + 2 * rank + d];
  END_COORDS
  ACC sum[R][R];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < R; j++)
      sum[i][j] = (ACC)0;
  for (long p0 = 0; p0 < k; p0 += WG) {
    for (int q = 0; q < R; q++) {
      const int idx = lid + q * WG * WG;
      /* A: element (row0 + idx / WG, p0 + idx % WG) into as[idx % WG][idx / WG]. */
      const int ar = idx / WG, ak = idx % WG;
      const long gr = row0 + ar, gk = p0 + ak;
      as[ak][ar] = (gr < m && gk < k) ? (ACC)a[ao + gr * a_sm + gk * a_sk] : (ACC)0;
      /* B: element (p0 + idx / TM, col0 + idx % TM) into bs[idx / TM][idx % TM]. */
      const int bk = idx / TM, bc = idx % TM;
      const long hk = p0 + bk, hc = col0 + bc;
      bs[bk][bc] = (hk < k && hc < n) ? (ACC)b[bo + hk * b_sk + hc * b_sn] : (ACC)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = 0; p < WG; p++) {
      ACC av[R], bv[R];
      for (int i = 0; i < R; i++) av[i] = as[p][lr + WG * i];
      for (int j = 0; j < R; j++) bv[j] = bs[p][lc + WG * j];
      for (int i = 0; i < R; i++)
        for (int j = 0; j < R; j++)
          sum[i][j] += av[i] * bv[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < R; i++) {
    const long row = row0 + lr + WG * i;
    for (int j = 0; j < R; j++) {
      const long col = col0 + lc + WG * j;
      if (row < m && col < n) out[(bat * m + row) * n + col] = (T)sum[i][j];
    }
  }
}
"#,
    );
    s
}
