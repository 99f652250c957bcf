//! What the host knows of a stream's completed work, without asking the driver.
//!
//! Each queue of the runtime (a pool queue or an external stream's) carries a [`Progress`]:
//! two counters. `issued` numbers the tracked commands: a layer that enqueues a command it
//! wants to ask about later (an event's marker) takes a [`Submission`] *after* the enqueue
//! call returned. `completed` is a watermark: every submission at or below it is known
//! complete. A synchronize of the queue reads `issued` *before* it waits (`clFinish`) and,
//! once the wait returned `Ok`, raises the watermark to what it read; a stream query that
//! found its marker complete does the same with the value read before the marker's enqueue.
//!
//! Why this is sound: a submission `n <= read` was taken by an atomic increment that comes
//! before the read in `issued`'s modification order, so (release/acquire) the enqueue that
//! preceded the increment happened before the read, hence before `clFinish` (or the query's
//! marker) was called. `clFinish` returns only once every command queued before it completed
//! (OpenCL 3.0, `clFinish`), and a marker with an empty wait list completes only after
//! every command enqueued before it (`clEnqueueMarkerWithWaitList`). A command enqueued
//! concurrently with the read may be numbered above it: it is then simply not known complete
//! yet (the driver is asked).
//!
//! Lock-free: one atomic increment per tracked command, one atomic load per question, one
//! atomic `fetch_max` per synchronize. No driver call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use xpu_device::backend::{CommandQueue, IdleProbe};

/// A point in a queue's tracked commands, taken by [`QueueRef::submission`] right after a
/// command's enqueue call returned: once [`QueueRef::is_known_complete`] says so, that command
/// (and every command of the queue enqueued before it) has completed. Only meaningful for the
/// queue that gave it.
///
/// [`QueueRef::submission`]: crate::QueueRef::submission
/// [`QueueRef::is_known_complete`]: crate::QueueRef::is_known_complete
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Submission(u64);

/// The two counters of one queue (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Submissions handed out: the n-th is `n` (from 1).
    issued: AtomicU64,
    /// Every submission `<=` this is known complete.
    completed: AtomicU64,
}

impl Progress {
    /// Numbers the commands enqueued so far (call it after the enqueue call returned).
    pub(crate) fn submit(&self) -> Submission {
        Submission(self.issued.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The latest submission handed out: read it *before* a synchronize or a query's marker,
    /// and pass it to [`Progress::complete_up_to`] once that proved the queue drained.
    pub(crate) fn issued(&self) -> Submission {
        Submission(self.issued.load(Ordering::Acquire))
    }

    /// Everything up to `s` is known complete (never lowers the watermark).
    pub(crate) fn complete_up_to(&self, s: Submission) {
        self.completed.fetch_max(s.0, Ordering::AcqRel);
    }

    /// Whether `s` is known complete.
    pub(crate) fn covers(&self, s: Submission) -> bool {
        self.completed.load(Ordering::Acquire) >= s.0
    }
}

/// A queue and its [`Progress`]: what the pool and the external-stream registry hold.
/// Cache-line aligned, so that streams recorded on by different threads do not share a line
/// of counters.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct TrackedQueue {
    pub(crate) queue: CommandQueue,
    pub(crate) progress: Progress,
    /// The marker of the last stream query, with what `issued` read before its enqueue: the
    /// next query asks about it before enqueuing another, so a polling loop keeps one marker
    /// in flight and an idle stream's answers `true` on it (see `Stream::query`). Queries
    /// read it shared and replace it only once it is stale (complete, with work enqueued
    /// after it), so that queries on several threads never keep enqueuing fresh markers that
    /// a slow driver reads pending. The lock is held only to read or swap the `Arc`, never
    /// over a driver call.
    query_marker: Mutex<Option<Arc<QueryMarker>>>,
}

/// A stream query's marker and what `issued` read before its enqueue.
#[derive(Debug)]
pub(crate) struct QueryMarker {
    pub(crate) probe: IdleProbe,
    pub(crate) drained: Submission,
}

impl QueryMarker {
    pub(crate) fn new(probe: IdleProbe, drained: Submission) -> QueryMarker {
        QueryMarker { probe, drained }
    }

    /// Whether the commands enqueued before the marker completed: once a `clFinish` of the
    /// queue begun after it returned with success, at once, whatever the driver or the waits
    /// enqueued before it say of the marker (a marker after a failed wait reads the failure
    /// for ever: review h52); otherwise as [`IdleProbe::is_complete`] judges it.
    ///
    /// # Errors
    /// As [`IdleProbe::is_complete`], until such a `clFinish` returned.
    pub(crate) fn is_complete(&self) -> Result<bool, xpu_device::ClError> {
        if self.probe.drained_by_finish() {
            return Ok(true);
        }
        self.probe.is_complete()
    }
}

impl TrackedQueue {
    pub(crate) fn new(queue: CommandQueue) -> TrackedQueue {
        TrackedQueue {
            queue,
            progress: Progress::default(),
            query_marker: Mutex::new(None),
        }
    }

    /// The marker a previous stream query kept, if any.
    pub(crate) fn query_marker(&self) -> Option<Arc<QueryMarker>> {
        self.query_marker.lock().clone()
    }

    /// Keeps `marker` for the next stream query in place of `read` (what the caller's
    /// [`TrackedQueue::query_marker`] returned; `None` empties the slot), unless another
    /// query replaced that meanwhile: then `marker` is dropped (either covers the same ask).
    pub(crate) fn replace_query_marker(
        &self,
        read: Option<&Arc<QueryMarker>>,
        marker: Option<QueryMarker>,
    ) {
        let mut marker = marker.map(Arc::new);
        {
            let mut slot = self.query_marker.lock();
            let unchanged = match (slot.as_ref(), read) {
                (None, None) => true,
                (Some(now), Some(read)) => Arc::ptr_eq(now, read),
                _ => false,
            };
            if unchanged {
                std::mem::swap(&mut *slot, &mut marker);
            }
        }
        // Released outside the lock (`clReleaseEvent`): the replaced marker, or the new one.
        drop(marker);
    }

    /// `clFinish` ([`CommandQueue::finish`]); once one of its `clFinish` calls returned
    /// `Ok`, everything submitted before it is known complete, also when it reports a failure
    /// (NVIDIA reports a failed command once, having drained).
    ///
    /// # Errors
    /// A failed `clFinish` (the watermark is raised only where a retry proved the drain) or
    /// a kept release failure.
    pub(crate) fn finish(&self) -> Result<(), xpu_device::ClError> {
        let drained = self.progress.issued();
        // A query's kept marker enqueued before the `clFinish` began reads complete once it
        // returned with success (`IdleProbe::drained_by_finish`).
        let outcome = self.queue.finish_outcome();
        if outcome.drained {
            self.progress.complete_up_to(drained);
        }
        outcome.result
    }
}
