//! Device buffers (`cl_mem`) and sub-buffers.

use std::ptr;

use opencl3::memory as clm;

use super::{check_nonzero_size, cl, raw, release, Context};
use crate::error::{ClError, DeviceError, Result};

const CREATE_TYPE_REGION: u32 = 0x1220;
const MEM_CONTEXT: u32 = 0x1106;
const MEM_ASSOCIATED_MEMOBJECT: u32 = 0x1107;

/// `cl_mem_flags` the runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemFlags {
    /// `CL_MEM_ALLOC_HOST_PTR`: the driver allocates the backing store in host-accessible
    /// (on GPUs: pinned) memory.
    pub alloc_host_ptr: bool,
}

impl MemFlags {
    fn bits(self) -> u64 {
        let read_write = 1;
        let host = if self.alloc_host_ptr { 1 << 4 } else { 0 };
        read_write | host
    }
}

/// A reference-counted read-write buffer. `Clone` retains, `Drop` releases. The driver keeps
/// the memory alive until commands that use it complete (OpenCL 3.0 §5.5.1), so dropping a
/// buffer with work in flight is safe.
#[derive(Debug)]
pub struct Buffer {
    mem: raw::cl_mem,
    size: usize,
    base_addr_align: u64,
    sub: bool,
    /// The buffer's context (`CL_MEM_CONTEXT`, fixed at creation; a sub-buffer's is its
    /// parent's, OpenCL 3.0 §5.2.1), read once so that a kernel argument's context check is
    /// no driver query. Only compared, never used as a handle (not retained).
    context: raw::cl_context,
}

// SAFETY: cl_mem is reference counted and every memory-object API is thread-safe
// (OpenCL 3.0 appendix A.2); we own one reference, released once in `Drop` on whichever thread
// drops it; the other fields are plain integers and a context pointer that is only compared.
unsafe impl Send for Buffer {}
// SAFETY: as above; through `&Buffer` only driver calls are made (queries, sub-buffer creation,
// commands naming it), never a host access of the device memory, so concurrent uses are
// ordered (or not) by their queues, not by Rust: no host memory is shared through it.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Creates a buffer of `size` bytes (`clCreateBuffer`). Many drivers allocate the backing
    /// store lazily, at first use.
    ///
    /// # Errors
    /// `InvalidArgument` for size 0; a failed `clCreateBuffer` (`CL_INVALID_BUFFER_SIZE` above
    /// the device's max allocation, `CL_MEM_OBJECT_ALLOCATION_FAILURE` when memory is exhausted).
    /// The size limit is checked here too, as OpenCL 3.0 §5.2.1 requires, because some drivers
    /// (NVIDIA's) accept larger sizes and fail only at first use.
    pub fn new(context: &Context, size: usize, flags: MemFlags) -> Result<Buffer> {
        check_nonzero_size("buffer", size)?;
        let limits = context.limits();
        if size as u64 > limits.max_alloc_size {
            return Err(
                ClError::new("clCreateBuffer", crate::error::CODE_INVALID_BUFFER_SIZE).into(),
            );
        }
        // SAFETY: live context, no host pointer (null with neither USE_HOST_PTR nor
        // COPY_HOST_PTR, as §5.2.1 requires).
        let mem = cl("clCreateBuffer", unsafe {
            clm::create_buffer(context.as_raw(), flags.bits(), size, ptr::null_mut())
        })?;
        Ok(Buffer::counted(
            mem,
            size,
            limits.base_addr_align,
            false,
            context.as_raw(),
        ))
    }

    /// A sub-buffer viewing `size` bytes at `offset` (`clCreateSubBuffer`). `offset` must be a
    /// multiple of the device's base address alignment (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`, in
    /// bytes), checked here on every driver, as OpenCL 3.0 §5.2.1 requires
    /// (`CL_MISALIGNED_SUB_BUFFER_OFFSET`), since some drivers accept misaligned offsets.
    ///
    /// # Errors
    /// `InvalidArgument` for an empty or out-of-range region; `MisalignedSubBuffer { origin,
    /// align }` for a misaligned `offset`; a failed `clCreateSubBuffer`.
    pub fn sub_buffer(&self, offset: usize, size: usize) -> Result<Buffer> {
        if size == 0 || offset.checked_add(size).is_none_or(|end| end > self.size) {
            return Err(DeviceError::InvalidArgument(format!(
                "sub-buffer {offset}+{size} outside a buffer of {} bytes",
                self.size
            )));
        }
        if offset as u64 % self.base_addr_align != 0 {
            return Err(DeviceError::MisalignedSubBuffer {
                origin: offset,
                align: self.base_addr_align,
            });
        }
        let region: [usize; 2] = [offset, size];
        // SAFETY: live parent buffer; `region` is a cl_buffer_region {origin, size} that
        // outlives the call (clCreateSubBuffer, §5.2.1).
        let mem = cl("clCreateSubBuffer", unsafe {
            clm::create_sub_buffer(self.mem, 1, CREATE_TYPE_REGION, region.as_ptr().cast())
        })?;
        Ok(Buffer::counted(
            mem,
            size,
            self.base_addr_align,
            true,
            self.context,
        ))
    }

    /// Wraps an owned reference and counts it in [`super::live_objects`].
    fn counted(
        mem: raw::cl_mem,
        size: usize,
        base_addr_align: u64,
        sub: bool,
        context: raw::cl_context,
    ) -> Buffer {
        super::live::created(Buffer::kind(sub));
        Buffer {
            mem,
            size,
            base_addr_align,
            sub,
            context,
        }
    }

    /// The buffer's context as a raw handle (`CL_MEM_CONTEXT`, read at creation), for
    /// comparisons only: not retained.
    pub(crate) fn context_raw(&self) -> raw::cl_context {
        self.context
    }

    fn kind(sub: bool) -> super::live::Kind {
        if sub {
            super::live::Kind::SubBuffer
        } else {
            super::live::Kind::Buffer
        }
    }

    /// True for a sub-buffer.
    pub fn is_sub_buffer(&self) -> bool {
        self.sub
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The raw `cl_mem`, valid while `self` lives; pass it as a kernel argument.
    pub fn as_raw(&self) -> raw::cl_mem {
        self.mem
    }

    /// Wraps a raw buffer, retaining it. The sub-buffer alignment is that of the buffer's
    /// context's device (`CL_MEM_CONTEXT`, then `CL_DEVICE_MEM_BASE_ADDR_ALIGN`).
    ///
    /// # Safety
    /// `mem` must be a valid buffer object of at least `size` bytes.
    ///
    /// # Errors
    /// A failed `clRetainMemObject` or `clGetMemObjectInfo`.
    pub unsafe fn from_raw_retained(mem: raw::cl_mem, size: usize) -> Result<Buffer, ClError> {
        let ctx = cl(
            "clGetMemObjectInfo",
            clm::get_mem_object_info(mem, MEM_CONTEXT),
        )?
        .to_ptr() as raw::cl_context;
        let sub =
            clm::get_mem_object_info(mem, MEM_ASSOCIATED_MEMOBJECT).is_ok_and(|p| p.to_ptr() != 0);
        let align = super::context::limits_of_context(ctx).base_addr_align;
        // SAFETY: the caller guarantees `mem` is valid (clRetainMemObject precondition).
        cl("clRetainMemObject", unsafe { clm::retain_mem_object(mem) })?;
        Ok(Buffer::counted(mem, size, align, sub, ctx))
    }
}

/// A buffer that nothing else holds: made fresh by [`ExclusiveBuffer::new`] (or vouched for
/// with [`ExclusiveBuffer::from_buffer`]), and not `Clone`. What an allocator needs of the
/// memory it hands out in blocks: no other handle reads or writes it behind the blocks'
/// owners.
#[derive(Debug)]
pub struct ExclusiveBuffer(Buffer);

impl ExclusiveBuffer {
    /// A new read-write buffer of `size` bytes (`clCreateBuffer`, as [`Buffer::new`]).
    ///
    /// # Errors
    /// As [`Buffer::new`].
    pub fn new(context: &Context, size: usize, flags: MemFlags) -> Result<ExclusiveBuffer> {
        Buffer::new(context, size, flags).map(ExclusiveBuffer)
    }

    /// Vouches that `buffer` is held by nothing else.
    ///
    /// # Safety
    /// For as long as the result (or what it is handed to) uses the buffer, no other handle
    /// to the same `cl_mem` (a [`Buffer::clone`], a raw handle) nor a sub-buffer of it or of
    /// its parent is used to read or write it, and it is not a sub-buffer overlapping memory
    /// used elsewhere.
    pub unsafe fn from_buffer(buffer: Buffer) -> ExclusiveBuffer {
        ExclusiveBuffer(buffer)
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.0.size()
    }

    /// The buffer, giving up the claim (the caller then holds the only handle).
    pub fn into_buffer(self) -> Buffer {
        self.0
    }
}

impl Clone for Buffer {
    fn clone(&self) -> Self {
        // SAFETY: self.mem is live (we own a reference).
        release::note("clRetainMemObject", unsafe {
            clm::retain_mem_object(self.mem)
        });
        Buffer::counted(
            self.mem,
            self.size,
            self.base_addr_align,
            self.sub,
            self.context,
        )
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        super::live::released(Buffer::kind(self.sub));
        // SAFETY: we own exactly one reference to a live memory object.
        release::note("clReleaseMemObject", unsafe {
            clm::release_mem_object(self.mem)
        });
    }
}
