//! The element-wise optimization: a builder that takes runs of same-shaped `f32`
//! element-wise ops from burn-fusion's stream, and the optimization that runs such a run as
//! one [`crate::ops::fused`] chain.
//!
//! What a run writes: every tensor made inside it that is still alive after it. burn's IR
//! says which are not: a tensor read with status `ReadWrite` was read for the last time (its
//! last owner gave it to the op), and a `Drop` op drops the last owner's. Those stay in
//! registers; inputs read `ReadWrite` or dropped inside the run are freed after it, as the
//! ops one by one would free them.

use burn_fusion::stream::{Context, OrderedExecution, ScalarId};
use burn_fusion::{
    NumOperations, Optimization, OptimizationBuilder, OptimizationProperties, OptimizationStatus,
};
use burn_ir::{
    BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr, TensorId,
    TensorIr, TensorStatus, UnaryOpIr,
};
use burn_tensor::DType;
use serde::{Deserialize, Serialize};

use super::XpuFusionRuntime;
use crate::error::or_panic;
use crate::ops::elementwise::broadcasts_to;
use crate::ops::fused::{
    self, Chain, Step, StepOp, MAX_BINDINGS, MAX_STEPS, MAX_STRIDED, STRIDED_RANK,
};
use crate::tensor::XpuTensor;
use crate::XpuDevice;

/// One recorded op of a run, in burn's relative IR (tensor ids, shapes and scalars relative
/// to the stream, resolved at execution through the [`Context`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RunOp {
    /// An element-wise step: `out = op(x, y, s)`.
    Step {
        /// The operation.
        op: StepOp,
        /// The first operand.
        x: TensorIr,
        /// The second operand (binary ops).
        y: Option<TensorIr>,
        /// The scalar (scalar ops): `ScalarIr::U64(id)` of the stream's scalar `id`.
        s: Option<ScalarIr>,
        /// The result.
        out: TensorIr,
    },
    /// The last owner of a tensor dropped it.
    Drop(TensorIr),
}

/// The element-wise op `op` is, if it is one the chains take (float ops of the chain's
/// steps but `Ceil` and `Trunc`; any other op closes the run).
fn step_of(op: &OperationIr) -> Option<RunOp> {
    let binary = |op, b: &BinaryOpIr| RunOp::Step {
        op,
        x: b.lhs.clone(),
        y: Some(b.rhs.clone()),
        s: None,
        out: b.out.clone(),
    };
    let scalar = |op, b: &ScalarOpIr| RunOp::Step {
        op,
        x: b.lhs.clone(),
        y: None,
        s: Some(b.rhs),
        out: b.out.clone(),
    };
    let unary = |op, u: &UnaryOpIr| RunOp::Step {
        op,
        x: u.input.clone(),
        y: None,
        s: None,
        out: u.out.clone(),
    };
    Some(match op {
        OperationIr::Drop(t) => RunOp::Drop(t.clone()),
        OperationIr::NumericFloat(DType::F32, n) => match n {
            NumericOperationIr::Add(b) => binary(StepOp::Add, b),
            NumericOperationIr::Sub(b) => binary(StepOp::Sub, b),
            NumericOperationIr::Mul(b) => binary(StepOp::Mul, b),
            NumericOperationIr::Div(b) => binary(StepOp::Div, b),
            NumericOperationIr::Powf(b) => binary(StepOp::Powf, b),
            NumericOperationIr::AddScalar(b) => scalar(StepOp::AddScalar, b),
            NumericOperationIr::SubScalar(b) => scalar(StepOp::SubScalar, b),
            NumericOperationIr::MulScalar(b) => scalar(StepOp::MulScalar, b),
            NumericOperationIr::DivScalar(b) => scalar(StepOp::DivScalar, b),
            NumericOperationIr::Abs(u) => unary(StepOp::Abs, u),
            _ => return None,
        },
        OperationIr::Float(DType::F32, f) => match f {
            FloatOperationIr::PowfScalar(b) => scalar(StepOp::PowfScalar, b),
            FloatOperationIr::Exp(u) => unary(StepOp::Exp, u),
            FloatOperationIr::Log(u) => unary(StepOp::Log, u),
            FloatOperationIr::Log1p(u) => unary(StepOp::Log1p, u),
            FloatOperationIr::Erf(u) => unary(StepOp::Erf, u),
            FloatOperationIr::Sqrt(u) => unary(StepOp::Sqrt, u),
            FloatOperationIr::Cos(u) => unary(StepOp::Cos, u),
            FloatOperationIr::Sin(u) => unary(StepOp::Sin, u),
            FloatOperationIr::Tanh(u) => unary(StepOp::Tanh, u),
            FloatOperationIr::Round(u) => unary(StepOp::Round, u),
            FloatOperationIr::Floor(u) => unary(StepOp::Floor, u),
            // Not `Ceil` or `Trunc`: burn-fusion 0.19.1 converts `Trunc` to `Ceil` in the
            // relative form builders see (stream/context.rs), so a builder cannot tell them
            // apart; both run as the ops themselves (tests/fusion.rs, burn's fmod suite).
            FloatOperationIr::Recip(u) => unary(StepOp::Recip, u),
            _ => return None,
        },
        _ => return None,
    })
}

/// Takes runs of same-shaped `f32` element-wise ops (see the module docs).
#[derive(Debug, Clone)]
pub struct ElementwiseBuilder {
    device: XpuDevice,
    ops: Vec<RunOp>,
    steps: usize,
    /// The run's shape (relative dims), set by its first step.
    shape: Option<Vec<usize>>,
    /// Tensors made by the run's steps, and those it reads from outside.
    created: Vec<TensorId>,
    inputs: Vec<TensorId>,
    /// The inputs of another shape than the run's (broadcast to it).
    broadcast: Vec<TensorId>,
    scalars: usize,
    status: OptimizationStatus,
}

/// Whether relative dims `from` broadcast to `to` (numpy rules): burn-fusion's relative
/// shapes give each dimension size an id, the size 1 always id 0 (stream/context.rs), so
/// equal ids are equal sizes and id 0 is a size 1.
fn broadcasts_relative(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 0)
}

impl ElementwiseBuilder {
    /// An empty, open builder for `device`.
    pub fn new(device: XpuDevice) -> Self {
        ElementwiseBuilder {
            device,
            ops: Vec::new(),
            steps: 0,
            shape: None,
            created: Vec::new(),
            inputs: Vec::new(),
            broadcast: Vec::new(),
            scalars: 0,
            status: OptimizationStatus::Open,
        }
    }

    /// Whether the step fits the run: `f32`, its result of the run's shape, its operands of
    /// that shape or (tensors from outside the run) broadcasting to it, and within the
    /// chain's bindings.
    fn fits(&self, x: &TensorIr, y: Option<&TensorIr>, s: bool, out: &TensorIr) -> bool {
        let shape = self.shape.as_ref().unwrap_or(&out.shape.dims);
        if [Some(x), y, Some(out)]
            .iter()
            .flatten()
            .any(|t| t.dtype != DType::F32)
            || &out.shape.dims != shape
        {
            return false;
        }
        let mut new_inputs: Vec<TensorId> = Vec::new();
        let mut new_broadcast = 0;
        for t in [Some(x), y].into_iter().flatten() {
            let dims = &t.shape.dims;
            if dims == shape {
                // Of the run's shape (a value of the run, or an input).
            } else if self.created.contains(&t.id)
                || !broadcasts_relative(dims, shape)
                || shape.len() > STRIDED_RANK
            {
                return false;
            } else if !self.broadcast.contains(&t.id) && !new_inputs.contains(&t.id) {
                new_broadcast += 1;
            }
            if !self.created.contains(&t.id)
                && !self.inputs.contains(&t.id)
                && !new_inputs.contains(&t.id)
            {
                new_inputs.push(t.id);
            }
        }
        self.inputs.len() + new_inputs.len() <= MAX_BINDINGS
            && self.broadcast.len() + new_broadcast <= MAX_STRIDED
            && self.scalars + usize::from(s) <= MAX_BINDINGS
            && self.steps < MAX_STEPS
            && self.created.len() < 2 * MAX_BINDINGS
    }
}

impl OptimizationBuilder<ElementwiseOptimization> for ElementwiseBuilder {
    fn register(&mut self, operation: &OperationIr) {
        if let OptimizationStatus::Closed = self.status {
            return;
        }
        let Some(op) = step_of(operation) else {
            self.status = OptimizationStatus::Closed;
            return;
        };
        match &op {
            // A run does not start with a drop (nothing of it to keep in registers).
            RunOp::Drop(_) if self.steps == 0 => {
                self.status = OptimizationStatus::Closed;
                return;
            }
            RunOp::Drop(_) => {}
            RunOp::Step { x, y, s, out, .. } => {
                if !self.fits(x, y.as_ref(), s.is_some(), out) {
                    self.status = OptimizationStatus::Closed;
                    return;
                }
                let shape = self.shape.get_or_insert_with(|| out.shape.dims.clone());
                for t in [Some(x), y.as_ref()].into_iter().flatten() {
                    if &t.shape.dims != shape && !self.broadcast.contains(&t.id) {
                        self.broadcast.push(t.id);
                    }
                    if !self.created.contains(&t.id) && !self.inputs.contains(&t.id) {
                        self.inputs.push(t.id);
                    }
                }
                self.created.push(out.id);
                self.scalars += usize::from(s.is_some());
                self.steps += 1;
            }
        }
        self.ops.push(op);
    }

    fn build(&self) -> ElementwiseOptimization {
        ElementwiseOptimization::new(self.device, self.ops.clone())
    }

    fn reset(&mut self) {
        *self = ElementwiseBuilder::new(self.device);
    }

    fn status(&self) -> OptimizationStatus {
        self.status
    }

    fn properties(&self) -> OptimizationProperties {
        // A run of one step is taken too (one launch either way): burn-fusion 0.19.1 marks a
        // tensor that other streams still use read-only in the IR builders see, but an op run
        // by itself uses the status it was recorded with, and frees such a tensor (burn's
        // multi_threads suite: `Should have handle for tensor`); a chain reads the IR's.
        OptimizationProperties {
            score: self.ops.len() as u64,
            ready: self.steps >= 1,
        }
    }

    fn len(&self) -> usize {
        self.ops.len()
    }

    fn clone_dyn(&self) -> Box<dyn OptimizationBuilder<ElementwiseOptimization>> {
        Box::new(self.clone())
    }
}

/// The serializable form of an [`ElementwiseOptimization`]: its recorded ops.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElementwiseState {
    ops: Vec<RunOp>,
}

/// A run of element-wise ops, executed as one chain (or op by op when the run, resolved to
/// this execution's tensors, is not one the chains take).
#[derive(Debug)]
pub struct ElementwiseOptimization {
    device: XpuDevice,
    ops: Vec<RunOp>,
}

/// A run resolved to one execution's tensors: the chain and the tensor ids it reads, writes
/// and frees.
struct Plan {
    chain: Chain,
    /// The run's (every result's) shape.
    shape: Vec<usize>,
    inputs: Vec<TensorId>,
    scalars: Vec<f32>,
    outputs: Vec<TensorId>,
    freed: Vec<TensorId>,
}

impl ElementwiseOptimization {
    fn new(device: XpuDevice, ops: Vec<RunOp>) -> Self {
        ElementwiseOptimization { device, ops }
    }

    /// The device the run's chain is for.
    pub fn device(&self) -> &XpuDevice {
        &self.device
    }

    /// The run resolved through `context`, or `None` when it is not one chain: a tensor or
    /// scalar the context does not know, tensors of several shapes or another element type
    /// than `f32`, more bindings than a chain takes, or nothing alive after it.
    fn plan(&self, context: &Context<'_, XpuTensor>) -> Option<Plan> {
        let global = |t: &TensorIr| context.tensors.get(&t.id).cloned();
        // The run's shape: its first step's result's, in this execution.
        let shape: Vec<usize> = self.ops.iter().find_map(|op| match op {
            RunOp::Step { out, .. } => global(out).map(|g| g.shape.dims),
            RunOp::Drop(_) => None,
        })?;
        let result = |t: &TensorIr| t.dtype == DType::F32 && t.shape.dims == shape;
        let operand = |t: &TensorIr| t.dtype == DType::F32 && broadcasts_to(&t.shape.dims, &shape);
        // Value indices: inputs first (in order of first read), then steps.
        let mut inputs: Vec<TensorId> = Vec::new();
        let mut created: Vec<TensorId> = Vec::new();
        let mut dead: Vec<TensorId> = Vec::new();
        let mut freed: Vec<TensorId> = Vec::new();
        let mut scalars: Vec<f32> = Vec::new();
        // (op, x, y, s, out) with global ids, before indices.
        let mut steps: Vec<(StepOp, TensorId, Option<TensorId>, usize, TensorId)> = Vec::new();
        for op in &self.ops {
            match op {
                RunOp::Drop(t) => {
                    let g = global(t)?;
                    dead.push(g.id);
                    if !created.contains(&g.id) {
                        freed.push(g.id);
                    }
                }
                RunOp::Step { op, x, y, s, out } => {
                    let mut read = |t: &TensorIr| -> Option<TensorId> {
                        let g = global(t)?;
                        // The status is the read's own (the relative op's): the context's
                        // tensor holds the status of the stream's latest use, which may lie
                        // after this run.
                        if !operand(&g) || t.status == TensorStatus::NotInit {
                            return None;
                        }
                        if !created.contains(&g.id) && !inputs.contains(&g.id) {
                            inputs.push(g.id);
                        }
                        if t.status == TensorStatus::ReadWrite {
                            dead.push(g.id);
                            if !created.contains(&g.id) && !freed.contains(&g.id) {
                                freed.push(g.id);
                            }
                        }
                        Some(g.id)
                    };
                    let gx = read(x)?;
                    let gy = match y {
                        Some(y) => Some(read(y)?),
                        None => None,
                    };
                    let si = match s {
                        Some(ScalarIr::U64(id)) => {
                            let v = context.scalars.get(&ScalarId { value: *id })?;
                            scalars.push(v.elem::<f32>());
                            scalars.len() - 1
                        }
                        Some(_) => return None,
                        None => 0,
                    };
                    let go = global(out)?;
                    if !result(&go) {
                        return None;
                    }
                    created.push(go.id);
                    steps.push((*op, gx, gy, si, go.id));
                }
            }
        }
        let n_in = inputs.len();
        // The chain's limits on broadcast inputs (the builder keeps runs within them; a run
        // reused at other shapes is checked again).
        let broadcast = inputs
            .iter()
            .filter(|id| {
                context
                    .handles
                    .get_handle_ref(id)
                    .is_some_and(|t| t.shape != shape)
            })
            .count();
        if broadcast > MAX_STRIDED || broadcast > 0 && shape.len() > STRIDED_RANK {
            return None;
        }
        let index = |id: TensorId| -> Option<usize> {
            inputs
                .iter()
                .position(|&i| i == id)
                .or_else(|| steps.iter().position(|st| st.4 == id).map(|k| n_in + k))
        };
        let mut chain = Chain {
            inputs: n_in,
            scalars: scalars.len(),
            steps: Vec::with_capacity(steps.len()),
            outputs: Vec::new(),
        };
        for &(op, x, y, s, _) in &steps {
            chain.steps.push(Step {
                op,
                x: index(x)?,
                y: match y {
                    Some(y) => index(y)?,
                    None => 0,
                },
                s,
            });
        }
        let outputs: Vec<TensorId> = created
            .iter()
            .copied()
            .filter(|id| !dead.contains(id))
            .collect();
        for &o in &outputs {
            chain.outputs.push(index(o)?);
        }
        chain.check().ok()?;
        Some(Plan {
            chain,
            shape,
            inputs,
            scalars,
            outputs,
            freed,
        })
    }

    /// Runs the ops one by one, as burn-fusion would without this optimization.
    fn fallback(
        &self,
        context: &mut Context<'_, XpuTensor>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        for i in 0..self.ops.len() {
            execution
                .operation_within_optimization(i)
                .execute(context.handles);
        }
    }
}

impl NumOperations for ElementwiseOptimization {
    fn len(&self) -> usize {
        self.ops.len()
    }
}

impl Optimization<XpuFusionRuntime> for ElementwiseOptimization {
    fn execute(
        &mut self,
        context: &mut Context<'_, XpuTensor>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        let Some(plan) = self.plan(context) else {
            return self.fallback(context, execution);
        };
        let handles: Option<Vec<XpuTensor>> = plan
            .inputs
            .iter()
            .map(|id| context.handles.get_handle_ref(id).cloned())
            .collect();
        let Some(handles) = handles else {
            return self.fallback(context, execution);
        };
        let refs: Vec<&XpuTensor> = handles.iter().collect();
        // burn's ops return tensors, not results: a failed launch (out of memory, a build
        // failure) panics with its typed error's message, as every op of the backend does.
        let outs = or_panic(fused::run(&plan.chain, &plan.shape, &refs, &plan.scalars));
        drop(refs);
        drop(handles);
        for (id, t) in plan.outputs.into_iter().zip(outs) {
            context.handles.register_handle(id, t);
        }
        for id in plan.freed {
            context.handles.remove_handle(id);
        }
    }

    fn to_state(&self) -> ElementwiseState {
        ElementwiseState {
            ops: self.ops.clone(),
        }
    }

    fn from_state(device: &XpuDevice, state: ElementwiseState) -> Self {
        ElementwiseOptimization::new(*device, state.ops)
    }
}
