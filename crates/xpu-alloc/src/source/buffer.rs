//! Segments made of OpenCL buffers (`cl_mem`), the default memory kind.

use parking_lot::Mutex;
use xpu_device::backend::{ExclusiveBuffer, MemFlags};
use xpu_device::DeviceError;

use super::{DeviceFailure, SegmentMemory, SegmentSource, SourceError, SourceSegment};

/// Segment start alignment of the assigned address ranges.
const RANGE_ALIGN: u64 = 2 << 20;

/// OpenCL buffers on one device. A buffer has no device address a host can see, so the
/// source assigns each segment a range of a per-device address space (a bump counter,
/// never reused): block addresses are unique on the device and are turned back into
/// `(cl_mem, offset)` for kernels.
pub struct BufferSource {
    device: &'static xpu_device::Device,
    index: usize,
    next_address: Mutex<u64>,
}

impl BufferSource {
    /// Buffers on device `index` (creates the device's context if needed).
    ///
    /// # Errors
    /// A bad device index or a failed context creation.
    pub fn new(index: usize) -> Result<Self, DeviceError> {
        let device = xpu_device::device(index)?;
        device.context()?;
        Ok(Self {
            device,
            index,
            next_address: Mutex::new((index as u64 + 1) << 44),
        })
    }
}

/// Whether the OpenCL platform named `platform_name` (`CL_PLATFORM_NAME`) survives several
/// sub-buffers of one buffer in use at once (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1). Not
/// NVIDIA's ("NVIDIA CUDA"): on an H200 (driver 580.159.04) burn's conformance suite, whose
/// tensors were blocks of shared segments passed to kernels as sub-buffers, crashed the driver
/// (a NULL read in `libnvidia-opencl.so.1`, in the driver's own thread or inside
/// `clEnqueueNDRangeKernel` or `clCreateSubBuffer`) in 2 of 2 runs at 16 threads, whether
/// sub-buffers were made with the device drained and every enqueue locked out or not
/// (docs/performance.md, 2026-12-03 18:30 UTC), while threads sharing one buffer by offsets
/// ran clean (`ci/diag/nvidia_subbuffer_repro.c`, mode `O`). Kernels therefore take a block
/// as its segment's buffer plus a byte offset ([`xpu_device::backend::add_offset_params`]);
/// on a platform where this is `false`, a block that is not its whole segment is refused to
/// a kernel built without offset parameters instead of becoming a sub-buffer.
#[must_use]
pub fn sub_buffers_safe_on(platform_name: &str) -> bool {
    !platform_name.starts_with("NVIDIA")
}

/// Whether device `index`'s allocators split segments where the configuration leaves
/// `split_segments` unset ([`SegmentSource::splits_segments`] of its [`BufferSource`]): on
/// every platform, as PyTorch does. Kernels take a block as its segment's buffer plus a byte
/// offset, so no platform needs a sub-buffer per block (see [`sub_buffers_safe_on`]).
///
/// # Errors
/// A bad device index, or no OpenCL runtime.
pub fn device_splits_segments(index: usize) -> Result<bool, DeviceError> {
    xpu_device::device(index)?;
    Ok(true)
}

/// `CL_INVALID_BUFFER_SIZE` (OpenCL 3.0 §5.2.1).
const CL_INVALID_BUFFER_SIZE: i32 = -61;

/// Maps a device error of an allocation of `size` bytes to the allocator's
/// classification: `CL_INVALID_BUFFER_SIZE` (OpenCL 3.0 §5.2.1: above the device's largest
/// allocation) can never succeed and is [`SourceError::TooLarge`]; exhausted memory is
/// [`SourceError::OutOfMemory`] (retried after releasing cached memory); any other is
/// [`SourceError::Device`] holding the [`DeviceError`] itself (which `AllocError` gets back
/// as `AllocError::Device`).
pub(super) fn classify(error: DeviceError, size: u64) -> SourceError {
    if error
        .cl_error()
        .is_some_and(|e| e.code == CL_INVALID_BUFFER_SIZE)
    {
        SourceError::TooLarge { size }
    } else if error.is_out_of_memory() {
        SourceError::OutOfMemory
    } else {
        SourceError::Device(DeviceFailure::new(error))
    }
}

impl SegmentSource for BufferSource {
    type Memory = SegmentMemory;

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

    /// Every platform: see [`device_splits_segments`].
    fn splits_segments(&self) -> bool {
        true
    }

    /// A freed segment's buffer is released (`clReleaseMemObject`) and never handed out
    /// again: the driver deletes it only once the commands using it completed (OpenCL 3.0
    /// §5.5.1), so a release during an allocation waits for nothing.
    fn free_needs_sync(&self) -> bool {
        false
    }

    fn base_addr_align(&self) -> u64 {
        self.device.properties().mem_base_addr_align.max(1)
    }

    /// A new OpenCL buffer (`clCreateBuffer`) of `size` bytes.
    ///
    /// # Errors
    /// In a bad fork child (see `xpu_device::fork`), [`SourceError::Device`] with
    /// [`DeviceError::BadFork`] at once, before any driver call; otherwise as the device
    /// reports it, classified as [`SegmentSource::allocate`] says.
    fn allocate(&self, size: u64) -> Result<SourceSegment, SourceError> {
        xpu_device::fork::refuse_in_bad_fork(DeviceError::BadFork)
            .map_err(|e| classify(e, size))?;
        let bytes = usize::try_from(size).map_err(|_| SourceError::OutOfMemory)?;
        let context = self.device.context().map_err(|e| classify(e, size))?;
        let buffer = ExclusiveBuffer::new(context, bytes, MemFlags::default())
            .map_err(|e| classify(e, size))?;
        let address = {
            let mut next = self.next_address.lock();
            let address = *next;
            *next = next.saturating_add(size.div_ceil(RANGE_ALIGN).saturating_mul(RANGE_ALIGN));
            address
        };
        xpu_device::note_reserved(self.index, i64::try_from(size).unwrap_or(i64::MAX));
        Ok(SourceSegment {
            address,
            size,
            memory: SegmentMemory::buffer(buffer),
        })
    }

    fn free(&self, segment: SourceSegment) {
        xpu_device::note_reserved(self.index, -i64::try_from(segment.size).unwrap_or(i64::MAX));
        // Dropping the buffer releases it; the driver keeps it until queued work is done.
        drop(segment);
    }
}
