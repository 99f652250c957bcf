//! OpenCL platforms (`cl_platform_id`).

use opencl3::platform::platform as clp;

use super::{cl, raw, DeviceId};
use crate::error::ClError;

/// An OpenCL platform (one vendor implementation, e.g. "NVIDIA CUDA" or "Portable Computing
/// Language"). Platform ids are not reference counted and live for the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Platform(raw::cl_platform_id);

// SAFETY: a cl_platform_id is an opaque, immutable handle valid for the process lifetime, and
// clGetPlatformInfo / clGetDeviceIDs are thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for Platform {}
// SAFETY: as above: no method mutates through the handle.
unsafe impl Sync for Platform {}

impl Platform {
    /// Every platform the ICD loader reports (`clGetPlatformIDs`).
    ///
    /// # Errors
    /// `DLOPEN_RUNTIME_LOAD_FAILED` (-2000) when libOpenCL.so.1 is missing,
    /// `CL_PLATFORM_NOT_FOUND_KHR` when no vendor implementation is installed.
    pub fn all() -> Result<Vec<Platform>, ClError> {
        let ids = cl("clGetPlatformIDs", clp::get_platform_ids())?;
        Ok(ids.into_iter().map(Platform).collect())
    }

    fn info(&self, param: u32) -> Result<String, ClError> {
        let v = cl("clGetPlatformInfo", clp::get_platform_info(self.0, param))?;
        Ok(String::from(v).trim_end_matches('\0').trim().to_string())
    }

    /// `CL_PLATFORM_NAME`.
    ///
    /// # Errors
    /// A failed `clGetPlatformInfo`.
    pub fn name(&self) -> Result<String, ClError> {
        self.info(clp::CL_PLATFORM_NAME)
    }

    /// `CL_PLATFORM_VENDOR`.
    ///
    /// # Errors
    /// A failed `clGetPlatformInfo`.
    pub fn vendor(&self) -> Result<String, ClError> {
        self.info(clp::CL_PLATFORM_VENDOR)
    }

    /// `CL_PLATFORM_VERSION`.
    ///
    /// # Errors
    /// A failed `clGetPlatformInfo`.
    pub fn version(&self) -> Result<String, ClError> {
        self.info(clp::CL_PLATFORM_VERSION)
    }

    /// Devices of the given `CL_DEVICE_TYPE_*` bit mask. A platform without such devices gives
    /// an empty list, not an error.
    ///
    /// # Errors
    /// A failed `clGetDeviceIDs` other than `CL_DEVICE_NOT_FOUND`.
    pub fn devices(&self, device_type: u64) -> Result<Vec<DeviceId>, ClError> {
        match opencl3::device::get_device_ids(self.0, device_type) {
            Ok(ids) => Ok(ids.into_iter().map(DeviceId::from_raw).collect()),
            Err(opencl3::error_codes::CL_DEVICE_NOT_FOUND) => Ok(Vec::new()),
            Err(code) => Err(ClError::new("clGetDeviceIDs", code)),
        }
    }

    /// The raw `cl_platform_id`, for interop.
    pub fn as_raw(&self) -> raw::cl_platform_id {
        self.0
    }
}
