//! [`Allocation`]: a block handed out by a [`CachingAllocator`](super::CachingAllocator),
//! returned to its stream's cache when dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::free_cache::count_free;
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
    handed: Handed,
    size: u64,
    /// A `record_stream` named another stream: the free goes through the stream's lock
    /// (markers), never into a thread's cache.
    recorded: AtomicBool,
}

impl<B: ThreadCacheKey> Allocation<B> {
    #[inline]
    pub(super) fn new(shard: Arc<Shard<B>>, handed: Handed, size: u64) -> Self {
        Self {
            shard,
            handed,
            size,
            recorded: AtomicBool::new(false),
        }
    }

    /// Device address of the first byte: unique on the device while the allocation lives.
    ///
    /// With [`Relocation::Merge`](crate::config::Relocation::Merge) over simulated segments
    /// (the only memory that relocates), this is the address at which the block was handed
    /// out: a later move is not reflected (snapshots show the block's current place).
    #[must_use]
    pub fn address(&self) -> u64 {
        self.handed.addr
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
        self.handed.size
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
        self.shard
            .with_segment(self.handed.block, |segment, address| {
                f(segment, address - segment.address)
            })
    }

    /// Waits on the host until every command enqueued on the allocation stream before this
    /// call completed (a marker recorded on the stream, then waited for; as
    /// `torch.cuda.Stream.synchronize` of the allocation stream). No allocator lock is held
    /// while waiting. For callers that must know the bytes of this block idle: the commands
    /// of the block's earlier owners on this stream are then complete (uses on other streams
    /// were already waited for before the block was handed out, through their markers).
    ///
    /// # Errors
    /// The marker's [`MarkerError`](crate::MarkerError): a failed marker or wait, a bad fork
    /// child.
    pub fn wait_for_stream(&self) -> Result<(), crate::MarkerError> {
        if B::is_bad_fork() {
            return Err(crate::MarkerError::message("in a bad fork child"));
        }
        let stream = self.shard.stream();
        let marker = B::record_marker(&stream)?;
        B::wait(&marker)
    }

    /// Marks the allocation as used on `stream` (as `Tensor.record_stream`); ignored for
    /// the allocation stream and for a stream already recorded. Does nothing in a bad fork
    /// child.
    pub fn record_stream(&self, stream: &B::Stream) {
        if B::is_bad_fork() {
            return;
        }
        if B::stream_key(stream) != self.shard.key {
            self.recorded.store(true, Ordering::Relaxed);
        }
        self.shard.record_stream(self.handed.block, stream);
    }
}

impl<B: ThreadCacheKey> std::fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("address", &format_args!("{:#x}", self.handed.addr))
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
        let shared = &shard.shared;
        let (handed, size) = (&self.handed, self.size);
        shared
            .history
            .record(TraceAction::FreeRequested, handed.addr, size, shard.key.id);
        // Relaxed: whoever drops the allocation owns it, after every `record_stream` on it.
        let recorded = *self.recorded.get_mut();
        with_local(shared, |local| {
            // A block with no recorded use goes into this thread's cache when its bin has
            // room (`free_cache`): no lock.
            if !recorded {
                if let Some(bins) = local.bins {
                    if bins.put(shard, handed, size, (local.cell, local.gens)) {
                        let mut st = local.cell.write(local.gens);
                        if shared.history.is_enabled() {
                            shared.history.record(
                                TraceAction::FreeCompleted,
                                handed.addr,
                                size,
                                shard.key.id,
                            );
                        }
                        count_free(&mut st, handed, size);
                        return;
                    }
                }
            }
            shard.free(handed.block, || local.cell.write(local.gens));
        });
    }
}
