//! Pinned host buffers: `CL_MEM_ALLOC_HOST_PTR` buffers mapped for the host.

use std::ptr;
use std::sync::Arc;

use opencl3::command_queue as clq;

use super::{cl, release, Buffer, ClEvent, CommandQueue, Context, MemFlags};
use crate::error::{DeviceError, Result};

const MAP_READ_WRITE: u64 = 1 | 2;

#[derive(Debug)]
struct Inner {
    buffer: Buffer,
    queue: CommandQueue,
    ptr: *mut u8,
}

// SAFETY: the mapping is plain host memory owned by this object; the cl handles are
// thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for Inner {}
// SAFETY: shared access only reads the pointer value; slice access goes through &/&mut self.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the pointer returned by our map of `buffer` on `queue`, unmapped
        // exactly once here (clEnqueueUnmapMemObject, §5.5.2). Copies that used the mapping
        // hold their own Arc, so none is in flight when the last reference drops.
        let r = unsafe {
            clq::enqueue_unmap_mem_object(
                self.queue.as_raw(),
                self.buffer.as_raw(),
                self.ptr.cast(),
                0,
                ptr::null(),
            )
        };
        // No wait for the unmap: the last reference is often dropped inside the CL_COMPLETE
        // callback of a copy (`keep_alive_until`), where blocking calls such as clWaitForEvents
        // are undefined behavior (OpenCL 3.0 §5.11.4) and can deadlock a driver's callback
        // thread. Nothing needs the wait: the buffer released right after stays alive until
        // the enqueued unmap completes (§5.5.1).
        match r {
            Ok(e) => drop(ClEvent::from_owned(e)),
            Err(code) => release::note("clEnqueueUnmapMemObject", Err(code)),
        }
    }
}

/// Host memory the device copies from at full speed: a `CL_MEM_ALLOC_HOST_PTR` buffer mapped
/// for reading and writing by the host. The memory is unmapped and released on drop, but copies
/// in flight hold an internal reference, so the memory outlives them.
#[derive(Debug)]
pub struct PinnedBuffer(Arc<Inner>);

impl PinnedBuffer {
    /// Allocates `size` bytes and maps them (blocking map on `queue`).
    ///
    /// # Errors
    /// `InvalidArgument` for size 0; a failed `clCreateBuffer` or `clEnqueueMapBuffer`.
    pub fn new(context: &Context, queue: &CommandQueue, size: usize) -> Result<PinnedBuffer> {
        let buffer = Buffer::new(
            context,
            size,
            MemFlags {
                alloc_host_ptr: true,
            },
        )?;
        let mut mapped: opencl3::types::cl_mem = ptr::null_mut();
        // SAFETY: blocking map (CL_TRUE) of the whole live buffer; the pointer written to
        // `mapped` stays valid until the matching unmap in Inner::drop (clEnqueueMapBuffer,
        // OpenCL 3.0 §5.5.1).
        let ev = cl("clEnqueueMapBuffer", unsafe {
            clq::enqueue_map_buffer(
                queue.as_raw(),
                buffer.as_raw(),
                1,
                MAP_READ_WRITE,
                0,
                size,
                &mut mapped,
                0,
                ptr::null(),
            )
        })?;
        drop(ClEvent::from_owned(ev));
        let ptr: *mut u8 = mapped.cast();
        if ptr.is_null() {
            return Err(DeviceError::InvalidArgument(
                "map returned a null pointer".into(),
            ));
        }
        Ok(PinnedBuffer(Arc::new(Inner {
            buffer,
            queue: queue.clone(),
            ptr: ptr.cast(),
        })))
    }

    /// Another handle to the same memory, for keeping it alive while a copy is in flight.
    /// Crate-private so that safe code cannot obtain two `&mut` views of one mapping.
    pub(crate) fn share(&self) -> PinnedBuffer {
        PinnedBuffer(Arc::clone(&self.0))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.0.buffer.size()
    }

    /// Always false: pinned buffers hold at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The mapped host address.
    pub fn host_ptr(&self) -> *mut u8 {
        self.0.ptr
    }

    /// The underlying `cl_mem` buffer (for device-side copies).
    pub fn buffer(&self) -> &Buffer {
        &self.0.buffer
    }

    /// The host view. Bytes a non-blocking copy is still writing are unspecified until its
    /// event completes: synchronize first (the host allocator's events do this).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is a live host mapping owned by self.0 (valid until unmapped in
        // Inner::drop, which cannot run while &self exists).
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.len()) }
    }

    /// The mutable host view; see [`PinnedBuffer::as_slice`] for the copy caveat.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice; &mut self excludes other borrows (internal shares never touch
        // the bytes from the host).
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr, self.len()) }
    }
}
