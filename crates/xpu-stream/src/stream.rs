//! The `Stream` handle and its queue.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use xpu_device::backend::{raw, CommandQueue, IdleProbe};
use xpu_device::HasDevice;

use crate::error::{check_fork, StreamError};
use crate::priority::{priority_of_level, PRIORITY_NORMAL};
use crate::progress::{QueryMarker, Submission, TrackedQueue};
use crate::state::StateRef;
use crate::{external, id, pool};

/// A stream: an in-order OpenCL command queue with profiling enabled, identified by
/// (device index, stream id). A `Copy` handle (16 bytes); the queue lives in the device's pool
/// (native streams, never destroyed) or in the external-stream registry.
///
/// Equality and hashing use (device, id), as torch's `Stream`. `Debug` shows the device, the
/// id, the priority and the queue handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream {
    id: u64,
    device: u32,
}

/// A resolved queue: a `&'static` pool queue for native streams, a shared reference for
/// external ones (which keeps the queue alive while the `QueueRef` lives). Derefs to
/// [`CommandQueue`]. Also carries what the host knows of the queue's completed work
/// ([`QueueRef::submission`], [`QueueRef::is_known_complete`]).
#[derive(Debug, Clone)]
pub struct QueueRef(Inner);

#[derive(Debug, Clone)]
enum Inner {
    Native(&'static TrackedQueue),
    External(Arc<TrackedQueue>),
}

impl Drop for QueueRef {
    /// An external stream's queue is released by its last reference; in a bad fork child it is
    /// leaked instead (the parent's driver object: `clReleaseCommandQueue` is a driver call).
    /// A pool queue is never released here, so the common drop asks nothing.
    #[inline]
    fn drop(&mut self) {
        if let Inner::External(q) = &self.0 {
            if xpu_device::fork::is_in_bad_fork() {
                std::mem::forget(Arc::clone(q));
            }
        }
    }
}

impl Deref for QueueRef {
    type Target = CommandQueue;
    fn deref(&self) -> &CommandQueue {
        &self.tracked().queue
    }
}

impl QueueRef {
    fn tracked(&self) -> &TrackedQueue {
        match &self.0 {
            Inner::Native(q) => q,
            Inner::External(q) => q,
        }
    }

    /// Numbers the commands enqueued on this queue so far, for
    /// [`QueueRef::is_known_complete`]: call it right after the enqueue call of the command
    /// to ask about later returned (as `xpu_event::Event::record` does for its marker). One
    /// atomic increment, no driver call.
    #[must_use]
    pub fn submission(&self) -> Submission {
        self.tracked().progress.submit()
    }

    /// True when the commands enqueued on this queue before `submission` was taken are known
    /// complete without asking the driver: a [`Stream::synchronize`] of the stream (or the
    /// device-wide [`synchronize`](crate::synchronize)) that began after it returned `Ok`, or a
    /// [`Stream::query`] that began after it returned `true`. False means "not known", not
    /// "incomplete": ask the driver then. One atomic load, no driver call. `submission` must
    /// come from this queue: with another queue's, the answer is about unrelated commands.
    #[must_use]
    pub fn is_known_complete(&self, submission: Submission) -> bool {
        self.tracked().progress.covers(submission)
    }
}

impl Stream {
    /// Builds a handle; `device < MAX_DEVICES` is checked by every caller.
    pub(crate) const fn from_parts(device: usize, id: u64) -> Stream {
        Stream {
            id,
            device: device as u32,
        }
    }

    /// The device index.
    pub fn device(&self) -> usize {
        self.device as usize
    }

    /// The stream id (never 0; layout: bit 0 set for native streams, bits 1..=3 the level,
    /// then the pool index or the external serial number).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The priority: 1 (low), 0 (normal) or -1 (high). Default and external streams are
    /// normal unless an external stream was registered with another priority.
    pub fn priority(&self) -> i32 {
        match id::level(self.id) {
            id::DEFAULT_LEVEL => PRIORITY_NORMAL,
            l => priority_of_level(l as usize),
        }
    }

    /// True for the device's default stream.
    pub fn is_default(&self) -> bool {
        self.id == id::DEFAULT_ID
    }

    /// True for a stream wrapping a user's queue ([`ExternalStream`](crate::ExternalStream)).
    pub fn is_external(&self) -> bool {
        !id::is_native(self.id)
    }

    /// The stream's queue. Native streams: lock-free (an atomic load and an index), no driver
    /// call. External streams: a registry lookup under a read lock.
    ///
    /// # Errors
    /// `ExternalReleased` when the external stream's owner was dropped; `BadFork` in a child
    /// forked after the parent initialized OpenCL (no lock taken, no driver call).
    #[inline]
    pub fn queue(&self) -> Result<QueueRef, StreamError> {
        Ok(self.resolve()?.0)
    }

    /// The queue and the capture state of the stream (see [`Stream::queue`]).
    #[inline]
    pub(crate) fn resolve(&self) -> Result<(QueueRef, StateRef), StreamError> {
        check_fork()?;
        if id::is_native(self.id) {
            // A native handle exists only once its device's pool does.
            if let Some(p) = pool::existing(self.device()) {
                let (queue, state) = p.slot(self.id);
                return Ok((QueueRef(Inner::Native(queue)), StateRef::Native(state)));
            }
        } else if let Some(q) = external::lookup(self.id) {
            return Ok((
                QueueRef(Inner::External(q.queue)),
                StateRef::External(q.capture),
            ));
        }
        Err(self.released())
    }

    fn released(&self) -> StreamError {
        StreamError::ExternalReleased {
            id: self.id,
            device: self.device(),
        }
    }

    /// True when the queue has `CL_QUEUE_PROFILING_ENABLE` (always for native streams), which
    /// event timing needs. No driver call.
    ///
    /// # Errors
    /// `ExternalReleased` as [`Stream::queue`].
    pub fn has_profiling(&self) -> Result<bool, StreamError> {
        check_fork()?;
        if id::is_native(self.id) {
            return Ok(true);
        }
        external::lookup(self.id)
            .map(|e| e.profiling)
            .ok_or_else(|| self.released())
    }

    /// The raw `cl_command_queue`, for interop (as `torch.xpu.Stream.sycl_queue`); valid while
    /// the stream is (native streams: for the process).
    ///
    /// # Errors
    /// `ExternalReleased` as [`Stream::queue`]; [`StreamError::Capturing`] while a graph
    /// captures the stream (what interop code enqueues on the raw queue would run at once,
    /// outside the graph).
    pub fn as_raw(&self) -> Result<raw::cl_command_queue, StreamError> {
        Ok(self.enqueue_queue("raw queue access")?.as_raw())
    }

    /// True when all work submitted so far has completed, as `torch.xpu.Stream.query`. OpenCL
    /// has no "queue empty" query, so this enqueues a marker, flushes the queue and reads the
    /// marker's status (three driver calls, no blocking). The marker is kept: the next query
    /// reads its status first and answers `false` while it is pending (one driver call,
    /// nothing enqueued), so a polling loop keeps one marker in flight instead of queueing
    /// them faster than the device completes them; once it completed, a native stream on
    /// which nothing was enqueued after it is idle, and the query answers `true` on it (one
    /// driver call, nothing enqueued; a driver's status of a fresh marker may read pending
    /// for a while, so a new marker per query could keep an idle stream's polling loop at
    /// `false`). The same holds for an external stream: its owner's commands enqueued
    /// through the runtime's wrappers of the queue are noted, and so must be those enqueued on
    /// the raw handle by other code (`CommandQueue::note_raw_enqueue`, as the runtime's foreign
    /// library calls do; likewise for a native stream's [`Stream::as_raw`]): until noted, they
    /// are seen only by a query that enqueues a marker after them. (Asking with a new marker
    /// at every query instead kept an idle external stream's polling loop at `false` on
    /// NVIDIA, whose status of a fresh marker reads pending at first.) A query asks with a new
    /// marker when work was noted after the kept one. Queries on several threads share the
    /// kept marker (none enqueues another while it is pending). A stream on which nothing was
    /// enqueued since its creation, or since a [`Stream::synchronize`] (of any wrapper of its
    /// queue, or the device's) returned, answers `true` with no driver call (as
    /// `torch.cuda.Stream.query`; an external stream only after a synchronize). A stream that
    /// has just gone idle otherwise can report `false` a few times; poll. After `true`, every
    /// event recorded on the stream before this call began is known complete: its `query`
    /// answers `true` without a driver call (as `torch.cuda.Event.query` after
    /// `torch.cuda.Stream.query` returned `True`).
    ///
    /// The marker is judged with the waits of the commands enqueued before it (as the
    /// allocators' ordered markers): a driver may complete a marker enqueued after a command
    /// whose wait failed while earlier commands stay queued (PoCL does), so after such a
    /// failure the query reports it, until a [`Stream::synchronize`] returned. The marker that
    /// read the failure is kept and answers every query with it, with no new command, until
    /// a synchronize of the queue that covered the failed wait (begun after its enqueue)
    /// returned with success, through any wrapper of the queue (a new marker would fail too,
    /// and NVIDIA's `clFinish` reports each batch of failed commands: pollers enqueuing one
    /// per query kept `synchronize` failing). While the kept marker is still queued the
    /// query answers `false` (one driver call), or reports a failed wait before it that is
    /// already known (judged by an earlier question, such as an event's `synchronize`; no
    /// status query), as `xpu_event::Event::query` does; a failure behind it is reported once
    /// it is over.
    ///
    /// # Errors
    /// A failed OpenCL call, or the abnormal status of a command on the stream (a command
    /// whose wait list failed included: every query reports it until a `synchronize` of the
    /// stream returned); `BadFork` in a
    /// bad fork child (at once: the parent's queue is never touched there);
    /// [`StreamError::Capturing`] while a graph captures the stream (as `cudaStreamQuery`).
    pub fn query(&self) -> Result<bool, StreamError> {
        // The checks (fork, capture, a released external stream) come first, every time.
        let q = self.enqueue_queue("query")?.queue_ref();
        // Known idle with no driver call: a synchronize of the queue returned (or the runtime
        // created it) and nothing was enqueued through its wrappers since. A fresh marker's
        // status read right after its flush is often pending (PoCL, NVIDIA): the query
        // answered `false` on a stream that never had work, and right after a synchronize
        // (review h81; `torch.cuda.Stream.query` is `True` there).
        if q.idle_since_finish() {
            return Ok(true);
        }
        // Every enqueue through the runtime's wrappers of the queue is noted, and so is one on
        // the raw handle that its code notes (`CommandQueue::note_raw_enqueue`): a kept marker
        // that completed with nothing noted after it answers, on a native stream and on an
        // external one alike. (An external stream's query asked with a new marker each time
        // instead, and NVIDIA's status of a fresh marker reads pending at first: a polling
        // loop over an idle external stream stayed `false` for 60 s, 2 of 2 on an H100,
        // 2026-12-06.)
        let kept = q.tracked().query_marker();
        if let Some(k) = &kept {
            // In-order queue: a later marker cannot complete before this one, so while it is
            // pending the answer is `false` whatever a new marker would say. Judged with the
            // waits enqueued before it (a marker after a failed wait may complete while
            // earlier commands stay queued: review h51).
            let complete = match k.is_complete() {
                Ok(complete) => Some(complete),
                // No `clFinish` begun after the marker returned with success (that would
                // read it complete: `QueryMarker::is_complete`). While a failed wait of the
                // queue stands (no successful `clFinish` covered it, through any wrapper),
                // the kept marker reports the failure with no new command: a new marker would
                // fail too, and NVIDIA's `clFinish` reports each batch of failed commands
                // (threads polling with a new marker each kept `synchronize` failing, 21
                // times in a row on an H200, 2026-12-06; `query_after_failure.rs`).
                Err(e) if q.follows_failed_wait() => return Err(e.into()),
                // None stands: a synchronize covered it, whenever it began (reviews h70,
                // h71). One begun after the marker answers for it (a finish raises its count
                // before it clears the log, so it is seen now: no new marker for a poller
                // racing the synchronize); else a new marker asks, judged with the waits
                // since.
                Err(_) => k.probe.drained_by_finish().then_some(true),
            };
            match complete {
                // Still queued: `false`, one driver call (a failed wait enqueued after it is
                // reported once it is over; asking the wait log here cost a status query per
                // logged wait on every poll: review h73), or the failure of a wait before it
                // already known (no status query: the log's lock), as `Event::query` reads
                // a pending event's (reviews h90, h91).
                Some(false) => return pending_answer(&k.probe),
                Some(true) => {
                    q.tracked().progress.complete_up_to(k.drained);
                    // Nothing enqueued after it: the stream is idle, and the marker answers
                    // the next query too. Work enqueued after it is not covered: ask again
                    // with a new marker.
                    if !q.enqueued_since(&k.probe) {
                        return Ok(true);
                    }
                }
                None => {}
            }
        }
        let permit = self.enqueue_queue("query")?;
        // Read before the marker's enqueue: what it numbers was enqueued before the marker,
        // which completes only after it (OpenCL 3.0, `clEnqueueMarkerWithWaitList`).
        let drained = q.tracked().progress.issued();
        let probe = permit.enqueue_idle_probe()?;
        // The flush and the status query are not enqueues: outside the permit.
        drop(permit);
        q.flush()?;
        let complete = match probe.is_complete() {
            Ok(complete) => complete,
            Err(e) => {
                // Kept: it answers the next queries while the failure stands (see above).
                q.tracked()
                    .replace_query_marker(kept.as_ref(), Some(QueryMarker::new(probe, drained)));
                return Err(e.into());
            }
        };
        if complete {
            q.tracked().progress.complete_up_to(drained);
        }
        let answer = if complete {
            Ok(true)
        } else {
            pending_answer(&probe)
        };
        // Kept, pending or complete (it answers the next query). Another query's replacement
        // since the read above is kept instead.
        q.tracked()
            .replace_query_marker(kept.as_ref(), Some(QueryMarker::new(probe, drained)));
        answer
    }

    /// Blocks the host until all work submitted so far has completed (`clFinish`), then
    /// reports a deferred release failure if any, as `torch.xpu.Stream.synchronize`.
    ///
    /// Once it returned `Ok`, every event recorded on the stream before this call began is
    /// known complete: its `query` answers `true` without asking the driver, as
    /// `torch.cuda.Event.query` after `torch.cuda.Stream.synchronize` (NVIDIA's OpenCL was
    /// seen reporting a marker incomplete right after `clFinish` covering it returned). A
    /// command that terminated abnormally is over too; where the driver's `clFinish` does not
    /// report it (PoCL), such an event's `query` reads `true` afterwards, and its
    /// `synchronize` still reports the failure. Where it does (NVIDIA, once per batch of
    /// failed commands), the error is returned once and the stream is known drained all the
    /// same when a second `clFinish` succeeded (`CommandQueue::finish`): the events recorded
    /// before it read as after an `Ok`, and the ones recorded after it are judged without the
    /// failed wait.
    ///
    /// # Errors
    /// A failed `clFinish` (its first report) or a kept release failure; `BadFork` in a bad
    /// fork child (at once: waiting there could hang forever); [`StreamError::Capturing`]
    /// while a graph captures the stream (its commands are recorded, not run: as torch.cuda
    /// refuses `synchronize` during capture), without waiting.
    pub fn synchronize(&self) -> Result<(), StreamError> {
        // Checked under the permit, which is released before the wait (no driver wait under
        // it: a capture begun meanwhile only makes `finish` wait for the earlier work).
        let queue = self.enqueue_queue("synchronize")?.queue_ref();
        // Raises the queue's watermark to what was submitted before the wait (see `progress`).
        Ok(queue.tracked().finish()?)
    }
}

impl HasDevice for Stream {
    fn device_index(&self) -> Option<usize> {
        Some(self.device())
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Stream");
        d.field("device", &self.device)
            .field("id", &format_args!("{:#x}", self.id))
            .field("priority", &self.priority());
        match self.queue() {
            Ok(q) => d.field("queue", &q.as_raw()),
            Err(_) => d.field("queue", &"released"),
        };
        d.finish()
    }
}

/// A stream query's answer for its marker `probe` while the driver reports it pending:
/// `false`, or the failure of a wait enqueued before it that is already known
/// ([`IdleProbe::known_failed_wait`], no status query): -14 as a `"command execution"`
/// error, the code an event's `query` reads then.
fn pending_answer(probe: &IdleProbe) -> Result<bool, StreamError> {
    if probe.known_failed_wait() {
        return Err(xpu_device::ClError::new(
            "command execution",
            xpu_device::backend::CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
        )
        .into());
    }
    Ok(false)
}
