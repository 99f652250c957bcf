//! Non-blocking host<->device copies through pinned blocks, recording the use automatically.

use xpu_device::backend::{Buffer, PinnedBytes};
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
///
/// A region lent by memory with stream-ordered reuse carries its lender
/// ([`RegionLender`]), which every copy through the region calls before it enqueues: the
/// lender's obligations go wherever the region goes, even through a [`DeviceMemory`] that
/// wraps the memory and passes its region on.
pub struct DeviceRegion<'a> {
    buffer: Buffer,
    offset: usize,
    len: usize,
    lender: Option<&'a dyn RegionLender>,
}

impl std::fmt::Debug for DeviceRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRegion")
            .field("buffer", &self.buffer)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("lent", &self.lender.is_some())
            .finish()
    }
}

impl<'a> DeviceRegion<'a> {
    /// The whole of `buffer` (its commands keep it alive: no lender).
    #[must_use]
    pub fn whole(buffer: &'a Buffer) -> Self {
        Self {
            buffer: buffer.clone(),
            offset: 0,
            len: buffer.size(),
            lender: None,
        }
    }

    /// `len` bytes of `buffer` from byte `offset`, lent by `lender` for as long as it is
    /// borrowed; every copy through the region calls [`RegionLender::before_copy`] first.
    /// For implementations of [`DeviceMemory`] (the device allocator's `DataPtr`): the caller
    /// already holds `buffer`, and the region gives nothing back but copies, which check
    /// `offset + len` against the buffer's size.
    #[doc(hidden)]
    #[must_use]
    pub fn lend(lender: &'a dyn RegionLender, buffer: Buffer, offset: usize, len: usize) -> Self {
        Self {
            buffer,
            offset,
            len,
            lender: Some(lender),
        }
    }
}

/// The memory behind a lent [`DeviceRegion`]: what a copy through the region must do on its
/// stream before it enqueues. Implemented by the device allocator's `DataPtr`, which records
/// a stream other than its allocation stream on its block (as `Tensor.record_stream`), so the
/// block is not handed to another allocation before the copy completes, and orders that
/// stream after relocation copies that may still use the block's bytes.
pub trait RegionLender: Sync {
    /// Called by every copy through a region of this memory on `stream`, before it enqueues.
    ///
    /// # Errors
    /// [`HostError::Stream`] when the use cannot be prepared (a stream that a graph is
    /// capturing, or whose queue is released); the copy is then not enqueued.
    fn before_copy(&self, stream: &Stream) -> Result<(), HostError>;
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
    /// memory (an empty or simulated allocation). A region of memory with stream-ordered
    /// reuse carries its [`RegionLender`], which the copies call before they enqueue.
    fn device_region(&self) -> Option<DeviceRegion<'_>>;
}

impl DeviceMemory for Buffer {
    fn device_region(&self) -> Option<DeviceRegion<'_>> {
        Some(DeviceRegion::whole(self))
    }
}

/// The pinned host end of a [`HostCopy::copy_pinned`], which gives the copy's direction.
///
/// A copy into a [`HostPtr`] borrows it exclusively, so it cannot be enqueued while a view
/// of its bytes lives (the device would write under the borrow):
///
/// ```compile_fail,E0502
/// # use xpu_host::{HostBytes, HostCopy, HostPtr};
/// # fn f(stream: &xpu_stream::Stream, dev: &xpu_device::backend::Buffer, host: &mut HostPtr) {
/// let bytes = host.as_slice();
/// // error: `*host` is borrowed by `bytes`
/// let _ = stream.copy_pinned(dev, 0, HostBytes::Into(host), 0, bytes.len());
/// # }
/// ```
#[derive(Debug)]
pub enum HostBytes<'a> {
    /// Host to device: the copy reads these bytes (`clEnqueueWriteBuffer` from the mapped
    /// pinned pointer, non-blocking).
    From(&'a HostPtr),
    /// Device to host: the copy writes these bytes (`clEnqueueReadBuffer` into the mapped
    /// pinned pointer, non-blocking). Reading the [`HostPtr`] ([`HostPtr::as_slice`]) waits
    /// for the copy; synchronizing the stream first makes that wait free.
    Into(&'a mut HostPtr),
}

impl HostBytes<'_> {
    fn ptr(&self) -> &HostPtr {
        match self {
            HostBytes::From(ptr) => ptr,
            HostBytes::Into(ptr) => ptr,
        }
    }

    /// The names of the copy, of its host side and of its device side, in errors.
    fn names(&self) -> [&'static str; 3] {
        match self {
            HostBytes::From(_) => ["host-to-device copy", "host source", "device destination"],
            HostBytes::Into(_) => ["device-to-host copy", "host destination", "device source"],
        }
    }
}

/// Copies between pinned host memory and device buffers on a [`Stream`], as PyTorch's
/// `non_blocking=True` copies: the copy is enqueued on the stream's queue and the call
/// returns at once; the stream is recorded on the host block
/// ([`HostPtr::record_stream`]), so dropping the [`HostPtr`] right after is safe: its block
/// is not reused before the copy completed. The whole-allocation copies
/// ([`HostCopy::copy_from_host`], [`HostCopy::copy_to_host`]) record it on the device side
/// too ([`RegionLender::before_copy`] of the region's lender: a device allocator `DataPtr`
/// used on a stream other than its allocation stream), so dropping that right after is safe
/// as well. The copy is also tracked on the block: reading the
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
    /// region (see [`HostCopy::copy_pinned`]).
    ///
    /// # Errors
    /// `NoBuffer` when `dst` has no OpenCL buffer and `src` is not empty; `OutOfRange` when
    /// the region is shorter than `src`; `StreamDevice` when `dst` is a device allocation
    /// (a lent region) of another device than the stream's; otherwise as
    /// [`HostCopy::copy_pinned`].
    fn copy_from_host(&self, src: &HostPtr, dst: &impl DeviceMemory) -> Result<(), HostError>;

    /// Device to host, whole host allocation: `dst.len()` bytes from the start of `src`'s
    /// region (see [`HostCopy::copy_pinned`]).
    ///
    /// # Errors
    /// As [`HostCopy::copy_from_host`], with the roles swapped.
    fn copy_to_host(&self, src: &impl DeviceMemory, dst: &mut HostPtr) -> Result<(), HostError>;

    /// `len` bytes between `buffer` at byte `buffer_offset` and the host allocation of `host`
    /// at byte `host_offset`, in the direction `host` gives: [`HostBytes::From`] host to
    /// device, [`HostBytes::Into`] device to host. The source's range is checked first.
    ///
    /// # Errors
    /// `OutOfRange` for a range outside either side; `Stream` for a released external
    /// stream; `Device` for a failed enqueue (e.g. a buffer of another context).
    fn copy_pinned(
        &self,
        buffer: &Buffer,
        buffer_offset: usize,
        host: HostBytes<'_>,
        host_offset: usize,
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

/// A whole-allocation copy on `stream` between `host` and the start of `device`'s region.
fn copy_whole(
    stream: &Stream,
    host: HostBytes<'_>,
    device: &impl DeviceMemory,
) -> Result<(), HostError> {
    crate::error::check_fork()?;
    let n = host.ptr().len();
    let [.., device_side] = host.names();
    match whole_copy_region(device_side, device, n)? {
        Some(r) => {
            if let Some(lender) = r.lender {
                lender.before_copy(stream)?;
            }
            stream.copy_pinned(&r.buffer, r.offset, host, 0, n)
        }
        None => Ok(()),
    }
}

impl HostCopy for Stream {
    fn copy_from_host(&self, src: &HostPtr, dst: &impl DeviceMemory) -> Result<(), HostError> {
        copy_whole(self, HostBytes::From(src), dst)
    }

    fn copy_to_host(&self, src: &impl DeviceMemory, dst: &mut HostPtr) -> Result<(), HostError> {
        copy_whole(self, HostBytes::Into(dst), src)
    }

    fn copy_pinned(
        &self,
        buffer: &Buffer,
        buffer_offset: usize,
        mut host: HostBytes<'_>,
        host_offset: usize,
        len: usize,
    ) -> Result<(), HostError> {
        crate::error::check_fork()?;
        let [copy, host_side, device_side] = host.names();
        let on_host = check(host_side, host_offset, len, host.ptr().len());
        let on_device = check(device_side, buffer_offset, len, buffer.size());
        match host {
            HostBytes::From(_) => on_host.and(on_device),
            HostBytes::Into(_) => on_device.and(on_host),
        }?;
        let pinned = match &mut host {
            HostBytes::From(ptr) => ptr.pinned().map(PinnedBytes::From),
            HostBytes::Into(ptr) => ptr.pinned_mut().map(PinnedBytes::Into),
        };
        let Some(pinned) = pinned.filter(|_| len > 0) else {
            return Ok(());
        };
        // Conflicting copies of another context (another device) are waited for through user
        // events of this one set by their completion (`copy_pinned`), never on the host.
        let queue = self.enqueue_queue(copy)?;
        drop(queue.copy_pinned(buffer, buffer_offset, pinned, host_offset, len, &[])?);
        host.ptr().record_use(self);
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
        // The permit covers the enqueue, not the wait for the write.
        let permit = self.enqueue_queue("host-to-device copy")?;
        Ok(permit
            .queue_ref()
            .write_releasing(dst, dst_offset, src, permit)?)
    }
}
