//! A pinned block: one `CL_MEM_ALLOC_HOST_PTR` buffer of a power-of-two size, and the streams
//! whose queued work uses it.

use parking_lot::Mutex;
use xpu_device::backend::PinnedBuffer;
use xpu_stream::Stream;

/// One pinned host block. The memory is host memory any device can copy from, but the
/// OpenCL buffer behind it belongs to one device's context, so a block is cached for that
/// device only (the cache key is (device, size class)).
///
/// Ownership moves: the [`HostPtr`](super::HostPtr) while in use, then the pending queue while
/// stream markers are outstanding, then its size class's free list. Nothing else refers to the
/// block, so the memory is never handed out twice.
#[derive(Debug)]
pub(crate) struct Block {
    /// Device whose context owns the buffer.
    pub(crate) device: usize,
    /// Size in bytes (a power of two).
    pub(crate) size: u64,
    /// The mapped buffer.
    pub(crate) buffer: PinnedBuffer,
    /// Streams recorded during the current use (`record_stream`): cleared when the block is
    /// freed, so a reused block never carries a marker of an earlier use (or of another
    /// device's stream).
    streams: Mutex<Vec<Stream>>,
}

impl Block {
    pub(crate) fn new(device: usize, size: u64, buffer: PinnedBuffer) -> Block {
        Block {
            device,
            size,
            buffer,
            streams: Mutex::new(Vec::new()),
        }
    }

    /// The size class: log2 of `size`, a power of two (see `class::class_of`).
    pub(crate) fn class(&self) -> usize {
        self.size.trailing_zeros() as usize
    }

    /// Adds `stream` to the streams of the current use (once).
    pub(crate) fn record(&self, stream: &Stream) {
        let mut set = self.streams.lock();
        if !set.contains(stream) {
            set.push(*stream);
        }
    }

    /// The streams of the current use.
    pub(crate) fn streams(&self) -> Vec<Stream> {
        self.streams.lock().clone()
    }

    /// The stream set, without locking: the caller owns the block exclusively.
    pub(crate) fn streams_mut(&mut self) -> &mut Vec<Stream> {
        self.streams.get_mut()
    }
}
