//! Ops run one by one as burn-fusion recorded them, keeping the tensors the IR reads
//! read-only: the optimization every op that no chain takes runs through, and the step a
//! chain's fallback ([`super::elementwise`]) takes per op.
//!
//! Why: burn-fusion 0.19.1 marks a tensor that other streams (threads) still use read-only in
//! the IR when an op is registered (`MultiStream::register_shared_tensors_drop`), but the op's
//! executable form keeps the status it was built with; an op whose recorded status is
//! `ReadWrite` then takes the tensor's handle out of the container, and the other stream
//! panics with `Should have handle for tensor` when its own op reads it (the same defect on
//! burn's CUDA backend: tracel-ai/burn#4328; burn's `multi_threads` tests, and a thread reading
//! a lazy `ceil(x).clamp(..)` of another thread's in `tests/fusion.rs`). Running the op here,
//! a tensor read only with status `ReadOnly` by the op's IR gets its handle back after the op
//! when the op took it: the IR's statuses decide, as they do for a chain. The handle is the
//! same tensor (its storage is shared, not copied); the later `Drop` burn-fusion issues for the
//! shared tensor frees it. What this cannot mend: that `Drop` itself, when burn-fusion issues
//! it while another thread's op on the tensor is still queued: its shared-tensor cursor is
//! one op short for a stream that already exists, so a stream that runs the ops before its
//! newest one lets go of a tensor the newest op reads (`tests/fusion.rs`' threaded case,
//! ignored, says how it was shown).

use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{OptimizationBuilder, OptimizationProperties, OptimizationStatus};
use burn_ir::{OperationIr, TensorId, TensorIr, TensorStatus};
use serde::{Deserialize, Serialize};

use super::handle::{fail_outputs, failure_message, XpuHandle};
use super::{XpuFusionRuntime, XpuOptimization};

/// The tensors (relative ids) that `op` reads with status `ReadOnly` only ([`read_only_among`]
/// of its tensors); none for a `Drop`.
pub(super) fn read_only_inputs(op: &OperationIr) -> Vec<TensorId> {
    if let OperationIr::Drop(_) = op {
        return Vec::new();
    }
    read_only_among(&op.nodes())
}

/// The tensors of `nodes` (an op's) read with status `ReadOnly` only: a tensor the op also
/// reads `ReadWrite` (`x.clone() + x`) is read for the last time.
pub(super) fn read_only_among(nodes: &[&TensorIr]) -> Vec<TensorId> {
    let mut ids: Vec<TensorId> = Vec::new();
    for t in nodes {
        let last_read = nodes
            .iter()
            .any(|u| u.id == t.id && u.status == TensorStatus::ReadWrite);
        if t.status == TensorStatus::ReadOnly && !last_read && !ids.contains(&t.id) {
            ids.push(t.id);
        }
    }
    ids
}

/// The tensors `op` makes (relative ids: its nodes of status `NotInit`); none for a `Drop`.
pub(super) fn outputs_of(op: &OperationIr) -> Vec<TensorId> {
    if let OperationIr::Drop(_) = op {
        return Vec::new();
    }
    op.nodes()
        .iter()
        .filter(|t| t.status == TensorStatus::NotInit)
        .map(|t| t.id)
        .collect()
}

/// Runs operation `i` of `execution` as recorded, then gives back the handle of each tensor
/// of `read_only` (relative ids, [`read_only_inputs`]) that the op took out of the container.
/// An op that panics (a failed op: burn's ops report failures by panicking) does not unwind
/// through burn-fusion: its `outputs` (relative ids) get the failure ([`fail_outputs`]; see
/// [`super::handle`]).
pub(super) fn run_recorded(
    context: &mut Context<'_, XpuHandle>,
    execution: &OrderedExecution<XpuFusionRuntime>,
    i: usize,
    read_only: &[TensorId],
    outputs: &[TensorId],
) {
    let kept: Vec<(TensorId, XpuHandle)> = read_only
        .iter()
        .filter_map(|rel| {
            let id = context.tensors.get(rel)?.id;
            let handle = context.handles.get_handle_ref(&id)?.clone();
            Some((id, handle))
        })
        .collect();
    let op = execution.operation_within_optimization(i);
    let handles = &mut *context.handles;
    // A panic leaves the closure's captures consistent for what follows: the container's
    // handles are only taken out or put in, and the op's outputs are settled below.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.execute(handles)));
    for (id, handle) in kept {
        if context.handles.get_handle_ref(&id).is_none() {
            context.handles.register_handle(id, handle);
        }
    }
    if let Err(payload) = ran {
        fail_outputs(context, outputs, &failure_message(payload.as_ref()));
    }
}

/// Takes any one op but a `Drop` (ready with it, score 1; it closes at the next op, so
/// a chain of two or more ops, or of one, wins: burn-fusion takes the last builder of the best score).
#[derive(Debug, Clone)]
pub struct SingleOpBuilder {
    read_only: Option<Vec<TensorId>>,
    outputs: Vec<TensorId>,
    status: OptimizationStatus,
}

impl SingleOpBuilder {
    /// An empty, open builder.
    pub fn new() -> Self {
        SingleOpBuilder {
            read_only: None,
            outputs: Vec::new(),
            status: OptimizationStatus::Open,
        }
    }
}

impl Default for SingleOpBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl OptimizationBuilder<XpuOptimization> for SingleOpBuilder {
    fn register(&mut self, operation: &OperationIr) {
        if let OptimizationStatus::Closed = self.status {
            return;
        }
        self.status = OptimizationStatus::Closed;
        if self.read_only.is_none() && !matches!(operation, OperationIr::Drop(_)) {
            self.read_only = Some(read_only_inputs(operation));
            self.outputs = outputs_of(operation);
        }
    }

    fn build(&self) -> XpuOptimization {
        XpuOptimization::Single(SingleOpOptimization {
            read_only: self.read_only.clone().unwrap_or_default(),
            outputs: self.outputs.clone(),
        })
    }

    fn reset(&mut self) {
        *self = SingleOpBuilder::new();
    }

    fn status(&self) -> OptimizationStatus {
        self.status
    }

    fn properties(&self) -> OptimizationProperties {
        OptimizationProperties {
            score: 1,
            ready: self.read_only.is_some(),
        }
    }

    fn len(&self) -> usize {
        usize::from(self.read_only.is_some())
    }

    fn clone_dyn(&self) -> Box<dyn OptimizationBuilder<XpuOptimization>> {
        Box::new(self.clone())
    }
}

/// One op run as recorded, its read-only inputs kept (see the module docs) and its outputs
/// given the failure if it fails (see [`super::handle`]); also its serializable form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SingleOpOptimization {
    read_only: Vec<TensorId>,
    outputs: Vec<TensorId>,
}

impl SingleOpOptimization {
    /// Runs the op ([`run_recorded`]).
    pub(super) fn execute(
        &self,
        context: &mut Context<'_, XpuHandle>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        run_recorded(context, execution, 0, &self.read_only, &self.outputs);
    }
}
