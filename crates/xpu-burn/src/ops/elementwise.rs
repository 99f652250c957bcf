//! The element-wise template: `out[i] = EXPR(a0, a1, ..., s0, s1, ...)` over any number of
//! strided, broadcast inputs and by-value scalars, one work-item per output element. Every
//! unary, binary, comparison, select (`where`), cast, fill and copy op is an instance of it.

use burn_tensor::DType;
use xpu::xpu_kernel::Arg;

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::FOR_COORDS;
use crate::runtime::{self, ScalarValue};
use crate::tensor::XpuTensor;

/// One element-wise op: its OpenCL C expression and its output type.
///
/// The expression is device code pasted into the kernel [`map`] launches, so only the
/// library's own templates make one safely; a caller's expression comes through the
/// `unsafe` [`MapSpec::new`] (review h57: safe code ran caller-written OpenCL C).
///
/// ```compile_fail
/// // A caller's expression needs `unsafe`:
/// let spec = xpu_burn::ops::elementwise::MapSpec::new("a0", burn_tensor::DType::F32);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct MapSpec<'a> {
    /// The expression, in the loaded input values `a0, a1, ...` (of types `T0, T1, ...`),
    /// the scalars `s0, s1, ...` (of types `S0, S1, ...`) and the output index `i` (`long`);
    /// `TO` is the output type. The result is converted to `TO`.
    pub(crate) expr: &'a str,
    /// OpenCL C functions the expression calls (defined before the kernel).
    pub(crate) helpers: &'a str,
    /// The output element type.
    pub(crate) out: DType,
}

impl<'a> MapSpec<'a> {
    /// A caller's expression without helpers (see [`MapSpec`]'s fields in [`map`]'s terms:
    /// the inputs `a0, a1, ...`, the scalars `s0, s1, ...`, the index `i`).
    ///
    /// # Safety
    /// `expr` becomes device code run by [`map`] for every output element: it must be an
    /// OpenCL C expression of the loaded values, scalars and index only, that reads and
    /// writes no memory, and ends (no side effect the kernel's bounds do not cover).
    pub unsafe fn new(expr: &'a str, out: DType) -> Self {
        Self::builtin(expr, out)
    }

    /// With a caller's helper functions.
    ///
    /// # Safety
    /// As [`MapSpec::new`], for every function of `helpers`: each reads and writes no memory
    /// but its arguments' values, and returns.
    pub unsafe fn with_helpers(self, helpers: &'a str) -> Self {
        self.helpers_of_library(helpers)
    }

    /// One of the library's own expressions (its templates, written in this crate).
    pub(crate) fn builtin(expr: &'a str, out: DType) -> Self {
        MapSpec {
            expr,
            helpers: "",
            out,
        }
    }

    /// With the library's own helper functions.
    pub(crate) fn helpers_of_library(mut self, helpers: &'a str) -> Self {
        self.helpers = helpers;
        self
    }

    /// The output element type.
    pub fn out(&self) -> DType {
        self.out
    }
}

/// The broadcast of `shapes` (numpy rules; shorter shapes are padded with leading 1s).
///
/// # Errors
/// [`Error::Invalid`] when two sizes differ and neither is 1.
pub fn broadcast_shape(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let pad = rank - s.len();
        for (d, &n) in s.iter().enumerate() {
            let o = &mut out[pad + d];
            if *o == 1 {
                *o = n;
            } else if n != 1 && n != *o {
                return Err(Error::Invalid(format!(
                    "shapes {shapes:?} cannot be broadcast together"
                )));
            }
        }
    }
    Ok(out)
}

/// The strides of `t` seen as a tensor of `shape` (its broadcast): 0 on broadcast dims.
pub(crate) fn broadcast_strides(t: &XpuTensor, shape: &[usize]) -> Vec<isize> {
    let pad = shape.len() - t.shape.len();
    (0..shape.len())
        .map(|d| {
            if d < pad || t.shape[d - pad] == 1 && shape[d] != 1 {
                0
            } else {
                t.strides[d - pad]
            }
        })
        .collect()
}

/// `out[i] = spec.expr` over the broadcast of `inputs`, on the device of the first input.
///
/// # Errors
/// Broadcast errors, inputs on several devices, allocation and kernel errors.
pub fn map(
    spec: MapSpec<'_>,
    inputs: &[&XpuTensor],
    scalars: &[(ScalarValue, DType)],
) -> Result<XpuTensor> {
    let device = inputs
        .first()
        .map(|t| t.device())
        .ok_or_else(|| Error::Invalid("element-wise op without inputs".into()))?;
    // Same-shaped inputs (the common case) need no broadcast.
    let first = &inputs[0].shape;
    if inputs.iter().all(|t| &t.shape == first) {
        return map_into_shape(spec, device, first, inputs, scalars);
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let shape = broadcast_shape(&shapes)?;
    map_into_shape(spec, device, &shape, inputs, scalars)
}

/// As [`map`] with the output shape given (inputs broadcast to it), on `device`; with no
/// inputs this is a generator (`fill`, `arange`: the expression uses `i` and scalars).
///
/// # Errors
/// As [`map`]; [`Error::Invalid`] when an input does not broadcast to `shape`.
pub fn map_into_shape(
    spec: MapSpec<'_>,
    device: usize,
    shape: &[usize],
    inputs: &[&XpuTensor],
    scalars: &[(ScalarValue, DType)],
) -> Result<XpuTensor> {
    let out = XpuTensor::empty(device, shape, spec.out)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    for t in inputs {
        if t.device() != device {
            return Err(Error::Invalid(format!(
                "tensors on devices {} and {device} in one op",
                t.device()
            )));
        }
        if !broadcasts_to(&t.shape, shape) {
            return Err(Error::Invalid(format!(
                "shape {:?} does not broadcast to {shape:?}",
                t.shape
            )));
        }
    }
    let contiguous = inputs.iter().all(|t| t.shape == shape && t.is_contiguous());
    let in_types: Vec<&str> = inputs
        .iter()
        .map(|t| dtype::cl_type(t.dtype))
        .collect::<Result<_>>()?;
    let sc_types: Vec<&str> = scalars
        .iter()
        .map(|(_, d)| runtime::scalar_cl_type(*d))
        .collect::<Result<_>>()?;
    let kernel = MapKernel {
        spec,
        contiguous,
        in_types: &in_types,
        sc_types: &sc_types,
        out_type: dtype::cl_type(out.dtype)?,
    };
    let function = runtime::library_function(device, &kernel.key(), "map", || kernel.source())?;

    let meta;
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(3 + 2 * inputs.len() + scalars.len());
    args.push(Arg::from(out.storage.buffer()));
    args.push(Arg::from(n as i64));
    if contiguous {
        for t in inputs {
            args.push(Arg::from(t.storage.buffer()));
            args.push(Arg::from(t.offset as i64));
        }
    } else {
        let mut m: Vec<i64> = Vec::with_capacity(1 + shape.len() * (inputs.len() + 1));
        m.push(shape.len() as i64);
        m.extend(shape.iter().map(|&s| s as i64));
        for t in inputs {
            m.push(t.offset as i64);
            m.extend(broadcast_strides(t, shape).iter().map(|&s| s as i64));
        }
        meta = runtime::upload_meta(device, &m)?;
        args.push(Arg::from(&meta));
        for t in inputs {
            args.push(Arg::from(t.storage.buffer()));
        }
    }
    for (v, d) in scalars {
        args.push(runtime::scalar_arg(*v, *d)?);
    }
    // SAFETY: `n` work-items; item `i < n` writes `out[i]` (`out` holds `n` elements of `TO`)
    // and reads each input at its offset plus the dot product of `i`'s coordinates in `shape`
    // with the input's broadcast strides — an element of the input's view, which lies inside
    // its storage (`XpuTensor::view` refuses a view that reaches outside it); the metadata
    // buffer holds exactly what the kernel indexes (1 + rank + inputs * (1 + rank) longs);
    // the kernel has no loops beyond `rank`, so it terminates; the expression and helpers
    // compute a value and touch no memory (the library's templates, or a caller's under
    // `MapSpec::new`'s contract); `out` is a fresh allocation no other tensor sees; the
    // function was built from this template's source (the library's namespace of the cache).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(out)
}

/// Whether `from` broadcasts to `to` exactly (numpy rules: `to` has at least `from`'s rank,
/// and each of `from`'s sizes, aligned right, is 1 or `to`'s).
pub(crate) fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    broadcasts_with_unit(from, to, 1)
}

/// [`broadcasts_to`] for sizes written as ids where `unit` stands for the size 1 (burn-fusion's
/// relative shapes give the size 1 the id 0).
pub(crate) fn broadcasts_with_unit(from: &[usize], to: &[usize], unit: usize) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == unit)
}

/// One instance of the [`map`] kernel: what its source depends on.
#[derive(Clone, Copy)]
struct MapKernel<'a> {
    spec: MapSpec<'a>,
    /// All inputs contiguous with the output's shape (no metadata, no coordinate walk).
    contiguous: bool,
    /// The OpenCL C types of the inputs, the scalars and the output.
    in_types: &'a [&'a str],
    sc_types: &'a [&'a str],
    out_type: &'a str,
}

impl MapKernel<'_> {
    /// The kernel cache key: everything the source depends on (the contiguous or strided
    /// form, the expression, the helpers, the input, scalar and output types), joined by NUL
    /// bytes, which no part contains (OpenCL C source cannot hold one). Built without
    /// `format!`: this runs for every element-wise op.
    fn key(&self) -> String {
        const SEP: char = '\0';
        let spec = self.spec;
        let mut key = String::with_capacity(32 + spec.expr.len() + spec.helpers.len());
        key.push_str(if self.contiguous { "map\0c" } else { "map\0s" });
        for part in [spec.expr, spec.helpers] {
            key.push(SEP);
            key.push_str(part);
        }
        for types in [self.in_types, self.sc_types] {
            key.push(SEP);
            for t in types {
                key.push_str(t);
                key.push(',');
            }
        }
        key.push(SEP);
        key.push_str(self.out_type);
        key
    }

    fn source(&self) -> String {
        let MapKernel {
            spec,
            contiguous,
            in_types,
            sc_types,
            out_type,
        } = *self;
        let mut all: Vec<&str> = in_types.to_vec();
        all.extend_from_slice(sc_types);
        all.push(out_type);
        let mut s = dtype::pragmas(&all);
        s.push_str(&format!("#define TO {out_type}\n"));
        for (k, t) in in_types.iter().enumerate() {
            s.push_str(&format!("#define T{k} {t}\n"));
        }
        for (k, t) in sc_types.iter().enumerate() {
            s.push_str(&format!("#define S{k} {t}\n"));
        }
        s.push_str(crate::ops::PRELUDE);
        s.push_str(FOR_COORDS);
        s.push_str(spec.helpers);
        // Per input `k`: its parameters, and in the strided form its offset (`o{k}`, from the
        // view block `k` of the metadata: offset, then one stride per dimension) and its step
        // along each dimension `d` of the coordinate walk.
        let (mut params, mut offsets, mut steps, mut loads) =
            (String::new(), String::new(), String::new(), String::new());
        for k in 0..in_types.len() {
            params.push_str(&format!(", __global const T{k} *in{k}"));
            if contiguous {
                params.push_str(&format!(", long off{k}"));
                loads.push_str(&format!("  T{k} a{k} = in{k}[off{k} + i];\n"));
            } else {
                offsets.push_str(&format!(
                    "  long o{k} = meta[1 + rank + {k} * (rank + 1)];\n"
                ));
                steps.push_str(&format!(
                    "    o{k} += c * meta[1 + rank + {k} * (rank + 1) + 1 + d];\n"
                ));
                loads.push_str(&format!("  T{k} a{k} = in{k}[o{k}];\n"));
            }
        }
        for k in 0..sc_types.len() {
            params.push_str(&format!(", S{k} s{k}"));
        }
        let meta = if contiguous {
            ""
        } else {
            ", __global const long *meta"
        };
        s.push_str(&format!(
            "\n__kernel void map(__global TO *out, long n{meta}{params}) {{\n"
        ));
        s.push_str("  long i = get_global_id(0);\n  if (i >= n) return;\n");
        if !contiguous {
            s.push_str("  int rank = (int)meta[0];\n  __global const long *shape = meta + 1;\n");
            s.push_str(&offsets);
            s.push_str("  FOR_COORDS(i)\n");
            s.push_str(&steps);
            s.push_str("  END_COORDS\n");
        }
        s.push_str(&loads);
        s.push_str(&format!("  out[i] = (TO)({});\n}}\n", spec.expr));
        s
    }
}

/// A contiguous copy of `t` (or `t` itself when it already is contiguous from offset 0 and
/// fills its storage).
///
/// # Errors
/// Allocation and kernel errors.
pub fn contiguous(t: &XpuTensor) -> Result<XpuTensor> {
    if t.is_contiguous() && t.offset == 0 {
        return Ok(t.clone());
    }
    map(MapSpec::builtin("a0", t.dtype), &[t], &[])
}

/// `t` converted to `dtype`, as Rust's `as`: floats to integers truncate toward zero and
/// saturate at the integer type's bounds, NaN giving 0 (`convert_<type>_sat`: a plain OpenCL C
/// conversion of a value out of range is the implementation's choice, OpenCL 3.0 C §6.4.3.3;
/// x86 CPUs give the type's minimum even for +inf); integers to narrower integers wrap; to
/// bool: `x != 0`.
///
/// # Errors
/// An unsupported `dtype`; allocation and kernel errors.
pub fn cast(t: &XpuTensor, dtype: DType) -> Result<XpuTensor> {
    let dtype = dtype::canonical(dtype);
    if dtype == t.dtype {
        return Ok(t.clone());
    }
    let saturating;
    let expr = if dtype == DType::Bool {
        "a0 != 0"
    } else if dtype::is_float(t.dtype) && !dtype::is_float(dtype) {
        saturating = format!("convert_{}_sat(a0)", dtype::cl_type(dtype)?);
        &saturating
    } else {
        "a0"
    };
    map(MapSpec::builtin(expr, dtype), &[t], &[])
}

/// A new tensor of `shape` filled with `value` (converted to `dtype`).
///
/// # Errors
/// An unsupported `dtype`; allocation and kernel errors.
pub fn full(device: usize, shape: &[usize], value: ScalarValue, dtype: DType) -> Result<XpuTensor> {
    let dtype = dtype::canonical(dtype);
    map_into_shape(
        MapSpec::builtin("s0", dtype),
        device,
        shape,
        &[],
        &[(value, dtype)],
    )
}

/// `out[i] = start + i * step` for `i < n`, as a 1-D tensor of `dtype`.
///
/// # Errors
/// As [`full`].
pub fn arange(
    device: usize,
    n: usize,
    start: ScalarValue,
    step: ScalarValue,
    dtype: DType,
) -> Result<XpuTensor> {
    map_into_shape(
        MapSpec::builtin("s0 + (S0)i * s1", dtype),
        device,
        &[n],
        &[],
        &[(start, dtype), (step, dtype)],
    )
}
