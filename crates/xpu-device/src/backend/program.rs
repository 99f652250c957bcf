//! Programs built from OpenCL C source, and kernels.

use std::ffi::CString;
use std::ptr;

use opencl3::kernel as clk;
use opencl3::program as clp;
use opencl3::types::{cl_kernel, cl_program};

use super::{cl, release, Buffer, Context, DeviceId};
use crate::error::{ClError, DeviceError, Result};

const BUILD_LOG: u32 = 0x1183;

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
    /// `clBuildProgram`).
    ///
    /// # Errors
    /// `DeviceError::Build` with the compiler log when the build fails.
    pub fn build(context: &Context, device: DeviceId, source: &str) -> Result<Program> {
        let p = cl(
            "clCreateProgramWithSource",
            clp::create_program_with_source(context.as_raw(), &[source]),
        )?;
        let program = Program(p);
        let opts = CString::default();
        if let Err(code) = clp::build_program(p, &[device.as_raw()], &opts, None, ptr::null_mut()) {
            let log = clp::get_program_build_info(p, device.as_raw(), BUILD_LOG)
                .map(String::from)
                .unwrap_or_default();
            return Err(DeviceError::Build {
                source: ClError::new("clBuildProgram", code),
                log,
            });
        }
        Ok(program)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference to a live program.
        release::note("clReleaseProgram", unsafe { clp::release_program(self.0) });
    }
}

/// Scalar kernel argument types (passed by value with `clSetKernelArg`).
pub trait KernelScalar: Copy + private::Sealed {}
mod private {
    pub trait Sealed {}
}
macro_rules! scalar {
    ($($t:ty),*) => { $(impl private::Sealed for $t {} impl KernelScalar for $t {})* };
}
scalar!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// A kernel of a built program. `Send` but not `Sync`: `clSetKernelArg` is not thread-safe
/// (OpenCL 3.0 appendix A.2), so argument setting takes `&mut self`.
#[derive(Debug)]
pub struct Kernel(cl_kernel);

// SAFETY: a kernel may move between threads; only concurrent clSetKernelArg is forbidden,
// which `&mut self` on the setters and the missing Sync impl prevent.
unsafe impl Send for Kernel {}

impl Kernel {
    /// The kernel called `name` in `program` (`clCreateKernel`).
    ///
    /// # Errors
    /// `InvalidArgument` for a name with a NUL byte; `CL_INVALID_KERNEL_NAME` when absent.
    pub fn new(program: &Program, name: &str) -> Result<Kernel> {
        let cname = CString::new(name)
            .map_err(|_| DeviceError::InvalidArgument(format!("kernel name {name:?}")))?;
        Ok(Kernel(cl(
            "clCreateKernel",
            clk::create_kernel(program.0, &cname),
        )?))
    }

    /// Sets argument `index` to a buffer.
    ///
    /// # Errors
    /// A failed `clSetKernelArg` (wrong index or type).
    pub fn set_arg_buffer(&mut self, index: u32, buffer: &Buffer) -> Result<(), ClError> {
        let mem = buffer.as_raw();
        // SAFETY: the argument is a cl_mem passed by address with its exact size, as §5.9.2
        // requires for buffer arguments; the driver copies the value before returning.
        cl("clSetKernelArg", unsafe {
            clk::set_kernel_arg(
                self.0,
                index,
                std::mem::size_of_val(&mem),
                ptr::addr_of!(mem).cast(),
            )
        })
    }

    /// Sets argument `index` to a scalar value.
    ///
    /// # Errors
    /// A failed `clSetKernelArg` (`CL_INVALID_ARG_SIZE` when the kernel's type differs).
    pub fn set_arg<T: KernelScalar>(&mut self, index: u32, value: T) -> Result<(), ClError> {
        // SAFETY: `value` is a plain scalar passed by address with its exact size; the driver
        // checks the size against the kernel's parameter and copies it (§5.9.2).
        cl("clSetKernelArg", unsafe {
            clk::set_kernel_arg(
                self.0,
                index,
                std::mem::size_of::<T>(),
                ptr::addr_of!(value).cast(),
            )
        })
    }

    /// The raw `cl_kernel`.
    pub fn as_raw(&self) -> cl_kernel {
        self.0
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference to a live kernel.
        release::note("clReleaseKernel", unsafe { clk::release_kernel(self.0) });
    }
}
