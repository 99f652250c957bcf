//! Element-wise chains in one kernel: a sequence of element-wise steps over `f32` tensors of
//! one shape (inputs may broadcast to it), each step reading the chain's inputs or earlier steps' values, run as one
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
/// 16 inputs of a buffer and an offset (8 of them with 4 strides more), 16 output buffers,
/// 16 scalars, the count and 4 sizes take 744 bytes at most).
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

    /// The kernel's cache key: the chain's structure and which inputs are read through
    /// strides (what its source depends on). Built without `format!`: it is made for every
    /// launch of a chain.
    fn key(&self, strided: &[bool]) -> String {
        fn num(k: &mut String, v: usize) {
            let mut digits = [0u8; 20];
            let (mut v, mut n) = (v, 0);
            loop {
                digits[n] = b'0' + (v % 10) as u8;
                n += 1;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            k.extend(digits[..n].iter().rev().map(|&d| d as char));
        }
        let mut k = String::with_capacity(24 + strided.len() + 10 * self.steps.len());
        k.push_str("chain:");
        num(&mut k, self.inputs);
        k.push(':');
        num(&mut k, self.scalars);
        k.push(':');
        k.extend(strided.iter().map(|&s| if s { 's' } else { 'd' }));
        for st in &self.steps {
            k.push(';');
            // The op's position in `StepOp` (a fieldless enum), as a letter.
            k.push(char::from(b'A' + st.op as u8));
            for v in [st.x, st.y, st.s] {
                num(&mut k, v);
                k.push(',');
            }
        }
        k.push(':');
        for &o in &self.outputs {
            num(&mut k, o);
            k.push(',');
        }
        k
    }

    /// The kernel source: `chain(out0.., n, [d0..d3,] in0, off0, [t0_0..t0_3,] .., s0, ..)`:
    /// a direct input (`strided[k]` false) is read at `off + i`; a strided one at `off` plus
    /// its strides times `i`'s coordinates in the output's shape, padded in front to
    /// [`STRIDED_RANK`] dimensions `d0..d3`.
    fn source(&self, strided: &[bool]) -> String {
        use std::fmt::Write;
        let any_strided = strided.iter().any(|&s| s);
        let mut params = String::new();
        for k in 0..self.outputs.len() {
            let _ = write!(params, "__global float *out{k}, ");
        }
        params.push_str("long n");
        if any_strided {
            params.push_str(", long d0, long d1, long d2, long d3");
        }
        for (k, &st) in strided.iter().enumerate().take(self.inputs) {
            let _ = write!(params, ", __global const float *in{k}, long off{k}");
            if st {
                let _ = write!(
                    params,
                    ", long t{k}_0, long t{k}_1, long t{k}_2, long t{k}_3"
                );
            }
        }
        for k in 0..self.scalars {
            let _ = write!(params, ", float s{k}");
        }
        let mut body = String::new();
        if any_strided {
            body.push_str(
                "  long c3 = i % d3, r = i / d3;\n  long c2 = r % d2; r /= d2;\n  \
                 long c1 = r % d1; long c0 = r / d1;\n",
            );
        }
        for (k, &st) in strided.iter().enumerate().take(self.inputs) {
            if st {
                let _ = writeln!(
                    body,
                    "  float v{k} = in{k}[off{k} + c0 * t{k}_0 + c1 * t{k}_1 + c2 * t{k}_2 + \
                     c3 * t{k}_3];"
                );
            } else {
                let _ = writeln!(body, "  float v{k} = in{k}[off{k} + i];");
            }
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

/// The most dimensions an output may have when an input is read through strides (a
/// broadcast or a non-contiguous view): the coordinates are computed for this many.
pub const STRIDED_RANK: usize = 4;

/// The most inputs of one chain read through strides (each takes 4 more `long` arguments).
pub const MAX_STRIDED: usize = 8;

/// A [`Chain`] that passed [`Chain::check`]: a caller that runs one chain many times (the
/// fusion glue) checks it once, then launches it with [`run_checked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedChain(Chain);

impl CheckedChain {
    /// `chain`, checked.
    ///
    /// # Errors
    /// [`Chain::check`]'s.
    pub fn new(chain: Chain) -> Result<Self> {
        chain.check()?;
        Ok(CheckedChain(chain))
    }

    /// The chain.
    pub fn chain(&self) -> &Chain {
        &self.0
    }
}

/// Runs `chain` over `inputs` (`f32`, one device, each of `shape` or broadcasting to it, numpy
/// rules, with any strides) and `scalars`: one launch, one fresh contiguous tensor of `shape`
/// per output value, in `chain.outputs`' order. Inputs of `shape` that are contiguous are
/// read directly; the others through their (broadcast) strides, which needs `shape` to have
/// at most [`STRIDED_RANK`] dimensions and at most [`MAX_STRIDED`] such inputs (beyond that,
/// a non-contiguous input of `shape` is copied contiguous first).
///
/// # Errors
/// [`Chain::check`]'s; [`Error::Invalid`] when the inputs' count, element type or devices
/// disagree with the chain or each other, an input does not broadcast to `shape` (or needs
/// strides beyond the limits above), or the scalars' count disagrees; allocation and kernel
/// errors.
pub fn run(
    chain: &Chain,
    shape: &[usize],
    inputs: &[&XpuTensor],
    scalars: &[f32],
) -> Result<Vec<XpuTensor>> {
    chain.check()?;
    launch(chain, shape, inputs, scalars)
}

/// [`run`] for a chain checked before (no check per launch).
///
/// # Errors
/// As [`run`], but for [`Chain::check`]'s.
pub fn run_checked(
    chain: &CheckedChain,
    shape: &[usize],
    inputs: &[&XpuTensor],
    scalars: &[f32],
) -> Result<Vec<XpuTensor>> {
    launch(&chain.0, shape, inputs, scalars)
}

/// [`run`] after the chain's check.
fn launch(
    chain: &Chain,
    shape: &[usize],
    inputs: &[&XpuTensor],
    scalars: &[f32],
) -> Result<Vec<XpuTensor>> {
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
    let device = first.device();
    for t in inputs {
        if t.device() != device
            || t.dtype != DType::F32
            || !elementwise::broadcasts_to(&t.shape, shape)
        {
            return Err(Error::Invalid(format!(
                "element-wise chain inputs must be F32 on one device, broadcasting to the \
                 output's shape {shape:?}: {:?} {:?} on {} beside device {device}",
                t.dtype,
                t.shape,
                t.device()
            )));
        }
    }
    // Broadcast inputs must be read through strides; non-contiguous inputs of `shape` are
    // too while there is room, else copied contiguous.
    let broadcast = inputs.iter().filter(|t| t.shape != shape).count();
    if broadcast > 0 && (shape.len() > STRIDED_RANK || broadcast > MAX_STRIDED) {
        return Err(Error::Invalid(format!(
            "element-wise chain: {broadcast} inputs broadcast to {shape:?} (at most \
             {MAX_STRIDED}, to at most {STRIDED_RANK} dimensions)"
        )));
    }
    let mut room = if shape.len() <= STRIDED_RANK {
        MAX_STRIDED - broadcast
    } else {
        0
    };
    let mut copies: Vec<XpuTensor> = Vec::with_capacity(inputs.len());
    let mut strided: Vec<bool> = Vec::with_capacity(inputs.len());
    for t in inputs {
        if t.shape != shape {
            copies.push((*t).clone());
            strided.push(true);
        } else if t.is_contiguous() {
            copies.push((*t).clone());
            strided.push(false);
        } else if room > 0 {
            room -= 1;
            copies.push((*t).clone());
            strided.push(true);
        } else {
            copies.push(elementwise::contiguous(t)?);
            strided.push(false);
        }
    }
    let outs: Vec<XpuTensor> = chain
        .outputs
        .iter()
        .map(|_| XpuTensor::empty(device, shape, DType::F32))
        .collect::<Result<_>>()?;
    let n = crate::tensor::elem_count(shape);
    if n == 0 {
        return Ok(outs);
    }
    let function = runtime::library_function(device, &chain.key(&strided), "chain", || {
        chain.source(&strided)
    })?;
    let pad = STRIDED_RANK.saturating_sub(shape.len());
    let mut args: Vec<Arg<'_>> =
        Vec::with_capacity(5 + outs.len() + 6 * copies.len() + scalars.len());
    for o in &outs {
        args.push(Arg::from(o.storage.buffer()));
    }
    args.push(Arg::from(n as i64));
    if strided.iter().any(|&s| s) {
        for d in 0..STRIDED_RANK {
            let size = if d < pad { 1 } else { shape[d - pad] };
            args.push(Arg::from(size as i64));
        }
    }
    for (t, &st) in copies.iter().zip(&strided) {
        args.push(Arg::from(t.storage.buffer()));
        args.push(Arg::from(t.offset as i64));
        if st {
            let strides = elementwise::broadcast_strides(t, shape);
            for d in 0..STRIDED_RANK {
                let stride = if d < pad { 0 } else { strides[d - pad] };
                args.push(Arg::from(stride as i64));
            }
        }
    }
    for &s in scalars {
        args.push(Arg::from(s));
    }
    // SAFETY: `n` work-items; item `i < n` writes element `i` of each output (fresh
    // allocations of `n` floats no other tensor sees) and reads, of each direct input,
    // element `off + i` (a contiguous view of `shape`, inside its storage: views are checked
    // when made), and of each strided input the element at `off` plus its broadcast strides
    // times `i`'s coordinates in `shape` (padded with size-1 dimensions of stride 0): an
    // element of that input's view, inside its storage likewise; the body is straight-line
    // arithmetic of the library's own step expressions (no loop, no other memory), so it
    // terminates; the source is this chain's (its key is its structure and its strided
    // inputs, in the library's namespace).
    unsafe { runtime::launch(device, &function, &[n], None, &args)? };
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_step(op: StepOp, x: usize, y: usize, s: usize) -> Chain {
        Chain {
            inputs: 2,
            scalars: 1,
            steps: vec![Step { op, x, y, s }],
            outputs: vec![2],
        }
    }

    /// Chains that differ in any op, operand, scalar, output or strided input have different
    /// kernel keys (a shared key would run one chain's kernel for the other).
    #[test]
    fn keys_tell_chains_apart() {
        use StepOp::*;
        let ops = [
            Add, Sub, Mul, Div, Powf, AddScalar, SubScalar, MulScalar, DivScalar, PowfScalar, Abs,
            Exp, Log, Log1p, Erf, Sqrt, Cos, Sin, Tanh, Round, Floor, Ceil, Trunc, Recip,
        ];
        let mut keys: Vec<String> = ops
            .iter()
            .map(|&op| one_step(op, 0, 1, 0).key(&[false, false]))
            .collect();
        keys.push(one_step(Add, 1, 0, 0).key(&[false, false]));
        keys.push(one_step(Add, 0, 1, 0).key(&[true, false]));
        keys.push(one_step(Add, 0, 1, 0).key(&[false, true]));
        let mut wide = one_step(Add, 1, 12, 0);
        wide.inputs = 13;
        let mut wide2 = one_step(Add, 11, 2, 0);
        wide2.inputs = 13;
        keys.push(wide.key(&[false; 13]));
        keys.push(wide2.key(&[false; 13]));
        let mut two_out = one_step(Add, 0, 1, 0);
        two_out.steps.push(Step {
            op: Exp,
            x: 2,
            y: 0,
            s: 0,
        });
        let mut other_out = two_out.clone();
        two_out.outputs = vec![2, 3];
        other_out.outputs = vec![3];
        keys.push(two_out.key(&[false, false]));
        keys.push(other_out.key(&[false, false]));
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "two chains share a key");
    }
}
