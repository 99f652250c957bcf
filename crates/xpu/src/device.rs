//! Devices: `torch.xpu.is_available`, `device_count`, `current_device`, `set_device`, `device`,
//! `device_of`, `get_device_name`, `get_device_capability`, `get_device_properties`,
//! `synchronize`.

use std::collections::BTreeMap;

use xpu_device::{DeviceGuard, DeviceProperties, HasDevice};

use crate::error::Result;

/// Initializes the runtime, as `torch.xpu.init()`: with the `alloc` feature, first validates
/// the allocator configuration (`XPU_ALLOC_CONF`, or the last `xpu_alloc::set_config`), so a
/// bad configuration fails here rather than at the first allocation, and, as torch's `init`,
/// a failed call initializes nothing ([`is_initialized`](crate::is_initialized) stays as it
/// was); then [`xpu_lazy::init`] (OpenCL driver, device enumeration, queued calls). Once the
/// runtime reports itself initialized (another call initialized it: `current_device`,
/// `device_count`, ...), the configuration is not checked here: as torch's `init` returns at
/// once then, this does not fail where [`is_initialized`](crate::is_initialized) says true
/// (review h84), and a bad configuration is reported by the allocator's first use of it.
///
/// # Errors
/// [`Error::Lazy`](crate::Error::Lazy) (no device, bad fork, a failing queued call);
/// [`Error::Alloc`](crate::Error::Alloc) with `AllocError::Config` naming the bad key and its
/// allowed values.
pub fn init() -> Result<()> {
    #[cfg(feature = "alloc")]
    if !xpu_lazy::is_in_bad_fork() && !xpu_lazy::is_initialized() {
        // Before the initialization: a bad configuration leaves the runtime uninitialized.
        xpu_alloc::current_config()?;
    }
    xpu_lazy::init()?;
    Ok(())
}

/// True when at least one device is visible, as `torch.xpu.is_available`. A CPU's OpenCL
/// device counts: discovery takes every GPU, or the CPU devices (PoCL) when there is no GPU
/// (`XPU_DEVICE_TYPE=gpu` to see GPUs only; `XPU_PLATFORM` to pick a platform). Never fails and
/// creates no context, runs no queued call; it enumerates devices, which initializes the
/// OpenCL driver: [`is_initialized`](crate::is_initialized) is true afterwards and a forked
/// child is a bad fork (see the crate docs). In a bad fork child: the parent's answer.
pub fn is_available() -> bool {
    xpu_device::is_available()
}

/// Number of visible devices, as `torch.xpu.device_count`: 0 when no OpenCL runtime is
/// installed. Enumerates like [`is_available`] (the driver is initialized afterwards, no
/// queued call runs); in a bad fork child, the parent's count without a driver call.
pub fn device_count() -> usize {
    xpu_device::device_count()
}

/// The calling thread's current device (0 in every new thread), as
/// `torch.xpu.current_device`. Initializes the runtime.
///
/// # Errors
/// Initialization errors (no device, bad fork).
pub fn current_device() -> Result<usize> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_device::current_device())
}

/// Sets the calling thread's current device, as `torch.xpu.set_device`. Initializes.
///
/// # Errors
/// Initialization errors; `InvalidDevice` ("device 3 is out of range: 1 device(s) available").
pub fn set_device(index: usize) -> Result<()> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_device::set_device(index)?)
}

/// A guard making `index` current until dropped, as the `torch.xpu.device(i)` context manager.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn device(index: usize) -> Result<DeviceGuard> {
    xpu_lazy::lazy_init()?;
    Ok(DeviceGuard::new(index)?)
}

/// A guard switching to `obj`'s device (a no-op guard when it has none), as
/// `torch.xpu.device_of`.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn device_of(obj: &impl HasDevice) -> Result<DeviceGuard> {
    xpu_lazy::lazy_init()?;
    Ok(xpu_device::device_of(obj)?)
}

fn resolve(device: Option<usize>) -> Result<usize> {
    xpu_lazy::lazy_init()?;
    let index = device.unwrap_or_else(xpu_device::current_device);
    xpu_device::device(index)?;
    Ok(index)
}

/// The device's name (`None` = current device), as `torch.xpu.get_device_name`.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn get_device_name(device: Option<usize>) -> Result<String> {
    Ok(xpu_device::get_device_name(resolve(device)?)?)
}

/// The device's feature flags as a map, as `torch.xpu.get_device_capability`.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn get_device_capability(device: Option<usize>) -> Result<BTreeMap<String, bool>> {
    Ok(xpu_device::get_device_capability(resolve(device)?)?)
}

/// The device's properties, as `torch.xpu.get_device_properties`.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn get_device_properties(device: Option<usize>) -> Result<DeviceProperties> {
    Ok(xpu_device::get_device_properties(resolve(device)?)?)
}

/// Blocks until all work on every stream the runtime knows on the device (`None` = current),
/// external streams included, completed, as `torch.xpu.synchronize` (and like CUDA's
/// device-wide synchronize, which also covers external streams).
///
/// # Errors
/// Initialization errors; `InvalidDevice`; a failed `clFinish`; `StreamError::Capturing`
/// while a graph captures a stream of the device (nothing is waited for then).
pub fn synchronize(device: Option<usize>) -> Result<()> {
    Ok(xpu_stream::synchronize(resolve(device)?)?)
}
