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
use xpu::xpu_kernel::{Arg, Function};

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::elementwise::{cast, full, map, MapSpec};
use crate::ops::{layout, FOR_COORDS};
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
    check_same_device(op, t, indices)
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

/// The OpenCL C header of every index kernel. Each kernel takes `(long n,
/// __global const long *meta, buffers...)` and runs one item per position of a shape; its
/// metadata ([`index_meta`]) starts `rank, dim, shape[rank]` (that shape), then view blocks
/// `offset, strides[rank]`, then the kernel's extra longs.
const INDEX_COMMON: &str = r#"
/* Item i of n; the rank, dimension and walked shape of the metadata. */
#define INDEX_ITEM \
  long i = get_global_id(0); \
  if (i >= n) return; \
  int rank = (int)meta[0]; \
  int dim = (int)meta[1]; \
  __global const long *shape = meta + 2;
/* View block v after the shape: its offset and its strides. */
#define VIEW_OFFSET(v) meta[2 + rank + (v) * (rank + 1)]
#define VIEW_STRIDES(v) (meta + 3 + rank + (v) * (rank + 1))
/* The extra longs after nv view blocks. */
#define AFTER(nv) (meta + 2 + rank + (nv) * (rank + 1))
"#;

/// The metadata of an index kernel (the layout in [`INDEX_COMMON`]): `rank`, `dim`, `shape`,
/// then each view's offset and strides (views of `shape`'s rank), then `extra`:
/// `2 + rank + views.len() * (rank + 1) + extra.len()` longs.
fn index_meta(dim: usize, shape: &[usize], views: &[&XpuTensor], extra: &[i64]) -> Vec<i64> {
    let rank = shape.len();
    let mut m: Vec<i64> = Vec::with_capacity(2 + rank + views.len() * (rank + 1) + extra.len());
    m.push(rank as i64);
    m.push(dim as i64);
    m.extend(shape.iter().map(|&s| s as i64));
    for v in views {
        debug_assert_eq!(v.strides.len(), rank);
        m.push(v.offset as i64);
        m.extend(v.strides.iter().map(|&s| s as i64));
    }
    m.extend_from_slice(extra);
    m
}

/// The kernel `name` of an index template (`source`, after the `T`/`TI` defines the caller
/// puts in it, gets [`INDEX_COMMON`] first), cached under `key`.
fn index_kernel(
    device: usize,
    key: &str,
    name: &str,
    source: impl FnOnce() -> String,
) -> Result<Function> {
    runtime::library_function(device, key, name, || {
        let mut s = INDEX_COMMON.to_owned();
        s.push_str(FOR_COORDS);
        s.push_str(&source());
        s
    })
}

/// Launches an index kernel: `items` work-items of `function`, with the arguments
/// `(n = items, meta, buffers...)` (nothing when `items` is 0).
///
/// # What each caller guarantees
/// This holds the one `unsafe` launch of this file, and its `// SAFETY:` argument rests on
/// each caller's: next to every call, a `// Bounds:` comment argues that `function`, run
/// with `items` work-items over this metadata (its layout: [`index_meta`]) and these
/// buffers in this order, reads and writes only elements of the buffers' views (inside
/// their storages), writes only storages that no other tensor sees (fresh allocations of
/// the calling op, or its scratch), with no two items writing one element except by integer
/// atomics, and terminates (loops bounded, divisors non-zero). The helper checks that every
/// buffer is on the launch's device.
///
/// # Errors
/// [`Error::Invalid`] for a buffer on another device; allocation and enqueue errors.
fn launch_index(
    device: usize,
    function: &Function,
    items: usize,
    meta: &[i64],
    buffers: &[&XpuTensor],
) -> Result<()> {
    if items == 0 {
        return Ok(());
    }
    if let Some(t) = buffers.iter().find(|t| t.device() != device) {
        return Err(Error::Invalid(format!(
            "index kernel: a buffer on device {} in a launch on device {device}",
            t.device()
        )));
    }
    let meta = runtime::upload_meta(device, meta)?;
    let mut args = vec![Arg::from(items as i64), Arg::from(&meta)];
    args.extend(buffers.iter().map(|t| Arg::from(t.storage.buffer())));
    // SAFETY: the bounds, race and termination argument for this kernel, metadata and
    // buffers is the caller's (this function's doc; the `// Bounds:` comment at each call),
    // for exactly these arguments: `n` is the global size `items`, the metadata is uploaded
    // as given, and every buffer is on this device (checked above).
    unsafe { runtime::launch(device, function, &[items], None, &args)? };
    Ok(())
}

/// Fails unless `a` and `b` are on one device.
fn check_same_device(op: &str, a: &XpuTensor, b: &XpuTensor) -> Result<()> {
    if a.device() != b.device() {
        return Err(Error::Invalid(format!(
            "{op}: tensors on devices {} and {} in one op",
            a.device(),
            b.device()
        )));
    }
    Ok(())
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
    let ty = dtype::cl_type(t.dtype)?;
    let ity = dtype::cl_type(indices.dtype)?;
    let key = format!("index_gather|{ty}|{ity}");
    let function = index_kernel(device, &key, "gather", || gather_source(ty, ity))?;
    let extra = [t.shape[dim] as i64];
    let meta = index_meta(dim, &indices.shape, &[indices, t], &extra);
    // Bounds: one item per element of `out` (a fresh contiguous allocation of `n` elements
    // of `T`, shaped as `indices`); item `i` writes `out[i]` only. It reads `indices` at its
    // offset plus the dot product of `i`'s coordinates in `indices.shape` with its strides —
    // an element of the index view. It reads `src` only when the loaded index `k` satisfies
    // `0 <= k < t.shape[dim]`, at `t`'s offset plus the coordinates (with `k` along `dim`)
    // times `t`'s strides; the other coordinates are below `indices.shape[d] <= t.shape[d]`
    // (checked by the caller), so this is an element of `t`'s view. The metadata holds the
    // two views and `t.shape[dim]`. The only loop runs `rank` times; divisions are by sizes
    // of a non-empty shape (never 0).
    launch_index(device, &function, out.numel(), &meta, &[&out, t, indices])?;
    Ok(out)
}

fn gather_source(ty: &str, ity: &str) -> String {
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!("#define T {ty}\n#define TI {ity}\n"));
    s.push_str(
        r#"
__kernel void gather(long n, __global const long *meta, __global T *out,
                     __global const T *src, __global const TI *idx) {
  INDEX_ITEM
  long io = VIEW_OFFSET(0), to = VIEW_OFFSET(1);
  __global const long *istr = VIEW_STRIDES(0), *tstr = VIEW_STRIDES(1);
  long tdim = AFTER(2)[0];
  FOR_COORDS(i)
    io += c * istr[d];
    if (d != dim) to += c * tstr[d];
  END_COORDS
  long k = (long)idx[io];
  out[i] = (k >= 0 && k < tdim) ? src[to + k * tstr[dim]] : (T)0;
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
    check_same_device("scatter", t, values)?;
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

/// Buckets of [`Segments`] with up to this many entries are put in order by a rank pass (each
/// entry counts the smaller ids of its bucket: quadratic in the bucket's size); larger ones
/// whose square exceeds their line's length by one work-item walking the line in order
/// (linear in the line's length): a line of `k` entries costs at most about `k^1.5` steps
/// either way (at most `sqrt(k)` buckets are walked), where the rank pass alone cost `k^2`.
const SEG_RANK_MAX: usize = 64;

/// The entries of an index tensor grouped by destination, on the device: for each line
/// `l` (the coordinates but `cd`, row-major) and target `j` in `0..size`, the bucket
/// `b = l * size + j` holds the entry ids `e` (row-major positions in the index tensor) whose
/// index is `j`, in ascending order, at `sorted[offsets[b] .. offsets[b] + counts[b]]`.
/// Built with integer atomics (counts and slots, OpenCL 1.1 §6.11.11) and an order-restoring
/// pass (a rank pass for small buckets, an in-order walk of the line for large ones: see
/// [`SEG_RANK_MAX`]), so the grouping is deterministic. Counts are 32-bit: callers use it
/// only for lines of at most `i32::MAX` entries (the kernels still clamp every slot they
/// touch).
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
        let inner = crate::tensor::elem_count(&indices.shape[cd + 1..]);
        let lines = entries / k;
        let buckets = lines.saturating_mul(size);
        let ity = dtype::cl_type(indices.dtype)?;
        let f = |name: &str| {
            let key = format!("index_seg|{ity}|{name}");
            index_kernel(device, &key, name, || segments_source(ity))
        };
        let zero = runtime::ScalarValue::I(0);
        let counts = full(device, &[buckets], zero, DType::I32)?;
        let fill = full(device, &[buckets], zero, DType::I32)?;
        let offsets = XpuTensor::empty(device, &[buckets], DType::I64)?;
        let bucket = XpuTensor::empty(device, &[entries], DType::I64)?;
        let unsorted = XpuTensor::empty(device, &[entries], DType::I64)?;
        let sorted = XpuTensor::empty(device, &[entries], DType::I64)?;
        let extra = [k as i64, inner as i64, size as i64, entries as i64];
        let meta = index_meta(cd, &indices.shape, &[indices], &extra);

        // Bounds: `entries` items; item `e` reads `indices` at its offset plus `e`'s
        // coordinates in its shape times its strides (an element of the view) and writes
        // `bucket[e]` (`bucket` holds `entries` longs). It increments `counts[b]` only for
        // `b = l * size + j` with `0 <= j < size` and line
        // `l = (e / (k * inner)) * inner + e % inner < entries / k = lines`, so
        // `b < lines * size`, the length of `counts`. One loop of `rank` steps; divisions by
        // sizes of a non-empty shape and by `k * inner >= 1`. `counts` and `bucket` are
        // fresh scratch allocations.
        let count = f("seg_count")?;
        launch_index(device, &count, entries, &meta, &[&counts, &bucket, indices])?;

        // Bounds: `lines` items; item `l` reads `counts` and writes `offsets` at
        // `l * size + j` for `j < size`: below `lines * size`, the length of both. The loop
        // runs `size` times. `offsets` is a fresh scratch allocation.
        let scan = f("seg_scan")?;
        launch_index(device, &scan, lines, &meta, &[&offsets, &counts])?;

        // Bounds: `entries` items; item `e` reads `bucket[e]` (length `entries`); a
        // non-negative bucket `b` is below `lines * size` (as written by `seg_count`), the
        // length of `offsets` and `fill`; the slot written in `unsorted` is checked against
        // `entries`, its length. No loop. `fill` and `unsorted` are fresh scratch
        // allocations.
        let fill_k = f("seg_fill")?;
        launch_index(
            device,
            &fill_k,
            entries,
            &meta,
            &[&fill, &unsorted, &bucket, &offsets],
        )?;

        // Bounds: `entries` items; item `e` reads `bucket[e]`, and for a non-negative bucket
        // `b < lines * size` reads `offsets[b]` and `counts[b]`; for a bucket not walked
        // (`SEG_WALKED`) it scans `unsorted` from `offsets[b]` (checked non-negative) to at
        // most `entries`, its length, and writes `sorted` at a slot checked against
        // `entries`. The loop runs at most `entries` times. `sorted` is a fresh scratch
        // allocation.
        let rank_k = f("seg_rank")?;
        let bufs = [&sorted, &bucket, &offsets, &counts, &unsorted];
        launch_index(device, &rank_k, entries, &meta, &bufs)?;

        // The walked buckets (`SEG_WALKED`: the rank pass costs each entry a scan of its
        // bucket, and a pad token's bucket in an embedding's backward took seconds, review
        // h72): one item per bucket walks its line's entries in order.
        // Bounds: `lines * size` items; item `b` reads `counts[b]` and `offsets[b]` (both of
        // length `lines * size`); its line `l = b / size < lines` has the entries
        // `(l / inner) * k * inner + t * inner + l % inner` for `t < k`, each checked below
        // `entries` (the length of `bucket`) before `bucket` is read; it writes `sorted` at
        // slots checked against `entries`. The loop runs at most `k` times. Only walked
        // buckets are written here, the others' slots by the rank pass (the same
        // `SEG_WALKED` test on the same counts and `k`): each slot of `sorted` is written
        // once.
        let large_k = f("seg_large")?;
        let bufs = [&sorted, &offsets, &counts, &bucket];
        launch_index(device, &large_k, buckets, &meta, &bufs)?;

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
    let mut s = format!("#define TI {ity}\n#define SEG_RANK_MAX {SEG_RANK_MAX}\n");
    s.push_str(
        r#"
/* The extra longs of the segments' metadata (one index view): k, inner, size (and the
   entries, read by seg_large). */
#define SEG_EXTRA long k = AFTER(1)[0], inner = AFTER(1)[1], size = AFTER(1)[2];
/* Whether a bucket of c entries (of a line of k, SEG_EXTRA) is put in order by seg_large's
   walk of its line (k steps) rather than by seg_rank (c steps per entry): when it has more
   than SEG_RANK_MAX entries and c * c > k. */
#define SEG_WALKED(c) ((long)(c) > SEG_RANK_MAX && (long)(c) * (long)(c) > k)

__kernel void seg_count(long n, __global const long *meta, volatile __global int *counts,
                        __global long *bucket, __global const TI *idx) {
  INDEX_ITEM
  SEG_EXTRA
  long io = VIEW_OFFSET(0);
  __global const long *istr = VIEW_STRIDES(0);
  FOR_COORDS(i)
    io += c * istr[d];
  END_COORDS
  long j = (long)idx[io];
  long l = (i / (k * inner)) * inner + i % inner;
  if (j >= 0 && j < size) {
    long b = l * size + j;
    bucket[i] = b;
    atomic_inc(&counts[b]);
  } else {
    bucket[i] = -1;
  }
}

__kernel void seg_scan(long n, __global const long *meta, __global long *offsets,
                       __global const int *counts) {
  INDEX_ITEM
  SEG_EXTRA
  long acc = i * k;
  for (long j = 0; j < size; j++) {
    offsets[i * size + j] = acc;
    acc += counts[i * size + j];
  }
}

__kernel void seg_fill(long n, __global const long *meta, volatile __global int *fill,
                       __global long *unsorted, __global const long *bucket,
                       __global const long *offsets) {
  INDEX_ITEM
  long b = bucket[i];
  if (b < 0) return;
  long slot = offsets[b] + (long)atomic_inc(&fill[b]);
  if (slot >= 0 && slot < n) unsorted[slot] = i;
}

__kernel void seg_rank(long n, __global const long *meta, __global long *sorted,
                       __global const long *bucket, __global const long *offsets,
                       __global const int *counts, __global const long *unsorted) {
  INDEX_ITEM
  SEG_EXTRA
  long b = bucket[i];
  if (b < 0) return;
  long start = offsets[b];
  if (start < 0) return;
  if (SEG_WALKED(counts[b])) return;
  long end = start + (long)counts[b];
  if (end > n) end = n;
  long r = 0;
  for (long s = start; s < end; s++) {
    if (unsorted[s] < i) r++;
  }
  if (start + r < n) sorted[start + r] = i;
}

__kernel void seg_large(long n, __global const long *meta, __global long *sorted,
                        __global const long *offsets, __global const int *counts,
                        __global const long *bucket) {
  INDEX_ITEM
  SEG_EXTRA
  if (!SEG_WALKED(counts[i])) return;
  long total = AFTER(1)[3];
  long start = offsets[i];
  if (start < 0) return;
  long l = i / size;
  long base = (l / inner) * k * inner + l % inner;
  long r = 0;
  for (long t = 0; t < k; t++) {
    long e = base + t * inner;
    if (e < 0 || e >= total) break;
    if (bucket[e] == i) {
      if (start + r < total) sorted[start + r] = e;
      r++;
    }
  }
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
    let function = scatter_kernel(t, "long", "scatter_seg")?;
    let mut extra: Vec<i64> = lim.iter().map(|&s| s as i64).collect();
    extra.extend_from_slice(lstr);
    extra.extend([seg.size, seg.k, seg.inner, seg.entries].map(|v| v as i64));
    let meta = index_meta(dim, &t.shape, &[t, values], &extra);
    let bufs = [&out, t, values, &seg.offsets, &seg.counts, &seg.sorted];
    // Bounds: one item per element of `out` (a fresh contiguous allocation of `T`);
    // item `i` writes `out[i]` only. It reads `src` at an element of `t`'s view. Only when
    // every coordinate but `dim` is below its limit does it read the segments: its bucket
    // `l * size + c[dim]` is below `lines * size` (the caller's guarantee on `l`;
    // `c[dim] < t.shape[dim] = size`), the length of `offsets` and `counts`; it reads
    // `sorted` from `offsets[b]` (a negative start is treated as empty) to at most
    // `entries`, its length; it uses an entry id only when inside `0..entries`, giving
    // `0 <= k < seg.k`, and reads `values` at coordinates below its shape (the caller's
    // guarantees), an element of its view. Loops run `rank` times and at most `entries`
    // times; divisions are by sizes of a non-empty shape and by `inner`, `k` >= 1 (the
    // index tensor is non-empty).
    launch_index(device, &function, out.numel(), &meta, &bufs)?;
    Ok(out)
}

/// The scatter kernel `name` (`scatter` or `scatter_seg`) for `t`'s type and index type
/// `ity`.
fn scatter_kernel(t: &XpuTensor, ity: &str, name: &str) -> Result<Function> {
    let ty = dtype::cl_type(t.dtype)?;
    let bool_or = t.dtype == DType::Bool;
    let key = format!("index_scatter|{ty}|{ity}|{bool_or}");
    index_kernel(t.device(), &key, name, || scatter_source(ty, ity, bool_or))
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
    let function = scatter_kernel(t, dtype::cl_type(indices.dtype)?, "scatter")?;
    let extra: Vec<i64> = indices.shape.iter().map(|&s| s as i64).collect();
    let meta = index_meta(dim, &t.shape, &[t, values, indices], &extra);
    // Bounds: one item per element of `out` (a fresh contiguous allocation of `T`, seen by
    // no other tensor); item `i` writes `out[i]` only, so duplicate indices cause no race.
    // It reads `src` at `t`'s offset plus `i`'s coordinates in `t.shape` times `t`'s strides
    // (an element of `t`'s view). Only when every coordinate but `dim` is below
    // `indices.shape[d]` does it loop `k` over `0..indices.shape[dim]`, reading `indices`
    // and `values` at those coordinates with `k` along `dim`: inside the index view, and
    // inside the values view because `values.shape[d] >= indices.shape[d]` (checked by the
    // caller). Loops run `rank` and `indices.shape[dim]` times; divisions are by sizes of a
    // non-empty shape (never 0).
    launch_index(
        device,
        &function,
        out.numel(),
        &meta,
        &[&out, t, values, indices],
    )?;
    Ok(out)
}

/// Both scatter kernels: `scatter` (views `t`, `values`, `indices`; extra: the index
/// shape) and `scatter_seg` (views `t`, `values`; extra: `lim`, `lstr`, then size, k,
/// inner, entries).
fn scatter_source(ty: &str, ity: &str, bool_or: bool) -> String {
    let acc = acc_type(ty);
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!(
        "#define T {ty}\n#define TI {ity}\n#define ACC {acc}\n"
    ));
    s.push_str(if bool_or {
        "#define ADD(k) acc = (acc != 0 || val[vo + (k) * vstr[dim]] != 0) ? 1 : 0;\n"
    } else {
        "#define ADD(k) acc += (ACC)val[vo + (k) * vstr[dim]];\n"
    });
    s.push_str(
        r#"
/* The start of both scatter kernels: item i's offsets `to` in src and `vo` in values (at
   k = 0), `target` its coordinate along dim, `inside` whether every other coordinate is
   below lim, and `line` plus its other coordinates times lstr; `acc` starts at src. */
#define SCATTER_WALK(lim, line, lstr) \
  long to = VIEW_OFFSET(0), vo = VIEW_OFFSET(1); \
  __global const long *tstr = VIEW_STRIDES(0), *vstr = VIEW_STRIDES(1); \
  long target = 0; \
  int inside = 1; \
  FOR_COORDS(i) \
    to += c * tstr[d]; \
    if (d == dim) { \
      target = c; \
    } else { \
      if (c >= lim[d]) inside = 0; \
      line += c * lstr[d]; \
      vo += c * vstr[d]; \
    } \
  END_COORDS \
  ACC acc = (ACC)src[to];

__kernel void scatter(long n, __global const long *meta, __global T *out,
                      __global const T *src, __global const T *val,
                      __global const TI *idx) {
  INDEX_ITEM
  long io = VIEW_OFFSET(2);
  __global const long *istr = VIEW_STRIDES(2), *ishape = AFTER(3);
  SCATTER_WALK(ishape, io, istr)
  if (inside) {
    for (long k = 0; k < ishape[dim]; k++) {
      if ((long)idx[io + k * istr[dim]] == target) { ADD(k) }
    }
  }
  out[i] = (T)acc;
}

__kernel void scatter_seg(long n, __global const long *meta, __global T *out,
                          __global const T *src, __global const T *val,
                          __global const long *offsets, __global const int *counts,
                          __global const long *sorted) {
  INDEX_ITEM
  __global const long *lim = AFTER(2), *lstr = AFTER(2) + rank;
  long size = lstr[rank], kn = lstr[rank + 1], inner = lstr[rank + 2];
  long entries = lstr[rank + 3];
  long l = 0;
  SCATTER_WALK(lim, l, lstr)
  if (inside) {
    long b = l * size + target;
    long s0 = offsets[b];
    if (s0 < 0) s0 = entries;
    long s1 = s0 + (long)counts[b];
    if (s1 > entries) s1 = entries;
    for (long s = s0; s < s1; s++) {
      long e = sorted[s];
      if (e >= 0 && e < entries) {
        long k = (e / inner) % kn;
        ADD(k)
      }
    }
  }
  out[i] = (T)acc;
}
"#,
    );
    s
}

/// `indices` (1-D) seen as a tensor of `shape`: stride 0 on every dimension but `dim`.
fn broadcast_indices(indices: &XpuTensor, dim: usize, shape: &[usize]) -> Result<XpuTensor> {
    let mut strides = vec![0isize; shape.len()];
    strides[dim] = indices.strides[0];
    indices.view(shape.to_vec(), strides, indices.offset as isize)
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
    let idx = broadcast_indices(indices, dim, &shape)?;
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
        let idx = broadcast_indices(indices, dim, &shape)?;
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
    let device = dst.device();
    let ty = dtype::cl_type(dst.dtype)?;
    let key = format!("index_copy_view|{ty}");
    let function = index_kernel(device, &key, "copy_view", || copy_view_source(ty))?;
    let meta = index_meta(0, &dst.shape, &[dst, src], &[]);
    // Bounds: one item per element of the shared shape; item `i` writes `dst` at its offset
    // plus `i`'s coordinates times its strides and reads `src` likewise: elements of the two
    // views, inside their storages (views are built in bounds). `dst`'s storage is a fresh
    // allocation of the calling op that no other tensor sees yet, and its view maps
    // distinct coordinates to distinct elements (a slice with nonzero steps, or a block of
    // a contiguous output), so no two items write the same element; `src` is another
    // storage. The only loop runs `rank` times; divisions are by sizes of a non-empty shape
    // (never 0).
    launch_index(device, &function, dst.numel(), &meta, &[dst, src])
}

fn copy_view_source(ty: &str) -> String {
    let mut s = dtype::pragmas(&[ty]);
    s.push_str(&format!("#define T {ty}\n"));
    s.push_str(
        r#"
__kernel void copy_view(long n, __global const long *meta, __global T *dst,
                        __global const T *src) {
  INDEX_ITEM
  long dofs = VIEW_OFFSET(0), sofs = VIEW_OFFSET(1);
  __global const long *dstr = VIEW_STRIDES(0), *sstr = VIEW_STRIDES(1);
  FOR_COORDS(i)
    dofs += c * dstr[d];
    sofs += c * sstr[d];
  END_COORDS
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
    check_same_device("slice_assign", t, value)?;
    // A fresh copy: `contiguous` would return `t` itself when it already is contiguous.
    let out = map(MapSpec::builtin("a0", t.dtype), &[t], &[])?;
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
        check_same_device("cat", first, t)?;
        // Broadcast views may be longer than any memory (review h57: two of 2^63 wrapped).
        shape[dim] = shape[dim].checked_add(t.shape[dim]).ok_or_else(|| {
            Error::Invalid(format!(
                "cat along {dim}: the lengths sum past usize::MAX ({:?} and more)",
                first.shape
            ))
        })?;
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
