//! Segments made of coarse-grained SVM (`memory_kind:svm`), where the device supports it.

use xpu_device::backend::SvmBuffer;
use xpu_device::DeviceError;

use super::buffer::classify;
use super::{SegmentMemory, SegmentSource, SourceError, SourceSegment};

/// Coarse-grained SVM allocations on one device: a block's address is its SVM pointer,
/// usable directly as a kernel argument. `clSVMFree` does not wait for queued work, so the
/// allocator synchronizes the owning stream before releasing a segment
/// ([`SegmentSource::free_needs_sync`]).
pub struct SvmSource {
    device: &'static xpu_device::Device,
    index: usize,
}

impl SvmSource {
    /// SVM on device `index`.
    ///
    /// # Errors
    /// A bad device index, a failed context creation, or a device without coarse-grained
    /// buffer SVM (`InvalidArgument`).
    pub fn new(index: usize) -> Result<Self, DeviceError> {
        let device = xpu_device::device(index)?;
        if !device.properties().supports_svm {
            return Err(DeviceError::InvalidArgument(format!(
                "device {index} does not support coarse-grained SVM"
            )));
        }
        device.context()?;
        Ok(Self { device, index })
    }
}

impl SegmentSource for SvmSource {
    fn device(&self) -> usize {
        self.index
    }

    fn name(&self) -> String {
        self.device.properties().name.clone()
    }

    fn total_memory(&self) -> u64 {
        self.device.properties().total_memory
    }

    fn max_alloc_size(&self) -> u64 {
        self.device.properties().max_alloc_size
    }

    fn base_addr_align(&self) -> u64 {
        self.device.properties().mem_base_addr_align.max(1)
    }

    fn free_needs_sync(&self) -> bool {
        true
    }

    fn allocate(&self, size: u64) -> Result<SourceSegment, SourceError> {
        let bytes = usize::try_from(size).map_err(|_| SourceError::OutOfMemory)?;
        let context = self.device.context().map_err(|e| classify(&e, size))?;
        let align = u32::try_from(self.base_addr_align()).unwrap_or(0);
        let svm = SvmBuffer::new(context, bytes, align).map_err(|e| classify(&e, size))?;
        let address = svm.address();
        xpu_device::note_reserved(self.index, i64::try_from(size).unwrap_or(i64::MAX));
        Ok(SourceSegment {
            address,
            size,
            memory: SegmentMemory::Svm(svm),
        })
    }

    fn free(&self, segment: SourceSegment) {
        xpu_device::note_reserved(self.index, -i64::try_from(segment.size).unwrap_or(i64::MAX));
        drop(segment);
    }
}
