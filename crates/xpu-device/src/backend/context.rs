//! OpenCL contexts (`cl_context`).

use std::ptr;

use opencl3::context::context as clc;

use super::{cl, raw, release, DeviceId};
use crate::error::ClError;

/// Limits of the context's device that the backend enforces itself, because some drivers do
/// not (NVIDIA's OpenCL accepts buffers above `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, allocating
/// lazily, and sub-buffers at misaligned offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, bytes.
    pub max_alloc_size: u64,
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` in bytes.
    pub base_addr_align: u64,
    /// `CL_DEVICE_LOCAL_MEM_SIZE`, bytes: what the `__local` arguments of a launch may total
    /// (PoCL aborts the process beyond it).
    pub local_mem_size: u64,
}

impl DeviceLimits {
    /// No limits (used when the context's device cannot be queried).
    pub const NONE: DeviceLimits = DeviceLimits {
        max_alloc_size: u64::MAX,
        base_addr_align: 1,
        local_mem_size: u64::MAX,
    };

    fn of(device: DeviceId) -> DeviceLimits {
        use super::device_id::param;
        DeviceLimits {
            max_alloc_size: device
                .info_u64(param::MAX_MEM_ALLOC_SIZE)
                .unwrap_or(u64::MAX),
            base_addr_align: device
                .info_u64(param::MEM_BASE_ADDR_ALIGN)
                .map_or(1, |bits| (bits / 8).max(1)),
            local_mem_size: device.info_u64(param::LOCAL_MEM_SIZE).unwrap_or(u64::MAX),
        }
    }

    fn of_context(ctx: raw::cl_context) -> DeviceLimits {
        first_device(ctx).map_or(DeviceLimits::NONE, DeviceLimits::of)
    }
}

/// Whether the platform of `device` frees failed events under its own lock
/// ([`super::Platform::frees_failed_events`]); false when it cannot be read.
fn frees_failed_events_of(device: DeviceId) -> bool {
    device.platform().is_ok_and(|p| p.frees_failed_events())
}

/// The first device of a raw context, when it can be read.
fn first_device(ctx: raw::cl_context) -> Option<DeviceId> {
    const CONTEXT_DEVICES: u32 = 0x1081;
    match clc::get_context_data(ctx, CONTEXT_DEVICES) {
        Ok(b) if b.len() >= std::mem::size_of::<usize>() => {
            let mut a = [0u8; std::mem::size_of::<usize>()];
            let n = a.len();
            a.copy_from_slice(&b[..n]);
            Some(DeviceId::from_raw(
                usize::from_ne_bytes(a) as raw::cl_device_id
            ))
        }
        _ => None,
    }
}

/// The limits of the (first) device of a raw context.
pub(crate) fn limits_of_context(ctx: raw::cl_context) -> DeviceLimits {
    DeviceLimits::of_context(ctx)
}

/// A reference-counted OpenCL context for one device. `Clone` retains, `Drop` releases.
///
/// Besides the handle it keeps what the runtime reads of its device on every buffer and
/// event: the limits, and whether the platform frees failed events (three driver queries
/// once per wrapper, none per user event).
#[derive(Debug)]
pub struct Context(raw::cl_context, DeviceLimits, bool);

// SAFETY: cl_context is reference counted by the driver and every context API is thread-safe
// (OpenCL 3.0 appendix A.2); this wrapper owns exactly one reference.
unsafe impl Send for Context {}
// SAFETY: as above; no method mutates through a shared reference.
unsafe impl Sync for Context {}

impl Context {
    /// Creates a context holding one device (`clCreateContext`). On NVIDIA this costs about
    /// 325 ms, so the runtime creates it lazily, on first use of the device.
    ///
    /// # Errors
    /// A failed `clCreateContext`.
    pub fn new(device: DeviceId) -> Result<Context, ClError> {
        let before = super::at_exit::threads_now();
        let ctx = cl(
            "clCreateContext",
            clc::create_context(&[device.as_raw()], ptr::null(), None, ptr::null_mut()),
        );
        // Threads the driver starts for a context (the exit drain's measure of progress).
        super::at_exit::note_driver_threads(&before);
        let ctx = ctx?;
        Ok(Context(
            ctx,
            DeviceLimits::of(device),
            frees_failed_events_of(device),
        ))
    }

    /// Wraps a raw context, taking over one reference (the caller's).
    ///
    /// # Safety
    /// `raw` must be a valid `cl_context` and the caller must own one reference to it, which
    /// this wrapper will release on drop.
    pub unsafe fn from_raw_owned(raw: raw::cl_context) -> Context {
        Context::wrap(raw)
    }

    /// Wraps a raw context, retaining it first (the caller keeps its own reference).
    ///
    /// # Safety
    /// `raw` must be a valid `cl_context`.
    ///
    /// # Errors
    /// A failed `clRetainContext`.
    pub unsafe fn from_raw_retained(raw: raw::cl_context) -> Result<Context, ClError> {
        // SAFETY: the caller guarantees `raw` is a valid context (clRetainContext precondition).
        cl("clRetainContext", unsafe { clc::retain_context(raw) })?;
        Ok(Context::wrap(raw))
    }

    /// The wrapper of a raw context whose reference it owns, its device's facts read.
    fn wrap(raw: raw::cl_context) -> Context {
        let device = first_device(raw);
        Context(
            raw,
            device.map_or(DeviceLimits::NONE, DeviceLimits::of),
            device.is_some_and(frees_failed_events_of),
        )
    }

    /// Whether the platform of the context's device frees a failed command's event under its
    /// own lock ([`super::Platform::frees_failed_events`]; read when the wrapper was made).
    pub(crate) fn frees_failed_events(&self) -> bool {
        self.2
    }

    /// The device limits the backend enforces for buffers of this context.
    pub fn limits(&self) -> DeviceLimits {
        self.1
    }

    /// The raw `cl_context`, valid while `self` lives.
    pub fn as_raw(&self) -> raw::cl_context {
        self.0
    }
}

impl Clone for Context {
    fn clone(&self) -> Self {
        // SAFETY: self.0 is a live context (we own a reference), so retaining it is valid.
        release::note("clRetainContext", unsafe { clc::retain_context(self.0) });
        Context(self.0, self.1, self.2)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference to a live context; releasing it once is valid.
        release::note("clReleaseContext", unsafe { clc::release_context(self.0) });
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Context {}
