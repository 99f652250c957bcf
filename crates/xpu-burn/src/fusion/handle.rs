//! What burn-fusion holds for each tensor of [`XpuFusion`](super::XpuFusion): the tensor, or
//! the failure of the op that was to make it.
//!
//! burn's ops return tensors, not results, so a backend reports a failed op (out of memory,
//! a shape no allocation holds) by panicking. burn-fusion 0.19.1 runs recorded ops inside its
//! stream's execution, which a panic leaves half done: every later op of that thread on the
//! device then panicked too (`Ordering is bigger than operations`), a `Drop` included (review
//! h93). So the fused stream never unwinds through burn-fusion: an op that fails there gives
//! its results a [`XpuHandle::Failed`] handle with the failure's message (what it consumes,
//! burn-fusion frees after the run as it would have). The panic comes where burn's API hands
//! a tensor to the backend outside a run: reading it (`into_data`), moving it to another
//! device, or an op of another run reading it, which fails the same way. Dropping a failed
//! tensor unread is quiet. Like CUDA's asynchronous errors, a failure surfaces at the read,
//! not at the op that caused it; the message names the first failure.

use std::sync::Arc;

use burn_fusion::stream::Context;
use burn_ir::TensorId;

use crate::tensor::XpuTensor;

/// The start of the message of a panic that reading a failed tensor raises; the failure's own
/// message follows it.
const NEVER_COMPUTED: &str = "xpu-burn: a tensor was never computed: an op before it failed: ";

/// A tensor of [`XpuFusion`](super::XpuFusion) as burn-fusion holds it (see the module docs).
#[derive(Debug, Clone)]
pub enum XpuHandle {
    /// The tensor.
    Tensor(XpuTensor),
    /// The op that was to make the tensor failed with this message.
    Failed(Arc<str>),
}

impl XpuHandle {
    /// The tensor.
    ///
    /// # Panics
    /// For a [`XpuHandle::Failed`] handle: with the failure's message (after
    /// "xpu-burn: a tensor was never computed: an op before it failed: "), as burn's API
    /// reports a failed op.
    #[track_caller]
    pub fn into_tensor(self) -> XpuTensor {
        match self {
            XpuHandle::Tensor(t) => t,
            XpuHandle::Failed(why) => panic!("{NEVER_COMPUTED}{why}"),
        }
    }

    /// The tensor, if the op that made it did not fail.
    pub fn tensor(&self) -> Option<&XpuTensor> {
        match self {
            XpuHandle::Tensor(t) => Some(t),
            XpuHandle::Failed(_) => None,
        }
    }
}

/// The message of a caught panic's payload: the first failure's own message when the panic
/// is a failed tensor's read ([`XpuHandle::into_tensor`]), so that a failure carries on
/// through later runs under its first message.
pub(super) fn failure_message(payload: &(dyn std::any::Any + Send)) -> Arc<str> {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("an op panicked without a message");
    Arc::from(text.strip_prefix(NEVER_COMPUTED).unwrap_or(text))
}

/// After a failure inside an op: each tensor of `outputs` (the op's results, relative ids)
/// that the op has not made gets a [`XpuHandle::Failed`] handle with `why`, in place of
/// burn-fusion's placeholder. What the op consumes needs nothing more: burn-fusion frees the
/// handles its ops read for the last time after a run, failed or not (its queue's
/// bookkeeping, `drain_queue`).
pub(super) fn fail_outputs(
    context: &mut Context<'_, XpuHandle>,
    outputs: &[TensorId],
    why: &Arc<str>,
) {
    for rel in outputs {
        if let Some(id) = context.tensors.get(rel).map(|t| t.id) {
            // burn-fusion holds a placeholder (`Handle::NotInit`) for a tensor not made yet.
            if context.handles.get_handle_ref(&id).is_none() {
                context
                    .handles
                    .register_handle(id, XpuHandle::Failed(Arc::clone(why)));
            }
        }
    }
}
