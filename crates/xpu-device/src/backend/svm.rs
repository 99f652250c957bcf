//! Coarse-grained shared virtual memory (`clSVMAlloc`), where the device reports it.

use std::ffi::c_void;

use opencl3::memory as clm;

use super::{check_nonzero_size, cl, Context};
use crate::error::Result;

/// A coarse-grained SVM allocation (OpenCL 3.0 §5.6). Its pointer is a device address usable
/// directly as a kernel argument (`clSetKernelArgSVMPointer`). Freed with `clSVMFree` on drop;
/// `clSVMFree` does not wait for commands, so the owner (the caching allocator) synchronizes
/// the streams that used it before dropping.
#[derive(Debug)]
pub struct SvmBuffer {
    context: Context,
    ptr: *mut c_void,
    size: usize,
}

// SAFETY: the SVM pointer is a plain device/host address owned by this object, and
// clSVMFree is thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for SvmBuffer {}
// SAFETY: shared access only reads the address.
unsafe impl Sync for SvmBuffer {}

impl SvmBuffer {
    /// Allocates `size` bytes of coarse-grained read-write SVM aligned to `alignment` bytes
    /// (0 = the driver's default).
    ///
    /// # Errors
    /// `InvalidArgument` for size 0; `clSVMAlloc` returning null (reported as
    /// `CL_MEM_OBJECT_ALLOCATION_FAILURE`: OpenCL gives no reason).
    pub fn new(context: &Context, size: usize, alignment: u32) -> Result<SvmBuffer> {
        check_nonzero_size("SVM", size)?;
        // SAFETY: live context; flags = CL_MEM_READ_WRITE (coarse grain) as §5.6.1 allows.
        let ptr = cl("clSVMAlloc", unsafe {
            clm::svm_alloc(context.as_raw(), 1, size, alignment)
        })
        .map_err(|mut e| {
            e.code = crate::error::CODE_MEM_OBJECT_ALLOCATION_FAILURE;
            e
        })?;
        Ok(SvmBuffer {
            context: context.clone(),
            ptr,
            size,
        })
    }

    /// The SVM address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The SVM address as an integer.
    pub fn address(&self) -> u64 {
        self.ptr as usize as u64
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for SvmBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from clSVMAlloc on `context`, which we keep alive, and is freed
        // exactly once (clSVMFree, §5.6.1).
        let r = unsafe { clm::svm_free(self.context.as_raw(), self.ptr) };
        super::release::note("clSVMFree", r);
    }
}
