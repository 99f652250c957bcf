//! The stream seam over real streams: markers are `xpu_event` events (OpenCL markers
//! enqueued on the stream's queue); a device-side wait is a barrier on the waiting stream.

use std::any::Any;
use std::sync::Arc;

use xpu_event::{Event, EventFlags, StreamExt};
use xpu_stream::Stream;

use crate::stream::{Marker, MarkerError, MarkerStream, StreamKey, StreamRef};

/// The allocator's key of a stream.
#[must_use]
pub fn stream_key(stream: &Stream) -> StreamKey {
    StreamKey::new(
        u32::try_from(stream.device()).unwrap_or(u32::MAX),
        stream.id(),
    )
}

/// A real stream as the allocator sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClStream(pub Stream);

impl ClStream {
    /// The stream as a [`StreamRef`].
    #[must_use]
    pub fn shared(stream: Stream) -> StreamRef {
        Arc::new(Self(stream))
    }
}

fn marker_error(e: impl std::fmt::Display) -> MarkerError {
    MarkerError(e.to_string())
}

/// A marker recorded on a real stream.
#[derive(Debug)]
pub struct EventMarker(Event);

impl Marker for EventMarker {
    fn is_complete(&self) -> bool {
        // An event that cannot be queried has terminated abnormally: treat it as complete.
        self.0.query().unwrap_or(true)
    }

    fn wait(&self) -> Result<(), MarkerError> {
        self.0.synchronize().map_err(marker_error)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl MarkerStream for ClStream {
    fn key(&self) -> StreamKey {
        stream_key(&self.0)
    }

    fn record_marker(&self) -> Result<Box<dyn Marker>, MarkerError> {
        let mut event = Event::new(EventFlags::default());
        event.record(&self.0).map_err(marker_error)?;
        Ok(Box::new(EventMarker(event)))
    }

    fn wait_marker(&self, marker: &dyn Marker) -> Result<(), MarkerError> {
        let marker = marker
            .as_any()
            .downcast_ref::<EventMarker>()
            .ok_or_else(|| {
                MarkerError("a stream can only wait for markers of device streams".to_owned())
            })?;
        self.0.wait_event(&marker.0).map_err(marker_error)
    }

    fn synchronize(&self) -> Result<(), MarkerError> {
        self.0.synchronize().map_err(marker_error)
    }
}
