//! Stream identity and stream-operation errors, shared by every backend (the operations
//! themselves are on [`Backend`](crate::Backend)).

use thiserror::Error;

use crate::error::DeviceFailure;

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

/// A failure of a stream operation the allocator needed (record, query or wait for a
/// marker, make a stream wait, synchronize): the backend's own error, kept typed as a
/// [`DeviceFailure`] keeps a segment source's, so a caller above the backend-independent
/// core can take its type back ([`MarkerError::downcast_ref`], e.g. to
/// `xpu_stream::StreamError` for the OpenCL backend) and match it. Displays as
/// `stream marker operation failed: ` followed by that error. Two are equal when their
/// messages are.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("stream marker operation failed: {0}")]
pub struct MarkerError(DeviceFailure);

impl MarkerError {
    /// The backend's error `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(DeviceFailure::new(error))
    }

    /// A failure known only by its message (a simulated or test backend, a backend
    /// refusing a call it does not support).
    pub fn message(message: impl Into<String>) -> Self {
        Self(DeviceFailure::message(message))
    }

    /// The backend's error, when it is an `E`.
    #[must_use]
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::MarkerError;

    #[derive(Debug, PartialEq, thiserror::Error)]
    #[error("queue {0} lost")]
    struct Lost(u32);

    #[test]
    fn a_marker_error_keeps_the_backends_error_typed_and_displays_as_it() {
        let e = MarkerError::new(Lost(3));
        assert_eq!(
            e.to_string(),
            "stream marker operation failed: queue 3 lost"
        );
        assert_eq!(e.clone().downcast_ref::<Lost>(), Some(&Lost(3)));
        assert!(e.downcast_ref::<std::fmt::Error>().is_none());
        // Equal by message; the backend's error is no `source` (it is in the message).
        assert_eq!(e, MarkerError::message("queue 3 lost"));
        assert_ne!(e, MarkerError::message("queue 4 lost"));
        assert!(std::error::Error::source(&e).is_none());
    }
}
