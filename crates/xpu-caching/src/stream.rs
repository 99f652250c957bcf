//! Stream identity, shared by every backend, and the error of a stream operation
//! ([`MarkerError`], defined with the allocator's other errors; the operations themselves
//! are on [`Backend`](crate::Backend)).

pub use crate::error::MarkerError;

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
