//! OpenCL contexts (`cl_context`).

use std::ptr;

use opencl3::context::context as clc;

use super::{cl, raw, release, DeviceId};
use crate::error::ClError;

/// A reference-counted OpenCL context for one device. `Clone` retains, `Drop` releases.
#[derive(Debug)]
pub struct Context(raw::cl_context);

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
        let ctx = cl(
            "clCreateContext",
            clc::create_context(&[device.as_raw()], ptr::null(), None, ptr::null_mut()),
        )?;
        Ok(Context(ctx))
    }

    /// Wraps a raw context, taking over one reference (the caller's).
    ///
    /// # Safety
    /// `raw` must be a valid `cl_context` and the caller must own one reference to it, which
    /// this wrapper will release on drop.
    pub unsafe fn from_raw_owned(raw: raw::cl_context) -> Context {
        Context(raw)
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
        Ok(Context(raw))
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
        Context(self.0)
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
