//! Shared helpers of the pinned-host allocator tests.
#![allow(dead_code)]

use xpu_device::backend::{Buffer, MemFlags};
use xpu_host::HostError;

/// True when at least `n` devices exist. Otherwise prints why the test is skipped, or
/// panics when `XPU_REQUIRE_DEVICE=1` and there is no device at all (a test needing two
/// devices skips on a one-device machine: run with `POCL_DEVICES="pthread pthread"`).
pub fn have_devices(n: usize, test: &str) -> bool {
    let count = xpu_device::device_count();
    if count >= n {
        return true;
    }
    if count == 0 && xpu_device::require_device() {
        panic!("{test}: XPU_REQUIRE_DEVICE=1 but no OpenCL device was found");
    }
    eprintln!(
        "skipping {test}: needs {n} device(s), found {count} (PoCL: POCL_DEVICES=\"pthread pthread\")"
    );
    false
}

/// A device buffer of `size` bytes on `device`.
pub fn device_buffer(device: usize, size: usize) -> Result<Buffer, HostError> {
    let ctx = xpu_device::device(device)?.context()?;
    Ok(Buffer::new(ctx, size, MemFlags::default())?)
}

/// A recognizable byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
