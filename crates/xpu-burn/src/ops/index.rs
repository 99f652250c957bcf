//! Indexed reads and writes: gather, scatter (add), select, select_assign (add),
//! slice_assign, cat, and copies into a strided view.
//!
//! Three OpenCL C templates, each one work-item per output element:
//!
//! - `gather`: `out[c] = t[c with c[dim] = idx[c]]` over the index tensor's shape (any
//!   strides). `select` is a gather with the 1-D indices broadcast (stride 0) to the output's
//!   shape.
//! - `scatter`: a fresh copy of `t` where each output element sums, in index order, the
//!   values whose index along `dim` targets it. Each work-item owns its output element, so
//!   duplicate indices need no float atomics (OpenCL 1.2 has no float atomic add) and the
//!   result is deterministic. With few index entries per line the work-item scans them all;
//!   with more (an embedding's backward pass: thousands of tokens into a vocabulary) the
//!   entries are first grouped by destination (`Segments`: integer atomics plus a rank pass
//!   that restores index order) so each work-item visits only its own. `select_assign` is a
//!   scatter whose 1-D indices are shared by every line.
//! - `copy_view`: `dst[view] = src` element-wise through two strided views; `slice_assign`
//!   copies `t` to a fresh tensor, then copies the value into the slice view of that copy;
//!   `cat` copies each input into its view of a fresh output.
//!
//! Out-of-range indices (negative or `>=` the size along `dim`) never reach memory: a gather
//! reads 0 for them and a scatter ignores them (burn does not define them; its backends
//! differ).

use std::ops::Range;

use burn_tensor::DType;
use xpu::xpu_kernel::Arg;

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::elementwise::{cast, full, map, MapSpec};
use crate::ops::layout;
use crate::runtime;
use crate::tensor::XpuTensor;

/// Checks that `dim` is a dimension of `t` and that `indices` has an integer type and `t`'s
/// rank.
fn check_index_args(op: &str, dim: usize, t: &XpuTensor, indices: &XpuTensor) -> Result<()> {
    if dim >= t.shape.len() {
        return Err(Error::Invalid(format!(
            "{op}: dimension {dim} of a rank-{} tensor",
            t.shape.len()
        )));
    }
    if dtype::is_float(indices.dtype) || indices.dtype == DType::Bool {
        return Err(Error::Invalid(format!(
            "{op}: indices of type {:?} (an integer type is needed)",
            indices.dtype
        )));
    }
    if indices.shape.len() != t.shape.len() {
        return Err(Error::Invalid(format!(
            "{op}: indices of shape {:?} for a tensor of shape {:?} (the ranks differ)",
            indices.shape, t.shape
        )));
    }
    if t.device() != indices.device() {
        return Err(Error::Invalid(format!(
            "{op}: tensors on devices {} and {} in one op",
            t.device(),
            indices.device()
        )));
    }
    Ok(())
}

/// The OpenCL C type accumulating sums of `T`: `float` for `half` (a sum of many halves
/// rounds once, at the end), `T` otherwise.
fn acc_type(t: &str) -> &str {
    if t == "half" {
        "float"
    } else {
        t
    }
}

/// `out[..., i, ...] = t[..., indices[..., i, ...], ...]` along `dim` (output shaped as
/// `indices`), as burn's `gather`. Along the other dimensions `indices` may be smaller than
/// `t`. An index outside `0..t.shape[dim]` yields 0.
///
/// # Errors
/// [`Error::Invalid`] for a dimension out of range, non-integer indices, differing ranks, or
/// indices larger than `t` along another dimension; allocation and kernel errors.
pub fn gather(dim: usize, t: &XpuTensor, indices: &XpuTensor) -> Result<XpuTensor> {
    check_index_args("gather", dim, t, indices)?;
    for d in 0..t.shape.len() {
        if d != dim && indices.shape[d] > t.shape[d] {
            return Err(Error::Invalid(format!(
                "gather along {dim}: indices of shape {:?} exceed the tensor's shape {:?}",
                indices.shape, t.shape
            )));
        }
    }
    gather_unchecked(dim, t, indices)
}

/// The gather kernel over `indices`' shape; the caller checked that `indices` has `t`'s rank
/// and is no larger than `t` along every dimension but `dim`.
fn gather_unchecked(dim: usize, t: &XpuTensor, indices: &XpuTensor) -> Result<XpuTensor> {
    let device = t.device();
    let out = XpuTensor::empty(device, &indices.shape, t.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let ty = dtype::cl_type(t.dtype)?;
    let ity = dtype::cl_type(indices.dtype)?;
    let key = format!("index_gather|{ty}|{ity}");
    let function = runtime::function(device, &key, "gather", || gather_source(ty, ity))?;

    let rank = t.shape.len();
    let mut m: Vec<i64> = Vec::with_capacity(5 + 3 * rank);
    m.push(rank as i64);
    m.push(dim as i64);
    m.extend(indices.shape.iter().map(|&s| s as i64));
    m.push(indices.offset as i64);
    m.extend(indices.strides.iter().map(|&s| s as i64));
    m.push(t.offset as i64);
    m.extend(t.strides.iter().map(|&s| s as i64));
    m.push(t.shape[dim] as i64);
    let meta = runtime::upload_meta(device, &m)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(n as i64),
        Arg::from(&meta),
        Arg::from(t.storage.buffer()),
        Arg::from(indices.storage.buffer()),
    ];
    // SAFETY: `n` work-items, `n` = the element count of `out` (a fresh contiguous
    // allocation of `n` elements of `T`); item `i < n` writes `out[i]` only. It reads
    // `indices` at its offset plus the dot product of `i`'s coordinates in `indices.shape`
    // with its strides — an element of the index view, inside its storage. It reads `src`
    // only when the loaded index `k` satisfies `0 <= k < t.shape[dim]`, at `t`'s offset plus
    // the coordinates (with `k` along `dim`) times `t`'s strides; the other coordinates are
    // below `indices.shape[d] <= t.shape[d]` (checked by the caller), so this is an element of
    // `t`'s view, inside its storage. The metadata buffer holds exactly the 5 + 3 * rank
    // longs the kernel indexes. The only loop runs `rank` times, so the kernel terminates;
    // divisions are by sizes of a non-empty shape (never 0).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(out)
}

fn gather_source(ty: &str, ity: &str) -> String {
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!("#define T {ty}\n#define TI {ity}\n"));
    s.push_str(
        r#"
__kernel void gather(__global T *out, long n, __global const long *meta,
                     __global const T *src, __global const TI *idx) {
  long i = get_global_id(0);
  if (i >= n) return;
  int rank = (int)meta[0];
  int dim = (int)meta[1];
  __global const long *shape = meta + 2;
  long io = meta[2 + rank];
  __global const long *istr = meta + 3 + rank;
  long to = meta[3 + 2 * rank];
  __global const long *tstr = meta + 4 + 2 * rank;
  long tdim = meta[4 + 3 * rank];
  long rem = i;
  for (int d = rank - 1; d >= 0; d--) {
    long sz = shape[d];
    long c = rem % sz;
    rem /= sz;
    io += c * istr[d];
    if (d != dim) to += c * tstr[d];
  }
  long k = (long)idx[io];
  if (k >= 0 && k < tdim) {
    out[i] = src[to + k * tstr[dim]];
  } else {
    out[i] = (T)0;
  }
}
"#,
    );
    s
}

/// A copy of `t` with `values` added at `indices` along `dim`, as burn's `scatter` (which
/// sums): `out[c with c[dim] = indices[c]] += values[c]` for every coordinate `c` of
/// `indices`. Duplicate indices accumulate in index order (deterministic); for bool tensors
/// the sum is a logical or. An index outside `0..t.shape[dim]` is ignored.
///
/// # Errors
/// As [`gather`]; [`Error::Invalid`] when `values` is smaller than `indices` along some
/// dimension or has another rank.
pub fn scatter_add(
    dim: usize,
    t: &XpuTensor,
    indices: &XpuTensor,
    values: &XpuTensor,
) -> Result<XpuTensor> {
    check_index_args("scatter", dim, t, indices)?;
    let bad = values.shape.len() != indices.shape.len()
        || values
            .shape
            .iter()
            .zip(&indices.shape)
            .any(|(&v, &i)| v < i)
        || (0..t.shape.len()).any(|d| d != dim && indices.shape[d] > t.shape[d]);
    if bad {
        return Err(Error::Invalid(format!(
            "scatter along {dim}: indices of shape {:?} and values of shape {:?} do not fit a \
             tensor of shape {:?}",
            indices.shape, values.shape, t.shape
        )));
    }
    if values.device() != t.device() {
        return Err(Error::Invalid(format!(
            "scatter: tensors on devices {} and {} in one op",
            t.device(),
            values.device()
        )));
    }
    let values = cast(values, t.dtype)?;
    if indices.shape[dim] <= LOOP_MAX_ENTRIES
        || indices.numel() == 0
        || indices.shape[dim] > i32::MAX as usize
    {
        return scatter_unchecked(dim, t, indices, &values);
    }
    // Lines of `indices` (every coordinate but `dim`), numbered row-major.
    let mut lstr = vec![0i64; t.shape.len()];
    let mut acc = 1i64;
    for d in (0..t.shape.len()).rev() {
        if d != dim {
            lstr[d] = acc;
            acc *= indices.shape[d] as i64;
        }
    }
    let seg = Segments::build(indices, dim, t.shape[dim])?;
    scatter_segments(dim, t, &values, &seg, &indices.shape, &lstr)
}

/// Up to this many index entries per destination line, a scatter output element scans them
/// all (one kernel); above, the entries are first grouped by destination ([`Segments`]) so
/// each output element visits only its own.
const LOOP_MAX_ENTRIES: usize = 16;

/// The entries of an index tensor grouped by destination, on the device: for each line
/// `l` (the coordinates but `cd`, row-major) and target `j` in `0..size`, the bucket
/// `b = l * size + j` holds the entry ids `e` (row-major positions in the index tensor) whose
/// index is `j`, in ascending order, at `sorted[offsets[b] .. offsets[b] + counts[b]]`.
/// Built with integer atomics (counts and slots, OpenCL 1.1 §6.11.11) and an order-restoring
/// rank pass, so the grouping is deterministic. Counts are 32-bit: callers use it only for
/// lines of at most `i32::MAX` entries (the kernels still clamp every slot they touch).
struct Segments {
    counts: XpuTensor,
    offsets: XpuTensor,
    sorted: XpuTensor,
    /// Entries along `cd` per line.
    k: usize,
    /// Elements after `cd` in the index tensor's shape.
    inner: usize,
    /// All entries.
    entries: usize,
    /// The number of targets per line.
    size: usize,
}

impl Segments {
    /// Groups the entries of `indices` (non-empty) along `cd` into buckets of `size`
    /// targets per line; indices outside `0..size` are left out.
    fn build(indices: &XpuTensor, cd: usize, size: usize) -> Result<Segments> {
        let device = indices.device();
        let entries = indices.numel();
        let k = indices.shape[cd];
        let inner: usize = indices.shape[cd + 1..].iter().product();
        let lines = entries / k;
        let buckets = lines * size;
        let ity = dtype::cl_type(indices.dtype)?;
        let f = |name: &str| {
            runtime::function(device, &format!("index_seg|{ity}|{name}"), name, || {
                segments_source(ity)
            })
        };
        let zero = runtime::ScalarValue::I(0);
        let counts = full(device, &[buckets], zero, DType::I32)?;
        let fill = full(device, &[buckets], zero, DType::I32)?;
        let offsets = XpuTensor::empty(device, &[buckets], DType::I64)?;
        let bucket = XpuTensor::empty(device, &[entries], DType::I64)?;
        let unsorted = XpuTensor::empty(device, &[entries], DType::I64)?;
        let sorted = XpuTensor::empty(device, &[entries], DType::I64)?;

        let rank = indices.shape.len();
        let mut m: Vec<i64> = Vec::with_capacity(6 + 2 * rank);
        m.push(rank as i64);
        m.push(cd as i64);
        m.extend(indices.shape.iter().map(|&s| s as i64));
        m.push(indices.offset as i64);
        m.extend(indices.strides.iter().map(|&s| s as i64));
        m.push(k as i64);
        m.push(inner as i64);
        m.push(size as i64);
        let meta = runtime::upload_meta(device, &m)?;
        let count = f("seg_count")?;
        let args = [
            Arg::from(entries as i64),
            Arg::from(&meta),
            Arg::from(indices.storage.buffer()),
            Arg::from(counts.storage.buffer()),
            Arg::from(bucket.storage.buffer()),
        ];
        // SAFETY: `entries` work-items; item `e` reads `indices` at its offset plus `e`'s
        // coordinates in its shape times its strides (an element of the view, inside its
        // storage) and writes `bucket[e]` (`bucket` holds `entries` longs). It increments
        // `counts[b]` only for `b = l * size + j` with `0 <= j < size` and line
        // `l = (e / (k * inner)) * inner + e % inner < entries / k = lines`, so
        // `b < lines * size`, the length of `counts`. The metadata holds exactly the
        // 6 + 2 * rank longs indexed. One loop of `rank` steps; divisions by sizes of a
        // non-empty shape. `counts` and `bucket` are fresh scratch allocations.
        unsafe { runtime::launch(device, &count, &[entries], None, &args)? };

        let scan = f("seg_scan")?;
        let args = [
            Arg::from(lines as i64),
            Arg::from(size as i64),
            Arg::from(k as i64),
            Arg::from(counts.storage.buffer()),
            Arg::from(offsets.storage.buffer()),
        ];
        // SAFETY: `lines` work-items; item `l` reads `counts` and writes `offsets` at
        // `l * size + j` for `j < size`: below `lines * size`, the length of both. The loop
        // runs `size` times. `offsets` is a fresh scratch allocation.
        unsafe { runtime::launch(device, &scan, &[lines], None, &args)? };

        let fill_k = f("seg_fill")?;
        let args = [
            Arg::from(entries as i64),
            Arg::from(bucket.storage.buffer()),
            Arg::from(offsets.storage.buffer()),
            Arg::from(fill.storage.buffer()),
            Arg::from(unsorted.storage.buffer()),
        ];
        // SAFETY: `entries` work-items; item `e` reads `bucket[e]` (length `entries`); a
        // non-negative bucket `b` is below `lines * size` (as written by `seg_count`), the
        // length of `offsets` and `fill`; the slot written in `unsorted` is checked against
        // `entries`, its length. No loop. `fill` and `unsorted` are fresh scratch allocations.
        unsafe { runtime::launch(device, &fill_k, &[entries], None, &args)? };

        let rank_k = f("seg_rank")?;
        let args = [
            Arg::from(entries as i64),
            Arg::from(bucket.storage.buffer()),
            Arg::from(offsets.storage.buffer()),
            Arg::from(counts.storage.buffer()),
            Arg::from(unsorted.storage.buffer()),
            Arg::from(sorted.storage.buffer()),
        ];
        // SAFETY: `entries` work-items; item `e` reads `bucket[e]`, and for a non-negative
        // bucket `b < lines * size` reads `offsets[b]` and `counts[b]`; it scans `unsorted`
        // from `offsets[b]` (checked non-negative) to at most `entries`, its length, and
        // writes `sorted` at a slot checked against `entries`. The loop runs at most
        // `entries` times. `sorted` is a fresh scratch allocation.
        unsafe { runtime::launch(device, &rank_k, &[entries], None, &args)? };

        Ok(Segments {
            counts,
            offsets,
            sorted,
            k,
            inner,
            entries,
            size,
        })
    }
}

fn segments_source(ity: &str) -> String {
    let mut s = format!("#define TI {ity}\n");
    s.push_str(
        r#"
__kernel void seg_count(long n, __global const long *meta, __global const TI *idx,
                        volatile __global int *counts, __global long *bucket) {
  long e = get_global_id(0);
  if (e >= n) return;
  int rank = (int)meta[0];
  __global const long *shape = meta + 2;
  long io = meta[2 + rank];
  __global const long *istr = meta + 3 + rank;
  long k = meta[3 + 2 * rank];
  long inner = meta[4 + 2 * rank];
  long size = meta[5 + 2 * rank];
  long rem = e;
  for (int d = rank - 1; d >= 0; d--) {
    long sz = shape[d];
    long c = rem % sz;
    rem /= sz;
    io += c * istr[d];
  }
  long j = (long)idx[io];
  long l = (e / (k * inner)) * inner + e % inner;
  if (j >= 0 && j < size) {
    long b = l * size + j;
    bucket[e] = b;
    atomic_inc(&counts[b]);
  } else {
    bucket[e] = -1;
  }
}

__kernel void seg_scan(long n, long size, long k, __global const int *counts,
                       __global long *offsets) {
  long l = get_global_id(0);
  if (l >= n) return;
  long acc = l * k;
  for (long j = 0; j < size; j++) {
    offsets[l * size + j] = acc;
    acc += counts[l * size + j];
  }
}

__kernel void seg_fill(long n, __global const long *bucket, __global const long *offsets,
                       volatile __global int *fill, __global long *unsorted) {
  long e = get_global_id(0);
  if (e >= n) return;
  long b = bucket[e];
  if (b < 0) return;
  long slot = offsets[b] + (long)atomic_inc(&fill[b]);
  if (slot >= 0 && slot < n) unsorted[slot] = e;
}

__kernel void seg_rank(long n, __global const long *bucket, __global const long *offsets,
                       __global const int *counts, __global const long *unsorted,
                       __global long *sorted) {
  long e = get_global_id(0);
  if (e >= n) return;
  long b = bucket[e];
  if (b < 0) return;
  long start = offsets[b];
  if (start < 0) return;
  long end = start + (long)counts[b];
  if (end > n) end = n;
  long r = 0;
  for (long s = start; s < end; s++) {
    if (unsorted[s] < e) r++;
  }
  if (start + r < n) sorted[start + r] = e;
}
"#,
    );
    s
}

/// The scatter kernel over [`Segments`]: output element `c` adds, in entry order, the values
/// at `c` with `k` along `dim` for the entries of bucket `l * size + c[dim]`, where the line
/// `l` is the dot product of `c`'s other coordinates with `lstr`. Coordinates at or beyond
/// `lim[d]` (along `d != dim`) have no entries. The caller guarantees `lim[d] <= t.shape[d]`,
/// `lim[d] <= values.shape[d]`, `seg.k <= values.shape[dim]`, that `l < lines` whenever
/// every coordinate is below its limit, and that `values` has `t`'s type.
fn scatter_segments(
    dim: usize,
    t: &XpuTensor,
    values: &XpuTensor,
    seg: &Segments,
    lim: &[usize],
    lstr: &[i64],
) -> Result<XpuTensor> {
    let device = t.device();
    let out = XpuTensor::empty(device, &t.shape, t.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let ty = dtype::cl_type(t.dtype)?;
    let bool_or = t.dtype == DType::Bool;
    let key = format!("index_scatter_seg|{ty}|{bool_or}");
    let function = runtime::function(device, &key, "scatter_seg", || {
        scatter_segments_source(ty, bool_or)
    })?;
    let rank = t.shape.len();
    let mut m: Vec<i64> = Vec::with_capacity(8 + 5 * rank);
    m.push(rank as i64);
    m.push(dim as i64);
    m.extend(t.shape.iter().map(|&s| s as i64));
    m.push(t.offset as i64);
    m.extend(t.strides.iter().map(|&s| s as i64));
    m.extend(lim.iter().map(|&s| s as i64));
    m.extend_from_slice(lstr);
    m.push(values.offset as i64);
    m.extend(values.strides.iter().map(|&s| s as i64));
    m.push(seg.size as i64);
    m.push(seg.k as i64);
    m.push(seg.inner as i64);
    m.push(seg.entries as i64);
    let meta = runtime::upload_meta(device, &m)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(n as i64),
        Arg::from(&meta),
        Arg::from(t.storage.buffer()),
        Arg::from(values.storage.buffer()),
        Arg::from(seg.offsets.storage.buffer()),
        Arg::from(seg.counts.storage.buffer()),
        Arg::from(seg.sorted.storage.buffer()),
    ];
    // SAFETY: `n` work-items, `n` = the element count of `out` (a fresh contiguous
    // allocation of `n` elements of `T`); item `i` writes `out[i]` only. It reads `src` at an
    // element of `t`'s view. Only when every coordinate but `dim` is below its limit does it
    // read the segments: its bucket `l * size + c[dim]` is below `lines * size` (the caller's
    // guarantee on `l`; `c[dim] < t.shape[dim] = size`), the length of `offsets` and
    // `counts`; it reads `sorted` from `offsets[b]` (a negative start is treated as empty) to
    // at most `entries`, its length;
    // it uses an entry id only when inside `0..entries`, giving `0 <= k < seg.k`, and reads
    // `values` at coordinates below its shape (the caller's guarantees), an element of its
    // view. The metadata holds exactly the 8 + 5 * rank longs indexed. Loops run `rank` times
    // and at most `entries` times; divisions are by sizes of a non-empty shape and by
    // `inner`, `k` >= 1 (the index tensor is non-empty).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(out)
}

fn scatter_segments_source(ty: &str, bool_or: bool) -> String {
    let acc = acc_type(ty);
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!("#define T {ty}\n#define ACC {acc}\n"));
    let add = if bool_or {
        "acc = (acc != 0 || val[vo + k * vstr[dim]] != 0) ? 1 : 0;"
    } else {
        "acc += (ACC)val[vo + k * vstr[dim]];"
    };
    s.push_str(
        r#"
__kernel void scatter_seg(__global T *out, long n, __global const long *meta,
                          __global const T *src, __global const T *val,
                          __global const long *offsets, __global const int *counts,
                          __global const long *sorted) {
  long i = get_global_id(0);
  if (i >= n) return;
  int rank = (int)meta[0];
  int dim = (int)meta[1];
  __global const long *shape = meta + 2;
  long to = meta[2 + rank];
  __global const long *tstr = meta + 3 + rank;
  __global const long *lim = meta + 3 + 2 * rank;
  __global const long *lstr = meta + 3 + 3 * rank;
  long vo = meta[3 + 4 * rank];
  __global const long *vstr = meta + 4 + 4 * rank;
  long size = meta[4 + 5 * rank];
  long kn = meta[5 + 5 * rank];
  long inner = meta[6 + 5 * rank];
  long entries = meta[7 + 5 * rank];
  long rem = i;
  long j = 0;
  long l = 0;
  int inside = 1;
  for (int d = rank - 1; d >= 0; d--) {
    long sz = shape[d];
    long c = rem % sz;
    rem /= sz;
    to += c * tstr[d];
    if (d == dim) {
      j = c;
    } else {
      if (c >= lim[d]) inside = 0;
      l += c * lstr[d];
      vo += c * vstr[d];
    }
  }
  ACC acc = (ACC)src[to];
  if (inside) {
    long b = l * size + j;
    long s0 = offsets[b];
    if (s0 < 0) s0 = entries;
    long s1 = s0 + (long)counts[b];
    if (s1 > entries) s1 = entries;
    for (long s = s0; s < s1; s++) {
      long e = sorted[s];
      if (e >= 0 && e < entries) {
        long k = (e / inner) % kn;
        ADD
      }
    }
  }
  out[i] = (T)acc;
}
"#
        .replace("ADD", add)
        .as_str(),
    );
    s
}

/// The scatter kernel: the caller checked ranks, that `indices` fits in `t` (except along
/// `dim`) and in `values`, and that `values` has `t`'s type.
fn scatter_unchecked(
    dim: usize,
    t: &XpuTensor,
    indices: &XpuTensor,
    values: &XpuTensor,
) -> Result<XpuTensor> {
    let device = t.device();
    let out = XpuTensor::empty(device, &t.shape, t.dtype)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let ty = dtype::cl_type(t.dtype)?;
    let ity = dtype::cl_type(indices.dtype)?;
    let bool_or = t.dtype == DType::Bool;
    let key = format!("index_scatter|{ty}|{ity}|{bool_or}");
    let function = runtime::function(device, &key, "scatter", || scatter_source(ty, ity, bool_or))?;

    let rank = t.shape.len();
    let mut m: Vec<i64> = Vec::with_capacity(5 + 6 * rank);
    m.push(rank as i64);
    m.push(dim as i64);
    m.extend(t.shape.iter().map(|&s| s as i64));
    m.push(t.offset as i64);
    m.extend(t.strides.iter().map(|&s| s as i64));
    m.extend(indices.shape.iter().map(|&s| s as i64));
    m.push(indices.offset as i64);
    m.extend(indices.strides.iter().map(|&s| s as i64));
    m.push(values.offset as i64);
    m.extend(values.strides.iter().map(|&s| s as i64));
    let meta = runtime::upload_meta(device, &m)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(n as i64),
        Arg::from(&meta),
        Arg::from(t.storage.buffer()),
        Arg::from(indices.storage.buffer()),
        Arg::from(values.storage.buffer()),
    ];
    // SAFETY: `n` work-items, `n` = the element count of `out` (a fresh contiguous
    // allocation of `n` elements of `T`, seen by no other tensor); item `i < n` writes
    // `out[i]` only, so duplicate indices cause no race. It reads `src` at `t`'s offset plus
    // `i`'s coordinates in `t.shape` times `t`'s strides (an element of `t`'s view). Only when
    // every coordinate but `dim` is below `indices.shape[d]` does it loop `k` over
    // `0..indices.shape[dim]`, reading `indices` and `values` at those coordinates with `k`
    // along `dim`: inside the index view, and inside the values view because
    // `values.shape[d] >= indices.shape[d]` (checked by the caller). The metadata buffer holds
    // exactly the 5 + 6 * rank longs the kernel indexes. Loops run `rank` and
    // `indices.shape[dim]` times, so the kernel terminates; divisions are by sizes of a
    // non-empty shape (never 0).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(out)
}

fn scatter_source(ty: &str, ity: &str, bool_or: bool) -> String {
    let acc = acc_type(ty);
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!(
        "#define T {ty}\n#define TI {ity}\n#define ACC {acc}\n"
    ));
    let add = if bool_or {
        "acc = (acc != 0 || val[vo + k * vstr[dim]] != 0) ? 1 : 0;"
    } else {
        "acc += (ACC)val[vo + k * vstr[dim]];"
    };
    s.push_str(
        r#"
__kernel void scatter(__global T *out, long n, __global const long *meta,
                      __global const T *src, __global const TI *idx,
                      __global const T *val) {
  long i = get_global_id(0);
  if (i >= n) return;
  int rank = (int)meta[0];
  int dim = (int)meta[1];
  __global const long *shape = meta + 2;
  long to = meta[2 + rank];
  __global const long *tstr = meta + 3 + rank;
  __global const long *ishape = meta + 3 + 2 * rank;
  long io = meta[3 + 3 * rank];
  __global const long *istr = meta + 4 + 3 * rank;
  long vo = meta[4 + 4 * rank];
  __global const long *vstr = meta + 5 + 4 * rank;
  long rem = i;
  long target = 0;
  int inside = 1;
  for (int d = rank - 1; d >= 0; d--) {
    long sz = shape[d];
    long c = rem % sz;
    rem /= sz;
    to += c * tstr[d];
    if (d == dim) {
      target = c;
    } else {
      if (c >= ishape[d]) inside = 0;
      io += c * istr[d];
      vo += c * vstr[d];
    }
  }
  ACC acc = (ACC)src[to];
  if (inside) {
    long kn = ishape[dim];
    for (long k = 0; k < kn; k++) {
      if ((long)idx[io + k * istr[dim]] == target) {
        ADD
      }
    }
  }
  out[i] = (T)acc;
}
"#
        .replace("ADD", add)
        .as_str(),
    );
    s
}

/// `indices` (1-D) seen as a tensor of `shape`: stride 0 on every dimension but `dim`.
fn broadcast_indices(indices: &XpuTensor, dim: usize, shape: &[usize]) -> XpuTensor {
    let mut strides = vec![0isize; shape.len()];
    strides[dim] = indices.strides[0];
    indices.view(shape.to_vec(), strides, indices.offset)
}

/// Checks `select`'s 1-D indices.
fn check_select_args(op: &str, t: &XpuTensor, dim: usize, indices: &XpuTensor) -> Result<()> {
    if dim >= t.shape.len() {
        return Err(Error::Invalid(format!(
            "{op}: dimension {dim} of a rank-{} tensor",
            t.shape.len()
        )));
    }
    if indices.shape.len() != 1 {
        return Err(Error::Invalid(format!(
            "{op}: indices of shape {:?} (1-D indices are needed)",
            indices.shape
        )));
    }
    Ok(())
}

/// The slices of `t` at 1-D `indices` along `dim`, as burn's `select`. An index outside
/// `0..t.shape[dim]` selects zeros.
///
/// # Errors
/// As [`gather`]; [`Error::Invalid`] for indices that are not 1-D.
pub fn select(t: &XpuTensor, dim: usize, indices: &XpuTensor) -> Result<XpuTensor> {
    check_select_args("select", t, dim, indices)?;
    let mut shape = t.shape.clone();
    shape[dim] = indices.shape[0];
    let idx = broadcast_indices(indices, dim, &shape);
    gather(dim, t, &idx)
}

/// A copy of `t` with the slices of `values` added at 1-D `indices` along `dim`, as burn's
/// `select_assign` (which sums; duplicate indices accumulate, in index order). An index
/// outside `0..t.shape[dim]` is ignored.
///
/// # Errors
/// As [`scatter_add`]; [`Error::Invalid`] for indices that are not 1-D or `values` not
/// shaped as `t` with `indices.len()` along `dim`.
pub fn select_add(
    t: &XpuTensor,
    dim: usize,
    indices: &XpuTensor,
    values: &XpuTensor,
) -> Result<XpuTensor> {
    check_select_args("select_assign", t, dim, indices)?;
    let mut shape = t.shape.clone();
    shape[dim] = indices.shape[0];
    if values.shape != shape {
        return Err(Error::Invalid(format!(
            "select_assign along {dim}: values of shape {:?} for {} indices into a tensor of \
             shape {:?} (expected {shape:?})",
            values.shape, indices.shape[0], t.shape
        )));
    }
    if indices.shape[0] <= LOOP_MAX_ENTRIES || indices.shape[0] > i32::MAX as usize {
        let idx = broadcast_indices(indices, dim, &shape);
        return scatter_add(dim, t, &idx, values);
    }
    check_index_args("select_assign", 0, indices, indices)?;
    if values.device() != t.device() || indices.device() != t.device() {
        return Err(Error::Invalid(format!(
            "select_assign: tensors on devices {}, {} and {} in one op",
            t.device(),
            indices.device(),
            values.device()
        )));
    }
    let values = cast(values, t.dtype)?;
    // One line of entries, shared by every output line: all line strides 0.
    let seg = Segments::build(indices, 0, t.shape[dim])?;
    let lstr = vec![0i64; t.shape.len()];
    scatter_segments(dim, t, &values, &seg, &t.shape, &lstr)
}

/// Copies `src` element-wise into the view `dst` (same shape, same type): `dst` must be a
/// view of a fresh allocation that no other tensor sees, its elements pairwise distinct
/// (no stride-0 dimension of size > 1), which the callers in this module guarantee.
fn copy_into_view(dst: &XpuTensor, src: &XpuTensor) -> Result<()> {
    debug_assert_eq!(dst.shape, src.shape);
    debug_assert_eq!(dst.dtype, src.dtype);
    let n = dst.numel();
    if n == 0 {
        return Ok(());
    }
    let device = dst.device();
    let ty = dtype::cl_type(dst.dtype)?;
    let key = format!("index_copy_view|{ty}");
    let function = runtime::function(device, &key, "copy_view", || copy_view_source(ty))?;
    let rank = dst.shape.len();
    let mut m: Vec<i64> = Vec::with_capacity(3 + 3 * rank);
    m.push(rank as i64);
    m.extend(dst.shape.iter().map(|&s| s as i64));
    m.push(dst.offset as i64);
    m.extend(dst.strides.iter().map(|&s| s as i64));
    m.push(src.offset as i64);
    m.extend(src.strides.iter().map(|&s| s as i64));
    let meta = runtime::upload_meta(device, &m)?;
    let args = [
        Arg::from(dst.storage.buffer()),
        Arg::from(n as i64),
        Arg::from(&meta),
        Arg::from(src.storage.buffer()),
    ];
    // SAFETY: `n` work-items, `n` = the element count of the shared shape; item `i < n`
    // writes `dst` at its offset plus `i`'s coordinates times its strides and reads `src`
    // likewise: elements of the two views, inside their storages (views are built in
    // bounds). `dst`'s storage is a fresh allocation of the calling op that no other tensor
    // sees yet, and its view maps distinct coordinates to distinct elements (a slice with
    // nonzero steps, or a block of a contiguous output), so no two items write the same
    // element; `src` is another storage. The metadata buffer holds exactly the 3 + 3 * rank
    // longs the kernel indexes. The only loop runs `rank` times; divisions are by sizes of a
    // non-empty shape (never 0).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(())
}

fn copy_view_source(ty: &str) -> String {
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!("#define T {ty}\n"));
    s.push_str(
        r#"
__kernel void copy_view(__global T *dst, long n, __global const long *meta,
                        __global const T *src) {
  long i = get_global_id(0);
  if (i >= n) return;
  int rank = (int)meta[0];
  __global const long *shape = meta + 1;
  long dofs = meta[1 + rank];
  __global const long *dstr = meta + 2 + rank;
  long sofs = meta[2 + 2 * rank];
  __global const long *sstr = meta + 3 + 2 * rank;
  long rem = i;
  for (int d = rank - 1; d >= 0; d--) {
    long sz = shape[d];
    long c = rem % sz;
    rem /= sz;
    dofs += c * dstr[d];
    sofs += c * sstr[d];
  }
  dst[dofs] = src[sofs];
}
"#,
    );
    s
}

/// A copy of `t` with the view `ranges` (as [`crate::ops::layout::slice`]) replaced by `value`
/// (converted to `t`'s type; broadcast to the view's shape).
///
/// # Errors
/// The errors of [`crate::ops::layout::slice`]; [`Error::Invalid`] when `value` does not
/// broadcast to the view's shape; allocation and kernel errors.
pub fn slice_assign(
    t: &XpuTensor,
    ranges: &[(Range<usize>, isize)],
    value: &XpuTensor,
) -> Result<XpuTensor> {
    if value.device() != t.device() {
        return Err(Error::Invalid(format!(
            "slice_assign: tensors on devices {} and {} in one op",
            t.device(),
            value.device()
        )));
    }
    // A fresh copy: `contiguous` would return `t` itself when it already is contiguous.
    let out = map(MapSpec::new("a0", t.dtype), &[t], &[])?;
    let view = layout::slice(&out, ranges)?;
    if view.numel() == 0 {
        return Ok(out);
    }
    let value = cast(value, t.dtype)?;
    let value = if value.shape == view.shape {
        value
    } else {
        layout::expand(&value, &view.shape).map_err(|_| {
            Error::Invalid(format!(
                "slice_assign: a value of shape {:?} for a slice of shape {:?}",
                value.shape, view.shape
            ))
        })?
    };
    copy_into_view(&view, &value)?;
    Ok(out)
}

/// `tensors` concatenated along `dim` (all converted to the first one's type).
///
/// # Errors
/// [`Error::Invalid`] for no tensors, a dimension out of range, or shapes that differ on
/// another dimension; allocation and kernel errors.
pub fn cat(tensors: &[XpuTensor], dim: usize) -> Result<XpuTensor> {
    let first = tensors
        .first()
        .ok_or_else(|| Error::Invalid("cat of no tensors".into()))?;
    let rank = first.shape.len();
    if dim >= rank {
        return Err(Error::Invalid(format!(
            "cat along dimension {dim} of rank-{rank} tensors"
        )));
    }
    let mut shape = first.shape.clone();
    shape[dim] = 0;
    for t in tensors {
        let same =
            t.shape.len() == rank && (0..rank).all(|d| d == dim || t.shape[d] == first.shape[d]);
        if !same {
            return Err(Error::Invalid(format!(
                "cat along {dim}: shapes {:?} and {:?}",
                first.shape, t.shape
            )));
        }
        if t.device() != first.device() {
            return Err(Error::Invalid(format!(
                "cat: tensors on devices {} and {} in one op",
                first.device(),
                t.device()
            )));
        }
        shape[dim] += t.shape[dim];
    }
    let out = XpuTensor::empty(first.device(), &shape, first.dtype)?;
    let mut start = 0usize;
    for t in tensors {
        let len = t.shape[dim];
        if len > 0 {
            let mut ranges: Vec<(Range<usize>, isize)> = shape.iter().map(|&s| (0..s, 1)).collect();
            ranges[dim] = (start..start + len, 1);
            let view = layout::slice(&out, &ranges)?;
            let src = cast(t, out.dtype)?;
            copy_into_view(&view, &src)?;
        }
        start += len;
    }
    Ok(out)
}
