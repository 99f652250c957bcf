//! `xpu-device`: the OpenCL backend and the device layer of the xpu runtime.
//!
//! This crate is the only one of the workspace that talks to OpenCL, and the only one with FFI
//! and `unsafe impl`s (its `unsafe` code is in [`backend`], [`fork`], `fork_state`,
//! `discovery` and [`foreign`]); xpu-kernel and xpu-burn only declare documented `unsafe fn`s and call the
//! unsafe API of the layers below. It owns:
//! - [`backend`]: RAII wrappers for platforms, devices, contexts, in-order command queues,
//!   events (markers, barriers, user events, profiling), buffers and sub-buffers, pinned host
//!   buffers, programs and kernels. Every failure is a typed
//!   [`ClError`] naming the OpenCL function and the symbolic status code.
//! - discovery ([`devices`], [`device_count`], [`is_available`]): one enumeration per process;
//!   contexts are created lazily, on a device's first use.
//! - [`DeviceProperties`] and [`get_device_capability`].
//! - the current device of each thread ([`current_device`], [`set_device`], [`DeviceGuard`],
//!   [`device_of`]).
//! - [`mem_get_info`], with what "free" can mean under OpenCL.
//!
//! Contract with the layers above: everything here is `Send + Sync` except `Kernel` and the
//! guards; nothing here allocates device memory on its own; no call creates a context except
//! [`Device::context`] and what needs it.
//!
//! Soundness: safe functions are sound for any input and any interleaving; what cannot be made
//! sound is an `unsafe fn` with a `# Safety` section naming the caller's obligations: running
//! kernel code ([`backend::CommandQueue::enqueue_kernel`]), wrapping raw handles (the
//! `from_raw_*` constructors) and loading a caller-chosen foreign library
//! ([`foreign::clblast::Clblast::open`]). Event completion closures run on the runtime's own
//! `xpu-callbacks` thread, never on a driver thread. [`live_objects`] counts the OpenCL objects
//! the backend holds, for leak checks.
//!
//! ```
//! // Never fails: 0 when no OpenCL runtime is installed.
//! let n = xpu_device::device_count();
//! for i in 0..n {
//!     let p = xpu_device::get_device_properties(i).unwrap();
//!     println!("{i}: {} on {} ({} bytes)", p.name, p.platform_name, p.total_memory);
//! }
//! ```
//!
//! # What the backend covers
//! Platform, device, context, in-order command queue with profiling, user event, marker and barrier
//! with wait lists, event status / wait / profiling times, buffers and sub-buffers, pinned host
//! buffers, `cl_khr_command_buffer` (`CommandBuffer`, `command_buffer_support`, versions 0.9.0 to
//! 0.9.4). No SVM allocations: with `memory_kind:svm` gone from the allocator, nothing could copy
//! or launch on them. Handles are RAII (clone retains, drop releases and never panics). Discovery
//! runs once per process (GPUs, else CPUs; `XPU_DEVICE_TYPE`, `XPU_PLATFORM`); the current device
//! is thread-local and starts at 0 in every thread.
//!
//! Leak visibility: `live_objects()` counts the references the backend's wrappers hold (buffers,
//! sub-buffers, events, queues, programs, kernels) and the callbacks not yet run; the tests check
//! that 10,000 launches and 10,000 cross-stream waits return to the baseline.

pub mod backend;
mod current;
mod discovery;
mod error;
pub mod foreign;
pub mod fork;
mod fork_state;
mod memory;
mod properties;

pub use backend::{live_objects, LiveObjects};
pub use current::{
    check_device, current_device, device_of, exchange_device, set_device, DeviceGuard, HasDevice,
};
pub use discovery::{device, device_count, devices, icd_env, is_available, pass_icd_env, Device};
pub use error::{ClError, DeviceError, KernelArgProblem, Result, CODE_FORWARD_CYCLE, INSTALL_HINT};
pub use memory::{mem_get_info, note_reserved, reserved_by_runtime};
pub use properties::{DeviceProperties, DeviceType};

use std::collections::BTreeMap;

/// The device's name, as `torch.xpu.get_device_name`.
///
/// # Errors
/// `InvalidDevice` for a bad index.
pub fn get_device_name(index: usize) -> Result<String> {
    Ok(device(index)?.properties().name.clone())
}

/// The device's properties, as `torch.xpu.get_device_properties`.
///
/// # Errors
/// `InvalidDevice` for a bad index.
pub fn get_device_properties(index: usize) -> Result<DeviceProperties> {
    Ok(device(index)?.properties().clone())
}

/// The device's feature flags, as `torch.xpu.get_device_capability` (a map).
///
/// # Errors
/// `InvalidDevice` for a bad index.
pub fn get_device_capability(index: usize) -> Result<BTreeMap<String, bool>> {
    Ok(device(index)?.properties().capability())
}

/// True when device tests must fail rather than skip without a device (`XPU_REQUIRE_DEVICE=1`,
/// set by `cargo xtask test`).
pub fn require_device() -> bool {
    std::env::var("XPU_REQUIRE_DEVICE").is_ok_and(|v| v == "1")
}
