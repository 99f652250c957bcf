//! Errors of the caching allocator (`xpu-alloc` wraps them in its `AllocError`, variant for
//! variant, with the same messages).

use thiserror::Error;

use crate::size::format_size;
use crate::stream::MarkerError;

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
    /// A memory fraction outside `(0, 1]`.
    #[error("memory fraction {0} is outside (0, 1]")]
    Fraction(f64),
    /// A device error other than out-of-memory.
    #[error("device error: {0}")]
    Device(String),
    /// A stream operation failed.
    #[error(transparent)]
    Stream(#[from] MarkerError),
}
