//! Release failures from `Drop`: logged, kept, and reported by the next fallible call.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::ClError;

static HAS_PENDING: AtomicBool = AtomicBool::new(false);
static PENDING: Mutex<Option<ClError>> = Mutex::new(None);

/// Records the outcome of a release call made from `Drop`. Never panics.
pub(crate) fn note(function: &'static str, result: Result<(), i32>) {
    if let Err(code) = result {
        let err = ClError::new(function, code);
        tracing::warn!(%err, "OpenCL release failed in drop; reported by the next finish()");
        let mut slot = PENDING.lock();
        if slot.is_none() {
            *slot = Some(err);
        }
        HAS_PENDING.store(true, Ordering::Release);
    }
}

/// Takes the first release failure recorded since the last call, if any.
///
/// [`CommandQueue::finish`](super::CommandQueue::finish) calls this and returns the error, the
/// way torch.xpu reports asynchronous errors at the next synchronization.
pub fn take_release_error() -> Option<ClError> {
    if !HAS_PENDING.load(Ordering::Acquire) {
        return None;
    }
    let mut slot = PENDING.lock();
    HAS_PENDING.store(false, Ordering::Release);
    slot.take()
}
