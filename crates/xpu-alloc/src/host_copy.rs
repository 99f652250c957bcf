//! [`DeviceMemory`] for [`DataPtr`]: pinned-host copies (xpu-host's [`HostCopy`]) to and from
//! a device allocation.
//!
//! [`HostCopy`]: xpu_host::HostCopy

use xpu_host::{DeviceMemory, DeviceRegion};

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
        let (buffer, offset) = self.buffer_and_offset().ok()?;
        Some(DeviceRegion::lend(
            self,
            buffer,
            usize::try_from(offset).ok()?,
            usize::try_from(self.size()).ok()?,
        ))
    }
}
