//! `mem_get_info`: what OpenCL can say about free device memory.
//!
//! OpenCL has no portable free-memory query (NVIDIA's OpenCL has none; AMD has an extension).
//! So "free" here means: the device's `CL_DEVICE_GLOBAL_MEM_SIZE` minus the bytes this
//! process's xpu caching allocators have reserved on it (they report segment allocations and
//! releases through [`note_reserved`]). Memory used by other processes or by OpenCL objects
//! created outside xpu is not seen.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use crate::discovery::{device, devices};
use crate::error::Result;

fn counters() -> &'static [AtomicI64] {
    static C: OnceLock<Vec<AtomicI64>> = OnceLock::new();
    C.get_or_init(|| {
        let n = devices().map(|d| d.len()).unwrap_or(0);
        (0..n).map(|_| AtomicI64::new(0)).collect()
    })
}

/// Records `delta` bytes reserved (+) or released (-) on `device` by an allocator. Called on
/// segment allocation and release only, never on the cached path. Unknown indices are ignored.
pub fn note_reserved(device: usize, delta: i64) {
    if let Some(c) = counters().get(device) {
        c.fetch_add(delta, Ordering::Relaxed);
    }
}

/// Bytes xpu's allocators hold on `device` (as reported through [`note_reserved`]).
pub fn reserved_by_runtime(device: usize) -> u64 {
    counters()
        .get(device)
        .map_or(0, |c| c.load(Ordering::Relaxed).max(0) as u64)
}

/// `(free, total)` bytes, as `torch.xpu.mem_get_info`; see the module docs for what "free"
/// means under OpenCL.
///
/// # Errors
/// `InvalidDevice` for a bad index; enumeration errors.
pub fn mem_get_info(index: usize) -> Result<(u64, u64)> {
    let total = device(index)?.properties().total_memory;
    Ok((total.saturating_sub(reserved_by_runtime(index)), total))
}
