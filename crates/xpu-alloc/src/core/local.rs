//! Per-thread statistics cells and the thread-local cache of shards.
//!
//! Each thread that touches a device allocator gets its own statistics cell: every update
//! the thread makes (on any stream of the device) goes to its cell, under a mutex no other
//! thread takes on the cached path. Readers sum the cells. Currents, accumulations and
//! counters are exact sums; a device-wide peak is the sum of the per-thread peaks, which is
//! the exact peak when one thread makes every call (since creation or the last peak reset)
//! and an upper bound of it otherwise. When a thread exits, its cell is folded into a
//! "retired" cell (peaks keep adding up).

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::shard::Shard;
use super::shared::DeviceShared;
use crate::stats::MemoryStats;
use crate::stream::StreamKey;

/// Statistics updated by one thread.
#[derive(Default)]
pub(crate) struct StatsCell {
    pub stats: Mutex<MemoryStats>,
}

/// All cells of one device allocator.
#[derive(Default)]
pub(crate) struct StatsRegistry {
    cells: Mutex<Vec<Arc<StatsCell>>>,
    /// Cells of exited threads, folded together.
    retired: StatsCell,
    /// Used when the thread-local cache is unavailable (thread exiting, re-entrancy).
    pub fallback: StatsCell,
}

impl StatsRegistry {
    fn register(&self) -> Arc<StatsCell> {
        let cell = Arc::new(StatsCell::default());
        self.cells.lock().push(cell.clone());
        cell
    }

    fn retire(&self, cell: &Arc<StatsCell>) {
        let mut cells = self.cells.lock();
        if let Some(pos) = cells.iter().position(|c| Arc::ptr_eq(c, cell)) {
            cells.swap_remove(pos);
            drop(cells);
            let stats = *cell.stats.lock();
            self.retired.stats.lock().merge(&stats);
        }
    }

    fn for_each(&self, mut f: impl FnMut(&mut MemoryStats)) {
        let cells: Vec<Arc<StatsCell>> = self.cells.lock().clone();
        for cell in &cells {
            f(&mut cell.stats.lock());
        }
        f(&mut self.retired.stats.lock());
        f(&mut self.fallback.stats.lock());
    }

    /// The sum of every cell.
    pub(crate) fn aggregate(&self) -> MemoryStats {
        let mut total = MemoryStats::default();
        self.for_each(|s| total.merge(s));
        total
    }

    pub(crate) fn reset_peak(&self) {
        self.for_each(MemoryStats::reset_peak);
    }

    pub(crate) fn reset_accumulated(&self) {
        self.for_each(MemoryStats::reset_accumulated);
    }
}

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
    /// The thread's statistics cell.
    pub stats: &'a StatsCell,
    /// The shards this thread allocated from recently on this device (most recent first).
    pub shard: &'a mut Vec<(StreamKey, Weak<Shard>)>,
}

fn entry<'v>(entries: &'v mut Vec<Entry>, shared: &Arc<DeviceShared>) -> &'v mut Entry {
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
            stats: &e.cell,
            shard: &mut e.shard,
        }))
    });
    if let Ok(Some(result)) = done {
        return result;
    }
    let mut no_cache = Vec::new();
    match slot.take() {
        Some(f) => f(Local {
            stats: &shared.stats.fallback,
            shard: &mut no_cache,
        }),
        // `slot` is only emptied right before `f` runs and returns `Some`.
        None => unreachable!("thread-local closure consumed without a result"),
    }
}
