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

use super::{XpuFusionRuntime, XpuOptimization};
use crate::tensor::XpuTensor;

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

/// Runs operation `i` of `execution` as recorded, then gives back the handle of each tensor
/// of `read_only` (relative ids, [`read_only_inputs`]) that the op took out of the container.
pub(super) fn run_recorded(
    context: &mut Context<'_, XpuTensor>,
    execution: &OrderedExecution<XpuFusionRuntime>,
    i: usize,
    read_only: &[TensorId],
) {
    let kept: Vec<(TensorId, XpuTensor)> = read_only
        .iter()
        .filter_map(|rel| {
            let id = context.tensors.get(rel)?.id;
            let handle = context.handles.get_handle_ref(&id)?.clone();
            Some((id, handle))
        })
        .collect();
    execution
        .operation_within_optimization(i)
        .execute(context.handles);
    for (id, handle) in kept {
        if context.handles.get_handle_ref(&id).is_none() {
            context.handles.register_handle(id, handle);
        }
    }
}

/// Takes any one op but a `Drop` (ready with it, score 1; it closes at the next op, so
/// a chain of two or more ops, or of one, wins: burn-fusion takes the last builder of the best score).
#[derive(Debug, Clone)]
pub struct SingleOpBuilder {
    read_only: Option<Vec<TensorId>>,
    status: OptimizationStatus,
}

impl SingleOpBuilder {
    /// An empty, open builder.
    pub fn new() -> Self {
        SingleOpBuilder {
            read_only: None,
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
        }
    }

    fn build(&self) -> XpuOptimization {
        XpuOptimization::Single(SingleOpOptimization {
            read_only: self.read_only.clone().unwrap_or_default(),
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

/// One op run as recorded, its read-only inputs kept (see the module docs); also its
/// serializable form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SingleOpOptimization {
    read_only: Vec<TensorId>,
}

impl SingleOpOptimization {
    /// Runs the op ([`run_recorded`]).
    pub(super) fn execute(
        &self,
        context: &mut Context<'_, XpuTensor>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        run_recorded(context, execution, 0, &self.read_only);
    }
}
