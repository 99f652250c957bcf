//! One recorded point of an [`Event`](crate::Event): the marker, its stream and queue, its
//! flush state and what the runtime knows of its completion. A leaf below the event and the
//! cross-stream wait.
//!
//! Completion is known without the driver in two ways (then `poll` makes no driver call):
//! - `done`: this point completed successfully, as a driver status of `CL_COMPLETE` or a
//!   `clWaitForEvents` that returned `CL_SUCCESS` proved (`Event::synchronize`). A
//!   re-recording is a new `Recorded`, so it starts over.
//! - `submission`: the point's place among its queue's commands
//!   ([`QueueRef::submission`]), which a stream synchronize or a stream query that found the
//!   queue drained covers ([`QueueRef::is_known_complete`]). `None` for an adopted user event,
//!   which no queue orders.
//!
//! Drivers' status may lag their waits (NVIDIA's OpenCL read a marker incomplete right after
//! `clFinish` / `clWaitForEvents` covering it returned), so this is what makes a query after
//! a synchronize exact.
//!
//! A recorded marker is an [`OrderedMarker`]: its driver status is judged with the waits
//! enqueued before it on the queue. PoCL completes a marker after a failed wait while earlier
//! commands stay queued (review h67: an event behind a closed gate and a failed wait
//! synchronized `Ok`), so a marker after a failed wait reads that wait's error, and one after
//! a pending wait reads incomplete, as the allocators' free markers do.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use xpu_device::backend::{ClEvent, EventStatus, OrderedMarker};
use xpu_device::ClError;
use xpu_stream::{QueueRef, Stream, Submission};

use crate::error::EventError;

/// Flush state of a recording: see [`Event::query`](crate::Event::query).
const FRESH: u8 = 0;
const SEEN_INCOMPLETE: u8 = 1;
const FLUSHED: u8 = 2;

/// The status reported for a marker that follows a failed wait while the driver has not
/// completed the marker yet: `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` (OpenCL 3.0
/// §5.11), an event the stream waited for failed.
pub(crate) const FAILED_WAIT: i32 =
    xpu_device::backend::CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;

/// The error of a point whose status (or that of a wait enqueued before it) is `code`.
pub(crate) fn failure(code: i32) -> EventError {
    ClError::new("command execution", code).into()
}

/// What a point is: a marker the runtime recorded, or an adopted event.
#[derive(Debug)]
pub(crate) enum Point {
    /// A marker recorded by [`Event::record`](crate::Event::record), judged in order.
    Marker(OrderedMarker),
    /// A user event adopted by [`Event::from_cl_event`](crate::Event::from_cl_event): its
    /// driver status as it is.
    Adopted(ClEvent),
}

/// One recorded point.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) stream: Stream,
    pub(crate) queue: QueueRef,
    point: Point,
    /// Whether `event` is a command of `stream`'s in-order queue (a marker, or a foreign
    /// command adopted on it); false for an adopted user event, which no queue orders.
    pub(crate) in_stream_order: bool,
    flush: AtomicU8,
    /// Known to have completed successfully.
    done: AtomicBool,
    /// The point among its queue's tracked commands (`None`: not a command of the queue).
    submission: Option<Submission>,
}

impl Recorded {
    /// The point `marker` (enqueued on `queue` of `stream`, its enqueue call returned), not
    /// flushed yet.
    pub(crate) fn new(stream: Stream, queue: QueueRef, marker: OrderedMarker) -> Self {
        Self::of(stream, queue, Point::Marker(marker), true)
    }

    /// The user event `event` adopted on `stream` (not ordered by the queue, so no
    /// synchronize of the stream covers it; an adopted command of the queue is a
    /// [`Recorded::new`] of its in-order judgement, `CommandQueue::adopt_in_order`).
    pub(crate) fn adopted(stream: Stream, queue: QueueRef, event: ClEvent) -> Self {
        Self::of(stream, queue, Point::Adopted(event), false)
    }

    fn of(stream: Stream, queue: QueueRef, point: Point, in_stream_order: bool) -> Self {
        let submission = in_stream_order.then(|| queue.submission());
        Self {
            stream,
            queue,
            point,
            in_stream_order,
            flush: AtomicU8::new(FRESH),
            done: AtomicBool::new(false),
            submission,
        }
    }

    /// Whether the point is known complete without asking the driver (see the module docs).
    /// Two atomic loads at most.
    #[inline]
    pub(crate) fn is_known_complete(&self) -> bool {
        self.done.load(Ordering::Acquire)
            || self
                .submission
                .is_some_and(|s| self.queue.is_known_complete(s))
    }

    /// Whether the point is known to have completed successfully (`Event::synchronize` then
    /// has nothing left to wait for or report).
    #[inline]
    pub(crate) fn is_known_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Notes that the point completed successfully (a `CL_COMPLETE` status or a successful
    /// wait on it).
    #[inline]
    pub(crate) fn set_done(&self) {
        self.done.store(true, Ordering::Release);
    }

    /// The point's event (its marker's, or the adopted one).
    pub(crate) fn event(&self) -> &ClEvent {
        match &self.point {
            Point::Marker(m) => m.event(),
            Point::Adopted(e) => e,
        }
    }

    /// The point's status: a marker's judged in order ([`OrderedMarker::status`]), and by its
    /// own driver status again once a synchronize of its stream begun after the record
    /// returned ([`OrderedMarker::drained_by_finish`]: every command before it completed),
    /// but for a marker that a failed wait before it failed: complete then, as PoCL completes
    /// such a marker (NVIDIA fails it with the wait: after the synchronize that handled the
    /// failure, `query` read `true` and `synchronize` the failure, on an H100, 2026-12-07);
    /// an adopted event's as the driver reports it.
    ///
    /// A marker still pending after a wait before it already known to have failed
    /// ([`OrderedMarker::known_failed_wait`]: judged so by an earlier question, such as
    /// `Event::synchronize`'s) reads [`FAILED_WAIT`] (-14, as `Event::synchronize` and
    /// `Event::wait` report it: review h91) until such a synchronize: PoCL fails it
    /// with the wait, NVIDIA keeps it queued behind the earlier work (on an H100, 2026-12-07,
    /// `query` read `false` where `synchronize` had reported the failure: review h83's
    /// agreement test). Not judged now: a pending answer costs no status query of the waits
    /// (review h90).
    pub(crate) fn status(&self) -> Result<EventStatus, ClError> {
        match &self.point {
            Point::Marker(m) => match m.status()? {
                EventStatus::Error(_) if m.drained_by_finish() => match m.event().status()? {
                    EventStatus::Error(_) if m.follows_failed_wait() => Ok(EventStatus::Complete),
                    status => Ok(status),
                },
                status @ (EventStatus::Complete | EventStatus::Error(_)) => Ok(status),
                status if m.drained_by_finish() => Ok(status),
                _ if m.known_failed_wait() => Ok(EventStatus::Error(FAILED_WAIT)),
                status => Ok(status),
            },
            Point::Adopted(e) => e.status(),
        }
    }

    /// The status of a wait enqueued before the point's marker that failed, if one did
    /// (`CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, -14, while the driver has not
    /// completed the marker). Such a marker's own timestamps tell nothing of the work before
    /// it (PoCL completes it at the failure, while that work stays queued: review h69), also
    /// once a synchronize of its stream cleared the failure for its completion.
    pub(crate) fn failed_before(&self) -> Option<i32> {
        let m = self.marker()?;
        match m.status() {
            Ok(EventStatus::Error(code)) => Some(code),
            _ => m.follows_failed_wait().then_some(FAILED_WAIT),
        }
    }

    /// The marker, when the runtime recorded the point.
    pub(crate) fn marker(&self) -> Option<&OrderedMarker> {
        match &self.point {
            Point::Marker(m) => Some(m),
            Point::Adopted(_) => None,
        }
    }

    /// The driver's answer judged in order (`CL_COMPLETE`, kept), for `Event::synchronize`'s
    /// polling.
    ///
    /// # Errors
    /// A failed status query; the point's error status (a marker's: also that of a wait
    /// enqueued before it), as a `"command execution"` error.
    pub(crate) fn driver_says_complete(&self) -> Result<bool, EventError> {
        let complete = match self.status()? {
            EventStatus::Complete => true,
            EventStatus::Error(code) => return Err(failure(code)),
            _ => false,
        };
        if complete {
            self.set_done();
        }
        Ok(complete)
    }

    /// Flushes the recording queue once per recording.
    pub(crate) fn flush_once(&self) -> Result<(), EventError> {
        if self.flush.swap(FLUSHED, Ordering::AcqRel) != FLUSHED {
            self.queue.flush()?;
        }
        Ok(())
    }

    /// Non-blocking completion check: no driver call when the point is known complete (see
    /// the module docs), else one status call; the second incomplete answer flushes the
    /// queue so that a polling loop is guaranteed to finish.
    pub(crate) fn poll(&self) -> Result<bool, EventError> {
        if self.is_known_complete() || self.driver_says_complete()? {
            return Ok(true);
        }
        if self.flush.load(Ordering::Acquire) == FRESH {
            self.flush.store(SEEN_INCOMPLETE, Ordering::Release);
        } else {
            self.flush_once()?;
        }
        Ok(false)
    }
}
