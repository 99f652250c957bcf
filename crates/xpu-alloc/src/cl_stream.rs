//! The stream seam over real streams: markers are OpenCL markers enqueued on the stream's
//! queue; a device-side wait is a barrier on the waiting stream.
//!
//! A [`ClStream`] holds a strong reference to its queue, taken when it is created (at
//! allocation-stream registration and at `record_stream`): an external stream dropped by
//! its owner afterwards still gets the marker that orders the reuse of a block it used.

use std::any::Any;
use std::sync::Arc;

use xpu_device::backend::ClEvent;
use xpu_stream::{QueueRef, Stream};

use crate::stream::{Marker, MarkerError, MarkerStream, StreamKey, StreamRef};

/// The allocator's key of a stream.
#[must_use]
pub fn stream_key(stream: &Stream) -> StreamKey {
    StreamKey::new(stream.device(), stream.id())
}

/// A real stream as the allocator sees it: the handle and, when it could be resolved at
/// creation, a strong reference to its queue (which keeps an external stream's queue alive
/// after its [`xpu_stream::ExternalStream`] is dropped).
#[derive(Debug, Clone)]
pub struct ClStream {
    stream: Stream,
    queue: Option<QueueRef>,
}

impl ClStream {
    /// The stream as a [`StreamRef`], holding its queue when it can be resolved now (a
    /// stream whose queue is already released fails each marker operation instead).
    #[must_use]
    pub fn shared(stream: Stream) -> StreamRef {
        Arc::new(Self {
            stream,
            queue: stream.queue().ok(),
        })
    }

    /// The stream as a [`StreamRef`] holding its queue.
    ///
    /// # Errors
    /// [`MarkerError`] when the stream's queue is released (a dropped external stream).
    pub fn try_shared(stream: Stream) -> Result<StreamRef, MarkerError> {
        let queue = stream.queue().map_err(marker_error)?;
        Ok(Arc::new(Self {
            stream,
            queue: Some(queue),
        }))
    }

    /// The stream handle.
    #[must_use]
    pub fn stream(&self) -> Stream {
        self.stream
    }

    fn queue(&self) -> Result<QueueRef, MarkerError> {
        match &self.queue {
            Some(q) => Ok(q.clone()),
            None => self.stream.queue().map_err(marker_error),
        }
    }
}

fn marker_error(e: impl std::fmt::Display) -> MarkerError {
    MarkerError(e.to_string())
}

/// A marker recorded on a real stream (`clEnqueueMarkerWithWaitList`, flushed so that it
/// completes without a later flush).
#[derive(Debug)]
pub struct EventMarker(ClEvent);

impl Marker for EventMarker {
    fn is_complete(&self) -> bool {
        // An event that cannot be queried has terminated abnormally: treat it as complete.
        self.0.is_complete().unwrap_or(true)
    }

    fn wait(&self) -> Result<(), MarkerError> {
        self.0.wait().map_err(marker_error)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl MarkerStream for ClStream {
    fn key(&self) -> StreamKey {
        stream_key(&self.stream)
    }

    fn record_marker(&self) -> Result<Box<dyn Marker>, MarkerError> {
        let queue = self.queue()?;
        let event = queue.enqueue_marker(&[]).map_err(marker_error)?;
        queue.flush().map_err(marker_error)?;
        Ok(Box::new(EventMarker(event)))
    }

    fn wait_marker(&self, marker: &dyn Marker) -> Result<(), MarkerError> {
        let marker = marker
            .as_any()
            .downcast_ref::<EventMarker>()
            .ok_or_else(|| {
                MarkerError("a stream can only wait for markers of device streams".to_owned())
            })?;
        let queue = self.queue()?;
        queue.enqueue_barrier(&[&marker.0]).map_err(marker_error)?;
        Ok(())
    }

    fn synchronize(&self) -> Result<(), MarkerError> {
        self.queue()?.finish().map_err(marker_error)
    }
}
