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

    /// Whether the platform is PoCL before 4.0, whose failure path frees a command's event
    /// when the queue's reference was the last one and then locks it again (see the `held`
    /// module): then every command's event is kept until the command is over, and a wait on
    /// an event that already failed goes through a stand-in (PoCL 3.1 would never run the
    /// command). From `CL_PLATFORM_VERSION` ("OpenCL 3.0 PoCL 3.1+debian ..."); false when it
    /// cannot be read or names another implementation.
    pub fn frees_failed_events(&self) -> bool {
        self.version().is_ok_and(|v| pocl_before_4(&v))
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

/// Whether a `CL_PLATFORM_VERSION` string names PoCL with a major version below 4.
fn pocl_before_4(version: &str) -> bool {
    let lower = version.to_ascii_lowercase();
    let Some(at) = lower.find("pocl ") else {
        return false;
    };
    let major: String = lower[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    major.parse::<u32>().is_ok_and(|m| m < 4)
}

#[cfg(test)]
mod tests {
    use super::pocl_before_4;

    #[test]
    fn pocl_versions_before_4_are_recognized() {
        assert!(pocl_before_4(
            "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, LLVM 15.0.6, SLEEF"
        ));
        assert!(pocl_before_4("OpenCL 1.2 pocl 1.8"));
        assert!(!pocl_before_4("OpenCL 3.0 PoCL 5.0+debian  Linux"));
        assert!(!pocl_before_4("OpenCL 3.0 PoCL 10.1"));
        assert!(!pocl_before_4("OpenCL 3.0 CUDA 13.0.98"));
        assert!(!pocl_before_4("OpenCL 3.0 PoCL x"));
    }
}
