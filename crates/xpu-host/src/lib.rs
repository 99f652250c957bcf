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
//!
//! # Details
//! - `HostPtr::record_stream` / `host_record_event` return `Result<bool, HostError>` and refuse a
//!   stream a graph is capturing with `HostError::Stream(StreamError::Capturing)`, recording
//!   nothing; a block freed while a recorded stream is captured cannot get its marker and is
//!   released, not reused.
//! - `HostCopy` copies whole allocations with `copy_from_host` / `copy_to_host`, and byte ranges
//!   with `copy_pinned`, whose `HostBytes` argument gives the direction, as `PinnedBytes` does for
//!   the backend's `CommandQueue::copy_pinned`. `DeviceMemory` hands a copy an opaque
//!   `DeviceRegion` borrowed from the memory, so no caller reaches the segment buffer behind a
//!   `DataPtr`; the region carries its lender (`RegionLender`), whose `before_copy`, called by
//!   the whole-allocation copies before they enqueue, records the copy's stream on a `DataPtr`
//!   whose allocation stream it is not (its block is not reused before the copy completes) and
//!   orders that stream after relocation copies. A `DeviceMemory` that wraps a `DataPtr` and
//!   passes its region on cannot skip it.
//! - Pinned memory lifetime: non-blocking copies from or to a `PinnedBuffer` hold a reference until
//!   their completion callback runs, so dropping the host handle early is safe; the allocator also
//!   keeps the block out of its cache until the recorded streams' markers complete and every copy
//!   tracked on the block's buffer finished (so a backend copy made without `record_stream` is
//!   covered too).
//! - Host access waits for copies: a `PinnedBuffer` tracks its copies in flight (the events of
//!   `CommandQueue::copy_pinned`, plus counters its completion callbacks decrement). `as_slice`
//!   (and `HostPtr`'s `Deref`) waits for the device-to-host copies into the buffer, `as_mut_slice`
//!   for every copy; a device-to-host copy takes `&mut PinnedBuffer` (`PinnedBytes::Into`;
//!   `HostBytes::Into` takes `&mut HostPtr`), so no host borrow is live when the device starts
//!   writing (`compile_fail` doctests on both enums). The state lives in the buffer, not in a
//!   guard, so `mem::forget` and clones cannot skip the wait. With nothing in flight it is two
//!   atomic loads and no driver call; waits never hold a lock. The `cl_mem` behind a pinned buffer
//!   is not exposed (a command through it would write the host bytes untracked). Where PyTorch
//!   leaves the bytes of a `non_blocking=True` copy unspecified until the stream is synchronized,
//!   xpu waits.

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
mod thread_cache;

pub use allocator::HostAllocator;
pub use class::{MAX_CLASS_LOG2, MAX_HOST_ALLOC};
pub use copy::{DeviceMemory, DeviceRegion, HostBytes, HostCopy, RegionLender};
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
