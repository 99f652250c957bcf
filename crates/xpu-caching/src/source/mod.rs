//! The segment source seam: where the allocator gets device memory from.
//!
//! A [`SegmentSource`] hands out segments (one device allocation each) and takes them back;
//! what backs a segment is the source's [`SegmentSource::Memory`]. Implementations:
//! [`SimulatedSource`] (a capacity and fake addresses, or a recording's addresses for a
//! replay, with fault injection; the simulated backend), and the OpenCL buffer source of `xpu-alloc`; [`HookedSource`] wraps another
//! source and runs [`SourceHooks`] around its allocate and free and its size queries.

mod hooked;
mod simulated;

pub use hooked::{HookedSource, SourceHooks};
pub use simulated::{Fault, RecordedSegment, Simulated, SimulatedCounters, SimulatedSource};

use thiserror::Error;

pub use crate::error::DeviceFailure;

/// One device allocation handed out by a [`SegmentSource`], backed by `M`.
#[derive(Debug)]
pub struct SourceSegment<M> {
    /// Device address of the first byte. Addresses are unique on the device for as long as
    /// the segment lives: an address the source assigns to the range.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// The memory object.
    pub memory: M,
}

/// Why a segment could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SourceError {
    /// The device has not enough memory: the allocator frees cached memory and retries.
    #[error("device out of memory")]
    OutOfMemory,
    /// The size can never be allocated (OpenCL `CL_INVALID_BUFFER_SIZE`: above the
    /// device's largest allocation): reported to the caller at once as
    /// `xpu_alloc::AllocError::TooLarge`, without releasing cached memory or retrying.
    #[error("a segment of {size} bytes exceeds the device's largest allocation")]
    TooLarge {
        /// The segment size asked for, in bytes.
        size: u64,
    },
    /// Any other device error, the backend's own error value: reported to the caller at
    /// once (as [`CacheError::Device`](crate::CacheError::Device)).
    #[error("device error: {0}")]
    Device(DeviceFailure),
}

/// A provider of device memory segments for one device.
///
/// Contract (stream-ordered, as the caching allocator uses it): a segment handed out is
/// owned by the allocator until it passes it back to [`SegmentSource::free`]; the allocator
/// frees a segment only after the work of every stream that used its blocks completed
/// (markers waited for by `empty_cache`, the OOM path and a teardown; the stream
/// synchronized first by a release during an allocation), so the source may release or reuse
/// the memory at once. The one exception is a source whose
/// [`SegmentSource::free_needs_sync`] is `false` (its free hands the memory to a driver that
/// deletes it only once the work queued on it completed): a release during an allocation then
/// does not wait. Addresses are unique among live segments.
pub trait SegmentSource: Send + Sync + 'static {
    /// What backs a segment (an OpenCL buffer in `xpu-alloc`, [`Simulated`] here).
    type Memory: Send + Sync + std::fmt::Debug + 'static;
    /// Index of the device.
    fn device(&self) -> usize;
    /// Short description for messages and reports (e.g. the device name).
    fn name(&self) -> String;
    /// Total device memory in bytes.
    fn total_memory(&self) -> u64;
    /// Largest single allocation in bytes (OpenCL `CL_DEVICE_MAX_MEM_ALLOC_SIZE`).
    fn max_alloc_size(&self) -> u64;
    /// Alignment in bytes of sub-buffer origins (OpenCL `CL_DEVICE_MEM_BASE_ADDR_ALIGN`,
    /// converted from bits).
    fn base_addr_align(&self) -> u64;
    /// Free device memory in bytes when the device can tell; `None` makes the allocator
    /// report `total - reserved`.
    fn free_memory(&self) -> Option<u64> {
        None
    }
    /// Whether the allocator must synchronize the owning stream before freeing a segment
    /// during an allocation (the release policy's consolidation, garbage collection, an
    /// oversize release), so that no work queued on the segment's bytes still runs when
    /// [`SegmentSource::free`] gets it back. The default, `true`, is what a source that keeps
    /// or reuses the segments it gets back needs (a pooling source handing one to another
    /// stream's next segment would otherwise let the old stream's queued work write the new
    /// owner's bytes). `false` only for a source whose free releases the memory to a driver
    /// that deletes it once the commands using it completed, and never hands it out again
    /// before (OpenCL buffers, `clReleaseMemObject`, OpenCL 3.0 §5.5.1; simulated memory):
    /// such a release then waits for nothing. `empty_cache`, the OOM path and a shard's
    /// teardown wait for the stream's work either way.
    fn free_needs_sync(&self) -> bool {
        true
    }
    /// Whether the allocator may split a segment into blocks that are handed out at once
    /// (the default, as PyTorch's allocator does); `false` makes every block a whole segment
    /// where a configuration leaves `split_segments` unset (see
    /// [`AllocConfig::split_segments`](crate::config::AllocConfig::split_segments)): for
    /// memory whose parts cannot be used at once through separate handles. Asked once, when
    /// an allocator is built over the source (a later `set_config` reuses the answer and
    /// calls no source code).
    fn splits_segments(&self) -> bool {
        true
    }
    /// Allocates a segment of exactly `size` bytes.
    ///
    /// # Errors
    /// [`SourceError::OutOfMemory`] when the device has no room (the allocator then frees
    /// cached memory and retries), [`SourceError::TooLarge`] when `size` can never be
    /// allocated, [`SourceError::Device`] for any other failure.
    fn allocate(&self, size: u64) -> Result<SourceSegment<Self::Memory>, SourceError>;
    /// Returns a segment to the device. Work that used it has completed or is ordered
    /// before any later use of the memory (the caller guarantees it).
    fn free(&self, segment: SourceSegment<Self::Memory>);
}

/// A shared source (lets a caller keep a handle on the source an allocator owns).
impl<T: SegmentSource + ?Sized> SegmentSource for std::sync::Arc<T> {
    type Memory = T::Memory;
    fn device(&self) -> usize {
        (**self).device()
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn total_memory(&self) -> u64 {
        (**self).total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        (**self).max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        (**self).base_addr_align()
    }
    fn free_memory(&self) -> Option<u64> {
        (**self).free_memory()
    }
    fn free_needs_sync(&self) -> bool {
        (**self).free_needs_sync()
    }
    fn splits_segments(&self) -> bool {
        (**self).splits_segments()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment<T::Memory>, SourceError> {
        (**self).allocate(size)
    }
    fn free(&self, segment: SourceSegment<T::Memory>) {
        (**self).free(segment);
    }
}
