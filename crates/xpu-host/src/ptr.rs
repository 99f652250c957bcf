//! [`HostPtr`]: a pinned host allocation that returns its block to the allocator on drop.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use xpu_device::backend::PinnedBuffer;
use xpu_stream::Stream;

use super::allocator::Shared;
use super::block::Block;
use super::error::HostError;

/// How a [`HostPtr`] reaches its allocator (and keeps it alive).
#[derive(Debug)]
pub(crate) enum Owner {
    /// The process-wide allocator, which is never dropped: no reference count.
    Global(&'static Arc<Shared>),
    /// Any other allocator.
    Counted(Arc<Shared>),
}

impl Owner {
    #[inline]
    fn shared(&self) -> &Arc<Shared> {
        match self {
            Owner::Global(s) => s,
            Owner::Counted(s) => s,
        }
    }
}

struct Live {
    owner: Owner,
    block: Box<Block>,
}

/// Pinned host memory from the caching host allocator, as the `DataPtr` of PyTorch's
/// `CachingHostAllocator`: a byte slice view (`Deref<Target = [u8]>`), `Send + Sync`, and
/// freed on drop. Freeing returns the block to its size class at once, or, when queued work
/// recorded a use ([`HostPtr::record_stream`], or a [`HostCopy`](super::HostCopy) copy), only
/// after that work completed.
///
/// The slice is the requested length; the block behind it is the next power of two
/// ([`HostPtr::allocated_size`]).
///
/// Host access is tied to copy completion (the block's [`PinnedBuffer`] tracks every copy
/// made on it, by [`HostCopy`](super::HostCopy) or by the backend directly): reading
/// ([`HostPtr::as_slice`], `Deref`) waits for the device-to-host copies into the block, and
/// writing ([`HostPtr::as_mut_slice`], `DerefMut`) waits for every copy in flight on it. Where
/// PyTorch leaves the bytes of a `non_blocking=True` copy unspecified until the stream is
/// synchronized, xpu waits instead, so the bytes never change under a live borrow. When no copy
/// is in flight, access makes no driver call.
pub struct HostPtr {
    live: Option<Live>,
    device: usize,
    len: usize,
}

impl HostPtr {
    #[inline]
    pub(crate) fn new(owner: Owner, block: Box<Block>, len: usize) -> HostPtr {
        let device = block.device;
        HostPtr {
            live: Some(Live { owner, block }),
            device,
            len,
        }
    }

    /// An empty pointer for `device` (what a zero-size allocation returns): no block, no
    /// allocator involved.
    #[must_use]
    pub fn empty(device: usize) -> HostPtr {
        HostPtr {
            live: None,
            device,
            len: 0,
        }
    }

    pub(crate) fn block(&self) -> Option<&Block> {
        self.live.as_ref().map(|l| &*l.block)
    }

    /// Requested size in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-size allocation.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size of the block in bytes (the request rounded up to a power of two); 0 when empty.
    #[must_use]
    pub fn allocated_size(&self) -> u64 {
        self.block().map_or(0, |b| b.size)
    }

    /// The device whose context owns the block.
    #[must_use]
    pub fn device(&self) -> usize {
        self.device
    }

    /// Host address of the first byte (null when empty). Unique among live allocations.
    #[must_use]
    pub fn as_ptr(&self) -> *const u8 {
        self.block()
            .map_or(std::ptr::null(), |b| b.buffer.host_ptr().cast_const())
    }

    /// Host address of the first byte as an integer (0 when empty), e.g. to see whether a
    /// block was reused.
    #[must_use]
    pub fn address(&self) -> usize {
        self.as_ptr() as usize
    }

    /// The bytes. Waits first for the device-to-host copies into this block that are still in
    /// flight ([`PinnedBuffer::as_slice`]): a copy held back by an unset user event blocks the
    /// caller until the event is set.
    #[must_use]
    ///
    /// Empty in a bad fork child (no wait: the copies were the parent's).
    pub fn as_slice(&self) -> &[u8] {
        if xpu_device::fork::is_in_bad_fork() {
            return &[];
        }
        match &self.live {
            Some(l) => l.block.buffer.as_slice().get(..self.len).unwrap_or(&[]),
            None => &[],
        }
    }

    /// The bytes, mutable. Waits first for every copy in flight on this block, in either
    /// direction ([`PinnedBuffer::as_mut_slice`]).
    ///
    /// Empty in a bad fork child (no wait).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if xpu_device::fork::is_in_bad_fork() {
            return &mut [];
        }
        let len = self.len;
        match &mut self.live {
            Some(l) => l
                .block
                .buffer
                .as_mut_slice()
                .get_mut(..len)
                .unwrap_or(&mut []),
            None => &mut [],
        }
    }

    /// The pinned buffer behind the allocation (`None` when empty), for host-to-device copies
    /// made with the backend directly ([`CommandQueue::copy_pinned`]). The copy is
    /// tracked on the buffer: host writes wait for it, and a freed block whose copies are
    /// still in flight is not reused before they complete, even without
    /// [`HostPtr::record_stream`]. The buffer may be longer than [`HostPtr::len`]
    /// ([`HostPtr::allocated_size`]).
    ///
    /// [`CommandQueue::copy_pinned`]: xpu_device::backend::CommandQueue::copy_pinned
    #[must_use]
    ///
    /// `None` in a bad fork child (the buffer is the parent's driver state).
    pub fn pinned(&self) -> Option<&PinnedBuffer> {
        if xpu_device::fork::is_in_bad_fork() {
            return None;
        }
        self.block().map(|b| &b.buffer)
    }

    /// The pinned buffer behind the allocation, exclusively (`None` when empty), for
    /// device-to-host copies made with the backend directly
    /// ([`CommandQueue::copy_pinned`]); tracked as for [`HostPtr::pinned`].
    ///
    /// Replacing the buffer (`std::mem::swap`) is allowed but pointless: a block whose
    /// buffer no longer has the block's size is released when freed instead of being cached.
    /// [`HostPtr::len`] stays the requested size; when the new buffer is shorter than that,
    /// [`HostPtr::as_slice`] and [`HostPtr::as_mut_slice`] are empty (review h16).
    ///
    /// [`CommandQueue::copy_pinned`]: xpu_device::backend::CommandQueue::copy_pinned
    ///
    /// `None` in a bad fork child.
    pub fn pinned_mut(&mut self) -> Option<&mut PinnedBuffer> {
        if xpu_device::fork::is_in_bad_fork() {
            return None;
        }
        self.live.as_mut().map(|l| &mut l.block.buffer)
    }

    /// Marks a use by work queued on `stream` so far, as
    /// `CachingHostAllocator_recordEvent`: when this pointer is freed, the block is reused
    /// only after a marker recorded on `stream` at that moment completes. Returns `Ok(true)`
    /// when recorded, `Ok(false)` (and does nothing) for an empty pointer, and in a bad fork
    /// child. The set lasts for this allocation only. A stream recorded before a capture began
    /// and still captured when the pointer is freed cannot get its marker then (nor be
    /// synchronized): the block is released instead of being cached.
    ///
    /// # Errors
    /// [`HostError::Stream`] with [`StreamError::Capturing`] (naming the stream's device and
    /// id) while a graph captures `stream`, for an empty pointer too; nothing is recorded.
    /// Commands on a capturing stream go through the capture handle, and a stream recorded
    /// here would get its free-time marker on the capturing stream, where it cannot be
    /// recorded (as torch.cuda refuses `cudaEventRecord` on a capturing stream outside the
    /// graph).
    ///
    /// [`StreamError::Capturing`]: xpu_stream::StreamError::Capturing
    pub fn record_stream(&self, stream: &Stream) -> Result<bool, HostError> {
        if xpu_device::fork::is_in_bad_fork() {
            return Ok(false);
        }
        stream.check_not_capturing("pinned host record_stream")?;
        Ok(self.record_use(stream))
    }

    /// Records `stream` without the capture check, for a copy already enqueued on it (the
    /// check ran when its queue was resolved). False for an empty pointer.
    pub(crate) fn record_use(&self, stream: &Stream) -> bool {
        match self.block() {
            Some(b) => {
                b.record(stream);
                true
            }
            None => false,
        }
    }

    /// The streams recorded during this allocation, in recording order.
    #[must_use]
    /// Empty in a bad fork child (the set's lock may have been held at the fork).
    pub fn recorded_streams(&self) -> Vec<Stream> {
        if xpu_device::fork::is_in_bad_fork() {
            return Vec::new();
        }
        self.block().map_or_else(Vec::new, Block::streams)
    }
}

impl Deref for HostPtr {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for HostPtr {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for HostPtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostPtr")
            .field("device", &self.device)
            .field("address", &format_args!("{:#x}", self.address()))
            .field("len", &self.len)
            .field("allocated_size", &self.allocated_size())
            .finish()
    }
}

impl Drop for HostPtr {
    fn drop(&mut self) {
        // In a child forked after OpenCL was initialized, the block stays with the parent's
        // copy of the allocator (leaked): freeing records markers and takes locks.
        if let Some(Live { owner, block }) = xpu_device::fork::take_unless_bad_fork(&mut self.live)
        {
            Shared::free(owner.shared(), block);
        }
    }
}
