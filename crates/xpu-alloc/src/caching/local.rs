//! Per-thread statistics cells and the thread-local cache of shards.
//!
//! Each thread that touches a device allocator gets its own statistics cell: every update
//! the thread makes (on any stream of the device) goes to its cell with plain loads and
//! stores (no lock, no read-modify-write: see [`super::cell`]). Readers sum the cells. Currents, accumulations and
//! counters are exact sums; a device-wide peak is the sum of the per-thread peaks, which is
//! the exact peak when one thread makes every call (since creation or the last peak reset)
//! and an upper bound of it otherwise. When a thread exits, its cell is folded into a
//! "retired" cell (peaks keep adding up).

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, ReentrantMutex};

pub(crate) use super::cell::StatsCell;
use super::cell::{Generations, StatsWriter};
use super::shard::Shard;
use super::shared::DeviceShared;
use crate::stats::MemoryStats;
use crate::stream::StreamKey;

/// All cells of one device allocator.
#[derive(Default)]
pub(crate) struct StatsRegistry {
    /// Cells of live threads. Readers hold this lock while summing (so a retiring cell is
    /// counted once); the cached path never takes it.
    cells: Mutex<Vec<Arc<StatsCell>>>,
    /// Cells of exited threads, folded together (written under `cells`).
    retired: StatsCell,
    /// Used when the thread-local cache is unavailable (thread exiting, re-entrancy);
    /// written under `fallback_lock`.
    fallback: StatsCell,
    fallback_lock: ReentrantMutex<()>,
    /// Reset generations.
    pub gens: Generations,
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
            let stats = cell.read(&self.gens);
            self.retired.write(&self.gens).merge(&stats);
        }
    }

    /// Runs `f` with a write on the shared fallback cell.
    pub(crate) fn with_fallback<R>(&self, f: impl FnOnce(&mut StatsWriter<'_>) -> R) -> R {
        let _guard = self.fallback_lock.lock();
        f(&mut self.fallback.write(&self.gens))
    }

    /// The sum of every cell.
    pub(crate) fn aggregate(&self) -> MemoryStats {
        let mut total = MemoryStats::default();
        let cells = self.cells.lock();
        for cell in cells
            .iter()
            .map(AsRef::as_ref)
            .chain([&self.retired, &self.fallback])
        {
            total.merge(&cell.read(&self.gens));
        }
        total
    }

    pub(crate) fn reset_peak(&self) {
        self.gens.bump_peak();
    }

    pub(crate) fn reset_accumulated(&self) {
        self.gens.bump_accumulated();
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
