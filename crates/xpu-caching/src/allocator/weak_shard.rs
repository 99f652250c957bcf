//! [`WeakShard`]: a weak handle on one stream's shard, through which the shards of a dropped
//! private pool stay reachable for `empty_cache`.

use super::pending::wait_markers;
use super::shard::Shard;
use super::thread_cache::{with_local, ThreadCacheKey};
use crate::backend::Backend;

/// A weak handle on one stream's shard of a
/// [`CachingAllocator`](super::CachingAllocator) ([`CachingAllocator::weak_shards`](super::CachingAllocator::weak_shards)):
/// it does not keep the shard alive (its live allocations do).
#[derive(Clone)]
pub struct WeakShard<B: Backend>(pub(crate) std::sync::Weak<Shard<B>>);

impl<B: ThreadCacheKey> WeakShard<B> {
    /// Whether the shard still lives.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// The shard's segments with their blocks, as
    /// [`CachingAllocator::snapshot`](super::CachingAllocator::snapshot) shows them; none
    /// when the shard is gone, or in a bad fork child. Takes the shard's lock; no driver
    /// call, no wait.
    pub fn snapshot(&self) -> Vec<super::snapshot::SegmentSnapshot> {
        if B::is_bad_fork() {
            return Vec::new();
        }
        let Some(shard) = self.0.upgrade() else {
            return Vec::new();
        };
        // Blocks in threads' caches are shown free, coalesced, as the allocator's snapshot
        // shows them.
        with_local(&shard.shared, |local| {
            let mut state = shard.lock();
            let mut st = local.stats();
            state.flush_thread_caches(&mut st);
            state.segments_snapshot()
        })
    }

    /// Releases the shard's cached whole free segments if it still lives (as `empty_cache`
    /// for one stream): waits for its pending frees and for the work enqueued on its stream
    /// ([`Backend::wait`]), then frees them. Call without any allocator lock held. When the
    /// shard's last allocation was freed meanwhile, it drops here (its teardown runs as the
    /// allocator was set up to). Does nothing in a bad fork child
    /// ([`Backend::is_bad_fork`]).
    pub fn release_cached(&self) {
        if B::is_bad_fork() {
            return;
        }
        if let Some(shard) = self.0.upgrade() {
            release_cached(&shard);
        }
    }
}

/// Releases this shard's cached whole free segments (as `empty_cache` for one stream):
/// waits for its pending frees and for the work enqueued on its stream, then frees them.
/// Call without any allocator lock held. Used for the shards of a dropped private pool
/// that live on through their allocations.
fn release_cached<B: ThreadCacheKey>(shard: &Shard<B>) {
    // Collected under the stream's lock, waited for after it is released (a temporary guard
    // in the call's argument would hold the lock through the wait).
    let markers = shard.lock().pending_markers();
    wait_markers::<B>(&markers);
    let batch = with_local(&shard.shared, |local| {
        let mut state = shard.lock();
        let mut st = local.stats();
        state.flush_thread_caches(&mut st);
        state.process_events(&mut st);
        state.take_releasable(&mut st)
    });
    if let Some(batch) = batch {
        batch.wait();
        with_local(&shard.shared, |local| {
            batch.free(&shard.shared, &mut local.stats())
        });
    }
}
