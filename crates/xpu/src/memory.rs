//! Memory functions with torch.xpu's names (feature `alloc`).
//!
//! They report and release what the device allocators hold, whoever created them (the facade,
//! or `xpu_alloc` directly): they read the allocator registry itself, not the facade's init
//! flag. As torch, the statistics functions neither initialize the runtime nor fail before
//! it: while the OpenCL driver is not initialized no allocator can exist, so they answer zero /
//! empty without enumerating devices, and `empty_cache` is a no-op. In a bad fork child they
//! return `BadFork` (`empty_cache` does nothing).

use std::collections::BTreeMap;

pub use xpu_alloc::{
    DataPtr, DevicePtr, HostPtr, MemPool, MemPoolGuard, MemPoolId, MemorySnapshot, MemoryStats,
};

use crate::error::Result;

fn current(device: Option<usize>) -> usize {
    device.unwrap_or_else(xpu_device::current_device)
}

/// `Ok(false)` when no allocator can exist yet (the driver is not initialized: reading the
/// registry would enumerate devices, i.e. initialize), `Ok(true)` when they may, `BadFork` in
/// a bad fork child.
fn allocators_may_exist() -> Result<bool> {
    if xpu_device::fork::is_in_bad_fork() {
        return Err(xpu_lazy::LazyError::BadFork.into());
    }
    Ok(xpu_device::fork::driver_initialized())
}

/// Releases every cached, unused segment of every device's allocator, whoever created it, as
/// `torch.xpu.empty_cache`. A no-op before any allocator exists and in a bad fork child.
pub fn empty_cache() {
    if let Ok(true) = allocators_may_exist() {
        xpu_alloc::empty_cache();
    }
}

/// The typed statistics of a device's caching allocator (`None` = current device), as
/// `torch.xpu.memory_stats`; all zero while no allocator exists.
///
/// # Errors
/// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
pub fn memory_stats(device: Option<usize>) -> Result<MemoryStats> {
    if !allocators_may_exist()? {
        return Ok(MemoryStats::default());
    }
    Ok(xpu_alloc::memory_stats(current(device))?)
}

/// The statistics as flat dotted keys (`allocated_bytes.all.current`, ...), as
/// `torch.xpu.memory_stats` returns them; empty while no allocator exists.
///
/// # Errors
/// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
pub fn memory_stats_flat(device: Option<usize>) -> Result<BTreeMap<String, i64>> {
    if !allocators_may_exist()? {
        return Ok(BTreeMap::new());
    }
    Ok(xpu_alloc::memory_stats_flat(current(device))?)
}

/// A table a person reads, as `torch.cuda.memory_summary`; all zero while no allocator exists
/// (this call initializes nothing, like the other statistics functions).
///
/// # Errors
/// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
pub fn memory_summary(device: Option<usize>, abbreviated: bool) -> Result<String> {
    if !allocators_may_exist()? {
        return Ok(xpu_alloc::observe::memory_summary(
            &MemoryStats::default(),
            current(device),
            abbreviated,
        ));
    }
    Ok(xpu_alloc::memory_summary(current(device), abbreviated)?)
}

/// Every segment with its blocks, as `torch.xpu.memory_snapshot`; empty before any allocator
/// exists and in a bad fork child (this call creates none).
pub fn memory_snapshot() -> MemorySnapshot {
    if let Ok(true) = allocators_may_exist() {
        return xpu_alloc::memory_snapshot();
    }
    MemorySnapshot::empty(&xpu_alloc::AllocConfig::default())
}

macro_rules! stat_fn {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
        pub fn $name(device: Option<usize>) -> Result<u64> {
            if !allocators_may_exist()? {
                return Ok(0);
            }
            Ok(xpu_alloc::$name(current(device))?)
        }
    };
}

stat_fn!(
    /// Bytes held by live allocations (`allocated_bytes.all.current`), as
    /// `torch.xpu.memory_allocated`; 0 while no allocator exists.
    memory_allocated
);
stat_fn!(
    /// Peak of [`memory_allocated`], as `torch.xpu.max_memory_allocated`. Exact when one
    /// thread makes every call through one pool; otherwise an upper bound (torch's is exact):
    /// the device's peak is the sum of each pool's, and a pool's the sum of its threads'
    /// peaks, so that the hot path updates no shared counter.
    max_memory_allocated
);
stat_fn!(
    /// Bytes reserved in segments (`reserved_bytes.all.current`), as
    /// `torch.xpu.memory_reserved`.
    memory_reserved
);
stat_fn!(
    /// Peak of [`memory_reserved`], as `torch.xpu.max_memory_reserved`; an upper bound as
    /// [`max_memory_allocated`] when several pools reserve.
    max_memory_reserved
);

/// Resets every peak statistic to its current value, as `torch.xpu.reset_peak_memory_stats`.
/// A no-op while no allocator exists.
///
/// # Errors
/// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
pub fn reset_peak_memory_stats(device: Option<usize>) -> Result<()> {
    if !allocators_may_exist()? {
        return Ok(());
    }
    Ok(xpu_alloc::reset_peak_stats(current(device))?)
}

/// Resets the accumulated (allocated / freed) counters, as
/// `torch.xpu.reset_accumulated_memory_stats`. A no-op while no allocator exists.
///
/// # Errors
/// `InvalidDevice` for a bad index once the driver is initialized; `BadFork`.
pub fn reset_accumulated_memory_stats(device: Option<usize>) -> Result<()> {
    if !allocators_may_exist()? {
        return Ok(());
    }
    Ok(xpu_alloc::reset_accumulated_stats(current(device))?)
}

/// `(free, total)` bytes, as `torch.xpu.mem_get_info`. OpenCL has no free-memory query: free
/// is the device's total minus what xpu's allocators reserved. Initializes.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn mem_get_info(device: Option<usize>) -> Result<(u64, u64)> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_alloc::mem_get_info(current(device))?)
}

/// Caps the device's reserved memory at `fraction` x total, as
/// `torch.xpu.set_per_process_memory_fraction`. Initializes.
///
/// # Errors
/// Initialization errors; `InvalidDevice`; a fraction outside (0, 1].
pub fn set_per_process_memory_fraction(fraction: f64, device: Option<usize>) -> Result<()> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_alloc::set_memory_fraction(fraction, current(device))?)
}

/// The device's memory fraction, as `torch.cuda.get_per_process_memory_fraction`: what
/// [`set_per_process_memory_fraction`] set, 1.0 until then. Initializes.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn get_per_process_memory_fraction(device: Option<usize>) -> Result<f64> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_alloc::memory_fraction(current(device))?)
}

/// Allocates `size` bytes on the current device's current stream through the caching
/// allocator (`DataPtr` frees on drop). Initializes.
///
/// # Errors
/// Initialization errors; `AllocError` (out of memory with the torch-style report, a size that
/// can never fit, an exceeded memory fraction).
pub fn allocate(size: u64) -> Result<DataPtr> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_alloc::allocate_current(size)?)
}

/// A new private memory pool on a device (`None` = current device), as
/// `torch.xpu.MemPool()` / `torch.cuda.MemPool()`: its own small and large pools and
/// segments, shared accounting with the device (see `xpu_alloc::MemPool`; a custom segment
/// source: `xpu_alloc::MemPool::with_source`, as `MemPool(allocator=...)`). Initializes.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn mem_pool(device: Option<usize>) -> Result<MemPool> {
    xpu_lazy::lazy_init()?;
    Ok(MemPool::new(current(device))?)
}

/// Routes the calling thread's allocations on `pool`'s device to `pool` until the guard
/// drops, as `torch.xpu.use_mem_pool(pool)` / `torch.cuda.use_mem_pool(pool)` (other
/// threads are not routed). Initializes.
///
/// # Errors
/// Initialization errors; `AllocError::AlreadyRecordingToPool` ("beginAllocateToPool:
/// already recording to mempool_id") when this thread already routes to `pool`.
pub fn use_mem_pool(pool: &MemPool) -> Result<MemPoolGuard> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_alloc::use_mem_pool(pool)?)
}

/// Allocates `size` bytes from the caching allocator on `stream` (`None`: the current device's
/// current stream), as `torch.cuda.caching_allocator_alloc`: a raw pointer that stays
/// allocated until [`caching_allocator_delete`]. Initializes the runtime.
///
/// # Errors
/// Initialization errors; the allocator's errors (out of memory, a size over the device's
/// limit).
pub fn caching_allocator_alloc(
    size: u64,
    stream: Option<&xpu_stream::Stream>,
) -> Result<DevicePtr> {
    xpu_lazy::lazy_init()?;
    Ok(match stream {
        Some(stream) => xpu_alloc::raw_alloc_with_stream(size, stream)?,
        None => xpu_alloc::raw_alloc(size)?,
    })
}

/// Frees a pointer of [`caching_allocator_alloc`], as `torch.cuda.caching_allocator_delete`; a
/// null pointer is ignored.
///
/// # Errors
/// "invalid device pointer" for a pointer the allocator did not hand out (or freed already);
/// `BadFork` in a bad fork child.
pub fn caching_allocator_delete(ptr: DevicePtr) -> Result<()> {
    Ok(xpu_alloc::raw_delete(ptr)?)
}

/// Statistics of the caching pinned-host allocator, as `torch.cuda.host_memory_stats` (typed;
/// times in microseconds, as torch's). All zero before any pinned allocation and in a bad
/// fork child.
#[must_use]
pub fn host_memory_stats() -> xpu_alloc::HostMemoryStats {
    xpu_alloc::host_memory_stats()
}

/// Releases the pinned-host allocator's cached blocks whose copies completed, as
/// `torch.cuda.empty_host_cache`. Does nothing in a bad fork child.
pub fn empty_host_cache() {
    xpu_alloc::host_empty_cache();
}

/// Resets the peaks of [`host_memory_stats`], as `torch.cuda.reset_peak_host_memory_stats`.
pub fn reset_peak_host_memory_stats() {
    xpu_alloc::host_reset_peak_stats();
}

/// Resets the accumulated values of [`host_memory_stats`], as
/// `torch.cuda.reset_accumulated_host_memory_stats`.
pub fn reset_accumulated_host_memory_stats() {
    xpu_alloc::host_reset_accumulated_stats();
}
