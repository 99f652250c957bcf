//! One recorded point of an [`Event`](crate::Event): the marker, its stream and queue, and
//! its flush state. A leaf below the event and the cross-stream wait.

use std::sync::atomic::{AtomicU8, Ordering};

use xpu_device::backend::ClEvent;
use xpu_stream::{QueueRef, Stream};

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
}

impl Recorded {
    /// The point `event` (a marker enqueued on `queue` of `stream`), not flushed yet.
    pub(crate) fn new(stream: Stream, queue: QueueRef, event: ClEvent) -> Self {
        Self::adopted(stream, queue, event, true)
    }

    /// The point `event` adopted on `stream`: a command of its queue (`in_stream_order`) or
    /// a user event (not ordered by the queue).
    pub(crate) fn adopted(
        stream: Stream,
        queue: QueueRef,
        event: ClEvent,
        in_stream_order: bool,
    ) -> Self {
        Self {
            stream,
            queue,
            event,
            in_stream_order,
            flush: AtomicU8::new(FRESH),
        }
    }

    /// Flushes the recording queue once per recording.
    pub(crate) fn flush_once(&self) -> Result<(), EventError> {
        if self.flush.swap(FLUSHED, Ordering::AcqRel) != FLUSHED {
            self.queue.flush()?;
        }
        Ok(())
    }

    /// Non-blocking completion check; the second incomplete answer flushes the queue so that a
    /// polling loop is guaranteed to finish.
    pub(crate) fn poll(&self) -> Result<bool, EventError> {
        if self.event.is_complete()? {
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
