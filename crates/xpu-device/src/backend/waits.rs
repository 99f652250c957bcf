//! What the commands of a queue waited for, so that a marker is trusted only once every wait
//! enqueued before it completed successfully.
//!
//! A marker with an empty wait list completes after every command enqueued before it on an
//! in-order queue (`clEnqueueMarkerWithWaitList`, OpenCL 3.0 §5.12). What a driver does with
//! the commands after one that failed is implementation-defined (§5.11: a command waiting on
//! an event with a negative status), and PoCL breaks the order there: a barrier whose wait
//! failed terminates at once while the commands before it stay queued, and a marker enqueued
//! after it then completes (its wait returns, its status reads `CL_COMPLETE`) while those
//! commands have not run. A block freed under such a marker would be handed out while a
//! queued command still writes it (review h26).
//!
//! So each queue keeps a [`WaitLog`]: every command enqueued with a non-empty wait list
//! enters it (its events retained) before its enqueue call, numbered in one order with the
//! markers that ask about it. An [`EarlierWaits`] (taken by [`super::CommandQueue::
//! enqueue_ordered_marker`] right after its marker's enqueue) judges the waits numbered
//! before it: all complete with success, some still pending, or one failed. A failure is
//! sticky for the queue, as a CUDA error is for its context: no marker recorded after a
//! failed wait is ever trusted again (what the driver left queued before it is not known),
//! so memory freed under it stays out of reuse, until a `clFinish` of the queue
//! ([`super::CommandQueue::finish`]) returns: it returns only once every command enqueued
//! before it completed (OpenCL 3.0 `clFinish`; PoCL honours it after a failed wait too, and
//! keeps the order of the later commands), so the failures of the waits enqueued before it
//! tell nothing about the markers enqueued after it ([`WaitLog::before_finish`],
//! [`WaitLog::finished`]).
//!
//! Costs: a command without a wait list, and a marker while the log is empty and no wait
//! failed, pay one atomic load. A command with one pays a `clRetainEvent` per event and the
//! log's lock. Waits completed with success are dropped from the log when a marker is
//! judged, and when the log holds [`PRUNE_AT`] entries or more as one is added (then twice
//! as many as were left pending, so a pruning's queries are paid for by the adds before it). The lock is
//! held over status queries and releases of logged events (`clGetEventInfo`,
//! `clReleaseEvent`), never over a wait.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opencl3::event as cle;
use parking_lot::Mutex;

use super::{raw, release, EventStatus};

/// Entries at which adding one first drops those already complete with success; after each
/// such pruning, the next comes at twice the entries left (at least this many), so that n
/// waits pending together cost O(n) status queries in all, not O(n²).
pub(super) const PRUNE_AT: usize = 16;

/// Drained failures kept per queue ([`Inner::drained`]): past it the oldest go. A marker
/// judged before keeps its answer ([`EarlierWaits::status`]); one enqueued right after a
/// failure that old and never asked about since reads its driver status alone.
const DRAINED_FAILURES: usize = 256;

/// One retained reference to an event a command waited for (not counted in
/// [`super::live_objects`]: the log's own, released when the entry goes).
struct Retained(raw::cl_event);

// SAFETY: a cl_event is reference counted and its info queries and release are thread-safe
// (OpenCL 3.0 appendix A.2); we own one reference.
unsafe impl Send for Retained {}

impl Retained {
    /// Retains `raw`; `None` when `clRetainEvent` fails (the enqueue that lists it fails too).
    fn new(raw: raw::cl_event) -> Option<Retained> {
        // SAFETY: `raw` is an event of a live `ClEvent` borrowed by the enqueue call in
        // progress (the callers' wait lists), so it is valid to retain.
        (unsafe { cle::retain_event(raw) } == Ok(())).then_some(Retained(raw))
    }

    /// The event's execution status: `Some(code)` for a negative one (failed), `Some(0)` for
    /// complete, `None` while it is queued, submitted or running. A status that cannot be
    /// read counts as complete (nothing more can be learned).
    fn status(&self) -> Option<i32> {
        match super::event::raw_status(self.0) {
            Ok(EventStatus::Complete) | Err(_) => Some(0),
            Ok(EventStatus::Error(code)) => Some(code),
            Ok(_) => None,
        }
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        if crate::fork::is_in_bad_fork() {
            // The parent's driver object: no driver call in a bad fork child.
            return;
        }
        // SAFETY: we own exactly one reference to a live event.
        release::note("clReleaseEvent", unsafe { cle::release_event(self.0) });
    }
}

/// Where the waits before a marker stand (what
/// [`OrderedMarker::status`](super::OrderedMarker::status) reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitsStatus {
    /// Every wait enqueued before the marker completed with success (or there was none).
    Complete,
    /// A wait enqueued before the marker has not completed: the marker cannot have completed
    /// in order, whatever the driver says.
    Pending,
    /// A wait of the queue enqueued before the marker failed with this (negative) status: the
    /// commands before it may still be queued, and nothing tells when they ran.
    Failed(i32),
}

#[derive(Default)]
struct Inner {
    /// The next number (of a logged wait or of a marker).
    next: u64,
    /// Waits not yet known complete, in number order.
    entries: VecDeque<(u64, Vec<Retained>)>,
    /// The number and status of each wait seen failed that no successful `clFinish` covered
    /// yet, in number order.
    failed: Vec<(u64, i32)>,
    /// The failed waits a successful `clFinish` covered: `(number, status, upto)`, in number
    /// order, `upto` the last number covered by the earliest-begun such finish. A marker
    /// numbered in `number + 1 ..= upto` was enqueued after the failure and before every
    /// finish that covered it began: it is still judged with it (a status read once stays: a
    /// driver may have completed it ahead of the commands before the failure). A marker
    /// numbered above `upto` is not: every command before that finish began completed, the
    /// failed wait's included. At most [`DRAINED_FAILURES`] are kept (the oldest go).
    drained: VecDeque<(u64, i32, u64)>,
    /// Twice the entries left by the last judging: [`WaitLog::add`] prunes when the log
    /// holds this many (and at least [`PRUNE_AT`]).
    prune_at: usize,
    /// The numbers of the logged commands whose enqueue call has not returned yet
    /// ([`WaitLog::add`] to [`WaitLog::enqueued`]), in number order.
    in_flight: Vec<u64>,
}

impl Inner {
    fn take_number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Drops the entries numbered below `before` whose events all completed with success and
    /// notes a failure; returns whether one numbered below `before` is still pending.
    fn judge(&mut self, before: u64) -> bool {
        let mut pending = false;
        let failed = &mut self.failed;
        self.entries.retain(|(n, events)| {
            if *n >= before {
                return true;
            }
            let mut waiting = false;
            for e in events {
                match e.status() {
                    Some(0) => {}
                    Some(code) => {
                        let at = failed.partition_point(|(m, _)| m < n);
                        failed.insert(at, (*n, code));
                        return false;
                    }
                    None => waiting = true,
                }
            }
            pending |= waiting;
            waiting
        });
        self.prune_at = 2 * self.entries.len();
        pending
    }

    /// The status of a failed wait that judges the marker numbered `before`: one numbered
    /// below it that no successful finish covered, or one whose covering finishes all covered
    /// the marker too (see [`Inner::drained`]). A finish that began before the marker and
    /// covered the failure clears it for the marker, whatever finishes return later (review
    /// h74: the lowest failure any finish drained judged every marker up to the highest
    /// one's coverage: a marker read `Complete`, then `Error` for ever after a later finish,
    /// and a marker between two racing finishes read `Error`).
    fn failure_before(&self, before: u64) -> Option<i32> {
        if let Some(&(n, code)) = self.failed.first() {
            if n < before {
                return Some(code);
            }
        }
        self.drained
            .iter()
            .find(|&&(n, _, upto)| n < before && before <= upto)
            .map(|&(_, code, _)| code)
    }
}

/// The waits of one queue's commands (see the module docs).
#[derive(Default)]
pub(super) struct WaitLog {
    /// Whether the log holds an entry or a wait failed: a marker enqueued while this reads
    /// false has no earlier wait to ask about. Set under the lock before the command that
    /// adds an entry is enqueued; the driver's serialization of one queue's enqueue calls
    /// orders that before a later marker's enqueue. Shared: the allocator reads it on its
    /// cached hand-out ([`WaitLog::watched_flag`]).
    watched: Arc<AtomicBool>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for WaitLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitLog")
            .field("watched", &self.watched.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl WaitLog {
    /// Logs a command waiting for `events` (raw handles of live events), before its enqueue
    /// call; returns its number, for [`WaitLog::forget`] if the enqueue fails. `None` for an
    /// empty list.
    pub(super) fn add(&self, events: &[raw::cl_event]) -> Option<u64> {
        if events.is_empty() {
            return None;
        }
        let retained: Vec<Retained> = events.iter().filter_map(|&e| Retained::new(e)).collect();
        let mut inner = self.inner.lock();
        if inner.entries.len() >= inner.prune_at.max(PRUNE_AT) {
            let next = inner.next + 1;
            inner.judge(next);
        }
        let n = inner.take_number();
        inner.entries.push_back((n, retained));
        inner.in_flight.push(n);
        self.watched.store(true, Ordering::Release);
        Some(n)
    }

    /// The enqueue call of the command [`WaitLog::add`] numbered `n` returned (after
    /// [`WaitLog::forget`] when it failed).
    pub(super) fn enqueued(&self, n: u64) {
        let mut inner = self.inner.lock();
        if let Some(at) = inner.in_flight.iter().position(|&m| m == n) {
            inner.in_flight.remove(at);
        }
    }

    /// Called right before a `clFinish` of the queue: what it covers, for
    /// [`WaitLog::finished`] once it returned with success: every logged command and marker
    /// numbered so far but the logged commands whose enqueue call is still in progress (they
    /// may follow the `clFinish`; every other one returned from its enqueue call before this,
    /// a marker being numbered after its call returned). `None` when nothing is logged and no
    /// wait failed (one atomic load). (`None` while any enqueue call was in progress left a
    /// failure standing after a successful synchronize while another thread kept enqueuing
    /// commands with wait lists, review h71; covering only the numbers below the first one in
    /// progress left one enqueued after it standing, review h73.)
    pub(super) fn before_finish(&self) -> Option<Covered> {
        if !self.watched.load(Ordering::Acquire) {
            return None;
        }
        let inner = self.inner.lock();
        Some(Covered {
            upto: inner.next,
            in_flight: inner.in_flight.clone(),
        })
    }

    /// A `clFinish` begun after [`WaitLog::before_finish`] returned `covered` returned with
    /// success: every command it covers completed, so their waits are judged a last time and
    /// dropped, and their failures no longer matter to the markers numbered above it (nothing
    /// before those is queued any more, but the commands left out); the markers numbered up
    /// to it keep their answer. A command left out (its enqueue call was in progress) stays
    /// logged, its failure judging every marker numbered above it, until a later finish
    /// covers it.
    pub(super) fn finished(&self, covered: Covered) {
        let Covered { upto, in_flight } = covered;
        let left_out = |n: u64| in_flight.binary_search(&n).is_ok();
        let mut inner = self.inner.lock();
        inner.judge(upto + 1);
        inner.entries.retain(|(n, _)| *n > upto || left_out(*n));
        let mut newly = Vec::new();
        inner.failed.retain(|&(n, code)| {
            let drained = n <= upto && !left_out(n);
            if drained {
                newly.push((n, code));
            }
            !drained
        });
        // Failures an earlier-returned finish drained that this one covers too: the
        // earliest-begun covering finish counts.
        for entry in &mut inner.drained {
            if entry.0 <= upto && !left_out(entry.0) {
                entry.2 = entry.2.min(upto);
            }
        }
        for (n, code) in newly {
            let at = inner.drained.partition_point(|e| e.0 < n);
            inner.drained.insert(at, (n, code, upto));
        }
        while inner.drained.len() > DRAINED_FAILURES {
            inner.drained.pop_front();
        }
        self.unwatch_if_idle(&inner);
    }

    /// Whether the log holds an entry or a wait failed (false: every wait logged so far
    /// completed with success, or none was). One atomic load.
    pub(super) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Acquire)
    }

    /// The flag of [`WaitLog::is_watched`], shared: a reader pays one atomic load and no lock.
    pub(super) fn watched_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.watched)
    }

    /// Whether a wait logged so far is known to have failed that no `clFinish` returned with
    /// success has covered since ([`WaitLog::finished`]): the commands enqueued after it may
    /// run ahead of earlier ones still queued. Judges every logged wait (status queries under
    /// the log's lock, never a wait); one atomic load while nothing is logged and no wait
    /// failed.
    pub(super) fn failed_since_finish(&self) -> bool {
        if !self.watched.load(Ordering::Acquire) {
            return false;
        }
        let mut inner = self.inner.lock();
        let next = inner.next + 1;
        inner.judge(next);
        let failed = !inner.failed.is_empty();
        self.unwatch_if_idle(&inner);
        failed
    }

    /// Drops the entry numbered `n` (its command was not enqueued).
    pub(super) fn forget(&self, n: u64) {
        let mut inner = self.inner.lock();
        if let Some(at) = inner.entries.iter().position(|(m, _)| *m == n) {
            inner.entries.remove(at);
        }
        self.unwatch_if_idle(&inner);
    }

    /// Clears `watched` when the log (whose lock the caller holds) is empty and no wait
    /// failed.
    fn unwatch_if_idle(&self, inner: &Inner) {
        if inner.entries.is_empty() && inner.failed.is_empty() {
            self.watched.store(false, Ordering::Release);
        }
    }
}

/// What a `clFinish` covers ([`WaitLog::before_finish`]): the commands numbered up to `upto`
/// but those in `in_flight` (in number order).
pub(super) struct Covered {
    upto: u64,
    in_flight: Vec<u64>,
}

/// The waits enqueued on a queue before one marker, to judge with it (see the module docs).
/// Holds the queue's log, not the queue.
pub struct EarlierWaits {
    log: Arc<WaitLog>,
    before: u64,
    /// The first answer other than `Pending`: it stays (the log forgets drained failures past
    /// [`DRAINED_FAILURES`]: review h75 saw a marker that read `Error(-5)` read `Complete`
    /// 256 failures later, and `Event::elapsed_time` give a negative time again).
    settled: std::sync::OnceLock<WaitsStatus>,
}

impl std::fmt::Debug for EarlierWaits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlierWaits")
            .field("before", &self.before)
            .finish_non_exhaustive()
    }
}

impl EarlierWaits {
    /// Numbers a marker just enqueued on the queue of `log`: `None` when no wait can stand
    /// before it (the log empty and no wait failed), the common case, one atomic load.
    pub(super) fn after_marker(log: &Arc<WaitLog>) -> Option<EarlierWaits> {
        if !log.watched.load(Ordering::Acquire) {
            return None;
        }
        let before = log.inner.lock().take_number();
        Some(EarlierWaits {
            log: Arc::clone(log),
            before,
            settled: std::sync::OnceLock::new(),
        })
    }

    /// Where the waits enqueued before the marker stand. Queries the status of each wait
    /// still logged before it (`clGetEventInfo`, never a wait) under the log's lock; drops
    /// those complete with success. The first answer other than `Pending` stays (no query
    /// after it).
    pub fn status(&self) -> WaitsStatus {
        if let Some(&settled) = self.settled.get() {
            return settled;
        }
        let status = self.judge();
        if status != WaitsStatus::Pending {
            let _ = self.settled.set(status);
        }
        status
    }

    /// Whether a wait enqueued before the marker is already known to have failed: judged
    /// failed by an earlier question of any marker of the queue, and not cleared for this
    /// marker by a finish that began before it (or settled so once the marker completed:
    /// [`EarlierWaits::status`]). Neither queries a status nor settles the answer, so it costs
    /// one lock and no driver call.
    pub fn known_failure(&self) -> bool {
        if let Some(&settled) = self.settled.get() {
            return matches!(settled, WaitsStatus::Failed(_));
        }
        self.log.inner.lock().failure_before(self.before).is_some()
    }

    /// The status of a wait enqueued before the marker that failed, judging the logged waits
    /// now (status queries, never a wait). A `Failed` answer is not settled: a finish that
    /// began before the marker and covers the failure clears it for the marker once it
    /// returns, and a marker asked while pending kept the failure for good (review h91:
    /// `Event::synchronize` of a pending event while such a synchronize was in `clFinish`);
    /// [`EarlierWaits::status`] settles what it reads once the marker completed. `Complete`
    /// is settled (nothing before the marker can fail any more).
    pub fn failure_now(&self) -> Option<i32> {
        if let Some(&settled) = self.settled.get() {
            return match settled {
                WaitsStatus::Failed(code) => Some(code),
                _ => None,
            };
        }
        match self.judge() {
            WaitsStatus::Failed(code) => Some(code),
            WaitsStatus::Complete => {
                let _ = self.settled.set(WaitsStatus::Complete);
                None
            }
            WaitsStatus::Pending => None,
        }
    }

    /// [`EarlierWaits::status`], asked of the log.
    fn judge(&self) -> WaitsStatus {
        let waits = &self.log;
        let mut inner = waits.inner.lock();
        let pending = inner.judge(self.before);
        let status = match inner.failure_before(self.before) {
            Some(code) => WaitsStatus::Failed(code),
            None if pending => WaitsStatus::Pending,
            None => WaitsStatus::Complete,
        };
        waits.unwatch_if_idle(&inner);
        status
    }
}
