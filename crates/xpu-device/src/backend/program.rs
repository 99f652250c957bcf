//! Programs built from OpenCL C source, and kernels with checked arguments.
//!
//! Argument checks (the driver's own are not enough: PoCL dereferences an integer given for a
//! pointer parameter as a `cl_mem` and crashes, and aborts on a buffer of another context):
//! programs are built with `-cl-kernel-arg-info`, so every kernel knows each parameter's
//! address qualifier, type name and name (`clGetKernelArgInfo`, OpenCL 3.0 §5.9.4). Scalars
//! are accepted only for by-value parameters of a known scalar type of the same size, buffers
//! only for `__global`/`__constant` pointers of the kernel's own context, `__local` sizes only
//! for `__local` pointers. Where the driver reports no argument information, every argument is
//! refused ([`KernelArgProblem::InfoUnavailable`]): sound rather than permissive. A typed
//! buffer's element type is checked against the pointer's type name too
//! ([`Kernel::check_buffer_element`]), refused only where it certainly cannot match.

use std::ffi::CString;
use std::ptr;
use std::sync::Arc;

use opencl3::kernel as clk;
use opencl3::program as clp;
use opencl3::types::{cl_kernel, cl_program};

use super::{cl, raw, release, Buffer, Context, DeviceId};
use crate::error::{ClError, DeviceError, KernelArgProblem, Result};

/// The build options of every program: argument information is what the argument checks of
/// [`Kernel`] rely on.
const BUILD_OPTIONS: &str = "-cl-kernel-arg-info";

/// A program built for one device. `Drop` releases it.
#[derive(Debug)]
pub struct Program(cl_program);

// SAFETY: cl_program is reference counted; program APIs other than kernel argument setting
// are thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for Program {}
// SAFETY: as above.
unsafe impl Sync for Program {}

impl Program {
    /// Compiles and links OpenCL C `source` for `device` (`clCreateProgramWithSource` +
    /// `clBuildProgram` with `-cl-kernel-arg-info`, so kernels can check their arguments),
    /// with an offset parameter added after each `__global` / `__constant` pointer parameter
    /// of its kernels ([`super::add_offset_params`]): a kernel can then take a buffer plus a
    /// byte offset ([`Kernel::set_arg_shared_buffer_at`]), which is how blocks of a caching
    /// allocator's segments reach kernels without sub-buffers. Callers index parameters as
    /// written ([`Kernel::num_args`]); only the raw `cl_kernel` ([`Kernel::as_raw`]) sees the
    /// added ones. When the rewritten source does not build (a kernel called as a function
    /// by another), the source is built as written ([`Program::build_exact`]).
    ///
    /// # Errors
    /// `DeviceError::Build` with the compiler log (of the source as written) when the build
    /// fails.
    pub fn build(context: &Context, device: DeviceId, source: &str) -> Result<Program> {
        Program::build_with_options(context, device, source, "")
    }

    /// As [`Program::build`] with extra build `options` (`-D NAME=VALUE`, `-cl-std=CL2.0`,
    /// `-cl-fast-relaxed-math`..., OpenCL 3.0 §5.8.6); `-cl-kernel-arg-info` is always
    /// appended.
    ///
    /// # Errors
    /// `InvalidArgument` for options with a NUL byte; `DeviceError::Build` with the compiler
    /// log when the build fails (`CL_INVALID_BUILD_OPTIONS` for options the compiler refuses).
    pub fn build_with_options(
        context: &Context,
        device: DeviceId,
        source: &str,
        options: &str,
    ) -> Result<Program> {
        match super::add_offset_params(source) {
            Some(rewritten) => match Program::build_exact(context, device, &rewritten, options) {
                Ok(p) => Ok(p),
                Err(DeviceError::Build { .. }) => {
                    // A kernel called as a function by another keeps its parameters as
                    // written; its blocks then need sub-buffers, which some platforms refuse.
                    tracing::warn!(
                        "the source with offset parameters did not build; building it as \
                         written (blocks inside a segment reach its kernels as sub-buffers)"
                    );
                    Program::build_exact(context, device, source, options)
                }
                Err(e) => Err(e),
            },
            None => Program::build_exact(context, device, source, options),
        }
    }

    /// As [`Program::build_with_options`] with `source` built exactly as written: no offset
    /// parameters, so each pointer parameter takes a whole buffer (a block that is not its
    /// whole segment reaches such a kernel as a sub-buffer, where the platform allows them).
    ///
    /// # Errors
    /// As [`Program::build_with_options`].
    pub fn build_exact(
        context: &Context,
        device: DeviceId,
        source: &str,
        options: &str,
    ) -> Result<Program> {
        let p = cl(
            "clCreateProgramWithSource",
            clp::create_program_with_source(context.as_raw(), &[source]),
        )?;
        super::live::created(super::live::Kind::Program);
        let program = Program(p);
        program.build_for(device, options)?;
        Ok(program)
    }

    /// A program from a binary that [`Program::binary`] returned for the same device and
    /// driver (`clCreateProgramWithBinary` + `clBuildProgram` with `options`, OpenCL 3.0
    /// §5.8.1): no compilation of OpenCL C, so much faster than [`Program::build`].
    ///
    /// # Errors
    /// `CL_INVALID_BINARY` (or a build error) for a binary the driver rejects (another device,
    /// another driver version): callers fall back to source.
    ///
    /// # Safety
    /// `binary` must be exactly the bytes [`Program::binary`] returned for this device and
    /// driver (for example checked against a checksum written next to them). Drivers do not
    /// validate binaries: PoCL crashes (SIGSEGV) building a truncated one, and a binary is
    /// device code that later launches run. A safe function cannot take arbitrary bytes, so
    /// this one is `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// # fn f(ctx: &xpu_device::backend::Context, dev: xpu_device::backend::DeviceId) {
    /// let _ = xpu_device::backend::Program::from_binary(ctx, dev, &[0x7f, b'E', b'L'], "");
    /// # }
    /// ```
    pub unsafe fn from_binary(
        context: &Context,
        device: DeviceId,
        binary: &[u8],
        options: &str,
    ) -> Result<Program> {
        if binary.is_empty() {
            return Err(DeviceError::InvalidArgument("empty program binary".into()));
        }
        let entry = super::at_exit::DriverEntry::enter("clCreateProgramWithBinary")?;
        // SAFETY: `device` is a device of `context` (Context::new(device) made it for that
        // device, and DeviceId values come from the platform's enumeration); the binary slice
        // outlives the call, which copies it; the caller guarantees the bytes are a binary the
        // driver produced for this device (this function's # Safety).
        let p = cl("clCreateProgramWithBinary", unsafe {
            clp::create_program_with_binary(context.as_raw(), &[device.as_raw()], &[binary])
        });
        drop(entry);
        let p = p?;
        super::live::created(super::live::Kind::Program);
        let program = Program(p);
        program.build_for(device, options)?;
        Ok(program)
    }

    fn build_for(&self, device: DeviceId, options: &str) -> Result<()> {
        let all = if options.trim().is_empty() {
            BUILD_OPTIONS.to_string()
        } else {
            format!("{options} {BUILD_OPTIONS}")
        };
        let opts = CString::new(all)
            .map_err(|_| DeviceError::InvalidArgument(format!("build options {options:?}")))?;
        let entry = super::at_exit::DriverEntry::enter("clBuildProgram")?;
        let built = clp::build_program(self.0, &[device.as_raw()], &opts, None, ptr::null_mut());
        drop(entry);
        if let Err(code) = built {
            let log =
                clp::get_program_build_info(self.0, device.as_raw(), clp::CL_PROGRAM_BUILD_LOG)
                    .map(String::from)
                    .unwrap_or_default();
            return Err(DeviceError::Build {
                source: ClError::new("clBuildProgram", code),
                log,
            });
        }
        Ok(())
    }

    /// The built program's binary for its (single) device (`CL_PROGRAM_BINARIES`, OpenCL 3.0
    /// §5.8.9), for an on-disk cache: [`Program::from_binary`] loads it again.
    ///
    /// # Errors
    /// A failed `clGetProgramInfo`; `InvalidArgument` when the driver returns no binary.
    pub fn binary(&self) -> Result<Vec<u8>> {
        // A driver entry for the exit (`at_exit`): PoCL generates every kernel's code in this
        // thread to answer (review h33), as a build does.
        let entry = super::at_exit::DriverEntry::enter("clGetProgramInfo")?;
        let info = clp::get_program_info(self.0, clp::CL_PROGRAM_BINARIES);
        drop(entry);
        let info = cl("clGetProgramInfo", info)?;
        let mut binaries: Vec<Vec<u8>> = info.into();
        match binaries.first() {
            Some(b) if !b.is_empty() => Ok(binaries.swap_remove(0)),
            _ => Err(DeviceError::InvalidArgument(
                "the driver returned no program binary".into(),
            )),
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        super::live::released(super::live::Kind::Program);
        if super::at_exit::exiting_elsewhere() {
            // Left to the process's end: PoCL frees a program's LLVM modules, which must not
            // run beside the libraries' teardown (see `at_exit`).
            return;
        }
        // SAFETY: we own exactly one reference to a live program.
        release::note("clReleaseProgram", unsafe { clp::release_program(self.0) });
    }
}

/// Scalar kernel argument types (passed by value with `clSetKernelArg`).
pub trait KernelScalar: Copy + private::Sealed {}
mod private {
    /// The Rust name of a scalar type and whether it is a floating-point type.
    pub trait Sealed {
        const NAME: &'static str;
        const FLOAT: bool;
        /// The value's bytes (native order) in the first `.1` of 8.
        fn ne_bytes(self) -> ([u8; 8], u8);
    }
}
macro_rules! scalar {
    ($($t:ty => $float:expr),*) => {$(
        impl private::Sealed for $t {
            const NAME: &'static str = stringify!($t);
            const FLOAT: bool = $float;
            fn ne_bytes(self) -> ([u8; 8], u8) {
                let b = self.to_ne_bytes();
                let mut a = [0u8; 8];
                a[..b.len()].copy_from_slice(&b);
                (a, b.len() as u8)
            }
        }
        impl KernelScalar for $t {}
    )*};
}
scalar!(u8 => false, i8 => false, u16 => false, i16 => false, u32 => false, i32 => false,
        u64 => false, i64 => false, f32 => true, f64 => true);

/// Whether a value of a Rust scalar type that is (`float`) or is not a floating-point type
/// may be passed for a parameter of the OpenCL C scalar type `type_name` (of the same size):
/// `float` and `double` take only `f32` / `f64`, the integer types only integers (of either
/// signedness: the bits are C's conversion), `half` its bits as `u16` / `i16` (Rust has no
/// stable `f16`). The driver reads the bytes as the declared type and converts nothing, so an
/// integer for a `float` would silently become another number.
fn kind_matches(type_name: &str, float: bool) -> bool {
    match type_name {
        "float" | "double" => float,
        _ => !float,
    }
}

/// The size in bytes of an OpenCL C scalar type as `CL_KERNEL_ARG_TYPE_NAME` reports it
/// (whitespace removed, OpenCL 3.0 §5.9.4), or `None` for any other type (vectors, structs,
/// typedefs, images...), which the scalar setter refuses.
fn scalar_size(type_name: &str) -> Option<usize> {
    Some(match type_name {
        "char" | "uchar" | "unsignedchar" | "signedchar" => 1,
        "short" | "ushort" | "unsignedshort" | "half" => 2,
        "int" | "uint" | "unsignedint" | "unsigned" | "float" => 4,
        "long" | "ulong" | "unsignedlong" | "double" => 8,
        _ => return None,
    })
}

/// The class of a scalar component, for the element check of typed buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    /// Bytes (`char`, `uchar`, `u8`, `i8`): fits any element type.
    Byte,
    /// An integer of this many bytes (signedness ignored).
    Int(usize),
    /// A floating-point type of this many bytes.
    Float(usize),
    /// OpenCL's `half` (2 bytes), whose bits a Rust buffer holds as `u16` / `i16`.
    Half,
}

impl Component {
    /// Whether a buffer of `self` can hold the elements of `param` (never `Byte`: handled
    /// before).
    fn fits(self, param: Component) -> bool {
        match (self, param) {
            (Component::Byte, _) | (_, Component::Byte) => true,
            (Component::Int(a), Component::Int(b)) | (Component::Float(a), Component::Float(b)) => {
                a == b
            }
            (Component::Int(2), Component::Half) | (Component::Half, Component::Int(2)) => true,
            (Component::Half, Component::Half) => true,
            _ => false,
        }
    }
}

/// The element type of a typed buffer, as far as the element check of
/// [`Kernel::check_buffer_element`] needs it: its Rust name and its scalar component. Known for
/// Rust's integer and floating-point types and arrays of them of 2, 3, 4, 8 or 16 elements
/// (OpenCL's vector widths); any other type is unknown ([`BufferElement::of`] answers `None`)
/// and is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferElement {
    name: &'static str,
    component: Component,
}

impl BufferElement {
    /// The element descriptor of `T`, or `None` when the runtime does not know `T` (a user
    /// type): such a buffer passes to any pointer parameter.
    pub fn of<T: 'static>() -> Option<BufferElement> {
        use std::any::TypeId;
        let id = TypeId::of::<T>();
        macro_rules! known {
            ($($t:ty => $c:expr),* $(,)?) => {$(
                if id == TypeId::of::<$t>() {
                    return Some(BufferElement { name: stringify!($t), component: $c });
                }
                if id == TypeId::of::<[$t; 2]>() {
                    return Some(BufferElement { name: concat!("[", stringify!($t), "; 2]"), component: $c });
                }
                if id == TypeId::of::<[$t; 3]>() {
                    return Some(BufferElement { name: concat!("[", stringify!($t), "; 3]"), component: $c });
                }
                if id == TypeId::of::<[$t; 4]>() {
                    return Some(BufferElement { name: concat!("[", stringify!($t), "; 4]"), component: $c });
                }
                if id == TypeId::of::<[$t; 8]>() {
                    return Some(BufferElement { name: concat!("[", stringify!($t), "; 8]"), component: $c });
                }
                if id == TypeId::of::<[$t; 16]>() {
                    return Some(BufferElement { name: concat!("[", stringify!($t), "; 16]"), component: $c });
                }
            )*};
        }
        known!(
            u8 => Component::Byte,
            i8 => Component::Byte,
            u16 => Component::Int(2),
            i16 => Component::Int(2),
            u32 => Component::Int(4),
            i32 => Component::Int(4),
            u64 => Component::Int(8),
            i64 => Component::Int(8),
            f32 => Component::Float(4),
            f64 => Component::Float(8),
        );
        None
    }

    /// The Rust name of the element type, e.g. `f64` or `[f32; 4]`.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// The scalar component of the pointee of a pointer parameter's type name (`float*`,
/// `float4*`, `uint*`, `unsigned int*`, `const float*`...), or `None` when it is not one of
/// OpenCL C's built-in scalar or vector types (a typedef, a struct, `void*`, a pointer to a
/// pointer, an empty name): such a parameter is not checked.
fn pointee_component(type_name: &str) -> Option<Component> {
    let pointee = type_name.trim().strip_suffix('*')?;
    let words: Vec<&str> = pointee
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const"
                    | "volatile"
                    | "restrict"
                    | "__global"
                    | "global"
                    | "__constant"
                    | "constant"
            )
        })
        .collect();
    let base = words.concat();
    if base.contains('*') {
        return None;
    }
    let scalar = base.trim_end_matches(|c: char| c.is_ascii_digit());
    let width = &base[scalar.len()..];
    if !matches!(width, "" | "2" | "3" | "4" | "8" | "16") {
        return None;
    }
    Some(match scalar {
        "char" | "uchar" | "unsignedchar" | "signedchar" => Component::Byte,
        "short" | "ushort" | "unsignedshort" => Component::Int(2),
        "int" | "uint" | "unsignedint" | "unsigned" => Component::Int(4),
        "long" | "ulong" | "unsignedlong" => Component::Int(8),
        "half" => Component::Half,
        "float" => Component::Float(4),
        "double" => Component::Float(8),
        _ => return None,
    })
}

/// The local memory a `__local` argument of `bytes` takes, rounded up to [`LOCAL_ARG_ALIGN`].
fn local_footprint(bytes: usize) -> u64 {
    (bytes as u64)
        .div_ceil(LOCAL_ARG_ALIGN)
        .saturating_mul(LOCAL_ARG_ALIGN)
}

/// What the driver reports about one kernel parameter, with what the argument checks derive
/// from its type name, parsed once per kernel (not per launch).
#[derive(Debug, Clone)]
struct ArgInfo {
    name: String,
    address: u32,
    type_name: String,
    /// A pointer parameter (by its type name or its address qualifier).
    pointer: bool,
    /// The scalar size of a by-value parameter ([`scalar_size`]).
    scalar_size: Option<usize>,
    /// Whether the type is `float` or `double` ([`kind_matches`]).
    float: bool,
    /// The pointee's scalar component of a pointer parameter ([`pointee_component`]).
    pointee: Option<Component>,
}

impl ArgInfo {
    fn new(name: String, address: u32, type_name: String) -> ArgInfo {
        let pointer = type_name.ends_with('*')
            || matches!(
                address,
                clk::CL_KERNEL_ARG_ADDRESS_GLOBAL
                    | clk::CL_KERNEL_ARG_ADDRESS_LOCAL
                    | clk::CL_KERNEL_ARG_ADDRESS_CONSTANT
            );
        ArgInfo {
            pointer,
            scalar_size: scalar_size(&type_name),
            float: kind_matches(&type_name, true),
            pointee: pointee_component(&type_name),
            name,
            address,
            type_name,
        }
    }

    fn is_pointer(&self) -> bool {
        self.pointer
    }
}

fn arg_string(kernel: cl_kernel, index: u32, param: u32) -> std::result::Result<String, i32> {
    let bytes = clk::get_kernel_arg_data(kernel, index, param)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

fn arg_infos(kernel: cl_kernel, count: u32) -> Option<Vec<ArgInfo>> {
    (0..count)
        .map(|i| {
            let address = clk::get_kernel_arg_info(kernel, i, clk::CL_KERNEL_ARG_ADDRESS_QUALIFIER)
                .ok()?
                .to_uint();
            Some(ArgInfo::new(
                arg_string(kernel, i, clk::CL_KERNEL_ARG_NAME).ok()?,
                address,
                arg_string(kernel, i, clk::CL_KERNEL_ARG_TYPE_NAME).ok()?,
            ))
        })
        .collect()
}

/// The parameters as the kernel was written, from the driver's argument information
/// (`physical_count` parameters): (the driver's index of each, the driver's index of each one's
/// offset parameter, the caller's index of each driver parameter). An offset parameter is a
/// `ulong` whose name starts with [`super::OFFSET_PARAM_PREFIX`], right after a `__global` /
/// `__constant` pointer ([`super::add_offset_params`] inserts it there); without argument
/// information there is none. Its name is the prefix + the pointer's name as written, which
/// need not be the pointer's name once preprocessed (a kernel in a function-like macro whose
/// pointer is named by a macro parameter: `xpu_offset__P` is one token, `P` is replaced), so
/// the position is what pairs them, not the name's end.
fn offset_layout(
    args: Option<&[ArgInfo]>,
    physical_count: u32,
) -> (Vec<u32>, Vec<Option<u32>>, Vec<u32>) {
    let mut physical = Vec::new();
    let mut offset_param = Vec::new();
    let mut logical = Vec::new();
    let mut p = 0;
    while p < physical_count {
        let companion = args.and_then(|a| {
            let (ptr, next) = (a.get(p as usize)?, a.get(p as usize + 1)?);
            let is_offset = matches!(
                ptr.address,
                clk::CL_KERNEL_ARG_ADDRESS_GLOBAL | clk::CL_KERNEL_ARG_ADDRESS_CONSTANT
            ) && ptr.type_name.ends_with('*')
                && next.name.starts_with(super::OFFSET_PARAM_PREFIX)
                && matches!(next.type_name.as_str(), "ulong" | "unsigned long");
            is_offset.then_some(p + 1)
        });
        let index = physical.len() as u32;
        physical.push(p);
        offset_param.push(companion);
        logical.push(index);
        if companion.is_some() {
            logical.push(index);
            p += 1;
        }
        p += 1;
    }
    (physical, offset_param, logical)
}

/// A kernel of a built program, with checked arguments. `Send` but not `Sync`:
/// `clSetKernelArg` is not thread-safe (OpenCL 3.0 appendix A.2), so argument setting takes
/// `&mut self`.
///
/// Keeps a reference to every buffer set as an argument until the argument is replaced or the
/// kernel dropped, so a buffer dropped by the caller after `set_arg_buffer` is still alive at
/// the launch; from the launch on, the driver keeps the buffers of the queued command alive
/// until it completes (OpenCL 3.0 §5.5.1, `clReleaseMemObject`).
#[derive(Debug)]
pub struct Kernel {
    raw: cl_kernel,
    name: String,
    context: raw::cl_context,
    /// Per driver parameter (physical index), offset parameters included.
    args: Option<Vec<ArgInfo>>,
    /// The parameters a caller sees (offset parameters hidden, see
    /// [`super::add_offset_params`]).
    count: u32,
    /// The driver's index of each parameter a caller sees.
    physical: Vec<u32>,
    /// The driver's index of each parameter's offset parameter, for the pointers that have one.
    offset_param: Vec<Option<u32>>,
    /// The caller's index of each driver parameter (an offset parameter: its pointer's).
    logical: Vec<u32>,
    /// Per driver parameter from here on.
    set: Vec<bool>,
    /// The scalar bytes the driver holds for each argument, as far as this kernel set them
    /// (`None`: not a scalar, or unknown). OpenCL keeps an argument's value for every later
    /// enqueue of the kernel until the next `clSetKernelArg` of it (OpenCL 3.0 §5.9.2), so
    /// setting the same scalar again is no driver call. Outlives [`Kernel::reset_args`]: the
    /// driver's value does too.
    driver_scalars: Vec<Option<ScalarBytes>>,
    buffers: Vec<Option<HeldBuffer>>,
    /// The size set for each `__local` argument, 0 for the others.
    locals: Vec<usize>,
    /// `CL_DEVICE_LOCAL_MEM_SIZE` of the kernel's device, bytes.
    local_mem_size: u64,
}

/// The bytes of a by-value scalar argument (at most 8: OpenCL C's widest scalar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScalarBytes {
    bytes: [u8; 8],
    len: u8,
}

impl ScalarBytes {
    fn of<T: KernelScalar>(value: T) -> ScalarBytes {
        let (bytes, len) = value.ne_bytes();
        ScalarBytes { bytes, len }
    }
}

/// A buffer a kernel keeps for an argument: its own reference ([`Kernel::set_arg_buffer`]) or
/// a share of the caller's ([`Kernel::set_arg_shared_buffer`]).
#[derive(Debug)]
enum HeldBuffer {
    Owned(Buffer),
    Shared(Arc<Buffer>),
}

impl HeldBuffer {
    fn buffer(&self) -> &Buffer {
        match self {
            HeldBuffer::Owned(b) => b,
            HeldBuffer::Shared(b) => b,
        }
    }
}

/// The alignment drivers give each `__local` argument in local memory, bytes (PoCL:
/// `MAX_EXTENDED_ALIGNMENT`): the local-memory check counts each argument rounded up to it.
const LOCAL_ARG_ALIGN: u64 = 128;

// SAFETY: a kernel may move between threads; only concurrent clSetKernelArg is forbidden,
// which `&mut self` on the setters and the missing Sync impl prevent. The raw context is only
// compared, never used as a handle.
unsafe impl Send for Kernel {}

impl Kernel {
    /// The kernel called `name` in `program` (`clCreateKernel`), with its parameters' argument
    /// information (`clGetKernelArgInfo`).
    ///
    /// # Errors
    /// `InvalidArgument` for a name with a NUL byte; `CL_INVALID_KERNEL_NAME` when absent;
    /// failed `clGetKernelInfo` queries.
    pub fn new(program: &Program, name: &str) -> Result<Kernel> {
        let cname = CString::new(name)
            .map_err(|_| DeviceError::InvalidArgument(format!("kernel name {name:?}")))?;
        let entry = super::at_exit::DriverEntry::enter("clCreateKernel")?;
        let raw = cl("clCreateKernel", clk::create_kernel(program.0, &cname));
        drop(entry);
        let raw = raw?;
        super::live::created(super::live::Kind::Kernel);
        let mut kernel = Kernel {
            raw,
            name: name.to_string(),
            context: ptr::null_mut(),
            args: None,
            count: 0,
            physical: Vec::new(),
            offset_param: Vec::new(),
            logical: Vec::new(),
            set: Vec::new(),
            driver_scalars: Vec::new(),
            buffers: Vec::new(),
            locals: Vec::new(),
            local_mem_size: u64::MAX,
        };
        let physical_count = cl(
            "clGetKernelInfo",
            clk::get_kernel_info(raw, clk::CL_KERNEL_NUM_ARGS),
        )?
        .to_uint();
        kernel.context = cl(
            "clGetKernelInfo",
            clk::get_kernel_info(raw, clk::CL_KERNEL_CONTEXT),
        )?
        .to_ptr() as raw::cl_context;
        kernel.args = arg_infos(raw, physical_count);
        (kernel.physical, kernel.offset_param, kernel.logical) =
            offset_layout(kernel.args.as_deref(), physical_count);
        kernel.count = kernel.physical.len() as u32;
        let n = physical_count as usize;
        kernel.set = vec![false; n];
        kernel.driver_scalars = vec![None; n];
        kernel.buffers = (0..n).map(|_| None).collect();
        kernel.locals = vec![0; n];
        kernel.local_mem_size = super::context::limits_of_context(kernel.context).local_mem_size;
        Ok(kernel)
    }

    /// The kernel's function name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of parameters as the kernel was written (`CL_KERNEL_NUM_ARGS` less the
    /// offset parameters [`Program::build`] added, see [`Kernel::takes_offset`]). Every index
    /// taken by this type's setters counts these parameters.
    pub fn num_args(&self) -> u32 {
        self.count
    }

    /// Whether pointer parameter `index` has an offset parameter (added by [`Program::build`],
    /// see [`super::add_offset_params`]), so that [`Kernel::set_arg_shared_buffer_at`] can pass
    /// it a buffer with a byte offset. `false` for an index out of range and for any other
    /// parameter.
    pub fn takes_offset(&self, index: u32) -> bool {
        self.offset_param
            .get(index as usize)
            .is_some_and(Option::is_some)
    }

    /// `problem` with driver parameter `physical`, reported with its index and name as the
    /// kernel was written (an offset parameter's problem is its pointer's).
    fn error(&self, physical: u32, problem: KernelArgProblem) -> DeviceError {
        let index = self
            .logical
            .get(physical as usize)
            .copied()
            .unwrap_or(physical);
        let name = self
            .physical
            .get(index as usize)
            .and_then(|&p| self.args.as_ref()?.get(p as usize))
            .map_or_else(|| "?".to_string(), |a| a.name.clone());
        DeviceError::KernelArg {
            kernel: self.name.clone(),
            index,
            name,
            problem,
        }
    }

    /// The driver's index of parameter `index` (as the kernel was written).
    fn physical(&self, index: u32) -> Result<u32> {
        match self.physical.get(index as usize) {
            Some(&p) => Ok(p),
            None => Err(DeviceError::KernelArg {
                kernel: self.name.clone(),
                index,
                name: "?".to_string(),
                problem: KernelArgProblem::IndexOutOfRange { count: self.count },
            }),
        }
    }

    /// Driver parameter `physical`'s information.
    fn arg(&self, physical: u32) -> Result<&ArgInfo> {
        match &self.args {
            Some(a) => Ok(&a[physical as usize]),
            None => Err(self.error(physical, KernelArgProblem::InfoUnavailable)),
        }
    }

    fn set_raw(&mut self, index: u32, size: usize, value: *const std::ffi::c_void) -> Result<()> {
        // Whatever the outcome, the driver's value is no longer a known scalar (a buffer, a
        // `__local` size, or, after a failure, unknown).
        self.driver_scalars[index as usize] = None;
        // SAFETY: the index is in range and the argument's kind was checked against the
        // parameter's declaration by the caller; `value` is null (a __local size) or points to
        // `size` readable bytes that the driver copies before returning (§5.9.2).
        let r = unsafe { clk::set_kernel_arg(self.raw, index, size, value) };
        match r {
            Ok(()) => {
                self.set[index as usize] = true;
                Ok(())
            }
            Err(code) => Err(self.error(
                index,
                KernelArgProblem::Driver(ClError::new("clSetKernelArg", code)),
            )),
        }
    }

    /// Sets scalar argument `index` (checked by the caller) to `bytes`: no driver call when
    /// the driver already holds exactly these bytes for it from this kernel's last
    /// `clSetKernelArg` of it (§5.9.2: the value stays until the argument is set again).
    fn set_scalar_raw(&mut self, index: u32, bytes: ScalarBytes) -> Result<()> {
        if self.driver_scalars[index as usize] == Some(bytes) {
            self.set[index as usize] = true;
            return Ok(());
        }
        self.set_raw(index, bytes.len as usize, bytes.bytes.as_ptr().cast())?;
        self.driver_scalars[index as usize] = Some(bytes);
        Ok(())
    }

    /// Sets argument `index` to a buffer (a `__global` or `__constant` pointer parameter). The
    /// kernel keeps a reference to the buffer until the argument is replaced or the kernel is
    /// dropped.
    ///
    /// # Errors
    /// [`DeviceError::KernelArg`] naming the kernel and the argument: index out of range, a
    /// parameter that is not a `__global`/`__constant` pointer, a buffer of another context
    /// (another device), no argument information, or a failed `clSetKernelArg`.
    pub fn set_arg_buffer(&mut self, index: u32, buffer: &Buffer) -> Result<()> {
        let p = self.physical(index)?;
        self.set_buffer_raw(p, buffer)?;
        self.set_offset(index, 0)?;
        self.buffers[p as usize] = Some(HeldBuffer::Owned(buffer.clone()));
        self.locals[p as usize] = 0;
        Ok(())
    }

    /// As [`Kernel::set_arg_buffer`], the kernel keeping a clone of the `Arc` instead of a
    /// retained `cl_mem` (no `clRetainMemObject` now, no `clReleaseMemObject` when the
    /// argument is replaced): for buffers a caller shares through an `Arc` already (the
    /// allocator's segments).
    ///
    /// # Errors
    /// As [`Kernel::set_arg_buffer`].
    pub fn set_arg_shared_buffer(&mut self, index: u32, buffer: &Arc<Buffer>) -> Result<()> {
        self.set_arg_shared_buffer_at(index, buffer, 0)
    }

    /// As [`Kernel::set_arg_shared_buffer`], the kernel's pointer starting `offset` bytes into
    /// `buffer`: the buffer goes to the pointer parameter and `offset` to its offset parameter
    /// ([`Kernel::takes_offset`]), and the kernel's body advances the pointer by it before the
    /// kernel's own code runs. How an allocator passes a block of a larger segment without a
    /// sub-buffer. An offset equal to the last one set for this parameter is no driver call.
    ///
    /// # Errors
    /// As [`Kernel::set_arg_buffer`]; [`KernelArgProblem::NoOffsetParameter`] for a nonzero
    /// `offset` on a parameter without an offset parameter, and
    /// [`KernelArgProblem::OffsetOutOfRange`] for an offset at or past the buffer's end
    /// (nothing set in either case).
    pub fn set_arg_shared_buffer_at(
        &mut self,
        index: u32,
        buffer: &Arc<Buffer>,
        offset: u64,
    ) -> Result<()> {
        let p = self.physical(index)?;
        if offset != 0 {
            if !self.takes_offset(index) {
                return Err(self.error(p, KernelArgProblem::NoOffsetParameter));
            }
            if offset >= buffer.size() as u64 {
                let size = buffer.size() as u64;
                return Err(self.error(p, KernelArgProblem::OffsetOutOfRange { offset, size }));
            }
        }
        self.set_buffer_raw(p, buffer)?;
        self.set_offset(index, offset)?;
        self.buffers[p as usize] = Some(HeldBuffer::Shared(Arc::clone(buffer)));
        self.locals[p as usize] = 0;
        Ok(())
    }

    /// Sets parameter `index`'s offset parameter, if it has one, to `offset` bytes.
    fn set_offset(&mut self, index: u32, offset: u64) -> Result<()> {
        match self.offset_param.get(index as usize).copied().flatten() {
            Some(o) => self.set_scalar_raw(o, ScalarBytes::of(offset)),
            None => Ok(()),
        }
    }

    /// The checks and the `clSetKernelArg` of a buffer argument: a `__global`/`__constant`
    /// pointer parameter, a buffer of the kernel's context (the context the buffer recorded
    /// at its creation, `CL_MEM_CONTEXT`: no driver query here).
    fn set_buffer_raw(&mut self, index: u32, buffer: &Buffer) -> Result<()> {
        self.check_pointer_raw(index)?;
        if buffer.context_raw() != self.context {
            return Err(self.error(index, KernelArgProblem::OtherContext));
        }
        let mem = buffer.as_raw();
        self.set_raw(
            index,
            std::mem::size_of_val(&mem),
            ptr::addr_of!(mem).cast(),
        )
    }

    /// Checks that argument `index` is a `__global` / `__constant` pointer parameter, which
    /// takes a buffer (`CL_KERNEL_ARG_ADDRESS_QUALIFIER` and `CL_KERNEL_ARG_TYPE_NAME`, OpenCL
    /// 3.0 §5.9.4). Sets nothing: for a caller that has work to do before it can set the
    /// buffer (making a sub-buffer), so that a wrong parameter is reported as such first.
    ///
    /// # Errors
    /// [`DeviceError::KernelArg`]: index out of range, no argument information, or
    /// [`KernelArgProblem::BufferForNonPointer`].
    pub fn check_buffer_param(&self, index: u32) -> Result<()> {
        let p = self.physical(index)?;
        self.check_pointer_raw(p)
    }

    /// [`Kernel::check_buffer_param`] of driver parameter `index`.
    fn check_pointer_raw(&self, index: u32) -> Result<()> {
        let info = self.arg(index)?;
        if !(matches!(
            info.address,
            clk::CL_KERNEL_ARG_ADDRESS_GLOBAL | clk::CL_KERNEL_ARG_ADDRESS_CONSTANT
        ) && info.type_name.ends_with('*'))
        {
            let type_name = info.type_name.clone();
            return Err(self.error(index, KernelArgProblem::BufferForNonPointer { type_name }));
        }
        Ok(())
    }

    /// Checks that a typed buffer of `element` may be passed for argument `index`, a pointer
    /// parameter: refuses (`ElementType`) only an element type that cannot match the
    /// parameter's declared pointee (`CL_KERNEL_ARG_TYPE_NAME`, OpenCL 3.0 §5.9.4): a
    /// different component size (`f64` for `float*`) or a float for an integer (`f32` for
    /// `uint*`) or the reverse. A byte buffer, a `char*`/`uchar*` parameter, a type name the
    /// runtime does not know (typedefs, structs, `void*`) or an empty one pass; a vector
    /// parameter (`float4*`) takes buffers of its component. Sets nothing: call
    /// [`Kernel::set_arg_buffer`] afterwards.
    ///
    /// # Errors
    /// [`DeviceError::KernelArg`]: index out of range, no argument information, or
    /// [`KernelArgProblem::ElementType`].
    pub fn check_buffer_element(&self, index: u32, element: BufferElement) -> Result<()> {
        let index = self.physical(index)?;
        let info = self.arg(index)?;
        let Some(param) = info.pointee else {
            return Ok(());
        };
        if element.component.fits(param) {
            return Ok(());
        }
        let expected = info.type_name.clone();
        Err(self.error(
            index,
            KernelArgProblem::ElementType {
                expected,
                found: element.name,
            },
        ))
    }

    /// Sets argument `index` to a scalar value (a by-value parameter of an OpenCL C scalar
    /// type of the same size and kind: `uint` or `int` for `u32` / `i32`, `float` for `f32`,
    /// `half` for its bits as `u16` / `i16`).
    ///
    /// # Errors
    /// [`DeviceError::KernelArg`] naming the kernel and the argument: index out of range, a
    /// pointer parameter (`ScalarForPointer`), a size that differs from the declared type's or
    /// a type that is not an OpenCL C scalar (`SizeMismatch`, `CL_INVALID_ARG_SIZE`), an
    /// integer for a `float` / `double` parameter or a float for an integer one
    /// (`KindMismatch`: the driver would reinterpret the bits), no argument information, or a
    /// failed `clSetKernelArg`.
    pub fn set_arg<T: KernelScalar>(&mut self, index: u32, value: T) -> Result<()> {
        let index = self.physical(index)?;
        let info = self.arg(index)?;
        let given = std::mem::size_of::<T>();
        if info.is_pointer() {
            let type_name = info.type_name.clone();
            return Err(self.error(index, KernelArgProblem::ScalarForPointer { type_name }));
        }
        let declared = info.scalar_size;
        if declared != Some(given) {
            let type_name = info.type_name.clone();
            return Err(self.error(
                index,
                KernelArgProblem::SizeMismatch {
                    type_name,
                    declared,
                    given,
                },
            ));
        }
        if info.float != <T as private::Sealed>::FLOAT {
            let type_name = info.type_name.clone();
            return Err(self.error(
                index,
                KernelArgProblem::KindMismatch {
                    type_name,
                    given: <T as private::Sealed>::NAME,
                },
            ));
        }
        self.set_scalar_raw(index, ScalarBytes::of(value))?;
        self.buffers[index as usize] = None;
        self.locals[index as usize] = 0;
        Ok(())
    }

    /// Sets argument `index`, a `__local` pointer parameter, to `bytes` of local memory per
    /// work-group (`clSetKernelArg` with a null value, OpenCL 3.0 §5.9.2).
    ///
    /// The device's local memory (`CL_DEVICE_LOCAL_MEM_SIZE`) bounds the `__local` arguments:
    /// one larger than it is refused here, and a launch whose `__local` arguments total more
    /// (each rounded up to 128 bytes) is refused before the driver sees it, since PoCL aborts
    /// the process on such a launch.
    ///
    /// # Errors
    /// [`DeviceError::KernelArg`]: index out of range, a parameter that is not a `__local`
    /// pointer, `LocalSizeZero` for 0 bytes (checked here: NVIDIA's driver accepts it),
    /// `LocalMemoryExceeded` for more bytes than the device's local memory, no argument
    /// information, or a failed `clSetKernelArg`.
    pub fn set_arg_local(&mut self, index: u32, bytes: usize) -> Result<()> {
        let index = self.physical(index)?;
        let info = self.arg(index)?;
        if !(info.address == clk::CL_KERNEL_ARG_ADDRESS_LOCAL && info.type_name.ends_with('*')) {
            let type_name = info.type_name.clone();
            return Err(self.error(index, KernelArgProblem::LocalForNonLocal { type_name }));
        }
        if bytes == 0 {
            return Err(self.error(index, KernelArgProblem::LocalSizeZero));
        }
        let requested = local_footprint(bytes);
        if requested > self.local_mem_size {
            let available = self.local_mem_size;
            return Err(self.error(
                index,
                KernelArgProblem::LocalMemoryExceeded {
                    requested,
                    available,
                },
            ));
        }
        self.set_raw(index, bytes, ptr::null())?;
        self.buffers[index as usize] = None;
        self.locals[index as usize] = bytes;
        Ok(())
    }

    /// `LocalMemoryExceeded` (naming the `__local` argument that goes over) when the
    /// `__local` arguments set, each rounded up to [`LOCAL_ARG_ALIGN`], exceed the device's
    /// local memory.
    fn check_local_memory(&self) -> Result<()> {
        let mut requested: u64 = 0;
        for (i, &bytes) in self.locals.iter().enumerate() {
            if bytes == 0 {
                continue;
            }
            requested = requested.saturating_add(local_footprint(bytes));
            if requested > self.local_mem_size {
                let available = self.local_mem_size;
                return Err(self.error(
                    i as u32,
                    KernelArgProblem::LocalMemoryExceeded {
                        requested,
                        available,
                    },
                ));
            }
        }
        Ok(())
    }

    /// Forgets every argument: drops the buffer references the kernel keeps and marks every
    /// argument unset, so the next launch must set them all again. Launches already
    /// enqueued are unaffected: the driver keeps the buffers of a queued command alive until
    /// it completes (OpenCL 3.0 §5.5.1). For kernels kept in a pool between launches, so that
    /// an idle kernel holds no memory.
    pub fn reset_args(&mut self) {
        self.set.iter_mut().for_each(|s| *s = false);
        self.buffers.iter_mut().for_each(|b| *b = None);
        self.locals.iter_mut().for_each(|l| *l = 0);
    }

    /// What a launch needs of the arguments: the first argument never set, if any (a launch
    /// needs all of them), then the `__local` arguments' total against the device's local
    /// memory.
    pub(crate) fn check_all_set(&self) -> Result<()> {
        match self.set.iter().position(|s| !s) {
            None => self.check_local_memory(),
            Some(i) => Err(self.error(i as u32, KernelArgProblem::NotSet)),
        }
    }

    /// The buffers set as arguments now (for a command buffer that records the launch and
    /// must keep them alive).
    pub(crate) fn held_buffers(&self) -> impl Iterator<Item = &Buffer> {
        self.buffers.iter().flatten().map(HeldBuffer::buffer)
    }

    /// The raw `cl_kernel`, valid while `self` lives. Setting arguments through it bypasses the
    /// checks and the buffer references kept here, and the record of the scalar values the
    /// driver holds (a scalar set again through [`Kernel::set_arg`] with the value it last set
    /// is no driver call): code that sets arguments through the raw handle must not launch
    /// this kernel through the checked setters afterwards.
    pub fn as_raw(&self) -> cl_kernel {
        self.raw
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        super::live::released(super::live::Kind::Kernel);
        if super::at_exit::exiting_elsewhere() {
            // Left to the process's end, as a program is (see `Program`'s drop).
            return;
        }
        // SAFETY: we own exactly one reference to a live kernel.
        release::note("clReleaseKernel", unsafe { clk::release_kernel(self.raw) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fits<T: 'static>(type_name: &str) -> bool {
        let element = BufferElement::of::<T>().expect("a known element type");
        pointee_component(type_name).is_none_or(|p| element.component.fits(p))
    }

    #[test]
    fn element_types_that_cannot_match_the_pointee_are_told_apart_from_those_that_may() {
        // Certain mismatches.
        assert!(!fits::<f64>("float*"));
        assert!(!fits::<f32>("double*"));
        assert!(!fits::<f32>("uint*"));
        assert!(!fits::<u32>("float*"));
        assert!(!fits::<u64>("uint*"));
        assert!(!fits::<f64>("float4*"));
        assert!(!fits::<[f64; 4]>("float4*"));
        assert!(!fits::<f32>("half*"));
        assert!(!fits::<u32>("unsigned short*"));
        // Matches: same component, signedness, vectors of the component, half bits.
        assert!(fits::<f32>("float*"));
        assert!(fits::<f32>("const float*"));
        assert!(fits::<f32>("float4*"));
        assert!(fits::<[f32; 4]>("float*"));
        assert!(fits::<i32>("uint*"));
        assert!(fits::<u32>("unsigned int*"));
        assert!(fits::<u64>("long*"));
        assert!(fits::<u16>("half*"));
        assert!(fits::<u16>("half8*"));
        // Bytes either way, and whatever the runtime does not know.
        assert!(fits::<u8>("float*"));
        assert!(fits::<i8>("double4*"));
        assert!(fits::<f64>("uchar*"));
        assert!(fits::<f64>("char16*"));
        assert!(fits::<f64>("void*"));
        assert!(fits::<f64>("my_real*"));
        assert!(fits::<f64>("struct pair*"));
        assert!(fits::<f64>("float**"));
        assert!(fits::<f64>("float5*"));
        assert!(fits::<f64>(""));
        assert!(BufferElement::of::<(u32, u32)>().is_none());
        assert!(BufferElement::of::<[f32; 5]>().is_none());
        assert_eq!(BufferElement::of::<[f32; 4]>().unwrap().name(), "[f32; 4]");
    }
}
