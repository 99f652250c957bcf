//! Memory functions with torch.xpu's names (feature `alloc`). As torch, the statistics
//! functions neither initialize the runtime nor fail before initialization: they answer zero /
//! empty, and `empty_cache` is then a no-op.

use std::collections::BTreeMap;

pub use xpu_alloc::{DataPtr, DevicePtr, HostPtr, MemorySnapshot, MemoryStats};

use crate::error::Result;

fn current(device: Option<usize>) -> usize {
    device.unwrap_or_else(xpu_device::current_device)
}

/// Releases every cached, unused segment of every device, as `torch.xpu.empty_cache`. A no-op
/// before initialization.
pub fn empty_cache() {
    if xpu_lazy::is_initialized() {
        xpu_alloc::empty_cache();
    }
}

/// The typed statistics of a device's caching allocator (`None` = current device), as
/// `torch.xpu.memory_stats`; all zero before initialization.
///
/// # Errors
/// `InvalidDevice` for a bad index after initialization.
pub fn memory_stats(device: Option<usize>) -> Result<MemoryStats> {
    if !xpu_lazy::is_initialized() {
        return Ok(MemoryStats::default());
    }
    Ok(xpu_alloc::memory_stats(current(device))?)
}

/// The statistics as flat dotted keys (`allocated_bytes.all.current`, ...), as
/// `torch.xpu.memory_stats` returns them; empty before initialization.
///
/// # Errors
/// `InvalidDevice` for a bad index after initialization.
pub fn memory_stats_flat(device: Option<usize>) -> Result<BTreeMap<String, i64>> {
    if !xpu_lazy::is_initialized() {
        return Ok(BTreeMap::new());
    }
    Ok(xpu_alloc::memory_stats_flat(current(device))?)
}

/// A table a person reads, as `torch.cuda.memory_summary`; all zero before initialization
/// (this call initializes nothing, like the other statistics functions).
///
/// # Errors
/// `InvalidDevice` for a bad index.
pub fn memory_summary(device: Option<usize>, abbreviated: bool) -> Result<String> {
    Ok(xpu_alloc::memory_summary(current(device), abbreviated)?)
}

/// Every segment with its blocks, as `torch.xpu.memory_snapshot`; empty before any allocator
/// exists (this call creates none).
pub fn memory_snapshot() -> MemorySnapshot {
    xpu_alloc::memory_snapshot()
}

macro_rules! stat_fn {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Errors
        /// `InvalidDevice` for a bad index after initialization.
        pub fn $name(device: Option<usize>) -> Result<u64> {
            if !xpu_lazy::is_initialized() {
                return Ok(0);
            }
            Ok(xpu_alloc::$name(current(device))?)
        }
    };
}

stat_fn!(
    /// Bytes held by live allocations (`allocated_bytes.all.current`), as
    /// `torch.xpu.memory_allocated`; 0 before initialization.
    memory_allocated
);
stat_fn!(
    /// Peak of [`memory_allocated`], as `torch.xpu.max_memory_allocated`.
    max_memory_allocated
);
stat_fn!(
    /// Bytes reserved in segments (`reserved_bytes.all.current`), as
    /// `torch.xpu.memory_reserved`.
    memory_reserved
);
stat_fn!(
    /// Peak of [`memory_reserved`], as `torch.xpu.max_memory_reserved`.
    max_memory_reserved
);

/// Resets every peak statistic to its current value, as `torch.xpu.reset_peak_memory_stats`.
/// A no-op before initialization.
///
/// # Errors
/// `InvalidDevice` for a bad index after initialization.
pub fn reset_peak_memory_stats(device: Option<usize>) -> Result<()> {
    if !xpu_lazy::is_initialized() {
        return Ok(());
    }
    Ok(xpu_alloc::reset_peak_stats(current(device))?)
}

/// Resets the accumulated (allocated / freed) counters, as
/// `torch.xpu.reset_accumulated_memory_stats`. A no-op before initialization.
///
/// # Errors
/// `InvalidDevice` for a bad index after initialization.
pub fn reset_accumulated_memory_stats(device: Option<usize>) -> Result<()> {
    if !xpu_lazy::is_initialized() {
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
