//! Shared helpers of the pinned-host allocator tests.
#![allow(dead_code, unused_imports)]

use xpu_device::backend::{Buffer, MemFlags};

use xpu_host::HostError;
pub use xpu_testing::{have_devices, pattern};

/// A device buffer of `size` bytes on `device`.
pub fn device_buffer(device: usize, size: usize) -> Result<Buffer, HostError> {
    let ctx = xpu_device::device(device)?.context()?;
    Ok(Buffer::new(ctx, size, MemFlags::default())?)
}
