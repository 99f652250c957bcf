//! The element-wise optimization: a builder that takes runs of `f32` element-wise ops whose
//! results share one shape (inputs from outside the run may broadcast to it) from
//! burn-fusion's stream, and the optimization that runs such a run as one
//! [`crate::ops::fused`] chain.
//!
//! What a run writes: every tensor made inside it that is still alive after it. burn's IR
//! says which are not: a tensor read with status `ReadWrite` was read for the last time (its
//! last owner gave it to the op), and a `Drop` op drops the last owner's. Those stay in
//! registers; inputs read `ReadWrite` or dropped inside the run are freed after it, as the
//! ops one by one would free them.

use burn_fusion::stream::{Context, OrderedExecution, ScalarId};
use burn_fusion::{OptimizationBuilder, OptimizationProperties, OptimizationStatus};
use burn_ir::{
    BinaryOpIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr, TensorId,
    TensorIr, TensorStatus, UnaryOpIr,
};
use burn_tensor::DType;
use serde::{Deserialize, Serialize};

use super::handle::{fail_outputs, XpuHandle};
use super::single::{read_only_among, run_recorded};
use super::{XpuFusionRuntime, XpuOptimization};
use crate::error::failure_text;
use crate::ops::elementwise::{broadcasts_to, broadcasts_with_unit};
use crate::ops::fused::{
    self, Chain, CheckedChain, Step, StepOp, MAX_BINDINGS, MAX_STEPS, MAX_STRIDED, STRIDED_RANK,
};
use crate::tensor::XpuTensor;

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

/// Takes runs of `f32` element-wise ops of one result shape (see the module docs).
#[derive(Debug, Clone)]
pub struct ElementwiseBuilder {
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
    broadcasts_with_unit(from, to, 0)
}

impl ElementwiseBuilder {
    /// An empty, open builder.
    pub fn new() -> Self {
        ElementwiseBuilder {
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

impl Default for ElementwiseBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl OptimizationBuilder<XpuOptimization> for ElementwiseBuilder {
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

    fn build(&self) -> XpuOptimization {
        XpuOptimization::Chain(ElementwiseOptimization::new(self.ops.clone()))
    }

    fn reset(&mut self) {
        *self = ElementwiseBuilder::new();
    }

    fn status(&self) -> OptimizationStatus {
        self.status
    }

    fn properties(&self) -> OptimizationProperties {
        // A run of one step is taken too (one launch either way; a chain reads the IR's
        // statuses, as `super::single` makes an op run by itself do).
        OptimizationProperties {
            score: self.ops.len() as u64,
            ready: self.steps >= 1,
        }
    }

    fn len(&self) -> usize {
        self.ops.len()
    }

    fn clone_dyn(&self) -> Box<dyn OptimizationBuilder<XpuOptimization>> {
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
    ops: Vec<RunOp>,
    /// The chain and the relative tensors it reads, writes and frees: fixed by the recorded
    /// ops (their statuses included), so computed once; `None` when the ops are not one chain.
    plan: Option<Plan>,
}

/// A run as one chain, in the run's relative ids: the chain, its inputs (in value order), the
/// stream's scalar ids it reads (in order), the tensors it writes (in `chain.outputs`' order),
/// those it frees, and a tensor of the run's shape (its first step's result).
#[derive(Debug)]
struct Plan {
    chain: CheckedChain,
    inputs: Vec<TensorId>,
    scalars: Vec<u64>,
    outputs: Vec<TensorId>,
    freed: Vec<TensorId>,
    shape_of: TensorId,
}

impl Plan {
    /// The plan of `ops` (see [`Plan`]), or `None` when they are not one chain: a scalar
    /// not in the stream's form, a value read before it is made, or nothing alive after the
    /// run.
    ///
    /// What a run writes and frees follows from the statuses of its own reads, which are
    /// part of the recorded (relative) ops: a tensor read `ReadWrite` was read for the last
    /// time; a `Drop` drops the last owner's. (The context's tensors hold the status of the
    /// stream's latest use, which may lie after this run.)
    fn of(ops: &[RunOp]) -> Option<Plan> {
        let mut inputs: Vec<TensorId> = Vec::new();
        let mut created: Vec<TensorId> = Vec::new();
        let mut dead: Vec<TensorId> = Vec::new();
        let mut freed: Vec<TensorId> = Vec::new();
        let mut scalars: Vec<u64> = Vec::new();
        // (op, x, y, s, out) before value indices.
        let mut steps: Vec<(StepOp, TensorId, Option<TensorId>, usize, TensorId)> = Vec::new();
        for op in ops {
            match op {
                RunOp::Drop(t) => {
                    dead.push(t.id);
                    if !created.contains(&t.id) && !freed.contains(&t.id) {
                        freed.push(t.id);
                    }
                }
                RunOp::Step { op, x, y, s, out } => {
                    for t in [Some(x), y.as_ref()].into_iter().flatten() {
                        if t.status == TensorStatus::NotInit {
                            return None;
                        }
                        if !created.contains(&t.id) && !inputs.contains(&t.id) {
                            inputs.push(t.id);
                        }
                        if t.status == TensorStatus::ReadWrite {
                            dead.push(t.id);
                            if !created.contains(&t.id) && !freed.contains(&t.id) {
                                freed.push(t.id);
                            }
                        }
                    }
                    let si = match s {
                        Some(ScalarIr::U64(id)) => {
                            scalars.push(*id);
                            scalars.len() - 1
                        }
                        Some(_) => return None,
                        None => 0,
                    };
                    created.push(out.id);
                    steps.push((*op, x.id, y.as_ref().map(|y| y.id), si, out.id));
                }
            }
        }
        let shape_of = steps.first()?.4;
        let n_in = inputs.len();
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
        Some(Plan {
            chain: CheckedChain::new(chain).ok()?,
            inputs,
            scalars,
            outputs,
            freed,
            shape_of,
        })
    }
}

impl ElementwiseOptimization {
    fn new(ops: Vec<RunOp>) -> Self {
        let plan = Plan::of(&ops);
        ElementwiseOptimization { ops, plan }
    }

    /// Runs the plan on this execution's tensors; `false` (nothing done) when it cannot: no
    /// plan, a tensor, scalar or handle the context does not have, an element type other
    /// than `f32`, an input that does not broadcast to the run's shape, or more broadcast
    /// inputs than a chain reads. (A run reused at other shapes keeps the shape relations it
    /// was recorded with: burn-fusion matches runs by their relative shapes.)
    fn run_chain(&self, context: &mut Context<'_, XpuHandle>) -> bool {
        let Some(plan) = &self.plan else {
            return false;
        };
        let global = |id: &TensorId| context.tensors.get(id);
        let Some(shape) = global(&plan.shape_of).map(|t| t.shape.dims.clone()) else {
            return false;
        };
        let mut handles: Vec<XpuTensor> = Vec::with_capacity(plan.inputs.len());
        let mut broadcast = 0;
        for id in &plan.inputs {
            let Some(g) = global(id) else { return false };
            // A failed op's result runs op by op: its read there fails the run's ops.
            let Some(h) = context
                .handles
                .get_handle_ref(&g.id)
                .and_then(XpuHandle::tensor)
            else {
                return false;
            };
            if h.dtype != DType::F32 || !broadcasts_to(&h.shape, &shape) {
                return false;
            }
            broadcast += usize::from(h.shape != shape);
            handles.push(h.clone());
        }
        if broadcast > MAX_STRIDED || broadcast > 0 && shape.len() > STRIDED_RANK {
            return false;
        }
        let mut scalars: Vec<f32> = Vec::with_capacity(plan.scalars.len());
        for &id in &plan.scalars {
            let Some(v) = context.scalars.get(&ScalarId { value: id }) else {
                return false;
            };
            scalars.push(v.elem::<f32>());
        }
        let mut outputs: Vec<TensorId> = Vec::with_capacity(plan.outputs.len());
        for id in &plan.outputs {
            match global(id) {
                Some(g) if g.dtype == DType::F32 && g.shape.dims == shape => outputs.push(g.id),
                _ => return false,
            }
        }
        let mut freed: Vec<TensorId> = Vec::with_capacity(plan.freed.len());
        for id in &plan.freed {
            let Some(g) = global(id) else { return false };
            freed.push(g.id);
        }
        let refs: Vec<&XpuTensor> = handles.iter().collect();
        // A failed launch (out of memory, a build failure) gives the run's results the
        // failure's message, read where they are read (`super::handle`).
        let outs = fused::run_checked(&plan.chain, &shape, &refs, &scalars);
        drop(refs);
        drop(handles);
        match outs {
            Ok(outs) => {
                for (id, t) in outputs.into_iter().zip(outs) {
                    context.handles.register_handle(id, XpuHandle::Tensor(t));
                }
            }
            Err(e) => fail_outputs(context, &plan.outputs, &failure_text(&e).into()),
        }
        for id in freed {
            context.handles.remove_handle(id);
        }
        true
    }

    /// Runs the ops one by one as recorded, each keeping the tensors its IR reads read-only
    /// ([`run_recorded`]).
    fn fallback(
        &self,
        context: &mut Context<'_, XpuHandle>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        for (i, op) in self.ops.iter().enumerate() {
            let (read_only, outputs) = match op {
                RunOp::Step { x, y, out, .. } => (
                    read_only_among(
                        &[Some(x), y.as_ref()]
                            .into_iter()
                            .flatten()
                            .collect::<Vec<_>>(),
                    ),
                    std::slice::from_ref(&out.id),
                ),
                RunOp::Drop(_) => (Vec::new(), &[][..]),
            };
            run_recorded(context, execution, i, &read_only, outputs);
        }
    }
}

impl ElementwiseOptimization {
    /// The number of recorded ops.
    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Runs the run as one chain, or op by op when it does not resolve.
    pub(super) fn execute(
        &self,
        context: &mut Context<'_, XpuHandle>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        if !self.run_chain(context) {
            self.fallback(context, execution);
        }
    }

    /// The serializable form.
    pub(super) fn to_state(&self) -> ElementwiseState {
        ElementwiseState {
            ops: self.ops.clone(),
        }
    }

    /// The optimization of a serialized form.
    pub(super) fn from_state(state: ElementwiseState) -> Self {
        ElementwiseOptimization::new(state.ops)
    }
}
