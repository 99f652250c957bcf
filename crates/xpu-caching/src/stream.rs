//! Stream identity and stream-operation errors, shared by every backend (the operations
//! themselves are on [`Backend`](crate::Backend)).

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
