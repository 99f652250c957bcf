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
/// xpu's own code (no OpenCL call made): the process is exiting, and an enqueue or build from
/// a thread other than the exiting one is refused, so that nothing new runs in the driver
/// while its libraries are torn down (`xpu_device::backend::at_exit`; as CUDA's
/// `cudaErrorCudartUnloading`).
pub const CODE_PROCESS_EXITING: i32 = -2001;
/// xpu's own code (from [`ClEvent::forward_to`](crate::backend::ClEvent::forward_to) and
/// [`ClEvent::complete_when_over`](crate::backend::ClEvent::complete_when_over), no forward
/// made): the target already forwards to the source, directly or through other forwards
/// between user events, so once the application dropped them none could be set and every
/// command waiting on one would wait for ever.
pub const CODE_FORWARD_CYCLE: i32 = -2002;

impl ClError {
    /// Wraps a status code returned by `function`.
    pub const fn new(function: &'static str, code: i32) -> Self {
        Self { function, code }
    }

    /// The symbolic name of the code (`CL_INVALID_VALUE`), or `None` for an unknown code.
    pub fn code_name(&self) -> Option<&'static str> {
        if self.code == CODE_PROCESS_EXITING {
            return Some("XPU_PROCESS_EXITING");
        }
        if self.code == CODE_FORWARD_CYCLE {
            return Some("XPU_FORWARD_CYCLE");
        }
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
    /// A kernel argument was refused before reaching the driver (or the driver refused it).
    #[error("kernel {kernel:?}, argument {index} ({name}): {problem}")]
    KernelArg {
        /// The kernel's function name.
        kernel: String,
        /// The argument index.
        index: u32,
        /// The argument's name as declared (`CL_KERNEL_ARG_NAME`), or `"?"` when unknown.
        name: String,
        /// What is wrong.
        problem: KernelArgProblem,
    },
    /// A sub-buffer origin that is not a multiple of the device's base address alignment
    /// (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`, OpenCL 3.0 §5.2.1 `CL_MISALIGNED_SUB_BUFFER_OFFSET`),
    /// checked by the runtime on every driver, including those that accept it silently.
    #[error(
        "sub-buffer origin {origin} is not a multiple of the device's base address alignment \
         ({align} bytes)"
    )]
    MisalignedSubBuffer {
        /// The requested origin, bytes.
        origin: usize,
        /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN`, in bytes.
        align: u64,
    },
    /// The process is a child forked after its parent touched the OpenCL driver.
    #[error("{}", crate::fork_state::BAD_FORK_MESSAGE)]
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
            DeviceError::KernelArg { problem, .. } => Some(problem.cl_error()),
            DeviceError::MisalignedSubBuffer { .. } => Some(ClError::new(
                "clCreateSubBuffer",
                CODE_MISALIGNED_SUB_BUFFER_OFFSET,
            )),
            _ => None,
        }
    }

    /// True when the underlying OpenCL error means device memory is exhausted.
    pub fn is_out_of_memory(&self) -> bool {
        self.cl_error().is_some_and(|e| e.is_out_of_memory())
    }

    /// True for [`DeviceError::BadFork`]: this process is a child forked after its parent
    /// initialized the OpenCL driver, so no driver call can be made here (see
    /// [`crate::fork`]; as torch's "Cannot re-initialize CUDA in forked subprocess"). The
    /// error of every layer above has an `is_bad_fork` of its own, which answers for its own
    /// `BadFork` and asks the lower-layer errors it wraps, so a bad fork is found however
    /// deep it is nested.
    pub fn is_bad_fork(&self) -> bool {
        matches!(self, DeviceError::BadFork)
    }
}

/// Why a kernel argument was refused ([`DeviceError::KernelArg`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelArgProblem {
    /// The index is not below the kernel's argument count (`CL_INVALID_ARG_INDEX`).
    IndexOutOfRange {
        /// `CL_KERNEL_NUM_ARGS`.
        count: u32,
    },
    /// The driver did not report argument information (`CL_KERNEL_ARG_INFO_NOT_AVAILABLE`),
    /// so the argument's kind cannot be checked and is refused.
    InfoUnavailable,
    /// A scalar for a pointer parameter (`__global`, `__constant` or `__local`): the driver
    /// would read the value as a memory object handle (`CL_INVALID_ARG_VALUE`).
    ScalarForPointer {
        /// The parameter's declared type, e.g. `uint*`.
        type_name: String,
    },
    /// A buffer for a parameter that is not a `__global` or `__constant` pointer
    /// (`CL_INVALID_ARG_VALUE`).
    BufferForNonPointer {
        /// The parameter's declared type.
        type_name: String,
    },
    /// A `__local` size for a parameter that is not a `__local` pointer
    /// (`CL_INVALID_ARG_VALUE`).
    LocalForNonLocal {
        /// The parameter's declared type.
        type_name: String,
    },
    /// A `__local` argument of 0 bytes (`CL_INVALID_ARG_SIZE`, OpenCL 3.0 §5.9.2). Checked by
    /// the runtime: NVIDIA's driver (580) accepts it.
    LocalSizeZero,
    /// A scalar whose size differs from the declared type's (`CL_INVALID_ARG_SIZE`).
    SizeMismatch {
        /// The parameter's declared type.
        type_name: String,
        /// The declared type's size in bytes, when known.
        declared: Option<usize>,
        /// The size of the value given, bytes.
        given: usize,
    },
    /// A scalar of the declared size but another kind: an integer for a `float` / `double`
    /// parameter, or a float for an integer one. OpenCL reads the argument's bytes as the
    /// declared type without converting them (§5.9.2), so `2i32` for `float a` would be
    /// 2.8e-45; refused as `CL_INVALID_ARG_VALUE`.
    KindMismatch {
        /// The parameter's declared type, e.g. `float`.
        type_name: String,
        /// The Rust type of the value given, e.g. `i32`.
        given: &'static str,
    },
    /// A typed buffer whose element type cannot match the pointer parameter's: the element
    /// sizes differ (`f64` for `float*`), or one is a floating-point type and the other an
    /// integer (`f32` for `uint*`). The kernel would read the buffer's bytes as the declared
    /// type (OpenCL passes only the memory object); refused as `CL_INVALID_ARG_VALUE`. Only a
    /// certain mismatch is refused: a byte buffer (`u8`/`i8`) or an untyped allocation fits any
    /// pointer, any buffer fits a `char*`/`uchar*`/`void*` parameter, a vector parameter
    /// (`float4*`) takes buffers of its component (`f32`), signedness may differ, and a type
    /// the runtime does not know (a typedef, a struct, a user `Pod` type) is accepted.
    ElementType {
        /// The parameter's declared type, e.g. `float*`.
        expected: String,
        /// The Rust element type of the buffer given, e.g. `f64`.
        found: &'static str,
    },
    /// A buffer of another OpenCL context than the kernel's (`CL_INVALID_CONTEXT`), e.g. a
    /// buffer of device 0 for a kernel built for device 1.
    OtherContext,
    /// The argument was never set before a launch (`CL_INVALID_KERNEL_ARGS`).
    NotSet,
    /// The `__local` argument sizes, this one's included (each rounded up to 128 bytes, the
    /// alignment drivers give them), exceed the device's `CL_DEVICE_LOCAL_MEM_SIZE`
    /// (`CL_OUT_OF_RESOURCES` at the launch, OpenCL 3.0 §5.10). Checked by the runtime: PoCL
    /// aborts the process on such a launch instead of returning the error.
    LocalMemoryExceeded {
        /// Bytes of local memory the `__local` arguments set so far need, rounded.
        requested: u64,
        /// `CL_DEVICE_LOCAL_MEM_SIZE`, bytes.
        available: u64,
    },
    /// A nonzero byte offset for a pointer parameter without an offset parameter
    /// (`Kernel::takes_offset`: a kernel whose parameters the runtime could not rewrite, or a
    /// program built as written, `Program::build_exact`); refused as `CL_INVALID_ARG_VALUE`.
    NoOffsetParameter,
    /// A byte offset at or past the end of the buffer given (`CL_INVALID_ARG_VALUE`).
    OffsetOutOfRange {
        /// The offset given, bytes.
        offset: u64,
        /// The buffer's size, bytes.
        size: u64,
    },
    /// The driver refused the argument.
    Driver(ClError),
}

/// `CL_MISALIGNED_SUB_BUFFER_OFFSET`.
pub const CODE_MISALIGNED_SUB_BUFFER_OFFSET: i32 = -13;

impl KernelArgProblem {
    /// The OpenCL error this problem corresponds to (function `clSetKernelArg`).
    pub fn cl_error(&self) -> ClError {
        let code = match self {
            KernelArgProblem::IndexOutOfRange { .. } => -49,
            KernelArgProblem::InfoUnavailable => -19,
            KernelArgProblem::ScalarForPointer { .. }
            | KernelArgProblem::BufferForNonPointer { .. }
            | KernelArgProblem::LocalForNonLocal { .. }
            | KernelArgProblem::KindMismatch { .. }
            | KernelArgProblem::ElementType { .. }
            | KernelArgProblem::NoOffsetParameter
            | KernelArgProblem::OffsetOutOfRange { .. } => -50,
            KernelArgProblem::SizeMismatch { .. } | KernelArgProblem::LocalSizeZero => -51,
            KernelArgProblem::OtherContext => -34,
            KernelArgProblem::NotSet => return ClError::new("clEnqueueNDRangeKernel", -52),
            KernelArgProblem::LocalMemoryExceeded { .. } => {
                return ClError::new("clEnqueueNDRangeKernel", -5)
            }
            KernelArgProblem::Driver(e) => return *e,
        };
        ClError::new("clSetKernelArg", code)
    }
}

impl fmt::Display for KernelArgProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelArgProblem::IndexOutOfRange { count } => {
                write!(
                    f,
                    "index out of range: the kernel has {count} argument(s) (CL_INVALID_ARG_INDEX)"
                )
            }
            KernelArgProblem::InfoUnavailable => f.write_str(
                "the driver reports no argument information, so the argument cannot be checked \
                 (CL_KERNEL_ARG_INFO_NOT_AVAILABLE)",
            ),
            KernelArgProblem::NoOffsetParameter => f.write_str(
                "a buffer at a nonzero offset for a pointer parameter without an offset \
                 parameter (a kernel built as written, or one whose parameters could not be \
                 read) (CL_INVALID_ARG_VALUE)",
            ),
            KernelArgProblem::OffsetOutOfRange { offset, size } => write!(
                f,
                "byte offset {offset} is not inside the {size}-byte buffer (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::ScalarForPointer { type_name } => write!(
                f,
                "a scalar cannot be passed for the pointer parameter of type {type_name} \
                 (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::BufferForNonPointer { type_name } => write!(
                f,
                "a buffer can only be passed for a __global or __constant pointer parameter, \
                 not {type_name} (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::LocalForNonLocal { type_name } => write!(
                f,
                "a __local size can only be passed for a __local pointer parameter, not \
                 {type_name} (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::LocalSizeZero => write!(
                f,
                "a __local argument needs at least 1 byte (CL_INVALID_ARG_SIZE)"
            ),
            KernelArgProblem::SizeMismatch {
                type_name,
                declared: Some(d),
                given,
            } => write!(
                f,
                "a {given}-byte value for a parameter of type {type_name} ({d} bytes) \
                 (CL_INVALID_ARG_SIZE)"
            ),
            KernelArgProblem::SizeMismatch {
                type_name,
                declared: None,
                given,
            } => write!(
                f,
                "a {given}-byte scalar for a parameter of type {type_name}, which is not a \
                 scalar type the runtime can check (CL_INVALID_ARG_SIZE)"
            ),
            KernelArgProblem::KindMismatch { type_name, given } => write!(
                f,
                "a value of Rust type {given} for a parameter of type {type_name}: OpenCL \
                 would read its bits as {type_name}, not convert it; pass a value of the \
                 parameter's kind (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::ElementType { expected, found } => write!(
                f,
                "a buffer of Rust element type {found} for a parameter of type {expected}: the \
                 kernel would read its bytes as another type; pass a buffer of the parameter's \
                 element type, or an untyped or byte buffer (CL_INVALID_ARG_VALUE)"
            ),
            KernelArgProblem::OtherContext => f.write_str(
                "the buffer belongs to another OpenCL context (another device) than the kernel \
                 (CL_INVALID_CONTEXT)",
            ),
            KernelArgProblem::NotSet => {
                f.write_str("never set before the launch (CL_INVALID_KERNEL_ARGS)")
            }
            KernelArgProblem::LocalMemoryExceeded {
                requested,
                available,
            } => write!(
                f,
                "the __local arguments need {requested} bytes of local memory (each rounded up \
                 to 128 bytes), more than the device's {available} (CL_OUT_OF_RESOURCES)"
            ),
            KernelArgProblem::Driver(e) => write!(f, "{e}"),
        }
    }
}

/// Result alias of the device layer.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;

/// Implements a layer error's `is_bad_fork` from a table: the error's own bad-fork variant
/// (`own:`, a unit variant, if it has one) is a bad fork, a variant wrapping a lower-layer
/// error (`wraps:`, tuple variants of one field) is one when that error's own
/// `is_bad_fork` says so, and every other variant is none. The doc comments given before
/// the error's name are the method's. The errors whose bad fork hides in a struct variant or
/// needs a downcast write the method out instead.
///
/// ```
/// # use xpu_device::DeviceError;
/// #[derive(Debug, thiserror::Error)]
/// enum MyError {
///     #[error("bad fork")]
///     BadFork,
///     #[error(transparent)]
///     Device(#[from] DeviceError),
///     #[error("something else")]
///     Other,
/// }
/// xpu_device::impl_is_bad_fork! {
///     /// True for a bad fork: this layer's or the device layer's.
///     MyError { own: BadFork; wraps: Device; }
/// }
///
/// assert!(MyError::BadFork.is_bad_fork());
/// assert!(MyError::Device(DeviceError::BadFork).is_bad_fork());
/// assert!(!MyError::Device(DeviceError::InvalidArgument("x".into())).is_bad_fork());
/// assert!(!MyError::Other.is_bad_fork());
/// ```
#[macro_export]
macro_rules! impl_is_bad_fork {
    (
        $(#[$doc:meta])*
        $error:ident { $(own: $own:ident;)? $(wraps: $($wrap:ident),+ $(,)?;)? }
    ) => {
        impl $error {
            $(#[$doc])*
            pub fn is_bad_fork(&self) -> bool {
                #[allow(unreachable_patterns)] // a table whose variants are all listed
                match self {
                    $($error::$own => true,)?
                    $($($error::$wrap(e) => e.is_bad_fork(),)+)?
                    _ => false,
                }
            }
        }
    };
}

/// Implements `From<Lower>` for an error that wraps only the error of the layer it calls
/// directly (`Via`), for errors of the layers below that one: `?` on a `Lower` then gives
/// `Outer::Variant(Via::from(e))`, the variant of `Via` that `Via`'s own `From<Lower>` picks.
/// The message and `source()` stay the lower error's when `Outer::Variant` is
/// `#[error(transparent)]` and `Via`'s variant for `Lower` is too.
///
/// ```
/// # use xpu_device::{ClError, DeviceError};
/// #[derive(Debug, thiserror::Error)]
/// enum MyError {
///     #[error(transparent)]
///     Device(#[from] DeviceError),
/// }
/// xpu_device::impl_from_via!(MyError::Device(DeviceError) <- ClError);
///
/// let e = MyError::from(ClError::new("clFinish", -5));
/// assert!(matches!(e, MyError::Device(DeviceError::OpenCl(_))));
/// assert_eq!(e.to_string(), "clFinish failed: CL_OUT_OF_RESOURCES (-5)");
/// ```
#[macro_export]
macro_rules! impl_from_via {
    ($outer:ident :: $variant:ident ( $via:ty ) <- $($lower:ty),+ $(,)?) => {$(
        impl ::core::convert::From<$lower> for $outer {
            fn from(e: $lower) -> Self {
                $outer::$variant(<$via as ::core::convert::From<$lower>>::from(e))
            }
        }
    )+};
}
