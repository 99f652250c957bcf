//! Reductions along a dimension or over all elements, with indices (argmax/argmin), and
//! scans (cumulative sum, product, max, min).
//!
//! One OpenCL C template, `reduce_lines`, specialised per op and element types: each
//! work-item folds (part of) one *line* — the elements of the input along the reduced or
//! scanned dimension at one coordinate of the other dimensions, read through the input's
//! strides (any view: permuted, broadcast, flipped). A scan writes the running value at
//! every element of its line; few long lines are cut into chunks, scanned in three passes
//! (each chunk's total, the scan of the totals, each chunk's scan from the carry of the
//! chunks before it). A reduction writes one value (and/or the index of the
//! extreme, for argmax/argmin and max/min with indices) per line; when there are few lines
//! and they are long (a reduction over all elements is one line), each line is split among
//! `S` work-items (item `s` folds elements `s, s + S, s + 2S, ...`, so neighbouring items
//! read neighbouring elements) into partials (values, and the line positions of the partial
//! extremes), which are reduced the same way — ties between partial extremes go to the
//! lower position — until one work-item per line remains.
//!
//! Semantics (as torch and burn's suite): NaN propagates through max/min (and their scans),
//! argmax/argmin return the index of the first extreme value (a NaN counting as the
//! extreme); an empty reduction gives the identity (sum 0, prod 1, any false, all true; max,
//! min and their indices 0; a float mean NaN, an integer mean 0); integer means truncate;
//! half-precision sums and products accumulate in `float`, integer ones in 64 bits (wrapping
//! as the element type does).

use burn_tensor::DType;
use xpu::xpu_kernel::Arg;

use crate::dtype::{self, is_float};
use crate::error::{Error, Result};
use crate::ops::elementwise::contiguous;
use crate::ops::FOR_COORDS;
use crate::runtime;
use crate::tensor::{contiguous_strides, XpuTensor};

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Arithmetic mean (integer tensors: the sum divided by the count, truncated).
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Maximum of absolute values.
    MaxAbs,
    /// Index of the first maximum.
    ArgMax,
    /// Index of the first minimum.
    ArgMin,
    /// Whether any element is non-zero (bool output).
    Any,
    /// Whether all elements are non-zero (bool output).
    All,
}

/// A scan (cumulative op) along a dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOp {
    /// Cumulative sum.
    Sum,
    /// Cumulative product.
    Prod,
    /// Cumulative maximum.
    Max,
    /// Cumulative minimum.
    Min,
}

/// A line of at most this many elements is folded by one work-item.
const LINE_MAX: usize = 1024;

/// Elements each work-item of a split pass folds, at least.
const PER_ITEM_MIN: usize = 64;

/// The number of work-items a split pass aims at (enough to fill a GPU's memory pipes).
const TARGET_ITEMS: usize = 65536;

/// How many work-items share each of `lines` lines of `len` elements (1: no split, and
/// for no line at all).
fn splits(lines: usize, len: usize) -> usize {
    if lines == 0 || len <= LINE_MAX || lines >= TARGET_ITEMS / 4 {
        return 1;
    }
    len.div_ceil(PER_ITEM_MIN)
        .min(TARGET_ITEMS.div_ceil(lines))
        .max(1)
}

/// What the kernel folds: a reduction or a scan. `ArgMax`/`ArgMin` fold as `Max`/`Min`
/// (the index goes to an index output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Reduce(ReduceOp),
    Scan(ScanOp),
}

/// One instance of the template: the fold, the input's element type `t`, the value output's
/// type (`None`: no value output), the index output's type (`None`: none), whether the
/// input comes with the line positions of its elements (partials of an extreme), and
/// whether a split scan starts each part from the carry of the parts before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    fold: Fold,
    t: DType,
    val: Option<DType>,
    idx: Option<DType>,
    in_idx: bool,
    carry: bool,
}

/// How the lines are shared among work-items: `parts` work-items per line, each folding
/// every `parts`-th element (`chunk == 0`: interleaved) or a run of `chunk` elements.
#[derive(Debug, Clone, Copy)]
struct Split {
    parts: usize,
    chunk: usize,
}

impl Split {
    const NONE: Split = Split { parts: 1, chunk: 0 };
}

/// The element type the fold accumulates in: sums, products and means of `half` in
/// `float`, of integers in 64 bits; any/all in `uchar`; extremes in the element type.
fn acc_dtype(fold: Fold, t: DType) -> DType {
    let widen = matches!(
        fold,
        Fold::Reduce(ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Mean)
            | Fold::Scan(ScanOp::Sum | ScanOp::Prod)
    );
    if matches!(fold, Fold::Reduce(ReduceOp::Any | ReduceOp::All)) {
        return DType::Bool;
    }
    if !widen {
        return t;
    }
    match t {
        DType::F16 | DType::F32 | DType::Flex32 => DType::F32,
        DType::F64 => DType::F64,
        DType::I64 | DType::I32 | DType::I16 | DType::I8 => DType::I64,
        _ => DType::U64,
    }
}

/// The OpenCL C of one fold: `#define`s of the load, the first step, the step and the final
/// value, in the variables `acc` (`ACC`), `idx` (`long`), `v` (the loaded `ACC`), `pos` (the
/// line position of `v`), `count` (`long`, the divisor of a mean).
fn fold_defines(spec: Spec) -> String {
    let float = is_float(spec.t);
    let unsigned = !float && !dtype::is_signed_int(spec.t);
    let isnan = if float { "isnan(x)" } else { "0" };
    let abs = if float {
        "fabs(x)"
    } else if unsigned {
        "(x)"
    } else {
        "((x) < 0 ? -(x) : (x))"
    };
    let load = match spec.fold {
        Fold::Reduce(ReduceOp::MaxAbs) => "ABS((ACC)in[j])",
        Fold::Reduce(ReduceOp::Any | ReduceOp::All) => "(ACC)(in[j] != (T)0)",
        _ => "(ACC)in[j]",
    };
    // Extremes start from the line's first element; NaN wins and then sticks. Partials of
    // an extreme that tie (equal, or both NaN) resolve to the lower position.
    let tie = if spec.in_idx {
        " else if ((v == acc || (ISNAN(v) && ISNAN(acc))) && pos < idx) { idx = pos; }"
    } else {
        ""
    };
    let gt = format!("if (!ISNAN(acc) && (v > acc || ISNAN(v))) {{ acc = v; idx = pos; }}{tie}");
    let lt = format!("if (!ISNAN(acc) && (v < acc || ISNAN(v))) {{ acc = v; idx = pos; }}{tie}");
    let (init, first, step) = match spec.fold {
        Fold::Reduce(ReduceOp::Sum | ReduceOp::Mean) | Fold::Scan(ScanOp::Sum) => {
            ("(ACC)0", "acc += v;", "acc += v;".to_string())
        }
        Fold::Reduce(ReduceOp::Prod) | Fold::Scan(ScanOp::Prod) => {
            ("(ACC)1", "acc *= v;", "acc *= v;".to_string())
        }
        Fold::Reduce(ReduceOp::Any) => ("(ACC)0", "acc |= v;", "acc |= v;".to_string()),
        Fold::Reduce(ReduceOp::All) => ("(ACC)1", "acc &= v;", "acc &= v;".to_string()),
        Fold::Reduce(ReduceOp::Max | ReduceOp::MaxAbs | ReduceOp::ArgMax)
        | Fold::Scan(ScanOp::Max) => ("(ACC)0", "acc = v; idx = pos;", gt),
        Fold::Reduce(ReduceOp::Min | ReduceOp::ArgMin) | Fold::Scan(ScanOp::Min) => {
            ("(ACC)0", "acc = v; idx = pos;", lt)
        }
    };
    let fin = match spec.fold {
        Fold::Reduce(ReduceOp::Mean) if float => "(TO)(acc / (ACC)count)",
        Fold::Reduce(ReduceOp::Mean) => "(TO)(count > 0 ? acc / (ACC)count : (ACC)0)",
        _ => "(TO)acc",
    };
    format!(
        "#define ISNAN(x) {isnan}\n#define ABS(x) {abs}\n#define LOAD(j) {load}\n\
         #define INIT {init}\n#define FIRST {first}\n#define STEP {step}\n#define FINAL {fin}\n"
    )
}

/// The program of `spec`; `tc`, `accc`, `toc`, `tic` are the OpenCL C names of the input,
/// accumulator, value output and index output types.
/// The OpenCL C helper of the line kernels (reductions, scans, sort): the offsets of line
/// `line` in `t` (returned) and in the contiguous output (`*dst`), from [`line_meta`]'s
/// metadata (after [`FOR_COORDS`]).
const LINE_SRC: &str = r#"
// meta: r, shape[r], in_strides[r], out_strides[r], in_offset, len, in_step, out_step.
long line_src(__global const long *meta, long line, long *dst) {
  int rank = (int)meta[0];
  __global const long *shape = meta + 1;
  long src = meta[1 + 3 * rank];
  long d_ = 0;
  FOR_COORDS(line)
    src += c * meta[1 + rank + d];
    d_ += c * meta[1 + 2 * rank + d];
  END_COORDS
  *dst = d_;
  return src;
}

/* Item w of the padded sort rows [lines, P]: its line, its position p in the row, and the
   line's length len. */
#define ROW_ITEM \
  long w = get_global_id(0); \
  if (w >= lines * P) return; \
  long line = w / P; \
  long p = w % P; \
  int r = (int)meta[0]; \
  long len = meta[2 + 3 * r];
"#;

fn source(spec: Spec, tc: &str, accc: &str, toc: &str, tic: &str) -> String {
    let mut s = dtype::pragmas(&[tc, accc, toc]);
    s.push_str(&format!(
        "#define T {tc}\n#define ACC {accc}\n#define TO {toc}\n#define TI {tic}\n"
    ));
    s.push_str(FOR_COORDS);
    s.push_str(LINE_SRC);
    s.push_str(&fold_defines(spec));
    let scan = matches!(spec.fold, Fold::Scan(_));
    let mut params = String::new();
    if spec.val.is_some() {
        params.push_str("__global TO *out, ");
    }
    if spec.idx.is_some() {
        params.push_str("__global TI *out_idx, ");
    }
    params.push_str("__global const T *in, ");
    if spec.in_idx {
        params.push_str("__global const long *in_idx, ");
    }
    if spec.carry {
        params.push_str("__global const ACC *carry, ");
    }
    let carry_init = if spec.carry {
        "if (s > 0) { acc = carry[line * S + s - 1]; started = 1; }"
    } else {
        ""
    };
    let pos = if spec.in_idx { "in_idx[j]" } else { "k" };
    let scan_write = if scan {
        "out[dst + k * ost] = (TO)acc;"
    } else {
        ""
    };
    let mut final_write = String::new();
    if !scan && spec.val.is_some() {
        final_write.push_str("out[w_out] = FINAL; ");
    }
    if spec.idx.is_some() {
        final_write.push_str("out_idx[w_out] = (TI)idx;");
    }
    // meta: r, shape[r], in_strides[r], out_strides[r], in_offset, len, in_step, out_step.
    // Work-item w folds line `line` (its coordinates in the r other dimensions), positions
    // k = s * ka + m * kb < min(len, s * ka + kc) of it (interleaved: ka = 1, kb = S,
    // kc = len; chunked: ka = kc = chunk, kb = 1); it writes element line * S + s of a
    // reduction's output, or the scan of its positions.
    s.push_str(&format!(
        r#"
__kernel void reduce_lines({params}__global const long *meta, long lines, long S,
                           long ka, long kb, long kc, int line_fast, long count) {{
  long w = get_global_id(0);
  if (w >= lines * S) return;
  long line = line_fast ? w % lines : w / S;
  long s = line_fast ? w / lines : w % S;
  long w_out = line * S + s;
  int r = (int)meta[0];
  long dst;
  long src = line_src(meta, line, &dst);
  long len = meta[2 + 3 * r];
  long st = meta[3 + 3 * r];
  long ost = meta[4 + 3 * r];
  ACC acc = INIT;
  long idx = 0;
  int started = 0;
  {carry_init}
  long k0 = s * ka;
  long ke = min(len, k0 + kc);
  for (long k = k0; k < ke; k += kb) {{
    long j = src + k * st;
    ACC v = LOAD(j);
    long pos = {pos};
    if (!started) {{ FIRST started = 1; }} else {{ STEP }}
    {scan_write}
  }}
  {final_write}
}}
"#
    ));
    s
}

/// The `reduce_lines` kernel of `spec`, from the cache.
fn kernel(device: usize, spec: Spec) -> Result<xpu::xpu_kernel::Function> {
    let acc = acc_dtype(spec.fold, spec.t);
    let tc = dtype::cl_type(spec.t)?;
    let accc = dtype::cl_type(acc)?;
    let toc = spec.val.map(dtype::cl_type).transpose()?.unwrap_or(accc);
    let tic = spec.idx.map(dtype::cl_type).transpose()?.unwrap_or("long");
    let key = format!("reduce_lines|{spec:?}|{tc}|{accc}|{toc}|{tic}");
    runtime::library_function(device, &key, "reduce_lines", || {
        source(spec, tc, accc, toc, tic)
    })
}

/// The number of lines of `t` along `dim` (the product of the other sizes).
fn lines_along(t: &XpuTensor, dim: usize) -> usize {
    let others: Vec<usize> = (0..t.shape.len())
        .filter(|&d| d != dim)
        .map(|d| t.shape[d])
        .collect();
    crate::tensor::elem_count(&others)
}

/// The line metadata of `t` along `dim` that `line_src` and the line kernels read: `r` (the
/// other dimensions), their sizes, `t`'s strides and the contiguous output's strides along
/// them (`r` each), then `t`'s offset, the length along `dim` and the two strides along it:
/// `5 + 3 r` longs.
fn line_meta(t: &XpuTensor, dim: usize) -> Vec<i64> {
    let out_strides = contiguous_strides(&t.shape);
    let outer: Vec<usize> = (0..t.shape.len()).filter(|&d| d != dim).collect();
    let r = outer.len();
    let mut m: Vec<i64> = Vec::with_capacity(5 + 3 * r);
    m.push(r as i64);
    m.extend(outer.iter().map(|&d| t.shape[d] as i64));
    m.extend(outer.iter().map(|&d| t.strides[d] as i64));
    m.extend(outer.iter().map(|&d| out_strides[d] as i64));
    m.push(t.offset as i64);
    m.push(t.shape[dim] as i64);
    m.push(t.strides[dim] as i64);
    m.push(out_strides[dim] as i64);
    m
}

fn check_dim(t: &XpuTensor, dim: usize, what: &str) -> Result<()> {
    if dim >= t.shape.len() {
        return Err(Error::Invalid(format!(
            "{what} along dimension {dim} of a rank-{} tensor",
            t.shape.len()
        )));
    }
    Ok(())
}

/// The inputs and outputs of one launch beside the folded tensor: `out` is shaped as `t`
/// (a scan) or holds `lines * parts` elements (a reduction), as does `out_idx`; `in_idx`
/// (when `spec.in_idx`) has `t`'s shape and strides; `carry` (when `spec.carry`) holds
/// `lines * parts` accumulators. Outputs are fresh, contiguous allocations.
#[derive(Default)]
struct Buffers<'a> {
    out: Option<&'a XpuTensor>,
    out_idx: Option<&'a XpuTensor>,
    in_idx: Option<&'a XpuTensor>,
    carry: Option<&'a XpuTensor>,
}

/// Launches `spec`'s kernel over the lines of `t` along `dim`, each shared as `split` says.
fn launch_lines(
    t: &XpuTensor,
    dim: usize,
    spec: Spec,
    split: Split,
    bufs: Buffers<'_>,
    count: usize,
) -> Result<()> {
    let splits = split.parts;
    let device = t.device();
    let lines = lines_along(t, dim);
    let m = line_meta(t, dim);
    let function = kernel(device, spec)?;
    let meta = runtime::upload_meta(device, &m)?;
    let len = t.shape[dim];
    let (ka, kb, kc) = if split.chunk == 0 {
        (1, splits, len)
    } else {
        (split.chunk, 1, split.chunk)
    };
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(14);
    for b in [bufs.out, bufs.out_idx].into_iter().flatten() {
        args.push(Arg::from(b.storage.buffer()));
    }
    args.push(Arg::from(t.storage.buffer()));
    for b in [bufs.in_idx, bufs.carry].into_iter().flatten() {
        args.push(Arg::from(b.storage.buffer()));
    }
    args.push(Arg::from(&meta));
    args.push(Arg::from(lines as i64));
    args.push(Arg::from(splits as i64));
    args.push(Arg::from(ka as i64));
    args.push(Arg::from(kb as i64));
    args.push(Arg::from(kc as i64));
    // Neighbouring work-items on neighbouring elements: along the line when it is
    // contiguous, across lines otherwise.
    args.push(Arg::from(i32::from(t.strides[dim] != 1)));
    args.push(Arg::from(count as i64));
    // SAFETY: `lines * splits` work-items; item `w` takes one line (a coordinate of the r =
    // rank - 1 dimensions other than `dim`; the metadata holds exactly the 5 + 3r longs the
    // kernel indexes) and `s < splits`. It reads `t` (and `in_idx`, a fresh contiguous
    // tensor of `t`'s shape whose view `t` is then too) at `t`'s offset plus the line's
    // coordinates dotted with `t`'s strides plus `k * stride[dim]` for `0 <= k < len =
    // shape[dim]` (the loop stops at `min(len, ...)`): elements of `t`'s view, inside its
    // storage (every view is built in bounds). A scan writes `out` (`t`'s shape,
    // contiguous) at the same coordinates dotted with contiguous strides: inside `out`; it
    // reads `carry` at `line * splits + s - 1` for `s >= 1`, below the `lines * splits`
    // elements it holds. A reduction writes `out`/`out_idx` at `line * splits + s <
    // lines * splits`, the element count the caller allocated. Loops are bounded by `r` and
    // by `len` (k grows by `kb >= 1`), so the kernel terminates; the outputs are fresh
    // allocations no other tensor sees.
    unsafe { runtime::launch(device, &function, &[lines * splits], None, &args)? };
    Ok(())
}

/// Reduces `t` along `dim` with `fold` into a value output of type `val` and/or an index
/// output of type `idx` (the position of the extreme along `dim`), each shaped as `t` with
/// `dim` of size 1. `in_idx`: the positions of `t`'s elements (when `t` holds partials of
/// an extreme). A mean divides by `count`.
fn reduce_lines(
    t: &XpuTensor,
    dim: usize,
    op: ReduceOp,
    val: Option<DType>,
    idx: Option<DType>,
    in_idx: Option<&XpuTensor>,
    count: usize,
) -> Result<(Option<XpuTensor>, Option<XpuTensor>)> {
    let device = t.device();
    let mut shape = t.shape.clone();
    let len = shape[dim];
    shape[dim] = 1;
    let lines = crate::tensor::elem_count(&shape);
    let n_split = splits(lines, len);
    let fold = Fold::Reduce(op);
    if n_split == 1 {
        let out = val
            .map(|d| XpuTensor::empty(device, &shape, d))
            .transpose()?;
        let out_idx = idx
            .map(|d| XpuTensor::empty(device, &shape, d))
            .transpose()?;
        let spec = Spec {
            fold,
            t: t.dtype,
            val,
            idx,
            in_idx: in_idx.is_some(),
            carry: false,
        };
        let bufs = Buffers {
            out: out.as_ref(),
            out_idx: out_idx.as_ref(),
            in_idx,
            carry: None,
        };
        launch_lines(t, dim, spec, Split::NONE, bufs, count)?;
        return Ok((out, out_idx));
    }
    // Split: partials (and partial extremes' positions), then their reduction.
    let (first, rest) = match op {
        ReduceOp::Mean => (ReduceOp::Sum, ReduceOp::Mean),
        ReduceOp::MaxAbs => (ReduceOp::MaxAbs, ReduceOp::Max),
        other => (other, other),
    };
    let acc = acc_dtype(Fold::Reduce(first), t.dtype);
    let parts = [lines, n_split];
    let p_val = XpuTensor::empty(device, &parts, acc)?;
    let p_idx = idx
        .map(|_| XpuTensor::empty(device, &parts, DType::I64))
        .transpose()?;
    let spec = Spec {
        fold: Fold::Reduce(first),
        t: t.dtype,
        val: Some(acc),
        idx: idx.map(|_| DType::I64),
        in_idx: in_idx.is_some(),
        carry: false,
    };
    let bufs = Buffers {
        out: Some(&p_val),
        out_idx: p_idx.as_ref(),
        in_idx,
        carry: None,
    };
    let split = Split {
        parts: n_split,
        chunk: 0,
    };
    launch_lines(t, dim, spec, split, bufs, count)?;
    let (out, out_idx) = reduce_lines(&p_val, 1, rest, val, idx, p_idx.as_ref(), count)?;
    let strides = contiguous_strides(&shape);
    let keepdim = |o: XpuTensor| o.view(shape.clone(), strides.clone(), o.offset as isize);
    Ok((
        out.map(keepdim).transpose()?,
        out_idx.map(keepdim).transpose()?,
    ))
}

/// `op` along `dim`; the output keeps `dim` with size 1 and has element type `out`
/// (the input's type for values, an int type for indices, `Bool` for any/all).
///
/// # Errors
/// A dimension out of range; allocation and kernel errors.
pub fn reduce_dim(t: &XpuTensor, dim: usize, op: ReduceOp, out: DType) -> Result<XpuTensor> {
    check_dim(t, dim, "reduction")?;
    let count = t.shape[dim];
    let (val, idx) = match op {
        ReduceOp::ArgMax => (None, Some(out)),
        ReduceOp::ArgMin => (None, Some(out)),
        _ => (Some(out), None),
    };
    let (v, i) = reduce_lines(t, dim, op, val, idx, None, count)?;
    v.or(i)
        .ok_or_else(|| Error::Invalid("reduction without output".into()))
}

/// `op` over all elements: a tensor of shape `[1]` of type `out`.
///
/// # Errors
/// As [`reduce_dim`].
pub fn reduce_all(t: &XpuTensor, op: ReduceOp, out: DType) -> Result<XpuTensor> {
    let n = t.numel();
    let flat = if t.is_contiguous() {
        t.clone()
    } else {
        contiguous(t)?
    };
    let flat = flat.view(vec![n], vec![1], flat.offset as isize)?;
    reduce_dim(&flat, 0, op, out)
}

/// The maximum (`max == true`) or minimum along `dim` and the index of its first occurrence
/// (of type `index`), both keeping `dim` with size 1.
///
/// # Errors
/// As [`reduce_dim`].
pub fn extreme_with_indices(
    t: &XpuTensor,
    dim: usize,
    max: bool,
    index: DType,
) -> Result<(XpuTensor, XpuTensor)> {
    check_dim(t, dim, "reduction")?;
    let op = if max { ReduceOp::Max } else { ReduceOp::Min };
    let count = t.shape[dim];
    match reduce_lines(t, dim, op, Some(t.dtype), Some(index), None, count)? {
        (Some(v), Some(i)) => Ok((v, i)),
        _ => Err(Error::Invalid("reduction without output".into())),
    }
}

/// `op` accumulated along `dim` (same shape and type as `t`).
///
/// # Errors
/// As [`reduce_dim`].
pub fn scan(t: &XpuTensor, dim: usize, op: ScanOp) -> Result<XpuTensor> {
    check_dim(t, dim, "scan")?;
    scan_into(t, dim, op, t.dtype)
}

/// The scan of `t` along `dim` as a new tensor of type `out`. Few long lines are cut into
/// chunks: the chunks' totals, then their scan (recursively), then each chunk's scan
/// starting from the scanned total of the chunks before it.
fn scan_into(t: &XpuTensor, dim: usize, op: ScanOp, out: DType) -> Result<XpuTensor> {
    let device = t.device();
    let len = t.shape[dim];
    let lines = lines_along(t, dim);
    let o = XpuTensor::empty(device, &t.shape, out)?;
    if o.numel() == 0 {
        // No element to scan (an empty line, or no line): nothing to launch. A launch of
        // one item per line would run `lines` items for nothing, however many there are.
        return Ok(o);
    }
    let fold = Fold::Scan(op);
    let acc = acc_dtype(fold, t.dtype);
    let n = splits(lines, len);
    let spec = Spec {
        fold,
        t: t.dtype,
        val: Some(out),
        idx: None,
        in_idx: false,
        carry: n > 1,
    };
    if n == 1 {
        let bufs = Buffers {
            out: Some(&o),
            ..Buffers::default()
        };
        launch_lines(t, dim, spec, Split::NONE, bufs, len)?;
        return Ok(o);
    }
    let chunk = len.div_ceil(n);
    let split = Split {
        parts: len.div_ceil(chunk),
        chunk,
    };
    let total = match op {
        ScanOp::Sum => ReduceOp::Sum,
        ScanOp::Prod => ReduceOp::Prod,
        ScanOp::Max => ReduceOp::Max,
        ScanOp::Min => ReduceOp::Min,
    };
    let totals = XpuTensor::empty(device, &[lines, split.parts], acc)?;
    let total_spec = Spec {
        fold: Fold::Reduce(total),
        t: t.dtype,
        val: Some(acc),
        idx: None,
        in_idx: false,
        carry: false,
    };
    let bufs = Buffers {
        out: Some(&totals),
        ..Buffers::default()
    };
    launch_lines(t, dim, total_spec, split, bufs, len)?;
    let carry = scan_into(&totals, 1, op, acc)?;
    let bufs = Buffers {
        out: Some(&o),
        carry: Some(&carry),
        ..Buffers::default()
    };
    launch_lines(t, dim, spec, split, bufs, len)?;
    Ok(o)
}

/// The arguments `(buffers..., meta, lines, P)` of `sort_load` and `sort_store`.
fn line_args<'a>(
    bufs: &[&'a XpuTensor],
    meta: &'a runtime::Meta,
    lines: usize,
    p: usize,
) -> Vec<Arg<'a>> {
    let mut args: Vec<Arg<'a>> = bufs.iter().map(|t| Arg::from(t.storage.buffer())).collect();
    args.push(Arg::from(meta));
    args.push(Arg::from(lines as i64));
    args.push(Arg::from(p as i64));
    args
}

/// The program of the bitonic sort of `T` elements (`float`: ordered as IEEE 754's
/// totalOrder, as Rust's `total_cmp`: -NaN first, then -inf ... -0 < +0 ... +inf, +NaN last).
fn sort_source(tc: &str, float: bool) -> String {
    let mut s = dtype::pragmas(&[tc]);
    s.push_str(&format!("#define T {tc}\n"));
    s.push_str(FOR_COORDS);
    s.push_str(LINE_SRC);
    // The key of a float: its bits as a signed integer, negatives with the magnitude bits
    // flipped, so that integer order is totalOrder.
    let key = if float {
        match tc {
            "double" => "long KEY(T x) { long b = as_long(x); return b ^ (long)(((ulong)(b >> 63)) >> 1); }\n#define K long\n",
            "half" => "short KEY(T x) { short b = as_short(x); return b ^ (short)(((ushort)(b >> 15)) >> 1); }\n#define K short\n",
            _ => "int KEY(T x) { int b = as_int(x); return b ^ (int)(((uint)(b >> 31)) >> 1); }\n#define K int\n",
        }
    } else {
        "#define KEY(x) (x)\n#define K T\n"
    };
    s.push_str(key);
    s.push_str(
        r#"
// Whether (va, ia) goes before (vb, ib): padding (index < 0) last; then by key (descending
// when `desc`), equal keys by index (a stable order).
int before(T va, long ia, T vb, long ib, int desc) {
  if (ia < 0) return 0;
  if (ib < 0) return 1;
  K ka = KEY(va);
  K kb = KEY(vb);
  if (ka != kb) return desc ? ka > kb : ka < kb;
  return ia < ib;
}


// Loads line `w / P` into the padded rows `vals`, `idxs` ([lines, P]).
__kernel void sort_load(__global T *vals, __global long *idxs, __global const T *in,
                        __global const long *meta, long lines, long P) {
  ROW_ITEM
  long st = meta[3 + 3 * r];
  long dst;
  long src = line_src(meta, line, &dst);
  if (p < len) {
    vals[w] = in[src + p * st];
    idxs[w] = p;
  } else {
    vals[w] = (T)0;
    idxs[w] = -1;
  }
}

// One compare-exchange step (block size kk, distance j) of the bitonic network.
__kernel void sort_step(__global T *vals, __global long *idxs, long lines, long P, long kk,
                        long j, int desc) {
  long w = get_global_id(0);
  if (w >= lines * P) return;
  long p = w % P;
  long q = p ^ j;
  if (q <= p) return;
  long a = w;
  long b = w - p + q;
  T va = vals[a];
  T vb = vals[b];
  long ia = idxs[a];
  long ib = idxs[b];
  int up = (p & kk) == 0;
  int swap = up ? before(vb, ib, va, ia, desc) : before(va, ia, vb, ib, desc);
  if (swap) {
    vals[a] = vb; vals[b] = va;
    idxs[a] = ib; idxs[b] = ia;
  }
}

// Writes the first `len` sorted elements of each row to the outputs (the input's shape,
// contiguous).
__kernel void sort_store(__global T *out, __global long *out_idx, __global const T *vals,
                         __global const long *idxs, __global const long *meta, long lines,
                         long P) {
  ROW_ITEM
  long ost = meta[4 + 3 * r];
  if (p >= len) return;
  long dst;
  line_src(meta, line, &dst);
  out[dst + p * ost] = vals[w];
  out_idx[dst + p * ost] = idxs[w];
}
"#,
    );
    s
}

/// `t` sorted along `dim` (ascending, or descending when `descending`; floats in IEEE 754
/// totalOrder as burn's `total_cmp`, NaN last ascending; equal elements keep their order)
/// and the `I64` positions along `dim` the sorted elements came from. A bitonic network per
/// line on the device: the line padded to a power of two `P`, then `log2(P) (log2(P) + 1) /
/// 2` compare-exchange launches of `lines * P` work-items.
///
/// # Errors
/// A dimension out of range; allocation and kernel errors.
pub fn sort(t: &XpuTensor, dim: usize, descending: bool) -> Result<(XpuTensor, XpuTensor)> {
    check_dim(t, dim, "sort")?;
    let device = t.device();
    let len = t.shape[dim];
    let lines = lines_along(t, dim);
    let out = XpuTensor::empty(device, &t.shape, t.dtype)?;
    let out_idx = XpuTensor::empty(device, &t.shape, DType::I64)?;
    if len == 0 || lines == 0 {
        return Ok((out, out_idx));
    }
    let p = len.next_power_of_two();
    let n = lines
        .checked_mul(p)
        .ok_or_else(|| Error::Invalid(format!("sort of {:?}: too large", t.shape)))?;
    let vals = XpuTensor::empty(device, &[n], t.dtype)?;
    let idxs = XpuTensor::empty(device, &[n], DType::I64)?;
    let tc = dtype::cl_type(t.dtype)?;
    let float = is_float(t.dtype);
    let kernel = |name: &str| {
        let key = format!("sort|{name}|{tc}|{float}");
        runtime::library_function(device, &key, name, || sort_source(tc, float))
    };
    let load = kernel("sort_load")?;
    let step = kernel("sort_step")?;
    let store = kernel("sort_store")?;
    let m = line_meta(t, dim);
    let meta = runtime::upload_meta(device, &m)?;
    let args = line_args(&[&vals, &idxs, t], &meta, lines, p);
    // SAFETY: `lines * P` work-items; item `w` writes `vals[w]` and `idxs[w]` (both hold
    // `lines * P` elements, fresh allocations) and, for `w % P < len`, reads `t` at its
    // offset plus line `w / P`'s coordinates (the metadata holds exactly the 5 + 3r longs
    // the kernel indexes) dotted with `t`'s strides plus `(w % P) * stride[dim]`: an element
    // of `t`'s view, inside its storage. Loops are bounded by `r`.
    unsafe { runtime::launch(device, &load, &[n], None, &args)? };
    let mut kk = 2usize;
    while kk <= p {
        let mut j = kk / 2;
        while j >= 1 {
            let args = [
                Arg::from(vals.storage.buffer()),
                Arg::from(idxs.storage.buffer()),
                Arg::from(lines as i64),
                Arg::from(p as i64),
                Arg::from(kk as i64),
                Arg::from(j as i64),
                Arg::from(i32::from(descending)),
            ];
            // SAFETY: `lines * P` work-items; item `w` with partner position `q = (w % P) ^
            // j > w % P` (`j < P`, a power of two, so `q < P`) reads and writes `vals` and
            // `idxs` at `w` and `w - w % P + q`, both in its own row of `P`, below
            // `lines * P`; each pair is touched by one work-item only (the one of the lower
            // position), so no two items race. No loops.
            unsafe { runtime::launch(device, &step, &[n], None, &args)? };
            j /= 2;
        }
        kk *= 2;
    }
    let args = line_args(&[&out, &out_idx, &vals, &idxs], &meta, lines, p);
    // SAFETY: `lines * P` work-items; item `w` with `w % P < len` reads `vals[w]`, `idxs[w]`
    // (`lines * P` elements) and writes `out` and `out_idx` (both contiguous of `t`'s shape,
    // fresh) at line `w / P`'s coordinates dotted with contiguous strides plus
    // `(w % P) * stride[dim]`: an element of that shape. Loops are bounded by `r`.
    unsafe { runtime::launch(device, &store, &[n], None, &args)? };
    Ok((out, out_idx))
}
