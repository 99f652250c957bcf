//! Errors of the caching allocator (`xpu-alloc` wraps them in its `AllocError`, variant for
//! variant, with the same messages).

use std::sync::Arc;

use thiserror::Error;

use crate::size::format_size;

/// Figures of a failed allocation, for [`CacheError::OutOfMemory`].
/// All sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomReport {
    /// Device index.
    pub device: usize,
    /// The requested size.
    pub requested: u64,
    /// The segment size the allocator tried to obtain (PyTorch's "Tried to allocate").
    pub segment_size: u64,
    /// Total device memory.
    pub total: u64,
    /// Free device memory (device query, else total minus reserved).
    pub free: u64,
    /// Bytes handed out by this allocator.
    pub allocated: u64,
    /// Bytes reserved by this allocator.
    pub reserved: u64,
    /// Bytes allowed by the memory fraction, when one is set.
    pub allowed: Option<u64>,
}

impl OomReport {
    /// Reserved bytes not handed out (`reserved - allocated`).
    #[must_use]
    pub fn reserved_unallocated(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }
}

impl std::fmt::Display for OomReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tried to allocate {} (a segment of {}). Device {} has a total capacity of {} of which {} is free. ",
            format_size(self.requested),
            format_size(self.segment_size),
            self.device,
            format_size(self.total),
            format_size(self.free),
        )?;
        if let Some(allowed) = self.allowed {
            write!(f, "{} allowed; ", format_size(allowed))?;
        }
        write!(
            f,
            "Of the allocated memory {} is allocated by the xpu allocator, and {} is reserved by the xpu \
             allocator but unallocated. Call `empty_cache` to release all unoccupied cached memory.",
            format_size(self.allocated),
            format_size(self.reserved_unallocated()),
        )
    }
}

/// A failure of the caching allocator (`xpu-alloc` maps each to its `AllocError` of the
/// same meaning).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CacheError {
    /// No room after the whole OOM sequence; `fraction` when the memory fraction, not the
    /// device, refused the last segment.
    #[error("out of memory{}: {report}", if *.fraction { " (memory fraction)" } else { "" })]
    OutOfMemory {
        /// The figures of the failure.
        report: OomReport,
        /// Whether the memory fraction refused it.
        fraction: bool,
    },
    /// A request above the device's largest allocation (or 1 EiB): never satisfiable.
    #[error("{requested} bytes exceed the largest allocation ({max} bytes) of device {device}")]
    TooLarge {
        /// Bytes asked for.
        requested: u64,
        /// The largest allocation of the device, in bytes.
        max: u64,
        /// The device.
        device: usize,
    },
    /// An allocation of another allocator (its address).
    #[error("{0:#x} is not an allocation of this allocator")]
    Foreign(u64),
    /// A stream of another device given to a device's allocator (its memory could not be
    /// used on that stream, and the allocation would report the stream's device).
    #[error("stream of device {stream} given to the allocator of device {device}")]
    StreamDevice {
        /// The stream's device.
        stream: usize,
        /// The allocator's device.
        device: usize,
    },
    /// A memory fraction outside `(0, 1]`.
    #[error("memory fraction {0} is outside (0, 1]")]
    Fraction(f64),
    /// A device error other than out-of-memory: the segment source's own error, kept typed
    /// (see [`DeviceFailure`]).
    #[error("device error: {0}")]
    Device(DeviceFailure),
    /// A stream operation failed.
    #[error(transparent)]
    Stream(#[from] MarkerError),
    /// The process is a child forked after its parent initialized the device's driver
    /// ([`Backend::is_bad_fork`](crate::Backend::is_bad_fork)): the allocator refuses
    /// before any lock or backend call (`xpu-alloc` maps it to its `AllocError::BadFork`).
    #[error("{}", crate::error::BAD_FORK)]
    BadFork,
}

/// The message of [`CacheError::BadFork`] (xpu-alloc's `AllocError::BadFork` has the device
/// layer's own, naming the remedy).
pub(crate) const BAD_FORK: &str = "cannot use the caching allocator in a forked subprocess: \
     the parent process had already initialized the device";

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

/// Which end of a copy a [`CopyError::OutOfRange`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyEnd {
    /// The memory copied from.
    Source,
    /// The memory copied into.
    Destination,
}

impl std::fmt::Display for CopyEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Destination => "destination",
        })
    }
}

/// A copy between segment memories refused or failed
/// ([`Backend::enqueue_copy`](crate::Backend::enqueue_copy)). The range checks
/// ([`check_copy`](crate::backend::check_copy)) run before any backend call, so that every
/// backend refuses the same mistakes whatever its driver accepts. Offsets and lengths in
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CopyError {
    /// The range `offset .. offset + len` does not lie inside the memory's `size` bytes
    /// (OpenCL's `CL_INVALID_VALUE` for `clEnqueueCopyBuffer`).
    #[error(
        "copy {end} range of {len} bytes at offset {offset} exceeds the memory's {size} bytes"
    )]
    OutOfRange {
        /// The end whose range is out of bounds.
        end: CopyEnd,
        /// The range's start.
        offset: u64,
        /// The range's length.
        len: u64,
        /// The memory's size.
        size: u64,
    },
    /// Source and destination are the same memory object and their ranges overlap
    /// (OpenCL's `CL_MEM_COPY_OVERLAP`; a copy needs a staging range then).
    #[error(
        "copy ranges overlap in one memory object: {len} bytes from offset {src_offset} \
         to offset {dst_offset}"
    )]
    Overlap {
        /// The source range's start.
        src_offset: u64,
        /// The destination range's start.
        dst_offset: u64,
        /// The length of both ranges.
        len: u64,
    },
    /// A copy the backend cannot check or make (the reason is given): e.g. memory and a
    /// stream of different kinds (a device buffer and a simulated stream).
    #[error("copy not supported: {0}")]
    Unsupported(&'static str),
    /// The backend failed to enqueue the copy (its own error, kept typed: for the OpenCL
    /// backend a `xpu_stream::StreamError`, e.g. a refused capture, a bad fork child or a
    /// failed `clEnqueueCopyBuffer`).
    #[error("copy failed: {0}")]
    Device(DeviceFailure),
}

/// A backend's own error, kept typed: a device failure other than out-of-memory as the
/// segment source reported it ([`CacheError::Device`]), and the failure inside a
/// [`MarkerError`]. The error value is shared (cloning is cheap), so a caller above the
/// backend-independent core can take its type back ([`DeviceFailure::downcast_ref`], e.g.
/// to `xpu_device::DeviceError` for an OpenCL source) and match its code. Displays as that
/// error does. Two failures are equal when their messages are (the error types need not
/// implement `PartialEq`).
#[derive(Clone)]
pub struct DeviceFailure(Arc<dyn std::error::Error + Send + Sync + 'static>);

/// A failure that is only a message ([`DeviceFailure::message`]).
#[derive(Debug, Error)]
#[error("{0}")]
struct Message(String);

impl DeviceFailure {
    /// The backend's error `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// A failure known only by its message (a simulated fault, a source breaking its
    /// contract).
    pub fn message(message: impl Into<String>) -> Self {
        Self::new(Message(message.into()))
    }

    /// The backend's error, when it is an `E`.
    #[must_use]
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for DeviceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for DeviceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for DeviceFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for DeviceFailure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.to_string() == other.to_string()
    }
}

impl Eq for DeviceFailure {}

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
