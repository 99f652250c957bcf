//! The stream/marker seam: what the allocator needs from streams.
//!
//! The allocator identifies a stream by a [`StreamKey`] and, where it must order device
//! work, talks to it through [`MarkerStream`]: record a [`Marker`] (completes when all work
//! enqueued on the stream before it has finished), query or wait for it, and make a stream
//! wait for a marker of another stream without blocking the host.

use std::any::Any;
use std::sync::Arc;

use thiserror::Error;

/// Identity of a stream: device index and a stream id unique on that device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// Device index.
    pub device: usize,
    /// Stream id, unique per device.
    pub id: u64,
}

impl StreamKey {
    /// The key of stream `id` on device `device`.
    #[must_use]
    pub const fn new(device: usize, id: u64) -> Self {
        Self { device, id }
    }
}

/// A failure of a stream operation the allocator needed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stream marker operation failed: {0}")]
pub struct MarkerError(pub String);

/// A point in a stream's work: complete once everything enqueued before it has finished.
pub trait Marker: Send + Sync {
    /// Whether the marked work has finished (a failed marker counts as finished).
    fn is_complete(&self) -> bool;
    /// Blocks the calling thread until the marked work has finished.
    ///
    /// # Errors
    /// [`MarkerError`] when the wait itself failed.
    fn wait(&self) -> Result<(), MarkerError>;
    /// For downcasting by the stream implementation that created the marker.
    fn as_any(&self) -> &dyn Any;
}

/// A stream as the allocator sees it.
pub trait MarkerStream: Send + Sync {
    /// The stream's identity.
    fn key(&self) -> StreamKey;
    /// Records a marker after all work enqueued so far.
    ///
    /// # Errors
    /// [`MarkerError`] when the marker could not be enqueued.
    fn record_marker(&self) -> Result<Box<dyn Marker>, MarkerError>;
    /// Makes work enqueued on this stream from now on wait for `marker` (recorded on
    /// another stream of the same device), without blocking the host.
    ///
    /// # Errors
    /// [`MarkerError`] when the wait could not be enqueued (for example a marker of an
    /// unrelated implementation).
    fn wait_marker(&self, marker: &dyn Marker) -> Result<(), MarkerError>;
    /// Blocks until all work enqueued on this stream has finished (fallback when a marker
    /// cannot be recorded).
    ///
    /// # Errors
    /// [`MarkerError`] when the synchronization failed.
    fn synchronize(&self) -> Result<(), MarkerError>;
}

/// A shared handle to a stream.
pub type StreamRef = Arc<dyn MarkerStream>;
