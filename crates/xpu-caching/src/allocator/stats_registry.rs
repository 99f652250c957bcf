//! Per-thread statistics cells of one device allocator.
//!
//! Each thread that touches a device allocator gets its own statistics cell: every update
//! the thread makes (on any stream of the device) goes to its cell with plain loads and
//! stores (no lock, no read-modify-write: see [`super::stats_cell`]). Readers sum the cells.
//! Currents, accumulations and counters are exact sums; a device-wide peak is the sum of the
//! per-thread peaks. A free counts in the cell that counted the block's hand-out (a debt
//! when another thread frees, see [`super::stats_cell`]), so the peaks of the figures that
//! allocations own (`allocation`, `allocated_bytes`, `active`, `active_bytes`,
//! `requested_bytes`, `oversize_allocations`) are exact when one thread hands every block
//! out (since creation or the last peak reset), whichever threads free them, and an upper
//! bound when several threads hand blocks out at once. The other peaks (segments, reserved
//! and inactive-split figures, counted by whichever thread changes a pool's structure) are
//! exact when one thread makes every call and an upper bound otherwise. When a thread exits,
//! its cell is folded into a "retired" cell: when no other thread exited while it lived, its
//! peaks count only what they add beyond the retired cell's currents at its start (threads
//! that follow one another keep the device's real high-water mark, as torch's one `Stat`
//! does; review h87), else they add up.
//!
//! # Slots
//! Each registered cell has a slot: its index in an arena that never moves a cell
//! ([`CellsShared::slots`](super::stats_cell::CellsShared)), so that a free reaches the
//! owner's debts from the slot its block recorded, without a lock. An exited thread's cell
//! stays owed to while blocks it handed out live (or wait to be deactivated): readers, peak
//! resets and later retirements fold those debts into the retired cell (under this
//! registry's lock). Once every block it counted is paid (its allocation and active counts
//! are zero), no debt can come for its slot, and the slot and its cell are reused by the
//! next cell registered (zeroed, its debts paid): the cells kept are those of live threads,
//! spare cells, and exited threads with live blocks (about 1.5 KiB each).
//!
//! A call that cannot use its thread's cell (the thread's allocator state is busy in an
//! outer call on the same thread, e.g. a segment-source hook calling its own allocator, or
//! gone at thread exit; a dropped shard's teardown) takes a spare cell for the duration of
//! the call: registered once like a thread's, written by that call alone, handed back after.
//! No lock is held while the call runs, which may run user code (a segment source), so no
//! other thread's call waits for it. There are as many spare cells as such calls ever ran
//! at once.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::stats_cell::{CellsShared, StatsCell, StatsWriter, DEBTS};
use crate::stats::MemoryStats;

/// All cells of one device allocator.
#[derive(Default)]
pub(crate) struct StatsRegistry {
    /// The cells and their slots. Readers hold this lock while summing (so a retiring cell
    /// is counted once); the cached path never takes it.
    cells: Mutex<Cells>,
    /// Cells of exited threads, folded together (written under `cells`).
    retired: StatsCell,
    /// Registered cells not in use, for calls that cannot use their thread's cell (see the
    /// module docs); a cell taken from here is written by the taking call only.
    spare: Mutex<Vec<Arc<StatsCell>>>,
    /// Reset generations and the cells by slot.
    pub gens: CellsShared,
}

/// The cells of a registry by state (under its lock).
#[derive(Default)]
struct Cells {
    /// Cells of live threads and spare cells.
    live: Vec<Arc<StatsCell>>,
    /// Cells of exited threads that blocks they counted as handed out may still owe to
    /// (folded into `StatsRegistry::retired`, their debts too, as they come).
    retired: Vec<Retired>,
    /// Slots whose cell no block counts any more, for new cells (see the module docs).
    free: Vec<u32>,
    /// The next slot never used.
    next: u32,
    /// Threads' cells retired so far (the retired cell's generation).
    retirements: u64,
    /// For each live cell, by slot: `retirements` and the retired cell's figures when it
    /// was registered (see [`StatsRegistry::retire`]).
    born: HashMap<u32, Born>,
}

/// What the registry knew when a cell was registered.
struct Born {
    retirements: u64,
    retired: MemoryStats,
}

/// An exited thread's cell that blocks may still owe to.
struct Retired {
    cell: Arc<StatsCell>,
    /// Its debts folded into the registry's retired cell so far.
    paid: [u64; DEBTS],
    /// Its blocks not paid yet: allocations plus active blocks (0: no debt can come).
    outstanding: i64,
}

/// Allocations plus active blocks that a cell counts (its blocks a debt may still come for).
fn outstanding(stats: &MemoryStats) -> i64 {
    stats
        .allocation
        .all
        .current
        .saturating_add(stats.active.all.current)
}

impl StatsRegistry {
    pub(super) fn register(&self) -> Arc<StatsCell> {
        let mut cells = self.cells.lock();
        let cell = match cells.free.pop() {
            Some(slot) => {
                let cell = self.gens.slots.get(slot).and_then(|c| c.get()).cloned();
                // A free slot's cell exists (it was registered before).
                let cell = cell.expect("a free statistics slot has a cell");
                cell.recycle();
                cell
            }
            None => {
                let slot = cells.next;
                // Each cell takes about 1.5 KiB: 2^32 - 1 of them at once cannot exist.
                assert!(
                    slot != super::stats_cell::NO_SLOT,
                    "statistics slots exhausted"
                );
                cells.next += 1;
                let cell = Arc::new(StatsCell::new(slot));
                let set = self.gens.slots.get_or_create(slot).set(cell.clone());
                debug_assert!(set.is_ok(), "a new statistics slot was taken");
                cell
            }
        };
        self.fold_retired(&mut cells);
        let born = Born {
            retirements: cells.retirements,
            retired: self.retired.read(&self.gens),
        };
        cells.born.insert(cell.slot(), born);
        cells.live.push(cell.clone());
        cell
    }

    pub(super) fn retire(&self, cell: &Arc<StatsCell>) {
        let mut cells = self.cells.lock();
        if let Some(pos) = cells.live.iter().position(|c| Arc::ptr_eq(c, cell)) {
            cells.live.swap_remove(pos);
            let born = cells.born.remove(&cell.slot());
            let (mut stats, paid) = cell.read_owed(&self.gens);
            if let Some(born) = born.filter(|b| b.retirements == cells.retirements) {
                // No other cell was retired while this one lived: the retired cell's
                // currents have only fallen since it was registered (exited threads free,
                // they do not allocate), so the retired threads together never held more
                // than those currents plus this thread's peak while it lived. Its peaks
                // count only what that adds to the retired cell's peaks (sequential
                // threads: the device's high-water mark, as torch's one `Stat` keeps it).
                let retired = self.retired.read(&self.gens);
                stats.zip_stats(&born.retired, &retired, |own, then, now| {
                    let reach = then.current.saturating_add(own.peak);
                    own.peak = reach.saturating_sub(now.peak).clamp(0, own.peak.max(0));
                });
            }
            cells.retirements += 1;
            self.retired.write(&self.gens).merge(&stats);
            let outstanding = outstanding(&stats);
            if outstanding > 0 {
                cells.retired.push(Retired {
                    cell: cell.clone(),
                    paid,
                    outstanding,
                });
            } else {
                cells.free.push(cell.slot());
            }
        }
    }

    /// Folds the debts owed to exited threads' cells since the last fold into the retired
    /// cell; frees the slots of those that no block counts any more.
    fn fold_retired(&self, cells: &mut Cells) {
        if cells.retired.is_empty() {
            return;
        }
        let st = self.retired.write(&self.gens);
        let Cells { retired, free, .. } = cells;
        retired.retain_mut(|r| {
            let blocks = st.pay(&mut r.paid, &r.cell.owed());
            r.outstanding = r
                .outstanding
                .saturating_sub(i64::try_from(blocks).unwrap_or(i64::MAX));
            if r.outstanding > 0 {
                return true;
            }
            free.push(r.cell.slot());
            false
        });
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
        let mut cells = self.cells.lock();
        self.fold_retired(&mut cells);
        for cell in cells.live.iter().map(AsRef::as_ref).chain([&self.retired]) {
            total.merge(&cell.read(&self.gens));
        }
        total
    }

    /// Requests a peak reset: every cell applies it at its next write (readers to their
    /// copy), after paying the debts owed now.
    pub(crate) fn reset_peak(&self) {
        let mut cells = self.cells.lock();
        self.fold_retired(&mut cells);
        for cell in &cells.live {
            cell.note_peak_reset();
        }
        self.gens.bump_peak();
    }

    pub(crate) fn reset_accumulated(&self) {
        self.gens.bump_accumulated();
    }

    /// Slots handed out so far (the cells registered at once, at most), and how many of
    /// them are free now.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> (u32, usize) {
        let cells = self.cells.lock();
        (cells.next, cells.free.len())
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
