//! Stream methods that need events (streams sit below events in the crate stack).

use xpu_stream::Stream;

use crate::error::EventError;
use crate::event::{Event, EventFlags};

/// Event methods of [`Stream`], as `torch.xpu.Stream.record_event` / `wait_event` /
/// `wait_stream`.
pub trait StreamExt {
    /// A new event (timing disabled, as torch) recorded on this stream.
    ///
    /// # Errors
    /// As [`Event::record`].
    fn record_event(&self) -> Result<Event, EventError>;

    /// A new event with `flags` recorded on this stream.
    ///
    /// # Errors
    /// As [`Event::record`].
    fn record_event_with(&self, flags: EventFlags) -> Result<Event, EventError>;

    /// Makes this stream's future work wait for `event` (`event.wait(self)`); no host block.
    ///
    /// # Errors
    /// As [`Event::wait`].
    fn wait_event(&self, event: &Event) -> Result<(), EventError>;

    /// Makes this stream's future work wait for the work submitted to `other` so far: records a
    /// fresh marker on `other` and enqueues a barrier on this stream waiting for it. The host
    /// is not blocked. A no-op when `other` is this stream.
    ///
    /// # Errors
    /// As [`Event::record`] and [`Event::wait`].
    fn wait_stream(&self, other: &Stream) -> Result<(), EventError>;
}

impl StreamExt for Stream {
    fn record_event(&self) -> Result<Event, EventError> {
        self.record_event_with(EventFlags::default())
    }

    fn record_event_with(&self, flags: EventFlags) -> Result<Event, EventError> {
        let mut e = Event::new(flags);
        e.record(self)?;
        Ok(e)
    }

    fn wait_event(&self, event: &Event) -> Result<(), EventError> {
        event.wait(self)
    }

    fn wait_stream(&self, other: &Stream) -> Result<(), EventError> {
        if self == other {
            return Ok(());
        }
        other.record_event()?.wait(self)
    }
}
