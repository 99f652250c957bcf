//! Non-blocking host<->device copies through pinned blocks, recording the use automatically.

use std::marker::PhantomData;

use xpu_device::backend::Buffer;
use xpu_stream::Stream;

use super::error::HostError;
use super::ptr::HostPtr;

fn check(what: &'static str, offset: usize, len: usize, size: usize) -> Result<(), HostError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(HostError::OutOfRange {
            what,
            offset: offset as u64,
            len: len as u64,
            size: size as u64,
        }),
    }
}

/// The region of `memory` that a whole-allocation copy of `len` bytes uses (`what` names
/// that side in errors): `None` when there is nothing to copy.
fn whole_copy_region<'a>(
    what: &'static str,
    memory: &'a impl DeviceMemory,
    len: usize,
) -> Result<Option<DeviceRegion<'a>>, HostError> {
    if len == 0 {
        return Ok(None);
    }
    let region = memory.device_region().ok_or(HostError::NoBuffer)?;
    check(what, 0, len, region.len)?;
    Ok(Some(region))
}

/// A borrowed region of an OpenCL buffer: what a [`DeviceMemory`] lends a [`HostCopy`].
///
/// Opaque: only this crate's copies read the buffer, offset and length inside, so a region
/// lent by the device allocator's `DataPtr` never hands out the segment's whole `Buffer` (a
/// handle that would outlive the block and reach past its end). The lifetime ties the region
/// to the borrow of the memory that lent it, so it cannot outlive the allocation either.
#[derive(Debug)]
pub struct DeviceRegion<'a> {
    buffer: Buffer,
    offset: usize,
    len: usize,
    _borrow: PhantomData<&'a ()>,
}

impl<'a> DeviceRegion<'a> {
    /// The whole of `buffer`.
    #[must_use]
    pub fn whole(buffer: &'a Buffer) -> Self {
        Self::lend(buffer, buffer.clone(), 0, buffer.size())
    }

    /// `len` bytes of `buffer` from byte `offset`, lent for as long as `owner` is borrowed.
    /// For implementations of [`DeviceMemory`] (the device allocator's `DataPtr`): the caller
    /// already holds `buffer`, and the region gives nothing back but copies, which check
    /// `offset + len` against the buffer's size.
    #[doc(hidden)]
    #[must_use]
    pub fn lend<T: ?Sized>(_owner: &'a T, buffer: Buffer, offset: usize, len: usize) -> Self {
        Self {
            buffer,
            offset,
            len,
            _borrow: PhantomData,
        }
    }
}

/// Device memory a [`HostCopy`] can copy to or from: an OpenCL buffer region. Implemented
/// for [`Buffer`] (the whole buffer) and, in xpu-alloc, for the device allocator's
/// `DataPtr` (its block inside the segment's buffer).
///
/// The region is lent as an opaque [`DeviceRegion`] borrowed from the memory, so the trait
/// cannot be used to obtain the segment buffer behind a `DataPtr` (a handle that would
/// outlive the allocation and reach past its end). There is no accessor to the region's
/// buffer:
///
/// ```compile_fail
/// use xpu_host::DeviceMemory;
/// fn leak<T: DeviceMemory>(memory: &T) {
///     let _whole_segment = memory.cl_region();
/// }
/// ```
///
/// The region's buffer is private:
///
/// ```compile_fail
/// use xpu_host::DeviceMemory;
/// fn leak<T: DeviceMemory>(memory: &T) -> Option<xpu_device::backend::Buffer> {
///     memory.device_region().map(|region| region.buffer)
/// }
/// ```
///
/// And a region cannot outlive the memory it was lent by:
///
/// ```compile_fail
/// use xpu_host::{DeviceMemory, DeviceRegion};
/// fn keep<T: DeviceMemory>(memory: T) -> Option<DeviceRegion<'static>> {
///     memory.device_region()
/// }
/// ```
pub trait DeviceMemory {
    /// The region, borrowed from `self`; `None` when there is no OpenCL buffer behind the
    /// memory (an empty, SVM or simulated allocation).
    fn device_region(&self) -> Option<DeviceRegion<'_>>;
}

impl DeviceMemory for Buffer {
    fn device_region(&self) -> Option<DeviceRegion<'_>> {
        Some(DeviceRegion::whole(self))
    }
}

/// Copies between pinned host memory and device buffers on a [`Stream`], as PyTorch's
/// `non_blocking=True` copies: the copy is enqueued on the stream's queue and the call
/// returns at once; the stream is recorded on the host block
/// ([`HostPtr::record_stream`]), so dropping the [`HostPtr`] right after is safe: its block
/// is not reused before the copy completed. The copy is also tracked on the block: reading the
/// [`HostPtr`] waits for a device-to-host copy into it, and writing it waits for any copy in
/// flight on it (see [`HostPtr`]), so the host never sees bytes change under a borrow nor
/// changes bytes a queued copy has yet to read.
///
/// Ranges are in bytes; the host range must lie within the requested length
/// ([`HostPtr::len`]). A zero-length copy does nothing. The device buffer must belong to the
/// stream's device (its context); the host block may belong to any device.
///
/// Every copy returns [`HostError::BadFork`] at once in a bad fork child (before any check,
/// lock or driver call).
pub trait HostCopy {
    /// Host to device, whole host allocation: `src.len()` bytes into the start of `dst`'s
    /// region (see [`HostCopy::copy_from_host_to_buffer`]).
    ///
    /// # Errors
    /// `NoBuffer` when `dst` has no OpenCL buffer and `src` is not empty; `OutOfRange` when
    /// the region is shorter than `src`; otherwise as
    /// [`HostCopy::copy_from_host_to_buffer`].
    fn copy_from_host(&self, src: &HostPtr, dst: &impl DeviceMemory) -> Result<(), HostError>;

    /// Device to host, whole host allocation: `dst.len()` bytes from the start of `src`'s
    /// region (see [`HostCopy::copy_to_host_from_buffer`]).
    ///
    /// # Errors
    /// As [`HostCopy::copy_from_host`], with the roles swapped.
    fn copy_to_host(&self, src: &impl DeviceMemory, dst: &mut HostPtr) -> Result<(), HostError>;

    /// Host to device: `len` bytes from `src[src_offset..]` into `dst` at `dst_offset`
    /// (`clEnqueueWriteBuffer` from the mapped pinned pointer, non-blocking).
    ///
    /// # Errors
    /// `OutOfRange` for a range outside either side; `Stream` for a released external
    /// stream; `Device` for a failed enqueue (e.g. a buffer of another context).
    fn copy_from_host_to_buffer(
        &self,
        src: &HostPtr,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), HostError>;

    /// Device to host: `len` bytes of `src` at `src_offset` into `dst[dst_offset..]`
    /// (`clEnqueueReadBuffer` into the mapped pinned pointer, non-blocking). Reading `dst`
    /// ([`HostPtr::as_slice`]) waits for the copy; synchronizing the stream first makes that
    /// wait free.
    ///
    /// # Errors
    /// As [`HostCopy::copy_from_host_to_buffer`].
    fn copy_to_host_from_buffer(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &mut HostPtr,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), HostError>;

    /// Host to device from ordinary (pageable) memory: a blocking write, the slow path that
    /// pinned memory avoids (returns once `src` has been read).
    ///
    /// # Errors
    /// `OutOfRange`, `Stream` or `Device` as above.
    fn copy_from_pageable(
        &self,
        src: &[u8],
        dst: &Buffer,
        dst_offset: usize,
    ) -> Result<(), HostError>;
}

impl HostCopy for Stream {
    fn copy_from_host(&self, src: &HostPtr, dst: &impl DeviceMemory) -> Result<(), HostError> {
        crate::error::check_fork()?;
        let n = src.len();
        match whole_copy_region("device destination", dst, n)? {
            Some(r) => self.copy_from_host_to_buffer(src, 0, &r.buffer, r.offset, n),
            None => Ok(()),
        }
    }

    fn copy_to_host(&self, src: &impl DeviceMemory, dst: &mut HostPtr) -> Result<(), HostError> {
        crate::error::check_fork()?;
        let n = dst.len();
        match whole_copy_region("device source", src, n)? {
            Some(r) => self.copy_to_host_from_buffer(&r.buffer, r.offset, dst, 0, n),
            None => Ok(()),
        }
    }

    fn copy_from_host_to_buffer(
        &self,
        src: &HostPtr,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), HostError> {
        crate::error::check_fork()?;
        check("host source", src_offset, len, src.len())?;
        check("device destination", dst_offset, len, dst.size())?;
        let Some(pinned) = src.pinned().filter(|_| len > 0) else {
            return Ok(());
        };
        let queue = self.enqueue_queue("host-to-device copy")?;
        drop(queue.write_from_pinned(pinned, src_offset, dst, dst_offset, len, &[])?);
        src.record_use(self);
        Ok(())
    }

    fn copy_to_host_from_buffer(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &mut HostPtr,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), HostError> {
        crate::error::check_fork()?;
        check("device source", src_offset, len, src.size())?;
        check("host destination", dst_offset, len, dst.len())?;
        let Some(pinned) = dst.pinned_mut().filter(|_| len > 0) else {
            return Ok(());
        };
        let queue = self.enqueue_queue("device-to-host copy")?;
        drop(queue.read_into_pinned(src, src_offset, pinned, dst_offset, len, &[])?);
        dst.record_use(self);
        Ok(())
    }

    fn copy_from_pageable(
        &self,
        src: &[u8],
        dst: &Buffer,
        dst_offset: usize,
    ) -> Result<(), HostError> {
        crate::error::check_fork()?;
        check("device destination", dst_offset, src.len(), dst.size())?;
        if src.is_empty() {
            return Ok(());
        }
        Ok(self
            .enqueue_queue("host-to-device copy")?
            .write(dst, dst_offset, src)?)
    }
}
