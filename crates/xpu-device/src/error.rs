//! Typed errors of the device layer.

use std::borrow::Cow;
use std::fmt;

/// A failed OpenCL call: the function that failed and the status code it returned.
///
/// Displays as `clCreateBuffer failed: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)`. Codes that OpenCL
/// does not define are kept as numbers (`unknown OpenCL error code -9999`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClError {
    /// The OpenCL entry point that failed, e.g. `"clCreateBuffer"`.
    pub function: &'static str,
    /// The raw `cl_int` status code.
    pub code: i32,
}

/// `DLOPEN_RUNTIME_LOAD_FAILED`: libOpenCL.so.1 could not be loaded (no ICD loader installed).
pub const CODE_RUNTIME_LOAD_FAILED: i32 = -2000;
/// `CL_PLATFORM_NOT_FOUND_KHR`: the ICD loader found no vendor (no OpenCL implementation).
pub const CODE_PLATFORM_NOT_FOUND: i32 = -1001;
/// `CL_MEM_OBJECT_ALLOCATION_FAILURE` (OpenCL 3.0 §5.2.1, §5.6.1).
pub const CODE_MEM_OBJECT_ALLOCATION_FAILURE: i32 = -4;
/// `CL_OUT_OF_RESOURCES`.
pub const CODE_OUT_OF_RESOURCES: i32 = -5;
/// `CL_INVALID_BUFFER_SIZE`.
pub const CODE_INVALID_BUFFER_SIZE: i32 = -61;

impl ClError {
    /// Wraps a status code returned by `function`.
    pub const fn new(function: &'static str, code: i32) -> Self {
        Self { function, code }
    }

    /// The symbolic name of the code (`CL_INVALID_VALUE`), or `None` for an unknown code.
    pub fn code_name(&self) -> Option<&'static str> {
        match opencl3::error_codes::error_text(self.code) {
            "UNKNOWN_ERROR" => None,
            name => Some(name),
        }
    }

    /// True for the codes a driver uses when device memory is exhausted
    /// (`CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CL_OUT_OF_RESOURCES`, `CL_INVALID_BUFFER_SIZE`).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self.code,
            CODE_MEM_OBJECT_ALLOCATION_FAILURE | CODE_OUT_OF_RESOURCES | CODE_INVALID_BUFFER_SIZE
        )
    }

    /// True when the OpenCL runtime itself is missing (no ICD loader, or no vendor ICD).
    pub fn is_runtime_missing(&self) -> bool {
        matches!(
            self.code,
            CODE_RUNTIME_LOAD_FAILED | CODE_PLATFORM_NOT_FOUND
        )
    }

    fn describe(&self) -> Cow<'static, str> {
        match self.code_name() {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned("unknown OpenCL error code".to_string()),
        }
    }
}

impl fmt::Display for ClError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} ({})",
            self.function,
            self.describe(),
            self.code
        )
    }
}

impl std::error::Error for ClError {}

/// The hint printed when no OpenCL runtime can be found.
pub const INSTALL_HINT: &str = "install an OpenCL runtime, for example on Debian/Ubuntu: \
     `apt-get install pocl-opencl-icd ocl-icd-libopencl1` (CPU), or your GPU vendor's OpenCL driver";

/// Errors of the device layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// A device index outside `0..count`.
    #[error("device {index} is out of range: {count} device(s) available")]
    InvalidDevice {
        /// The index that was asked for.
        index: usize,
        /// How many devices the runtime sees.
        count: usize,
    },
    /// No OpenCL runtime (ICD loader or vendor implementation) is installed.
    #[error("no OpenCL runtime found ({source}); {hint}", hint = INSTALL_HINT)]
    NoRuntime {
        /// The failing call.
        source: ClError,
    },
    /// The runtime works but no device matched the selection (`XPU_DEVICE_TYPE`, `XPU_PLATFORM`).
    #[error("no OpenCL device found: {selection}")]
    NoDevices {
        /// What was searched for.
        selection: String,
    },
    /// An environment variable had a value the runtime does not understand.
    #[error("invalid value {value:?} for {name}: expected {expected}")]
    InvalidEnv {
        /// Variable name.
        name: &'static str,
        /// The value found.
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// A call's argument was invalid (zero size, misaligned offset, out-of-range region...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device lacks a feature the call needs (e.g. SVM).
    #[error("device {index} does not support {feature}")]
    Unsupported {
        /// Device index.
        index: usize,
        /// The missing feature.
        feature: &'static str,
    },
    /// A kernel failed to build; holds the build log.
    #[error("OpenCL program build failed ({source}):\n{log}")]
    Build {
        /// The failing call.
        source: ClError,
        /// The compiler's build log.
        log: String,
    },
    /// The process is a child forked after its parent touched the OpenCL driver.
    #[error("{}", crate::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// Any other failed OpenCL call.
    #[error(transparent)]
    OpenCl(#[from] ClError),
}

impl DeviceError {
    /// The OpenCL error underneath, if any.
    pub fn cl_error(&self) -> Option<ClError> {
        match self {
            DeviceError::NoRuntime { source } | DeviceError::Build { source, .. } => Some(*source),
            DeviceError::OpenCl(e) => Some(*e),
            _ => None,
        }
    }

    /// True when the underlying OpenCL error means device memory is exhausted.
    pub fn is_out_of_memory(&self) -> bool {
        self.cl_error().is_some_and(|e| e.is_out_of_memory())
    }
}

/// Result alias of the device layer.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;
