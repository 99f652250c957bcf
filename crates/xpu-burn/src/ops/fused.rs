//! Element-wise chains in one kernel: a sequence of element-wise steps over same-shaped
//! `f32` tensors, each step reading the chain's inputs or earlier steps' values, run as one
//! launch that writes only the values asked for. Each step computes exactly what its own
//! op's kernel computes ([`crate::backend`]'s expressions, rounded to `float` after every
//! step), so a chain's outputs equal the ops run one by one; what it saves is the launches
//! and the intermediate tensors' memory traffic (burn's Adam: about a dozen ops a parameter).
//!
//! This is the op layer (no burn traits): [`crate::fusion`] builds chains from burn-fusion's
//! recorded operations.

use burn_tensor::DType;
use xpu::xpu_kernel::Arg;

use crate::error::{Error, Result};
use crate::ops::elementwise;
use crate::runtime;
use crate::tensor::XpuTensor;

/// The most inputs, outputs and scalars one chain takes (each a kernel argument; OpenCL
/// guarantees 1,024 bytes of arguments, `CL_DEVICE_MAX_PARAMETER_SIZE`, OpenCL 3.0 §4.2:
/// 16 inputs of a buffer and an offset, 16 output buffers and 16 scalars stay below it).
pub const MAX_BINDINGS: usize = 16;

/// The most steps in one chain.
pub const MAX_STEPS: usize = 64;

/// One step's operation (burn's float op of the same name; the expressions are those of
/// [`crate::backend`]'s `float_*` methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum StepOp {
    /// `x + y`
    Add,
    /// `x - y`
    Sub,
    /// `x * y`
    Mul,
    /// `x / y`
    Div,
    /// `pow(x, y)`
    Powf,
    /// `x + s`
    AddScalar,
    /// `x - s`
    SubScalar,
    /// `x * s`
    MulScalar,
    /// `x / s`
    DivScalar,
    /// `pow(x, s)`
    PowfScalar,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `ln(1 + x)`
    Log1p,
    /// The error function.
    Erf,
    /// `sqrt(x)`
    Sqrt,
    /// `cos x`
    Cos,
    /// `sin x`
    Sin,
    /// `tanh x`
    Tanh,
    /// Round half to even (`rint`).
    Round,
    /// `floor x`
    Floor,
    /// `ceil x`
    Ceil,
    /// `trunc x`
    Trunc,
    /// `1 / x`
    Recip,
}

/// How many operands of each kind a step reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// One value.
    Unary,
    /// Two values.
    Binary,
    /// One value and one scalar.
    Scalar,
}

impl StepOp {
    /// The operands the op reads.
    pub fn arity(self) -> Arity {
        use StepOp::*;
        match self {
            Add | Sub | Mul | Div | Powf => Arity::Binary,
            AddScalar | SubScalar | MulScalar | DivScalar | PowfScalar => Arity::Scalar,
            _ => Arity::Unary,
        }
    }

    /// The OpenCL C expression of the op over the values `x`, `y` and the scalar `s`.
    fn expr(self, x: &str, y: &str, s: &str) -> String {
        use StepOp::*;
        match self {
            Add => format!("{x} + {y}"),
            Sub => format!("{x} - {y}"),
            Mul => format!("{x} * {y}"),
            Div => format!("{x} / {y}"),
            Powf => format!("pow({x}, {y})"),
            AddScalar => format!("{x} + {s}"),
            SubScalar => format!("{x} - {s}"),
            MulScalar => format!("{x} * {s}"),
            DivScalar => format!("{x} / {s}"),
            PowfScalar => format!("pow({x}, {s})"),
            Abs => format!("fabs({x})"),
            Exp => format!("exp({x})"),
            Log => format!("log({x})"),
            Log1p => format!("log1p({x})"),
            Erf => format!("erf({x})"),
            Sqrt => format!("sqrt({x})"),
            Cos => format!("cos({x})"),
            Sin => format!("sin({x})"),
            Tanh => format!("tanh({x})"),
            Round => format!("rint({x})"),
            Floor => format!("floor({x})"),
            Ceil => format!("ceil({x})"),
            Trunc => format!("trunc({x})"),
            Recip => format!("1.0f / {x}"),
        }
    }
}

/// One step of a [`Chain`]: its op, the values it reads (indices into the chain's values:
/// the inputs first, then each earlier step's result) and, for a scalar op, its scalar's
/// index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Step {
    /// The operation.
    pub op: StepOp,
    /// The first operand's value index.
    pub x: usize,
    /// The second operand's value index (binary ops; ignored otherwise).
    pub y: usize,
    /// The scalar's index (scalar ops; ignored otherwise).
    pub s: usize,
}

/// A chain of element-wise steps: `inputs` tensors (values `0..inputs`), `scalars` scalars,
/// `steps` (step `k` gives value `inputs + k`) and the values written out, in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Chain {
    /// The number of input tensors.
    pub inputs: usize,
    /// The number of scalars.
    pub scalars: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The values written to output tensors (each a step's value).
    pub outputs: Vec<usize>,
}

impl Chain {
    /// Checks the chain's indices and sizes.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first fault: a step reading a value not yet computed, a
    /// scalar out of range, an output that is not a step's value, or more than
    /// [`MAX_BINDINGS`] inputs, outputs or scalars or [`MAX_STEPS`] steps.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Invalid(format!("element-wise chain: {m}")));
        if self.inputs > MAX_BINDINGS
            || self.outputs.len() > MAX_BINDINGS
            || self.scalars > MAX_BINDINGS
            || self.steps.len() > MAX_STEPS
        {
            return bad(format!(
                "{} inputs, {} outputs, {} scalars, {} steps (at most {MAX_BINDINGS} of each \
                 binding, {MAX_STEPS} steps)",
                self.inputs,
                self.outputs.len(),
                self.scalars,
                self.steps.len()
            ));
        }
        if self.outputs.is_empty() {
            return bad("no output".into());
        }
        for (k, st) in self.steps.iter().enumerate() {
            let known = self.inputs + k;
            let reads_y = st.op.arity() == Arity::Binary;
            if st.x >= known || reads_y && st.y >= known {
                return bad(format!("step {k} reads a value not computed before it"));
            }
            if st.op.arity() == Arity::Scalar && st.s >= self.scalars {
                return bad(format!(
                    "step {k} reads scalar {} of {}",
                    st.s, self.scalars
                ));
            }
        }
        let values = self.inputs + self.steps.len();
        if let Some(o) = self
            .outputs
            .iter()
            .find(|&&o| o < self.inputs || o >= values)
        {
            return bad(format!("output value {o} is not a step's value"));
        }
        Ok(())
    }

    /// The kernel's cache key: the chain's structure (what its source depends on).
    fn key(&self) -> String {
        use std::fmt::Write;
        let mut k = String::with_capacity(16 + 12 * self.steps.len());
        let _ = write!(k, "chain:{}:{}:", self.inputs, self.scalars);
        for st in &self.steps {
            let _ = write!(k, "{:?},{},{},{};", st.op, st.x, st.y, st.s);
        }
        for o in &self.outputs {
            let _ = write!(k, "{o},");
        }
        k
    }

    /// The kernel source: `chain(out0.., n, in0, off0, .., s0, ..)`.
    fn source(&self) -> String {
        use std::fmt::Write;
        let mut params = String::new();
        for k in 0..self.outputs.len() {
            let _ = write!(params, "__global float *out{k}, ");
        }
        params.push_str("long n");
        for k in 0..self.inputs {
            let _ = write!(params, ", __global const float *in{k}, long off{k}");
        }
        for k in 0..self.scalars {
            let _ = write!(params, ", float s{k}");
        }
        let mut body = String::new();
        for k in 0..self.inputs {
            let _ = writeln!(body, "  float v{k} = in{k}[off{k} + i];");
        }
        for (k, st) in self.steps.iter().enumerate() {
            let (x, y, s) = (
                format!("v{}", st.x),
                format!("v{}", st.y),
                format!("s{}", st.s),
            );
            let _ = writeln!(
                body,
                "  float v{} = (float)({});",
                self.inputs + k,
                st.op.expr(&x, &y, &s)
            );
        }
        for (k, o) in self.outputs.iter().enumerate() {
            let _ = writeln!(body, "  out{k}[i] = v{o};");
        }
        format!(
            "__kernel void chain({params}) {{\n  long i = get_global_id(0);\n  if (i >= n) \
             return;\n{body}}}\n"
        )
    }
}

/// Runs `chain` over `inputs` (same shape, `f32`, one device; any strides: strided inputs
/// are copied contiguous first) and `scalars`: one launch, one fresh contiguous tensor per
/// output value, in `chain.outputs`' order.
///
/// # Errors
/// [`Chain::check`]'s; [`Error::Invalid`] when the inputs' count, shapes, element type or
/// devices disagree with the chain or each other, or the scalars' count does; allocation
/// and kernel errors.
pub fn run(chain: &Chain, inputs: &[&XpuTensor], scalars: &[f32]) -> Result<Vec<XpuTensor>> {
    chain.check()?;
    let first = inputs
        .first()
        .ok_or_else(|| Error::Invalid("element-wise chain without inputs".into()))?;
    if inputs.len() != chain.inputs || scalars.len() != chain.scalars {
        return Err(Error::Invalid(format!(
            "element-wise chain of {} inputs and {} scalars given {} and {}",
            chain.inputs,
            chain.scalars,
            inputs.len(),
            scalars.len()
        )));
    }
    let (device, shape) = (first.device(), first.shape.clone());
    for t in inputs {
        if t.device() != device || t.shape != shape || t.dtype != DType::F32 {
            return Err(Error::Invalid(format!(
                "element-wise chain inputs must be F32 of one shape on one device: {:?} {:?} \
                 on {} beside {shape:?} on {device}",
                t.dtype,
                t.shape,
                t.device()
            )));
        }
    }
    let copies: Vec<XpuTensor> = inputs
        .iter()
        .map(|t| {
            if t.is_contiguous() {
                Ok((*t).clone())
            } else {
                elementwise::contiguous(t)
            }
        })
        .collect::<Result<_>>()?;
    let outs: Vec<XpuTensor> = chain
        .outputs
        .iter()
        .map(|_| XpuTensor::empty(device, &shape, DType::F32))
        .collect::<Result<_>>()?;
    let n = first.numel();
    if n == 0 {
        return Ok(outs);
    }
    let function = runtime::library_function(device, &chain.key(), "chain", || chain.source())?;
    let mut args: Vec<Arg<'_>> =
        Vec::with_capacity(1 + outs.len() + 2 * copies.len() + scalars.len());
    for o in &outs {
        args.push(Arg::from(o.storage.buffer()));
    }
    args.push(Arg::from(n as i64));
    for t in &copies {
        args.push(Arg::from(t.storage.buffer()));
        args.push(Arg::from(t.offset as i64));
    }
    for &s in scalars {
        args.push(Arg::from(s));
    }
    // SAFETY: `n` work-items; item `i < n` reads element `off_k + i` of each input `k` (a
    // contiguous view of `n` elements from its offset, inside its storage: views are checked
    // when made) and writes element `i` of each output (fresh allocations of `n` floats no
    // other tensor sees); the body is straight-line arithmetic of the library's own step
    // expressions (no loop, no other memory), so it terminates; the source is this chain's
    // (its key is its structure, in the library's namespace).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(outs)
}
