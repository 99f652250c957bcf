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

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use xpu_device::backend::ClEvent;
use xpu_stream::{QueueRef, Stream, Submission};

use crate::error::EventError;

/// Flush state of a recording: see [`Event::query`](crate::Event::query).
const FRESH: u8 = 0;
const SEEN_INCOMPLETE: u8 = 1;
const FLUSHED: u8 = 2;

/// One recorded point.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) stream: Stream,
    pub(crate) queue: QueueRef,
    pub(crate) event: ClEvent,
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
    /// The point `event` (a marker enqueued on `queue` of `stream`, whose enqueue call has
    /// returned), not flushed yet.
    pub(crate) fn new(stream: Stream, queue: QueueRef, event: ClEvent) -> Self {
        Self::adopted(stream, queue, event, true)
    }

    /// The point `event` adopted on `stream`: a command of its queue (`in_stream_order`,
    /// already enqueued: its event exists) or a user event (not ordered by the queue, so no
    /// synchronize of the stream covers it).
    pub(crate) fn adopted(
        stream: Stream,
        queue: QueueRef,
        event: ClEvent,
        in_stream_order: bool,
    ) -> Self {
        let submission = in_stream_order.then(|| queue.submission());
        Self {
            stream,
            queue,
            event,
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

    /// The driver's answer (`CL_COMPLETE`, kept), for `Event::synchronize`'s polling.
    pub(crate) fn driver_says_complete(&self) -> Result<bool, EventError> {
        let complete = self.event.is_complete()?;
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
