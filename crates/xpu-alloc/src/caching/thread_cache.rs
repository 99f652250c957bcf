//! What a thread keeps per device allocator: its statistics cell (registered in the
//! device's [`StatsRegistry`](super::registry::StatsRegistry)) and the shards it allocated
//! from recently, so the cached path finds both without a lock.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use super::cell::{Generations, StatsCell, StatsWriter};
use super::device_wide::DeviceShared;
use super::shard::Shard;
use crate::stream::StreamKey;

struct Entry {
    id: u64,
    shared: Weak<DeviceShared>,
    cell: Arc<StatsCell>,
    shard: Vec<(StreamKey, Weak<Shard>)>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.stats.retire(&self.cell);
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// What a thread has for one device allocator.
pub(crate) struct Local<'a> {
    /// The thread's statistics cell (or the fallback cell, locked).
    cell: &'a StatsCell,
    gens: &'a Generations,
    /// The shards this thread allocated from recently on this device (most recent first).
    pub shard: &'a mut Vec<(StreamKey, Weak<Shard>)>,
}

impl<'a> Local<'a> {
    /// Opens a write on the thread's statistics cell.
    #[inline]
    pub(crate) fn stats(&self) -> StatsWriter<'a> {
        self.cell.write(self.gens)
    }
}

#[inline]
fn entry<'v>(entries: &'v mut Vec<Entry>, shared: &Arc<DeviceShared>) -> &'v mut Entry {
    if entries.first().is_some_and(|e| e.id == shared.id) {
        return &mut entries[0];
    }
    entry_slow(entries, shared)
}

#[cold]
fn entry_slow<'v>(entries: &'v mut Vec<Entry>, shared: &Arc<DeviceShared>) -> &'v mut Entry {
    if let Some(pos) = entries.iter().position(|e| e.id == shared.id) {
        return &mut entries[pos];
    }
    entries.retain(|e| e.shared.strong_count() > 0);
    entries.push(Entry {
        id: shared.id,
        shared: Arc::downgrade(shared),
        cell: shared.stats.register(),
        shard: Vec::new(),
    });
    let last = entries.len() - 1;
    &mut entries[last]
}

/// Runs `f` with this thread's cell and shard cache for `shared`.
pub(crate) fn with_local<R>(shared: &Arc<DeviceShared>, f: impl FnOnce(Local<'_>) -> R) -> R {
    let mut slot = Some(f);
    let done = LOCAL.try_with(|local| {
        let mut entries = local.try_borrow_mut().ok()?;
        let f = slot.take()?;
        let e = entry(&mut entries, shared);
        Some(f(Local {
            cell: &e.cell,
            gens: &shared.stats.gens,
            shard: &mut e.shard,
        }))
    });
    if let Ok(Some(result)) = done {
        return result;
    }
    let mut no_cache = Vec::new();
    let stats = &shared.stats;
    let _guard = stats.fallback_lock.lock();
    match slot.take() {
        Some(f) => f(Local {
            cell: &stats.fallback,
            gens: &stats.gens,
            shard: &mut no_cache,
        }),
        // `slot` is only emptied right before `f` runs and returns `Some`.
        None => unreachable!("thread-local closure consumed without a result"),
    }
}
