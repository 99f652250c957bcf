//! [`DeviceMemory`] for [`DataPtr`]: pinned-host copies (xpu-host's [`HostCopy`]) to and from
//! a device allocation.
//!
//! [`HostCopy`]: xpu_host::HostCopy

use xpu_host::{DeviceMemory, DeviceRegion, HostError, RegionLender};
use xpu_stream::Stream;

use crate::DataPtr;

/// The block inside the segment's buffer, lent as an opaque region: the segment's whole
/// `Buffer` never reaches the caller, and the region cannot outlive the borrow of the
/// pointer. There is no region accessor that returns the buffer:
///
/// ```compile_fail
/// use xpu_alloc::{DataPtr, DeviceMemory};
/// fn leak(ptr: &DataPtr) {
///     let _whole_segment = ptr.cl_region();
/// }
/// ```
///
/// and a region stays borrowed from its pointer:
///
/// ```compile_fail
/// use xpu_alloc::{DataPtr, DeviceMemory};
/// fn keep(ptr: DataPtr) {
///     let region = ptr.device_region();
///     drop(ptr); // error: `ptr` is borrowed by `region`
///     drop(region);
/// }
/// ```
impl DeviceMemory for DataPtr {
    fn device_region(&self) -> Option<DeviceRegion<'_>> {
        // The segment's buffer at the allocation's offset, as views and kernels take it (see
        // `DataPtr::view`).
        // The region is lent to another layer, whose commands the allocator does not see:
        // the block's place is fixed for good first. Relocation copies that may still use
        // the bytes are not waited for here: the copy's stream is ordered after them in
        // `before_copy`, which every copy through the region calls before it enqueues (a
        // host wait here would last as long as a user event holding the allocation stream
        // back, even for a copy on that stream, which is ordered after them anyway).
        self.observe_place_pending().ok()?;
        let (buffer, offset) = self.segment_buffer().ok()?;
        let buffer = xpu_device::backend::Buffer::clone(buffer);
        Some(DeviceRegion::lend(
            self,
            buffer,
            usize::try_from(offset).ok()?,
            usize::try_from(self.size()).ok()?,
        ))
    }
}

/// The lender of a [`DataPtr`]'s regions: every copy through one calls this before it
/// enqueues, whichever [`DeviceMemory`] passed the region on.
impl RegionLender for DataPtr {
    /// Records `stream` on the block unless it is the allocation stream (as
    /// [`DataPtr::record_stream`]), so a whole-allocation pinned copy on another stream delays
    /// the block's reuse until it completes, and orders `stream` after relocation copies that
    /// may still use the block's bytes (an enqueued wait, [`crate::PendingMove::order`]; on
    /// the allocation stream they come first anyway). A stream of another device is refused
    /// with [`HostError::StreamDevice`] (the block's buffer belongs to another context),
    /// nothing recorded.
    fn before_copy(&self, stream: &Stream) -> Result<(), HostError> {
        if self.is_empty() {
            return Ok(());
        }
        if stream.device() != self.device() {
            return Err(HostError::StreamDevice {
                stream: stream.device(),
                device: self.device(),
            });
        }
        if self.stream() == Some(crate::stream_key(stream)) {
            return Ok(());
        }
        stream.check_not_capturing("pinned host copy")?;
        let host_error = crate::data_ptr::host_error;
        if let Some(pending) = self.observe_place_pending().map_err(host_error)? {
            pending.order(stream).map_err(host_error)?;
        }
        self.record_stream_ref(&crate::cl_stream::ClStream::try_shared(*stream)?);
        Ok(())
    }
}
