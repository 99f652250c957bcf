//! Reductions along a dimension or over all elements, with indices (argmax/argmin), and
//! scans (cumulative sum, product, max, min).
//!
//! Two OpenCL C templates, specialised per op and element type:
//!
//! - `reduce_lines`: one work-item per *line* — the elements of the input along the reduced
//!   (or scanned) dimension at one coordinate of the other dimensions, read through the
//!   input's strides (any view: permuted, broadcast, flipped). A reduction writes one output
//!   element per line (and its index for argmax/argmin/max-with-indices); a scan writes the
//!   running value at every element of the line.
//! - `reduce_partial`: the first pass of a reduction over all elements of a large contiguous
//!   tensor: `G` work-items each fold the elements `g, g + G, g + 2G, ...` (neighbouring
//!   work-items read neighbouring elements) into a partial; the partials are then reduced
//!   the same way until few enough remain for one work-item.
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

/// A reduction of at most this many elements runs on one work-item; a larger reduction over
/// all elements first folds them into partials ([`partial_count`]).
const SINGLE_ITEM_MAX: usize = 4096;

/// Elements each work-item of a partial pass folds, at least.
const PER_ITEM_MIN: usize = 64;

/// Work-items of a partial pass, at most.
const PARTIALS_MAX: usize = 16384;

/// The number of partials the first pass over `n` elements produces.
fn partial_count(n: usize) -> usize {
    n.div_ceil(PER_ITEM_MIN).clamp(1, PARTIALS_MAX)
}

/// What the kernel folds: a reduction (`with_index`: also the extreme's index, in a second
/// output) or a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Reduce(ReduceOp),
    Scan(ScanOp),
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
/// value, in the variables `acc` (`ACC`), `idx` (`long`), `v` (the loaded `ACC`), `k` (the
/// position in the line), `count` (`long`, the divisor of a mean).
fn fold_defines(fold: Fold, t: DType) -> String {
    let float = is_float(t);
    let unsigned = !float && !dtype::is_signed_int(t);
    let isnan = if float { "isnan(x)" } else { "0" };
    let abs = if float {
        "fabs(x)"
    } else if unsigned {
        "(x)"
    } else {
        "((x) < 0 ? -(x) : (x))"
    };
    let load = match fold {
        Fold::Reduce(ReduceOp::MaxAbs) => "ABS((ACC)in[j])",
        Fold::Reduce(ReduceOp::Any | ReduceOp::All) => "(ACC)(in[j] != (T)0)",
        _ => "(ACC)in[j]",
    };
    // Extremes start from the line's first element; NaN wins and then sticks.
    let gt = "if (!ISNAN(acc) && (v > acc || ISNAN(v))) { acc = v; idx = k; }";
    let lt = "if (!ISNAN(acc) && (v < acc || ISNAN(v))) { acc = v; idx = k; }";
    let (init, first, step) = match fold {
        Fold::Reduce(ReduceOp::Sum | ReduceOp::Mean) | Fold::Scan(ScanOp::Sum) => {
            ("(ACC)0", "acc += v;", "acc += v;")
        }
        Fold::Reduce(ReduceOp::Prod) | Fold::Scan(ScanOp::Prod) => {
            ("(ACC)1", "acc *= v;", "acc *= v;")
        }
        Fold::Reduce(ReduceOp::Any) => ("(ACC)0", "acc |= v;", "acc |= v;"),
        Fold::Reduce(ReduceOp::All) => ("(ACC)1", "acc &= v;", "acc &= v;"),
        Fold::Reduce(ReduceOp::Max | ReduceOp::MaxAbs | ReduceOp::ArgMax)
        | Fold::Scan(ScanOp::Max) => ("(ACC)0", "acc = v;", gt),
        Fold::Reduce(ReduceOp::Min | ReduceOp::ArgMin) | Fold::Scan(ScanOp::Min) => {
            ("(ACC)0", "acc = v;", lt)
        }
    };
    let fin = match fold {
        Fold::Reduce(ReduceOp::Mean) if float => "(TO)(acc / (ACC)count)",
        Fold::Reduce(ReduceOp::Mean) => "(TO)(count > 0 ? acc / (ACC)count : (ACC)0)",
        Fold::Reduce(ReduceOp::ArgMax | ReduceOp::ArgMin) => "(TO)idx",
        _ => "(TO)acc",
    };
    format!(
        "#define ISNAN(x) {isnan}\n#define ABS(x) {abs}\n#define LOAD(j) {load}\n\
         #define INIT {init}\n#define FIRST {first}\n#define STEP {step}\n#define FINAL {fin}\n"
    )
}

/// The program of `fold` over `T` elements accumulating in `ACC`, writing `TO` (and the
/// index as `TI` when `with_index`).
/// `tc`, `accc`, `toc`, `tic` are the OpenCL C names of `t`, the accumulator, the output and
/// the index output (`None`: no index output).
fn source(fold: Fold, t: DType, tc: &str, accc: &str, toc: &str, tic: Option<&str>) -> String {
    let ti = tic;
    let tic = tic.unwrap_or("long");
    let mut s = dtype::pragmas(&[tc, accc, toc]);
    s.push_str(&format!(
        "#define T {tc}\n#define ACC {accc}\n#define TO {toc}\n#define TI {tic}\n"
    ));
    s.push_str(&fold_defines(fold, t));
    let scan = matches!(fold, Fold::Scan(_));
    let idx_param = if ti.is_some() {
        ", __global TI *out_idx"
    } else {
        ""
    };
    // meta: r, shape[r], in_strides[r], out_strides[r], in_offset, len, in_step, out_step.
    s.push_str(&format!(
        r#"
__kernel void reduce_lines(__global TO *out{idx_param}, __global const T *in,
                           __global const long *meta, long n, long count) {{
  long i = get_global_id(0);
  if (i >= n) return;
  int r = (int)meta[0];
  long rem = i;
  long src = meta[1 + 3 * r];
  long dst = 0;
  for (int d = r - 1; d >= 0; d--) {{
    long sz = meta[1 + d];
    long c = rem % sz;
    rem /= sz;
    src += c * meta[1 + r + d];
    dst += c * meta[1 + 2 * r + d];
  }}
  long len = meta[2 + 3 * r];
  long st = meta[3 + 3 * r];
  long ost = meta[4 + 3 * r];
  ACC acc = INIT;
  long idx = 0;
  for (long k = 0; k < len; k++) {{
    long j = src + k * st;
    ACC v = LOAD(j);
    if (k == 0) {{ FIRST }} else {{ STEP }}
    {scan_write}
  }}
  {final_write}
}}

__kernel void reduce_partial(__global TO *out, __global const T *in, long off, long n, long g_n) {{
  long g = get_global_id(0);
  if (g >= g_n) return;
  ACC acc = INIT;
  long idx = 0;
  long k = 0;
  long count = n;
  for (long e = g; e < n; e += g_n) {{
    long j = off + e;
    ACC v = LOAD(j);
    if (k == 0) {{ FIRST }} else {{ STEP }}
    k++;
  }}
  out[g] = FINAL;
}}
"#,
        scan_write = if scan {
            "out[dst + k * ost] = (TO)acc;"
        } else {
            ""
        },
        final_write = match (scan, ti.is_some()) {
            (true, _) => "",
            (false, true) => "out[dst] = FINAL; out_idx[dst] = (TI)idx;",
            (false, false) => "out[dst] = FINAL;",
        }
    ));
    s
}

/// The kernel `name` of `fold`'s program for these types, from the cache.
fn kernel(
    device: usize,
    name: &str,
    fold: Fold,
    t: DType,
    acc: DType,
    to: DType,
    ti: Option<DType>,
) -> Result<xpu::xpu_kernel::Function> {
    let (tc, accc, toc) = (
        dtype::cl_type(t)?,
        dtype::cl_type(acc)?,
        dtype::cl_type(to)?,
    );
    let tic = ti.map(dtype::cl_type).transpose()?;
    let key = format!("reduce|{name}|{fold:?}|{t:?}|{tc}|{accc}|{toc}|{tic:?}");
    runtime::function(device, &key, name, || source(fold, t, tc, accc, toc, tic))
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

/// Runs `reduce_lines` of `fold` over the lines of `t` along `dim` into `out` (and `out_idx`).
/// `out` is either shaped as `t` (a scan: every element written) or as `t` with `dim` of
/// size 1 (a reduction: one element per line); both contiguous and fresh.
fn run_lines(
    t: &XpuTensor,
    dim: usize,
    fold: Fold,
    out: &XpuTensor,
    out_idx: Option<&XpuTensor>,
    count: usize,
) -> Result<()> {
    let device = t.device();
    let rank = t.shape.len();
    let scan = matches!(fold, Fold::Scan(_));
    let out_strides = contiguous_strides(&out.shape);
    let outer: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    let lines: usize = outer.iter().map(|&d| t.shape[d]).product();
    let r = outer.len();
    let mut m: Vec<i64> = Vec::with_capacity(5 + 3 * r);
    m.push(r as i64);
    m.extend(outer.iter().map(|&d| t.shape[d] as i64));
    m.extend(outer.iter().map(|&d| t.strides[d] as i64));
    m.extend(outer.iter().map(|&d| out_strides[d] as i64));
    m.push(t.offset as i64);
    m.push(t.shape[dim] as i64);
    m.push(t.strides[dim] as i64);
    m.push(if scan { out_strides[dim] as i64 } else { 0 });
    let acc = acc_dtype(fold, t.dtype);
    let function = kernel(
        device,
        "reduce_lines",
        fold,
        t.dtype,
        acc,
        out.dtype,
        out_idx.map(|o| o.dtype),
    )?;
    let meta = runtime::upload_meta(device, &m)?;
    let mut args: Vec<Arg<'_>> = vec![Arg::from(out.storage.buffer())];
    if let Some(o) = out_idx {
        args.push(Arg::from(o.storage.buffer()));
    }
    args.push(Arg::from(t.storage.buffer()));
    args.push(Arg::from(&meta));
    args.push(Arg::from(lines as i64));
    args.push(Arg::from(count as i64));
    // SAFETY: `lines` work-items, one per coordinate of the dimensions other than `dim`
    // (the metadata holds exactly the 5 + 3r longs the kernel indexes, r = rank - 1). Item
    // `i` reads `t` at its offset plus its coordinates dotted with `t`'s strides plus
    // `k * stride[dim]` for `k < shape[dim]`: the elements of `t`'s view, which lie inside
    // its storage (every view is built in bounds). It writes `out` at its coordinates dotted
    // with `out`'s contiguous strides (plus `k * stride[dim]` for a scan, whose `out` has
    // `t`'s shape; a reduction's `out` and `out_idx` have `t`'s shape with `dim` of size 1,
    // and the coordinate along `dim` is 0): inside `out`'s `numel` elements. Loops are
    // bounded by `r` and `shape[dim]`, so the kernel terminates; the outputs are fresh
    // allocations no other tensor sees.
    unsafe { runtime::launch(device, &function, &[lines], None, &args)? };
    Ok(())
}

/// `op` along `dim`; the output keeps `dim` with size 1 and has element type `out`
/// (the input's type for values, an int type for indices, `Bool` for any/all).
///
/// # Errors
/// A dimension out of range; allocation and kernel errors.
pub fn reduce_dim(t: &XpuTensor, dim: usize, op: ReduceOp, out: DType) -> Result<XpuTensor> {
    check_dim(t, dim, "reduction")?;
    let mut shape = t.shape.clone();
    let len = shape[dim];
    shape[dim] = 1;
    let lines: usize = shape.iter().product();
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    if lines == 1 && len > SINGLE_ITEM_MAX && !arg {
        // One line of many elements: the multi-pass reduction over all elements.
        let r = reduce_all(t, op, out)?;
        return Ok(r.view(shape.clone(), contiguous_strides(&shape), r.offset));
    }
    let o = XpuTensor::empty(t.device(), &shape, out)?;
    run_lines(t, dim, Fold::Reduce(op), &o, None, len)?;
    Ok(o)
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
    let flat = flat.view(vec![n], vec![1], flat.offset);
    reduce_flat(&flat, op, out, n)
}

/// `op` over the contiguous 1-D `t`; a mean divides by `count` (the element count of the
/// original tensor when `t` holds partial sums).
fn reduce_flat(t: &XpuTensor, op: ReduceOp, out: DType, count: usize) -> Result<XpuTensor> {
    let n = t.numel();
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    if n <= SINGLE_ITEM_MAX || arg {
        let o = XpuTensor::empty(t.device(), &[1], out)?;
        run_lines(t, 0, Fold::Reduce(op), &o, None, count)?;
        return Ok(o);
    }
    // First pass: partials; the op that folds partials of the same kind, then the rest.
    let (first, rest) = match op {
        ReduceOp::Mean => (ReduceOp::Sum, ReduceOp::Mean),
        ReduceOp::MaxAbs => (ReduceOp::MaxAbs, ReduceOp::Max),
        other => (other, other),
    };
    let fold = Fold::Reduce(first);
    let acc = acc_dtype(fold, t.dtype);
    let g = partial_count(n);
    let device = t.device();
    let partials = XpuTensor::empty(device, &[g], acc)?;
    let function = kernel(device, "reduce_partial", fold, t.dtype, acc, acc, None)?;
    let args = [
        Arg::from(partials.storage.buffer()),
        Arg::from(t.storage.buffer()),
        Arg::from(t.offset as i64),
        Arg::from(n as i64),
        Arg::from(g as i64),
    ];
    // SAFETY: `g` work-items; item `j < g` reads `t` at `offset + e` for `e < n`, `e ≡ j`
    // (mod g): elements of the contiguous view of `n` elements from `offset`, inside its
    // storage; it writes `partials[j]` (`partials` holds `g` elements of `ACC`, a fresh
    // allocation). The loop advances `e` by `g >= 1` up to `n`, so it terminates.
    unsafe { runtime::launch(device, &function, &[g], None, &args)? };
    reduce_flat(&partials, rest, out, count)
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
    let mut shape = t.shape.clone();
    let len = shape[dim];
    shape[dim] = 1;
    let values = XpuTensor::empty(t.device(), &shape, t.dtype)?;
    let indices = XpuTensor::empty(t.device(), &shape, index)?;
    let op = if max { ReduceOp::Max } else { ReduceOp::Min };
    run_lines(t, dim, Fold::Reduce(op), &values, Some(&indices), len)?;
    Ok((values, indices))
}

/// `op` accumulated along `dim` (same shape and type as `t`).
///
/// # Errors
/// As [`reduce_dim`].
pub fn scan(t: &XpuTensor, dim: usize, op: ScanOp) -> Result<XpuTensor> {
    check_dim(t, dim, "scan")?;
    let o = XpuTensor::empty(t.device(), &t.shape, t.dtype)?;
    run_lines(t, dim, Fold::Scan(op), &o, None, t.shape[dim])?;
    Ok(o)
}
