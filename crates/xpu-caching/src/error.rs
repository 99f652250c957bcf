//! Errors of the caching allocator (`xpu-alloc` wraps them in its `AllocError`, variant for
//! variant, with the same messages).

use thiserror::Error;

use crate::size::format_size;
use crate::stream::MarkerError;

/// Figures of a failed allocation, for [`CacheError::OutOfMemory`] and
/// [`CacheError::MemoryFractionExceeded`]. All sizes in bytes.
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

/// A failure of the caching allocator.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CacheError {
    /// The device has no room even after releasing every cached segment.
    #[error("XPU out of memory. {0}")]
    OutOfMemory(OomReport),
    /// The request would take the reserved memory above the per-process memory fraction.
    #[error("XPU memory fraction exceeded. {0}")]
    MemoryFractionExceeded(OomReport),
    /// The request can never be served: larger than the device's largest allocation
    /// (or than 1 EiB).
    #[error("XPU allocation of {requested} bytes can never succeed on device {device}: the largest single allocation is {max} bytes")]
    TooLarge {
        /// Device index.
        device: usize,
        /// Requested size in bytes.
        requested: u64,
        /// Largest possible allocation in bytes.
        max: u64,
    },
    /// `record_stream` of an allocation of another allocator.
    #[error("invalid device pointer: {address:#x}")]
    InvalidDevicePointer {
        /// The allocation's address.
        address: u64,
    },
    /// `set_memory_fraction` outside `(0, 1]`.
    #[error("invalid memory fraction {fraction}: set it within (0, 1]")]
    InvalidFraction {
        /// The fraction given.
        fraction: f64,
    },
    /// A device error other than out-of-memory.
    #[error("device error: {0}")]
    Device(String),
    /// A stream operation failed.
    #[error(transparent)]
    Stream(#[from] MarkerError),
}
