//! A snapshot of the segments and blocks (as `torch.cuda.memory_snapshot`, reduced).

use crate::size::PoolKind;
use crate::stream::StreamKey;

use super::thread_cache::ThreadCacheKey;
use super::CachingAllocator;

/// State of a block in a [`SegmentSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out ("active_allocated").
    Allocated,
    /// Freed by the user, waiting for stream markers ("active_pending_free").
    PendingFree,
    /// Free in a pool ("inactive").
    Inactive,
}

/// One block of a segment. Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSnapshot {
    /// Device address.
    pub address: u64,
    /// Size (rounded).
    pub size: u64,
    /// Requested size (0 unless allocated).
    pub requested: u64,
    /// State.
    pub state: BlockState,
}

/// One segment. Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// Stream owning the segment.
    pub stream: StreamKey,
    /// Device address of the first byte.
    pub address: u64,
    /// Size.
    pub size: u64,
    /// Pool of its blocks.
    pub pool: PoolKind,
    /// Blocks by address; their sizes add up to `size`.
    pub blocks: Vec<BlockSnapshot>,
}

impl<B: ThreadCacheKey> CachingAllocator<B> {
    /// Every segment with its blocks, sorted by address. None in a bad fork child
    /// ([`Backend::is_bad_fork`](crate::Backend::is_bad_fork): the shards' locks may have been held at the fork).
    #[must_use]
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        if B::is_bad_fork() {
            return Vec::new();
        }
        // Blocks in threads' caches are shown free, coalesced (`free_cache`).
        self.flush_thread_caches();
        let mut out = Vec::new();
        for shard in self.all_shards() {
            out.extend(shard.lock().segments_snapshot());
        }
        // Dropped shards whose teardown still waits: their segments are still reserved
        // (review h87).
        out.extend(self.shared().0.in_teardown_snapshot());
        // Segments taken out of their shards to be released and not freed yet (waiting for
        // their stream, kept while their marker reads pending or failed, in the source's
        // free): still reserved (reviews h60, h88: the statistics counted them, the snapshot
        // did not). Read last: a segment taken out meanwhile is in a shard read before or
        // here, shown once.
        self.shared().0.releasing.extend_snapshot(&mut out);
        out.sort_by_key(|s| s.address);
        out
    }
}
