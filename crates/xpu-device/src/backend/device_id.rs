//! OpenCL device ids (`cl_device_id`), raw info queries and their parameter names.

use super::{cl, raw, Platform};
use crate::error::ClError;

/// `clGetDeviceInfo` parameter names used by the runtime (OpenCL 3.0 §4.2, table 5).
#[allow(missing_docs)]
pub mod param {
    pub const TYPE: u32 = 0x1000;
    pub const VENDOR_ID: u32 = 0x1001;
    pub const MAX_COMPUTE_UNITS: u32 = 0x1002;
    pub const MAX_WORK_GROUP_SIZE: u32 = 0x1004;
    pub const MAX_CLOCK_FREQUENCY: u32 = 0x100C;
    pub const MAX_MEM_ALLOC_SIZE: u32 = 0x1010;
    pub const MEM_BASE_ADDR_ALIGN: u32 = 0x1019;
    pub const GLOBAL_MEM_SIZE: u32 = 0x101F;
    pub const LOCAL_MEM_SIZE: u32 = 0x1023;
    pub const PROFILING_TIMER_RESOLUTION: u32 = 0x1025;
    pub const QUEUE_ON_HOST_PROPERTIES: u32 = 0x102A;
    pub const NAME: u32 = 0x102B;
    pub const VENDOR: u32 = 0x102C;
    pub const DRIVER_VERSION: u32 = 0x102D;
    pub const VERSION: u32 = 0x102F;
    pub const EXTENSIONS: u32 = 0x1030;
    pub const PLATFORM: u32 = 0x1031;
    pub const DOUBLE_FP_CONFIG: u32 = 0x1032;
    pub const HALF_FP_CONFIG: u32 = 0x1033;
    pub const SVM_CAPABILITIES: u32 = 0x1053;
    pub const MAX_NUM_SUB_GROUPS: u32 = 0x105C;
    pub const UUID_KHR: u32 = 0x106A;
    pub const SUB_GROUP_SIZES_INTEL: u32 = 0x4108;
    pub const PCI_BUS_INFO_KHR: u32 = 0x410F;
}

/// `CL_DEVICE_TYPE_*` bits.
#[allow(missing_docs)]
pub mod device_type {
    pub const CPU: u64 = 1 << 1;
    pub const GPU: u64 = 1 << 2;
    pub const ACCELERATOR: u64 = 1 << 3;
    pub const ALL: u64 = 0xFFFF_FFFF;
}

/// An OpenCL root device. Root device ids are not reference counted (OpenCL 3.0 §4.3:
/// retain/release are no-ops for root devices), so this is a plain `Copy` handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceId(raw::cl_device_id);

// SAFETY: a root cl_device_id is an immutable handle valid for the process lifetime, and
// clGetDeviceInfo is thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for DeviceId {}
// SAFETY: as above.
unsafe impl Sync for DeviceId {}

impl DeviceId {
    pub(crate) fn from_raw(id: raw::cl_device_id) -> Self {
        Self(id)
    }

    /// The raw `cl_device_id`, for interop.
    pub fn as_raw(&self) -> raw::cl_device_id {
        self.0
    }

    /// Raw bytes of a `clGetDeviceInfo` query.
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo` (for example `CL_INVALID_VALUE` for a parameter the device
    /// does not know).
    pub fn info_bytes(&self, param: u32) -> Result<Vec<u8>, ClError> {
        cl(
            "clGetDeviceInfo",
            opencl3::device::get_device_data(self.0, param),
        )
    }

    /// A string parameter (trailing NULs and whitespace removed).
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo`.
    pub fn info_string(&self, param: u32) -> Result<String, ClError> {
        let bytes = self.info_bytes(param)?;
        Ok(String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .trim()
            .to_string())
    }

    /// An integer parameter of 4 or 8 bytes (`cl_uint`, `cl_ulong`, `size_t`, bitfields).
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo`, or `CL_INVALID_VALUE` when the answer is not 4 or 8 bytes.
    pub fn info_u64(&self, param: u32) -> Result<u64, ClError> {
        let b = self.info_bytes(param)?;
        match b.len() {
            4 => Ok(u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))),
            8 => Ok(u64::from_ne_bytes([
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
            ])),
            _ => Err(ClError::new("clGetDeviceInfo", -30)),
        }
    }

    /// An array of `size_t` values.
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo`.
    pub fn info_usize_vec(&self, param: u32) -> Result<Vec<usize>, ClError> {
        let b = self.info_bytes(param)?;
        Ok(b.chunks_exact(std::mem::size_of::<usize>())
            .map(|c| {
                let mut a = [0u8; std::mem::size_of::<usize>()];
                a.copy_from_slice(c);
                usize::from_ne_bytes(a)
            })
            .collect())
    }

    /// The platform the device belongs to.
    ///
    /// # Errors
    /// A failed `clGetDeviceInfo`.
    pub fn platform(&self) -> Result<Platform, ClError> {
        let all = Platform::all()?;
        let raw_id = self.info_u64(param::PLATFORM)?;
        all.into_iter()
            .find(|p| p.as_raw() as usize as u64 == raw_id)
            .ok_or(ClError::new("clGetDeviceInfo", -33))
    }
}
