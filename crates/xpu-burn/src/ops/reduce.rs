//! Reductions along a dimension or over all elements, with indices (argmax/argmin), and
//! scans (cumulative sum, product, max, min).
//!
//! One OpenCL C template, `reduce_lines`, specialised per op and element types: each
//! work-item folds (part of) one *line* — the elements of the input along the reduced or
//! scanned dimension at one coordinate of the other dimensions, read through the input's
//! strides (any view: permuted, broadcast, flipped). A scan writes the running value at
//! every element of its line. A reduction writes one value (and/or the index of the
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

/// How many work-items share each of `lines` lines of `len` elements (1: no split).
fn splits(lines: usize, len: usize) -> usize {
    if len <= LINE_MAX || lines >= TARGET_ITEMS / 4 {
        return 1;
    }
    len.div_ceil(PER_ITEM_MIN)
        .min(TARGET_ITEMS.div_ceil(lines))
        .max(1)
}

/// What the kernel folds: a reduction or a scan. Argmax/argmin are `Max`/`Min` with an
/// index output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Reduce(ReduceOp),
    Scan(ScanOp),
}

/// One instance of the template: the fold, the input's element type `t`, the value output's
/// type (`None`: no value output), the index output's type (`None`: none), and whether the
/// input comes with the line positions of its elements (partials of an extreme).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    fold: Fold,
    t: DType,
    val: Option<DType>,
    idx: Option<DType>,
    in_idx: bool,
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
fn source(spec: Spec, tc: &str, accc: &str, toc: &str, tic: &str) -> String {
    let mut s = dtype::pragmas(&[tc, accc, toc]);
    s.push_str(&format!(
        "#define T {tc}\n#define ACC {accc}\n#define TO {toc}\n#define TI {tic}\n"
    ));
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
    // k = s, s + S, ... of it; it writes element line * S + s of a reduction's output.
    s.push_str(&format!(
        r#"
__kernel void reduce_lines({params}__global const long *meta, long lines, long S,
                           int line_fast, long count) {{
  long w = get_global_id(0);
  if (w >= lines * S) return;
  long line = line_fast ? w % lines : w / S;
  long s = line_fast ? w / lines : w % S;
  long w_out = line * S + s;
  int r = (int)meta[0];
  long rem = line;
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
  for (long k = s; k < len; k += S) {{
    long j = src + k * st;
    ACC v = LOAD(j);
    long pos = {pos};
    if (k == s) {{ FIRST }} else {{ STEP }}
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
    runtime::function(device, &key, "reduce_lines", || {
        source(spec, tc, accc, toc, tic)
    })
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

/// Launches `spec`'s kernel over the lines of `t` along `dim`, each split among `splits`
/// work-items (1 for a scan). `out` is shaped as `t` (a scan) or holds `lines * splits`
/// elements (a reduction), as does `out_idx`; `in_idx` (when `spec.in_idx`) has `t`'s
/// shape and strides. All outputs are fresh, contiguous allocations.
#[allow(clippy::too_many_arguments)]
fn launch_lines(
    t: &XpuTensor,
    dim: usize,
    spec: Spec,
    splits: usize,
    out: Option<&XpuTensor>,
    out_idx: Option<&XpuTensor>,
    in_idx: Option<&XpuTensor>,
    count: usize,
) -> Result<()> {
    let device = t.device();
    let rank = t.shape.len();
    let out_strides = contiguous_strides(&t.shape);
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
    m.push(out_strides[dim] as i64);
    let function = kernel(device, spec)?;
    let meta = runtime::upload_meta(device, &m)?;
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(9);
    if let Some(o) = out {
        args.push(Arg::from(o.storage.buffer()));
    }
    if let Some(o) = out_idx {
        args.push(Arg::from(o.storage.buffer()));
    }
    args.push(Arg::from(t.storage.buffer()));
    if let Some(i) = in_idx {
        args.push(Arg::from(i.storage.buffer()));
    }
    args.push(Arg::from(&meta));
    args.push(Arg::from(lines as i64));
    args.push(Arg::from(splits as i64));
    // Neighbouring work-items on neighbouring elements: along the line when it is
    // contiguous, across lines otherwise.
    args.push(Arg::from(i32::from(t.strides[dim] != 1)));
    args.push(Arg::from(count as i64));
    // SAFETY: `lines * splits` work-items; item `w` takes one line (a coordinate of the r =
    // rank - 1 dimensions other than `dim`; the metadata holds exactly the 5 + 3r longs the
    // kernel indexes) and `s < splits`. It reads `t` (and `in_idx`, a fresh contiguous
    // tensor of `t`'s shape whose view `t` is then too) at `t`'s offset plus the line's
    // coordinates dotted with `t`'s strides plus `k * stride[dim]` for `k < shape[dim]`:
    // elements of `t`'s view, inside its storage (every view is built in bounds). A scan
    // (`splits == 1`) writes `out` (`t`'s shape, contiguous) at the same coordinates dotted
    // with contiguous strides: inside `out`. A reduction writes `out`/`out_idx` at
    // `line * splits + s < lines * splits`, the element count the caller allocated. Loops
    // are bounded by `r` and by `shape[dim]` (k grows by `splits >= 1`), so the kernel
    // terminates; the outputs are fresh allocations no other tensor sees.
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
    let lines: usize = shape.iter().product();
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
        };
        launch_lines(
            t,
            dim,
            spec,
            1,
            out.as_ref(),
            out_idx.as_ref(),
            in_idx,
            count,
        )?;
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
    };
    launch_lines(
        t,
        dim,
        spec,
        n_split,
        Some(&p_val),
        p_idx.as_ref(),
        in_idx,
        count,
    )?;
    let (out, out_idx) = reduce_lines(&p_val, 1, rest, val, idx, p_idx.as_ref(), count)?;
    let strides = contiguous_strides(&shape);
    let keepdim = |o: XpuTensor| o.view(shape.clone(), strides.clone(), o.offset);
    Ok((out.map(keepdim), out_idx.map(keepdim)))
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
    let flat = flat.view(vec![n], vec![1], flat.offset);
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
    let o = XpuTensor::empty(t.device(), &t.shape, t.dtype)?;
    let spec = Spec {
        fold: Fold::Scan(op),
        t: t.dtype,
        val: Some(t.dtype),
        idx: None,
        in_idx: false,
    };
    launch_lines(t, dim, spec, 1, Some(&o), None, None, t.shape[dim])?;
    Ok(o)
}
