//! [`Allocation`]: a block handed out by a [`CachingAllocator`](super::CachingAllocator),
//! returned to its stream's cache when dropped.

use std::sync::Arc;

use super::shard::Shard;
use super::stream_state::Handed;
use super::thread_cache::{with_local, ThreadCacheKey};
use crate::history::TraceAction;
use crate::source::SourceSegment;
use crate::stream::StreamKey;

/// A live block of a caching allocator over backend `B` (as the allocation behind
/// PyTorch's `DataPtr`); dropping it frees the block: reusable at once on its allocation
/// stream, and on other streams' behalf only after markers recorded on the streams named by
/// [`Allocation::record_stream`] complete.
pub struct Allocation<B: ThreadCacheKey> {
    pub(super) shard: Arc<Shard<B>>,
    block: u32,
    address: u64,
    block_size: u64,
    size: u64,
}

impl<B: ThreadCacheKey> Allocation<B> {
    #[inline]
    pub(super) fn new(shard: Arc<Shard<B>>, handed: Handed, size: u64) -> Self {
        Self {
            shard,
            block: handed.block,
            address: handed.addr,
            block_size: handed.size,
            size,
        }
    }

    /// Device address of the first byte: unique on the device while the allocation lives.
    #[must_use]
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Requested size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Size in bytes of the block backing the allocation (rounded; may exceed the request
    /// when the block was not split).
    #[must_use]
    pub fn allocated_size(&self) -> u64 {
        self.block_size
    }

    /// The allocation stream.
    #[must_use]
    pub fn stream(&self) -> StreamKey {
        self.shard.key
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.shard.key.device
    }

    /// Id of the allocator that handed the block out
    /// ([`CachingAllocator::id`](super::CachingAllocator::id)).
    #[must_use]
    pub fn owner_id(&self) -> u64 {
        self.shard.shared.id
    }

    /// Runs `f` on the segment holding the allocation and the allocation's byte offset in
    /// it (under no allocator lock: `f` may call the allocator, on this stream too); `None`
    /// if the block is unknown (never for a live allocation), and in a bad fork child
    /// ([`Backend::is_bad_fork`](crate::Backend::is_bad_fork): the lock may have been held at the fork).
    pub fn with_segment<R>(
        &self,
        f: impl FnOnce(&SourceSegment<B::Memory>, u64) -> R,
    ) -> Option<R> {
        if B::is_bad_fork() {
            return None;
        }
        self.shard.with_segment(self.block, |segment, address| {
            f(segment, address - segment.address)
        })
    }

    /// Marks the allocation as used on `stream` (as `Tensor.record_stream`); ignored for
    /// the allocation stream and for a stream already recorded. Does nothing in a bad fork
    /// child.
    pub fn record_stream(&self, stream: &B::Stream) {
        if B::is_bad_fork() {
            return;
        }
        self.shard.record_stream(self.block, stream);
    }
}

impl<B: ThreadCacheKey> std::fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("address", &format_args!("{:#x}", self.address))
            .field("size", &self.size)
            .field("stream", &self.shard.key)
            .finish()
    }
}

impl<B: ThreadCacheKey> Drop for Allocation<B> {
    #[inline]
    fn drop(&mut self) {
        // In a bad fork child the block stays with the parent's copy of the allocator
        // (leaked, its shard kept alive): taking the shard's lock could hang.
        if B::is_bad_fork() {
            std::mem::forget(self.shard.clone());
            return;
        }
        let shard = &self.shard;
        shard.shared.history.record(
            TraceAction::FreeRequested,
            self.address,
            self.size,
            shard.key.id,
        );
        with_local(&shard.shared, |local| {
            shard.free(self.block, || local.stats());
        });
    }
}
