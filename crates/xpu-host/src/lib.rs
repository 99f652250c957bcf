//! `xpu-host`: the caching pinned-host allocator (reference §5, PyTorch's `CachingHostAllocator`):
//! host memory that devices copy from at full speed, reused safely across non-blocking
//! copies.
//!
//! - [`host_allocate`] / [`host_allocate_on`] return a [`HostPtr`]: a byte slice over a
//!   pinned block (`CL_MEM_ALLOC_HOST_PTR` buffer, mapped), rounded up to a power of two and
//!   cached per (device, size class); dropping it frees the block.
//! - [`HostCopy`] (on [`xpu_stream::Stream`]) enqueues non-blocking copies between a
//!   [`HostPtr`] and device memory ([`DeviceMemory`]: an OpenCL buffer region) and records
//!   the stream on the block, so a block freed while its copy runs is reused only after the
//!   copy completed.
//! - Host access waits for the copies in flight on the block: reading a [`HostPtr`] waits for
//!   a device-to-host copy into it, writing for any copy (see [`HostPtr`]); the bytes never
//!   change under a borrow.
//! - [`host_record_event`] records a use by other queued work.
//! - [`host_empty_cache`], [`host_memory_stats`], [`host_reset_peak_stats`],
//!   [`host_reset_accumulated_stats`] as their `torch.cuda` namesakes.
//!
//! The `host_*` functions use the process-wide [`HostAllocator::global`].
//!
//! ```
//! use xpu_host::{host_allocate_on, HostBytes, HostCopy};
//! # fn main() -> Result<(), xpu_host::HostError> {
//! # if xpu_device::device_count() == 0 { return Ok(()); }
//! let stream = xpu_stream::get_stream_from_pool(0, 0)?;
//! let ctx = xpu_device::device(0)?.context()?;
//! let dev = xpu_device::backend::Buffer::new(ctx, 4096, Default::default())?;
//! let mut src = host_allocate_on(0, 4096)?;
//! src.fill(7);
//! stream.copy_pinned(&dev, 0, HostBytes::From(&src), 0, 4096)?;
//! drop(src); // safe: the block is not reused before the copy completes
//! let mut back = host_allocate_on(0, 4096)?;
//! stream.copy_pinned(&dev, 0, HostBytes::Into(&mut back), 0, 4096)?;
//! stream.synchronize()?;
//! assert!(back.iter().all(|&b| b == 7));
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod allocator;
mod block;
mod class;
mod copy;
mod device;
mod error;
mod pending;
mod ptr;
mod stats;

pub use allocator::HostAllocator;
pub use class::{MAX_CLASS_LOG2, MAX_HOST_ALLOC};
pub use copy::{DeviceMemory, DeviceRegion, HostBytes, HostCopy};
pub use error::HostError;
pub use ptr::HostPtr;
pub use stats::{DurationStat, HostMemoryStats, Stat};

use xpu_stream::Stream;

/// `size` bytes of pinned host memory for the current device, from the process-wide
/// allocator (see [`HostAllocator::allocate_on`]).
///
/// # Errors
/// As [`HostAllocator::allocate_on`].
pub fn host_allocate(size: usize) -> Result<HostPtr, HostError> {
    HostAllocator::global().allocate(size)
}

/// `size` bytes of pinned host memory owned by `device`'s context, from the process-wide
/// allocator (see [`HostAllocator::allocate_on`]).
///
/// # Errors
/// As [`HostAllocator::allocate_on`].
pub fn host_allocate_on(device: usize, size: usize) -> Result<HostPtr, HostError> {
    HostAllocator::global().allocate_on(device, size)
}

/// Marks a use of `ptr` by the work queued on `stream` so far, as
/// `CachingHostAllocator_recordEvent` (see [`HostPtr::record_stream`]). Returns `Ok(false)`
/// for an empty pointer and in a bad fork child.
///
/// # Errors
/// As [`HostPtr::record_stream`]: a stream that a graph is capturing.
pub fn host_record_event(ptr: &HostPtr, stream: &Stream) -> Result<bool, HostError> {
    ptr.record_stream(stream)
}

/// Releases the process-wide allocator's cached blocks, as
/// `CachingHostAllocator_emptyCache` (see [`HostAllocator::empty_cache`]). Does nothing in a
/// bad fork child.
pub fn host_empty_cache() {
    HostAllocator::global().empty_cache();
}

/// Statistics of the process-wide allocator, as `torch.cuda.host_memory_stats()`. All zero in
/// a bad fork child.
#[must_use]
pub fn host_memory_stats() -> HostMemoryStats {
    HostAllocator::global().memory_stats()
}

/// Resets the peaks of the process-wide allocator's statistics.
pub fn host_reset_peak_stats() {
    HostAllocator::global().reset_peak_stats();
}

/// Resets the accumulated values of the process-wide allocator's statistics.
pub fn host_reset_accumulated_stats() {
    HostAllocator::global().reset_accumulated_stats();
}

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        send_sync::<super::HostPtr>();
        send_sync::<super::HostAllocator>();
    }
}
