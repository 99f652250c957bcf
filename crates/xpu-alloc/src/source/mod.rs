//! The segment sources of the device allocator: the seam ([`SegmentSource`], from
//! `xpu-caching`) with this crate's memory type [`SegmentMemory`], the OpenCL
//! [`BufferSource`] and the simulated source over the same memory type.

mod buffer;

use std::collections::HashMap;
use std::sync::Arc;

use xpu_device::backend::Buffer;

pub use buffer::BufferSource;
pub use xpu_caching::source::{
    DeviceFailure, Fault, HookedSource, SegmentSource, Simulated, SimulatedCounters, SourceError,
    SourceHooks,
};

/// The memory behind one segment, as the source created it.
#[derive(Debug)]
pub enum SegmentMemory {
    /// No real memory (simulated source).
    Simulated,
    /// An OpenCL buffer, and the sub-buffers made of it for allocations used as kernel
    /// arguments (dropped first: released before the buffer).
    Buffer {
        /// The sub-buffers of this segment, by (offset, size) in bytes.
        sub_buffers: SubBuffers,
        /// The segment's buffer.
        buffer: xpu_device::backend::Buffer,
    },
}

impl SegmentMemory {
    /// A segment of `buffer`, no sub-buffers made yet.
    pub fn buffer(buffer: xpu_device::backend::Buffer) -> SegmentMemory {
        SegmentMemory::Buffer {
            sub_buffers: SubBuffers::default(),
            buffer,
        }
    }
}

/// The most sub-buffers kept per segment; past it, a new (offset, size) gets a sub-buffer of
/// its own, not cached, released when its allocation drops. A training loop's block layout
/// repeats, so the cache holds what the loop uses.
pub const SUB_BUFFERS_PER_SEGMENT: usize = 1024;

/// The sub-buffers of one segment (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1) by (offset, size),
/// shared by every allocation that lands on the same bytes: a block reused for a same-sized
/// request costs no `clCreateSubBuffer` and its free no `clReleaseMemObject`. They live as
/// long as the segment and are released when the segment is returned to the driver
/// (`empty_cache`, the release of cached segments on out-of-memory), before its buffer, when
/// no command on the segment is queued any more. Sharing one is sound as sharing the segment
/// is: a sub-buffer is a view of the segment's bytes, and the caching allocator reuses those
/// bytes only after every recorded use completed (stream order); commands in flight hold
/// their own references (§5.5.1).
///
/// A cached sub-buffer is never released while the segment lives. On NVIDIA's driver, a
/// sub-buffer released while another sub-buffer of the same bytes (made for the block's next
/// owner) has commands queued crashes the process (seen on an H200, driver 580, raw OpenCL:
/// threads sharing a queue and a segment), so the cache does not evict; an uncached
/// sub-buffer is released by its allocation before the block goes back to the allocator
/// (`Live`'s field order in `data_ptr.rs`).
#[derive(Debug, Default)]
pub struct SubBuffers(parking_lot::Mutex<HashMap<(usize, usize), Arc<Buffer>>>);

impl SubBuffers {
    /// The sub-buffer of `parent` (this segment's buffer) for `size` bytes at `offset`: the
    /// cached one, or a new one (created outside the cache's lock, then cached unless the
    /// cache is full; a concurrent creator's wins).
    ///
    /// # Errors
    /// As [`Buffer::sub_buffer`].
    pub(crate) fn get_or_create(
        &self,
        parent: &Buffer,
        offset: usize,
        size: usize,
    ) -> Result<Arc<Buffer>, xpu_device::DeviceError> {
        if let Some(b) = self.0.lock().get(&(offset, size)) {
            return Ok(Arc::clone(b));
        }
        let sub = Arc::new(parent.sub_buffer(offset, size)?);
        let mut map = self.0.lock();
        if let Some(cached) = map.get(&(offset, size)) {
            // A concurrent creator's wins; ours is released outside the lock.
            let cached = Arc::clone(cached);
            drop(map);
            drop(sub);
            return Ok(cached);
        }
        if map.len() < SUB_BUFFERS_PER_SEGMENT {
            map.insert((offset, size), Arc::clone(&sub));
        }
        Ok(sub)
    }

    /// The number of sub-buffers cached.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Simulated> for SegmentMemory {
    fn from(_: Simulated) -> Self {
        Self::Simulated
    }
}

/// One segment of this crate's sources.
pub type SourceSegment = xpu_caching::source::SourceSegment<SegmentMemory>;

/// A simulated device whose segments are [`SegmentMemory::Simulated`] (see
/// [`xpu_caching::source::SimulatedSource`]).
pub type SimulatedSource = xpu_caching::source::SimulatedSource<SegmentMemory>;

/// A segment source of this crate's memory type, as a [`crate::DeviceCore`] holds it.
pub type DynSource = dyn SegmentSource<Memory = SegmentMemory>;
