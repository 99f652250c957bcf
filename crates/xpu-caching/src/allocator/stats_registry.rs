//! Per-thread statistics cells of one device allocator.
//!
//! Each thread that touches a device allocator gets its own statistics cell: every update
//! the thread makes (on any stream of the device) goes to its cell with plain loads and
//! stores (no lock, no read-modify-write: see [`super::stats_cell`]). Readers sum the cells.
//! Currents, accumulations and counters are exact sums; a device-wide peak is the sum of the
//! per-thread peaks, which is the exact peak when one thread makes every call (since creation
//! or the last peak reset) and an upper bound of it otherwise. When a thread exits, its cell
//! is folded into a "retired" cell (peaks keep adding up).
//!
//! A call that cannot use its thread's cell (the thread's allocator state is busy in an
//! outer call on the same thread, e.g. a segment-source hook calling its own allocator, or
//! gone at thread exit; a dropped shard's teardown) takes a spare cell for the duration of
//! the call: registered once like a thread's, written by that call alone, handed back after.
//! No lock is held while the call runs, which may run user code (a segment source), so no
//! other thread's call waits for it. There are as many spare cells as such calls ever ran
//! at once.

use std::sync::Arc;

use parking_lot::Mutex;

use super::stats_cell::{Generations, StatsCell, StatsWriter};
use crate::stats::MemoryStats;

/// All cells of one device allocator.
#[derive(Default)]
pub(crate) struct StatsRegistry {
    /// Cells of live threads. Readers hold this lock while summing (so a retiring cell is
    /// counted once); the cached path never takes it.
    cells: Mutex<Vec<Arc<StatsCell>>>,
    /// Cells of exited threads, folded together (written under `cells`).
    retired: StatsCell,
    /// Registered cells not in use, for calls that cannot use their thread's cell (see the
    /// module docs); a cell taken from here is written by the taking call only.
    spare: Mutex<Vec<Arc<StatsCell>>>,
    /// Reset generations.
    pub gens: Generations,
}

impl StatsRegistry {
    pub(super) fn register(&self) -> Arc<StatsCell> {
        let cell = Arc::new(StatsCell::default());
        self.cells.lock().push(cell.clone());
        cell
    }

    pub(super) fn retire(&self, cell: &Arc<StatsCell>) {
        let mut cells = self.cells.lock();
        if let Some(pos) = cells.iter().position(|c| Arc::ptr_eq(c, cell)) {
            cells.swap_remove(pos);
            let stats = cell.read(&self.gens);
            self.retired.write(&self.gens).merge(&stats);
        }
    }

    /// Runs `f` with a spare cell of its own (see the module docs), under no lock; the cell
    /// is handed back when `f` returns or unwinds.
    pub(super) fn with_spare<R>(&self, f: impl FnOnce(&StatsCell) -> R) -> R {
        let taken = self.spare.lock().pop();
        let cell = taken.unwrap_or_else(|| self.register());
        let spare = Spare {
            registry: self,
            cell,
        };
        f(&spare.cell)
    }

    /// Runs `f` with a write on a spare cell (see [`StatsRegistry::with_spare`]).
    pub(crate) fn with_fallback<R>(&self, f: impl FnOnce(&mut StatsWriter<'_>) -> R) -> R {
        self.with_spare(|cell| f(&mut cell.write(&self.gens)))
    }

    /// The sum of every cell.
    pub(crate) fn aggregate(&self) -> MemoryStats {
        let mut total = MemoryStats::default();
        let cells = self.cells.lock();
        for cell in cells.iter().map(AsRef::as_ref).chain([&self.retired]) {
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

/// A spare cell taken by one call; handed back on drop (also when the call unwinds: its
/// writer closed the write first, being dropped before this).
struct Spare<'a> {
    registry: &'a StatsRegistry,
    cell: Arc<StatsCell>,
}

impl Drop for Spare<'_> {
    fn drop(&mut self) {
        self.registry.spare.lock().push(self.cell.clone());
    }
}
