//! Per-thread statistics cells of one device allocator.
//!
//! Each thread that touches a device allocator gets its own statistics cell: every update
//! the thread makes (on any stream of the device) goes to its cell with plain loads and
//! stores (no lock, no read-modify-write: see [`super::stats_cell`]). Readers sum the cells.
//! Currents, accumulations and counters are exact sums; a device-wide peak is the sum of the
//! per-thread peaks, which is the exact peak when one thread makes every call (since creation
//! or the last peak reset) and an upper bound of it otherwise. When a thread exits, its cell
//! is folded into a "retired" cell (peaks keep adding up).

use std::sync::Arc;

use parking_lot::{Mutex, ReentrantMutex};

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
    /// Used when the thread-local cache is unavailable (thread exiting, re-entrancy);
    /// written under `fallback_lock`.
    pub(super) fallback: StatsCell,
    pub(super) fallback_lock: ReentrantMutex<()>,
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
