//! `xpu-lazy`: lazy process-wide initialization, queued calls and fork safety.
//!
//! Contract: nothing touches the OpenCL runtime until the first call that needs it. The facade
//! (`xpu`) runs [`lazy_init`] at the start of every call that needs the runtime; once
//! initialized that costs one atomic load.
//!
//! - [`lazy_init`] / [`init`]: thread-safe (a second thread waits for the first to finish),
//!   re-entrant (a queued call that calls back into the runtime does not deadlock), retried
//!   after a failure.
//! - [`lazy_call`]: queue work until initialization (as `torch.xpu._lazy_call`).
//! - [`register_backend`] / [`device_lazy_init`]: a registry of init routines by device type.
//! - Fork safety: in a child forked after the parent initialized the OpenCL driver, every call
//!   returns [`LazyError::BadFork`] at once, before any lock, telling the user to spawn
//!   processes instead ([`is_in_bad_fork`]).
//!
//! Which calls initialize (as torch): `current_device`, `set_device`, `synchronize`, stream and
//! event calls, `get_device_properties`, `mem_get_info`, memory-fraction setters.
//! [`is_initialized`] is false until [`lazy_init`] has finished, its queued calls included (as
//! torch's flag). One difference with torch, made so that [`is_initialized`] and a forked
//! child agree after such a call: OpenCL cannot count devices without initializing its
//! driver, so `is_available` and `device_count` (and any lower-layer call that enumerates)
//! initialize the driver — once that enumeration is complete [`is_initialized`] is true, and
//! a forked child is a bad fork — though they run no queued call (the next [`lazy_init`]
//! does). `memory_stats` & co before any allocator exists
//! answer empty / zero without enumerating, and `empty_cache` is then a no-op.
//!
//! The `pthread_atfork` handler itself lives in `xpu_device::fork` (xpu-device is the only crate
//! allowed FFI); this crate only reads the fork state.
#![forbid(unsafe_code)]

mod error;
mod registry;
mod state;

pub use error::{BoxError, LazyError};
pub use registry::{
    device_lazy_init, is_backend_initialized, register_backend, registered_backends, InitFn,
};
pub use state::{init, is_in_bad_fork, is_initialized, lazy_call, lazy_init, queued_calls};

/// The device type of the built-in OpenCL backend.
pub const OPENCL: &str = "opencl";

/// How long [`lazy_init`] on another thread waits for an initialization that is running its
/// queued calls (user code; also a routine registered under [`OPENCL`] in place of the
/// built-in one) before it fails with [`LazyError::QueuedCallsPending`]: a queued call that
/// waits for a thread calling into the runtime (it joins a helper thread) would otherwise
/// deadlock with it, as torch's `_lazy_init` does. The same limit bounds
/// [`device_lazy_init`]'s wait for another thread's init routine given to
/// [`register_backend`] (user code too). The wait for the built-in backend's own
/// initialization (device enumeration) has no limit.
pub const QUEUED_CALLS_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The built-in [`OPENCL`] backend's routine.
fn opencl_init() -> Result<(), BoxError> {
    // Enumerate devices (this installs the fork handler). As torch's init, zero devices is an
    // error ("No XPU devices are available"); without a runtime the error carries the install
    // command.
    let devices = xpu_device::devices()?;
    if devices.is_empty() {
        return Err(Box::new(xpu_device::DeviceError::NoDevices {
            selection: "no OpenCL device matched XPU_DEVICE_TYPE / XPU_PLATFORM".into(),
        }));
    }
    Ok(())
}
