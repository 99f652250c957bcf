//! [`ShardCache`]: the shards a thread allocated from recently on one device, so the cached
//! path finds its stream's shard without the allocator's shard-map lock.

use std::sync::{Arc, Weak};

use super::shard::Shard;
use crate::backend::Backend;
use crate::stream::StreamKey;

/// Shards cached per thread (most recently used first).
const SHARD_CACHE: usize = 8;

/// A thread's recently used shards of one allocator, most recent first, at most
/// `SHARD_CACHE` (weak: a cached shard does not keep its stream alive).
pub(crate) struct ShardCache<B: Backend>(Vec<(StreamKey, Weak<Shard<B>>)>);

impl<B: Backend> ShardCache<B> {
    /// An empty cache (allocates nothing).
    pub(crate) const fn new() -> Self {
        Self(Vec::new())
    }

    /// The shard of `key` when it is the thread's most recent one and still alive (the hit
    /// of the cached path: one comparison and one reference count).
    #[inline(always)]
    pub(crate) fn most_recent(&self, key: StreamKey) -> Option<Arc<Shard<B>>> {
        match self.0.first() {
            Some((k, weak)) if *k == key => weak.upgrade(),
            _ => None,
        }
    }

    /// The shard of `key` past [`ShardCache::most_recent`]: an older cached one (moved to the
    /// front), else `lookup(key)`'s (remembered first). No user code runs here.
    #[cold]
    #[inline(never)]
    pub(crate) fn find(
        &mut self,
        key: StreamKey,
        lookup: impl FnOnce(StreamKey) -> Option<Arc<Shard<B>>>,
    ) -> Option<Arc<Shard<B>>> {
        if let Some(pos) = self.0.iter().position(|(k, _)| *k == key) {
            let entry = self.0.remove(pos);
            if let Some(shard) = entry.1.upgrade() {
                self.0.insert(0, entry);
                return Some(shard);
            }
        }
        let shard = lookup(key)?;
        self.remember(key, &shard);
        Some(shard)
    }

    /// Puts `shard` first, as the shard of `key`.
    pub(crate) fn remember(&mut self, key: StreamKey, shard: &Arc<Shard<B>>) {
        self.0.retain(|(k, _)| *k != key);
        self.0.insert(0, (key, Arc::downgrade(shard)));
        self.0.truncate(SHARD_CACHE);
    }
}
