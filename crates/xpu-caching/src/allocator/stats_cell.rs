//! A statistics cell with one writer at a time and lock-free readers (a sequence lock).
//!
//! Each thread's cell is written only by its thread (the cached path then makes plain
//! relaxed loads and stores: no read-modify-write, no lock); readers copy a cell between
//! two reads of its sequence word and retry while a write is in progress, so a read sees
//! the cell between two operations. Resets requested by other threads are not written into
//! the cell: they bump a generation that readers apply to their copy and the owner applies
//! at its next write.
//!
//! # Debts: frees on another thread
//! A block's free decreases the statistics of the cell that counted its hand-out (its
//! *owner*, named by the cell's slot, which the block and its `Allocation` record), so that
//! a thread that only allocates (another frees: a producer/consumer pipeline) does not see
//! its current, and so its peak, grow without bound. When the freeing thread's cell is the
//! owner, the free writes it as before. Otherwise (out of line) the freeing thread adds the
//! decreases of `allocation`, `allocated_bytes`, `active`, `active_bytes`,
//! `requested_bytes` (per pool) and `oversize_allocations` to the owner's `owed` totals with
//! atomic adds and sets its `pending` flag; the owner pays them at its next write, before
//! any increase of that write computes a peak (one relaxed load of the flag per write; the
//! fold itself out of line), as decreases of its own (current down, freed total up, so the
//! derived `allocated` total stays what the owner handed out). Readers pay the unpaid debts
//! on their copy, as the owner's next write would: a read after a free sees it, whichever
//! thread reads. A peak reset pays the debts owed when it was requested before it applies
//! (the resetter records them, `at_peak_reset`), so a block freed before the reset does not
//! count in the peak after it. A `reset_accumulated_stats` does not: a debt owed before it
//! that the owner had not paid yet counts in the `freed` totals after it (the currents and
//! the `allocated` totals stay exact).
//!
//! What this makes exact: a cell's currents count exactly the blocks it handed out that are
//! still allocated (active), so its peak is the peak of its own hand-outs. A device-wide
//! peak is still the sum of the cells' peaks (`stats_registry`): exact when one thread hands
//! every block out, whatever threads free them; an upper bound when several threads hand
//! blocks out. The other statistics (segments, reserved and inactive-split figures) are
//! counted in the cell of whichever thread changes the pool's structure, so their peaks stay
//! upper bounds as before (their currents and totals are exact sums).

use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::place_cell::Arena;
use crate::memory_stats_fields;
use crate::size::PoolKind;
use crate::stats::{MemoryStats, Stat, StatArray};

const R: Ordering = Ordering::Relaxed;

/// The slot of no cell: a cell's slot is never this (the registry's folded cell of exited
/// threads has it, and writes nothing on anyone's behalf); an
/// [`Allocation`](super::Allocation) whose free must take the stream's lock holds it.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The statistics that a free takes from the allocating cell (see the module docs): per
/// pool (small first, then large) `allocation`, `allocated_bytes`, `active`, `active_bytes`,
/// `requested_bytes`, then `oversize_allocations`.
pub(crate) const DEBTS: usize = 11;

/// Per pool: where its five debts start.
const POOL_DEBTS: usize = 5;
const ALLOCATION: usize = 0;
const ALLOCATED_BYTES: usize = 1;
const ACTIVE: usize = 2;
const ACTIVE_BYTES: usize = 3;
const REQUESTED_BYTES: usize = 4;
const OVERSIZE: usize = 10;

/// The debts that count blocks (an allocation, an active block): written last by a debtor
/// (`Release`) and read first (`Acquire`), so that a reader that sees a block's count sees
/// its bytes too (the registry frees a retired slot once every block it counted is paid).
const COUNT_DEBTS: [usize; 4] = [
    ALLOCATION,
    ACTIVE,
    POOL_DEBTS + ALLOCATION,
    POOL_DEBTS + ACTIVE,
];

/// Debt words of a cell, by debt index (see [`DEBTS`]).
type DebtWords = [AtomicU64; DEBTS];

/// The cell's statistic that debt `i` decreases.
fn debt_stat(stats: &CellStats, i: usize) -> &CellStat {
    if i == OVERSIZE {
        return &stats.oversize_allocations;
    }
    let p = &stats.pools[i / POOL_DEBTS];
    match i % POOL_DEBTS {
        ALLOCATION => &p.allocation,
        ALLOCATED_BYTES => &p.allocated_bytes,
        ACTIVE => &p.active,
        ACTIVE_BYTES => &p.active_bytes,
        _ => &p.requested_bytes,
    }
}

/// Pays `n` of debt `i` on a copy of a cell's statistics (as [`CellStat::decrease`] on the
/// cell: the current drops, the freed total grows, the allocated total stays).
fn pay_copy(stats: &mut MemoryStats, i: usize, n: u64) {
    fn pay(stat: &mut Stat, n: i64) {
        stat.current = stat.current.wrapping_sub(n);
        stat.freed = stat.freed.saturating_add(n);
    }
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if i == OVERSIZE {
        pay(&mut stats.oversize_allocations, n);
        return;
    }
    let array = match i % POOL_DEBTS {
        ALLOCATION => &mut stats.allocation,
        ALLOCATED_BYTES => &mut stats.allocated_bytes,
        ACTIVE => &mut stats.active,
        ACTIVE_BYTES => &mut stats.active_bytes,
        _ => &mut stats.requested_bytes,
    };
    pay(&mut array.all, n);
    pay(
        if i < POOL_DEBTS {
            &mut array.small_pool
        } else {
            &mut array.large_pool
        },
        n,
    );
}

/// What is left to pay of a debt whose total owed is `target` when `paid` is paid (the
/// totals only grow, and wrap past `u64::MAX`): `None` when nothing is.
#[inline]
fn unpaid(target: u64, paid: u64) -> Option<u64> {
    let d = target.wrapping_sub(paid);
    // A target behind `paid` (a snapshot older than a fold) reads as a huge difference.
    (d != 0 && d <= i64::MAX as u64).then_some(d)
}

/// One [`Stat`] of a cell; updated by the cell's single writer with load + store.
///
/// The accumulated `allocated` total is not stored: every increase adds to `current` what it
/// adds to that total and every decrease takes from `current` what it adds to `freed`, so
/// `allocated = freed + current - base`, `base` being the current value at the last reset
/// of the accumulated totals (0 at creation; adjusted by merges). An increase (a hand-out)
/// then writes the current and, when passed, the peak, and nothing else.
#[derive(Default)]
pub(crate) struct CellStat {
    current: AtomicI64,
    peak: AtomicI64,
    /// Accumulated freed total, a saturating `u64` read as `i64` clamped at `i64::MAX`
    /// (see [`accumulated`]).
    freed: AtomicU64,
    /// See [`CellStat::allocated`].
    base: AtomicI64,
}

#[inline]
fn add(word: &AtomicI64, n: i64) {
    word.store(word.load(R).wrapping_add(n), R);
}

/// Adds to an accumulated total (`allocated`, `freed`): a saturating `u64` add (no
/// read-modify-write: the cell has one writer); reads clamp at `i64::MAX`
/// ([`accumulated`]), so a total saturates there, never wrapping negative nor, past 16 EiB
/// of traffic on one thread's cell, back to a small figure.
#[inline]
fn accumulate(word: &AtomicU64, n: u64) {
    word.store(word.load(R).saturating_add(n), R);
}

/// An accumulated total as the statistics report it (at most `i64::MAX`).
#[inline]
fn accumulated(word: &AtomicU64) -> i64 {
    i64::try_from(word.load(R)).unwrap_or(i64::MAX)
}

/// `x` clamped into `0..=i64::MAX` (an accumulated total as the statistics report it).
#[inline]
fn clamp_total(x: i128) -> i64 {
    i64::try_from(x.max(0)).unwrap_or(i64::MAX)
}

impl CellStat {
    /// As [`Stat::increase`] (the accumulated `allocated` follows from `current`).
    #[inline]
    pub(crate) fn increase(&self, n: u64) -> i64 {
        // Currents stay within i64: requests are capped at 1 EiB and reserved bytes at
        // `i64::MAX` (see `device_wide::MAX_RESERVED`).
        #[allow(clippy::cast_possible_wrap)]
        let current = self.current.load(R).wrapping_add(n as i64);
        self.current.store(current, R);
        if current > self.peak.load(R) {
            self.peak.store(current, R);
        }
        current
    }

    /// As [`Stat::decrease`].
    #[inline]
    pub(crate) fn decrease(&self, n: u64) {
        #[allow(clippy::cast_possible_wrap)]
        add(&self.current, (n as i64).wrapping_neg());
        accumulate(&self.freed, n);
    }

    /// The accumulated `allocated` total, `freed + current - base`, clamped as
    /// [`accumulated`] clamps: exact while `freed` has not saturated; once it has, the sum
    /// is past `i64::MAX` (`current - base` stays within `i64`), as the true total is.
    #[inline]
    fn allocated(&self) -> i64 {
        clamp_total(
            i128::from(self.freed.load(R)) + i128::from(self.current.load(R))
                - i128::from(self.base.load(R)),
        )
    }

    fn load(&self) -> Stat {
        Stat {
            current: self.current.load(R),
            peak: self.peak.load(R),
            allocated: self.allocated(),
            freed: accumulated(&self.freed),
        }
    }

    fn merge(&self, other: &Stat) {
        let mut s = self.load();
        s.merge(other);
        self.current.store(s.current, R);
        self.peak.store(s.peak, R);
        self.freed.store(u64::try_from(s.freed).unwrap_or(0), R);
        // The base that makes `freed + current - base` the merged `allocated`.
        let base = i128::from(s.freed) + i128::from(s.current) - i128::from(s.allocated);
        let base = i64::try_from(base).unwrap_or(if base < 0 { i64::MIN } else { i64::MAX });
        self.base.store(base, R);
    }

    fn reset_peak(&self) {
        self.peak.store(self.current.load(R), R);
    }

    fn reset_accumulated(&self) {
        self.freed.store(0, R);
        self.base.store(self.current.load(R), R);
    }

    fn clear(&self) {
        for word in [&self.current, &self.peak, &self.base] {
            word.store(0, R);
        }
        self.freed.store(0, R);
    }
}

/// One [`StatArray`] of a cell, seen through its parts (the cell stores each pool's
/// statistics together, see [`PoolCells`]). `all` is not stored but derived: its current,
/// allocated and freed values are the sums of the two pools'; only its peak is kept.
#[derive(Clone, Copy)]
pub(crate) struct CellArray<'a> {
    all_peak: &'a AtomicI64,
    pools: [&'a CellStat; 2],
}

/// Index of a pool in [`CellStats::pools`] (small first).
#[inline]
fn at(pool: PoolKind) -> usize {
    match pool {
        PoolKind::Small => 0,
        PoolKind::Large => 1,
    }
}

/// Adds `n` to `this` (one pool's statistic) and raises `all_peak` when the sum with
/// `other` (the other pool's) passes it.
#[inline]
fn grow(this: &CellStat, other: &CellStat, all_peak: &AtomicI64, n: u64) {
    let current = this.increase(n);
    let all = current.wrapping_add(other.current.load(R));
    if all > all_peak.load(R) {
        all_peak.store(all, R);
    }
}

impl CellArray<'_> {
    /// As [`StatArray::increase`].
    #[inline]
    pub(crate) fn increase(self, pool: PoolKind, n: u64) {
        let i = at(pool);
        grow(self.pools[i], self.pools[i ^ 1], self.all_peak, n);
    }

    /// As [`StatArray::decrease`].
    #[inline]
    pub(crate) fn decrease(self, pool: PoolKind, n: u64) {
        self.pools[at(pool)].decrease(n);
    }

    fn load(self) -> StatArray {
        let small_pool = self.pools[0].load();
        let large_pool = self.pools[1].load();
        let all = Stat {
            current: small_pool.current.wrapping_add(large_pool.current),
            peak: self.all_peak.load(R),
            allocated: small_pool.allocated.saturating_add(large_pool.allocated),
            freed: small_pool.freed.saturating_add(large_pool.freed),
        };
        StatArray {
            all,
            small_pool,
            large_pool,
        }
    }

    fn merge(self, other: &StatArray) {
        self.all_peak
            .store(self.all_peak.load(R).saturating_add(other.all.peak), R);
        self.pools[0].merge(&other.small_pool);
        self.pools[1].merge(&other.large_pool);
    }

    fn reset_peak(self) {
        self.pools[0].reset_peak();
        self.pools[1].reset_peak();
        let all = self.pools[0]
            .current
            .load(R)
            .wrapping_add(self.pools[1].current.load(R));
        self.all_peak.store(all, R);
    }

    fn reset_accumulated(self) {
        self.pools[0].reset_accumulated();
        self.pools[1].reset_accumulated();
    }
}

impl CellStats {
    /// A block of `size` bytes (rounded; `requested` asked for) handed out from `pool`:
    /// `allocation`, `allocated_bytes`, `active`, `active_bytes` and `requested_bytes` grow
    /// (the cached path's five updates, addressed from one pool's block of the cell).
    #[inline(always)]
    pub(crate) fn hand_out(&self, pool: PoolKind, size: u64, requested: u64) {
        let i = at(pool);
        let (p, o, a) = (&self.pools[i], &self.pools[i ^ 1], &self.all_peaks);
        grow(&p.allocation, &o.allocation, &a.allocation, 1);
        grow(
            &p.allocated_bytes,
            &o.allocated_bytes,
            &a.allocated_bytes,
            size,
        );
        grow(&p.active, &o.active, &a.active, 1);
        grow(&p.active_bytes, &o.active_bytes, &a.active_bytes, size);
        grow(
            &p.requested_bytes,
            &o.requested_bytes,
            &a.requested_bytes,
            requested,
        );
    }

    /// A block of `size` bytes (rounded; `requested` asked for) of `pool` becomes reusable:
    /// `active`, `active_bytes` and `requested_bytes` drop.
    #[inline]
    pub(crate) fn deactivate(&self, pool: PoolKind, size: u64, requested: u64) {
        let p = &self.pools[at(pool)];
        p.active.decrease(1);
        p.active_bytes.decrease(size);
        p.requested_bytes.decrease(requested);
    }
}

/// A counter of a cell (`num_*`).
#[derive(Default)]
pub(crate) struct CellCounter(AtomicU64);

impl CellCounter {
    /// Adds one.
    #[inline]
    pub(crate) fn bump(&self) {
        self.0.store(self.0.load(R).wrapping_add(1), R);
    }

    fn load(&self) -> u64 {
        self.0.load(R)
    }

    fn merge(&self, n: u64) {
        self.0.store(self.0.load(R).wrapping_add(n), R);
    }
}

macro_rules! define_cell_stats {
    (
        arrays: [$($(#[$ad:meta])* $a:ident,)*],
        counters: [$($(#[$cd:meta])* $c:ident,)*],
        stats: [$($(#[$sd:meta])* $s:ident,)*],
    ) => {
        /// One pool's share of every array statistic of a cell: the updates of one
        /// operation on one pool address one block of memory.
        #[derive(Default)]
        pub(crate) struct PoolCells {
            $(pub $a: CellStat,)*
        }

        /// The peaks of the arrays' `all` figures.
        #[derive(Default)]
        pub(crate) struct AllPeaks {
            $(pub $a: AtomicI64,)*
        }

        /// The statistics of a cell, field for field as [`MemoryStats`] (both expand the one
        /// field list, `memory_stats_fields!`): the arrays through their methods.
        #[derive(Default)]
        pub(crate) struct CellStats {
            /// The arrays' pool statistics, indexed by pool (small first).
            pub pools: [PoolCells; 2],
            pub all_peaks: AllPeaks,
            $(pub $c: CellCounter,)*
            $(pub $s: CellStat,)*
        }

        impl CellStats {
            $(
                $(#[$ad])*
                #[inline]
                pub(crate) fn $a(&self) -> CellArray<'_> {
                    CellArray {
                        all_peak: &self.all_peaks.$a,
                        pools: [&self.pools[0].$a, &self.pools[1].$a],
                    }
                }
            )*

            fn load(&self) -> MemoryStats {
                MemoryStats {
                    $($a: self.$a().load(),)*
                    $($c: self.$c.load(),)*
                    $($s: self.$s.load(),)*
                    max_split_size: -1,
                }
            }

            /// Adds every statistic of `other` (as [`MemoryStats::merge`]).
            pub(crate) fn merge(&self, other: &MemoryStats) {
                $(self.$a().merge(&other.$a);)*
                $(self.$c.merge(other.$c);)*
                $(self.$s.merge(&other.$s);)*
            }

            fn reset_peak(&self) {
                $(self.$a().reset_peak();)*
                $(self.$s.reset_peak();)*
            }

            fn reset_accumulated(&self) {
                $(self.$a().reset_accumulated();)*
                $(self.$s.reset_accumulated();)*
                $(self.$c.0.store(0, R);)*
            }

            /// Zeroes every statistic (a recycled cell starts as a new one).
            fn clear(&self) {
                for pool in &self.pools {
                    $(pool.$a.clear();)*
                }
                $(self.all_peaks.$a.store(0, R);)*
                $(self.$c.0.store(0, R);)*
                $(self.$s.clear();)*
            }
        }
    };
}

memory_stats_fields!(define_cell_stats);

/// What the cells of one device allocator share: the reset generations, bumped by
/// `reset_peak_stats` / `reset_accumulated_stats` and applied lazily by every cell, and the
/// cells by slot, so that a free reaches the allocating cell's debts from its slot without a
/// lock (see the module docs).
#[derive(Default)]
pub(crate) struct CellsShared {
    peak: AtomicU64,
    accumulated: AtomicU64,
    /// Every cell ever registered, by slot (set once per slot; a slot's cell is recycled,
    /// never replaced: see `stats_registry`).
    pub(crate) slots: Arena<OnceLock<Arc<StatsCell>>>,
}

impl CellsShared {
    pub(crate) fn bump_peak(&self) {
        self.peak.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn bump_accumulated(&self) {
        self.accumulated.fetch_add(1, Ordering::AcqRel);
    }

    #[inline]
    fn load(&self) -> (u64, u64) {
        (
            self.peak.load(Ordering::Acquire),
            self.accumulated.load(Ordering::Acquire),
        )
    }
}

/// Statistics written by one writer at a time (see the module docs).
pub(crate) struct StatsCell {
    /// Odd while a write is in progress.
    seq: AtomicU64,
    /// Reset generations already applied to `stats`.
    peak_gen: AtomicU64,
    accumulated_gen: AtomicU64,
    /// The cell's index in [`CellsShared::slots`] ([`NO_SLOT`] for a cell that is not
    /// registered there).
    slot: u32,
    /// Set by a debtor after adding to `owed`; the writer folds at its next write.
    pending: AtomicBool,
    /// Debts paid into `stats` so far, by debt index: written by the writer, read with
    /// `stats` under the sequence lock.
    paid: DebtWords,
    stats: CellStats,
    /// Debts owed to this cell so far by other cells' frees of blocks that this cell counted
    /// as handed out (totals that only grow; atomic adds by the debtors).
    owed: DebtWords,
    /// `owed` when the last peak reset was requested (stored by the resetter under the
    /// registry's lock before it bumps the generation): debts up to these are paid before
    /// the reset applies, so a peak after a reset does not count a block freed before it.
    at_peak_reset: DebtWords,
}

impl Default for StatsCell {
    fn default() -> Self {
        Self::new(NO_SLOT)
    }
}

impl StatsCell {
    /// A new cell of slot `slot`.
    pub(crate) fn new(slot: u32) -> Self {
        Self {
            seq: AtomicU64::new(0),
            peak_gen: AtomicU64::new(0),
            accumulated_gen: AtomicU64::new(0),
            slot,
            pending: AtomicBool::new(false),
            paid: Default::default(),
            stats: CellStats::default(),
            owed: Default::default(),
            at_peak_reset: Default::default(),
        }
    }

    /// The cell's slot ([`NO_SLOT`] if none).
    #[inline(always)]
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    /// The debts owed so far, counts first (`Acquire`: a count seen brings its bytes).
    pub(crate) fn owed(&self) -> [u64; DEBTS] {
        let mut owed = [0; DEBTS];
        for i in COUNT_DEBTS {
            owed[i] = self.owed[i].load(Ordering::Acquire);
        }
        for (i, word) in self.owed.iter().enumerate() {
            if !COUNT_DEBTS.contains(&i) {
                owed[i] = word.load(R);
            }
        }
        owed
    }

    /// Adds `n` to debt `i` (a debtor; `Release` for a count, see [`COUNT_DEBTS`]).
    #[inline]
    fn owe(&self, i: usize, n: u64, order: Ordering) {
        if n != 0 {
            self.owed[i].fetch_add(n, order);
        }
    }

    /// Another cell frees a block of `size` bytes of `pool` that this cell counted as
    /// allocated: `allocation` and `allocated_bytes` are owed (folded at this cell's next
    /// write; readers subtract them meanwhile).
    fn owe_free(&self, pool: PoolKind, size: u64) {
        let base = at(pool) * POOL_DEBTS;
        self.owe(base + ALLOCATED_BYTES, size, R);
        self.owe(base + ALLOCATION, 1, Ordering::Release);
        self.pending.store(true, Ordering::Release);
    }

    /// Another cell deactivates a block that this cell counted as active (as
    /// [`CellStats::deactivate`], and `oversize_allocations` when `oversize`).
    fn owe_deactivate(&self, pool: PoolKind, size: u64, requested: u64, oversize: bool) {
        let base = at(pool) * POOL_DEBTS;
        self.owe(base + ACTIVE_BYTES, size, R);
        self.owe(base + REQUESTED_BYTES, requested, R);
        self.owe(OVERSIZE, u64::from(oversize), R);
        self.owe(base + ACTIVE, 1, Ordering::Release);
        self.pending.store(true, Ordering::Release);
    }

    /// Folds the debts owed since the last fold (the writer, at a write's opening).
    #[cold]
    #[inline(never)]
    fn fold(&self) {
        if self.pending.swap(false, Ordering::Acquire) {
            self.pay_to(&self.owed());
        }
    }

    /// Pays every debt up to `target` (totals owed at some point), as frees counted in this
    /// cell (the writer).
    fn pay_to(&self, target: &[u64; DEBTS]) {
        for (i, (&target, paid)) in target.iter().zip(&self.paid).enumerate() {
            if let Some(n) = unpaid(target, paid.load(R)) {
                paid.store(target, R);
                debt_stat(&self.stats, i).decrease(n);
            }
        }
    }

    /// The debts as they were at the last peak reset's request.
    fn at_peak_reset(&self) -> [u64; DEBTS] {
        std::array::from_fn(|i| self.at_peak_reset[i].load(R))
    }

    /// Records the debts owed now as those to pay before the peak reset about to be
    /// requested applies (the resetter, under the registry's lock, before the bump).
    pub(crate) fn note_peak_reset(&self) {
        let owed = self.owed();
        for (word, owed) in self.at_peak_reset.iter().zip(owed) {
            word.store(owed, R);
        }
    }

    /// Readies a cell whose slot no block counts any more (every block it counted was
    /// freed and paid, so no debt can come) for a new thread: zeroed, its debts paid. Only
    /// the registry, under its lock, with no writer on the cell.
    pub(crate) fn recycle(&self) {
        let seq = self.seq.load(R);
        debug_assert!(seq & 1 == 0, "a recycled cell was being written");
        self.seq.store(seq.wrapping_add(1), R);
        fence(Ordering::Release);
        self.stats.clear();
        self.peak_gen.store(0, R);
        self.accumulated_gen.store(0, R);
        self.pending.store(false, R);
        for (paid, owed) in self.paid.iter().zip(self.owed()) {
            paid.store(owed, R);
        }
        self.close();
    }

    /// Opens a write. The caller guarantees that no other thread writes this cell at the
    /// same time (the cell is the thread's own, or the caller holds the cell's lock); a
    /// nested write on the same thread joins the outer one.
    #[inline]
    pub(crate) fn write<'a>(&'a self, gens: &'a CellsShared) -> StatsWriter<'a> {
        let seq = self.seq.load(R);
        let outer = seq & 1 == 0;
        if outer {
            self.open(seq, gens);
        }
        StatsWriter {
            cell: self,
            gens,
            outer,
        }
    }

    /// Marks a write in progress (`seq` is the current, even, sequence value) and applies
    /// the resets requested since the last write.
    #[inline]
    fn open(&self, seq: u64, gens: &CellsShared) {
        self.seq.store(seq.wrapping_add(1), R);
        fence(Ordering::Release);
        let (peak, accumulated) = gens.load();
        if peak != self.peak_gen.load(R) {
            self.reset_peak();
            self.peak_gen.store(peak, R);
        }
        if accumulated != self.accumulated_gen.load(R) {
            self.stats.reset_accumulated();
            self.accumulated_gen.store(accumulated, R);
        }
        // Debts are paid before any increase of this write computes a peak.
        if self.pending.load(R) {
            self.fold();
        }
    }

    /// Applies a peak reset: the debts owed at its request are paid first (the blocks freed
    /// before it are not live at it).
    #[cold]
    #[inline(never)]
    fn reset_peak(&self) {
        self.pay_to(&self.at_peak_reset());
        self.stats.reset_peak();
    }

    /// Publishes the write in progress (the sequence value becomes even).
    #[inline]
    fn close(&self) {
        let seq = self.seq.load(R);
        self.seq.store(seq.wrapping_add(1), Ordering::Release);
    }

    /// A copy of the cell between two writes, with resets of `gens` not yet applied by the
    /// writer and the debts owed to it not yet folded applied to the copy, as its writer's
    /// next write would apply them.
    pub(crate) fn read(&self, gens: &CellsShared) -> MemoryStats {
        self.read_owed(gens).0
    }

    /// [`StatsCell::read`], with the debts owed that the copy has paid.
    pub(crate) fn read_owed(&self, gens: &CellsShared) -> (MemoryStats, [u64; DEBTS]) {
        let (peak, accumulated) = gens.load();
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let mut stats = self.stats.load();
                let mut paid: [u64; DEBTS] = std::array::from_fn(|i| self.paid[i].load(R));
                let applied = (self.peak_gen.load(R), self.accumulated_gen.load(R));
                fence(Ordering::Acquire);
                if self.seq.load(R) == before {
                    // Generations only grow: a cell ahead of `gens` was reset after `gens`
                    // was read, and needs nothing.
                    if applied.0 < peak {
                        pay_copy_to(&mut stats, &mut paid, &self.at_peak_reset());
                        stats.reset_peak();
                    }
                    if applied.1 < accumulated {
                        stats.reset_accumulated();
                    }
                    // Read after the copy: at least what the copy has paid.
                    let owed = self.owed();
                    pay_copy_to(&mut stats, &mut paid, &owed);
                    return (stats, owed);
                }
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// [`StatsCell::pay_to`] on a copy of a cell (`paid`: the copy's paid debts).
fn pay_copy_to(stats: &mut MemoryStats, paid: &mut [u64; DEBTS], target: &[u64; DEBTS]) {
    for (i, (&target, paid)) in target.iter().zip(paid).enumerate() {
        if let Some(n) = unpaid(target, *paid) {
            *paid = target;
            pay_copy(stats, i, n);
        }
    }
}

/// An open write on a [`StatsCell`]; closes it on drop. Dereferences to the statistics.
pub(crate) struct StatsWriter<'a> {
    cell: &'a StatsCell,
    gens: &'a CellsShared,
    /// Whether this writer opened the write (a nested writer joins the outer one).
    outer: bool,
}

impl StatsWriter<'_> {
    /// Runs `f` with the write closed, so that statistics readers (which wait while a write
    /// is in progress) never wait for `f`: every driver call and device wait made while a
    /// writer is held runs inside this. The statistics are consistent at this point (no
    /// update in progress); the write is reopened afterwards.
    /// When `f` panics, the write is reopened as well (as the unwind passes), so that a
    /// caller that catches the panic writes on an open cell.
    pub(crate) fn unlocked<T>(&mut self, f: impl FnOnce() -> T) -> T {
        /// Reopens the write when dropped, after `f` returned or while it unwinds.
        struct Reopen<'a, 'b>(&'a StatsWriter<'b>);
        impl Drop for Reopen<'_, '_> {
            fn drop(&mut self) {
                // Writes nested in `f` on this thread have closed theirs: the value is even.
                let seq = self.0.cell.seq.load(R);
                self.0.cell.open(seq, self.0.gens);
            }
        }
        let open = self.cell.seq.load(R) & 1 == 1;
        if !open {
            return f();
        }
        self.cell.close();
        let _reopen = Reopen(self);
        f()
    }
}

impl StatsWriter<'_> {
    /// The slot of the cell written (what a hand-out records as its owner).
    #[inline(always)]
    pub(crate) fn slot(&self) -> u32 {
        self.cell.slot
    }

    /// A block of `size` bytes of `pool` handed out by the cell of slot `owner` is freed:
    /// `allocation` and `allocated_bytes` drop in that cell (in this one when it is this
    /// one, else as a debt that cell folds in).
    #[inline(always)]
    pub(crate) fn free_of(&self, owner: u32, pool: PoolKind, size: u64) {
        if owner == self.cell.slot {
            self.allocation().decrease(pool, 1);
            self.allocated_bytes().decrease(pool, size);
        } else {
            self.owe_free(owner, pool, size);
        }
    }

    /// As [`CellStats::deactivate`] (and `oversize_allocations` when `oversize`), in the
    /// cell of slot `owner` (see [`StatsWriter::free_of`]).
    #[inline(always)]
    pub(crate) fn deactivate_of(
        &self,
        owner: u32,
        pool: PoolKind,
        size: u64,
        requested: u64,
        oversize: bool,
    ) {
        if owner == self.cell.slot {
            self.deactivate(pool, size, requested);
            if oversize {
                self.oversize_allocations.decrease(1);
            }
        } else {
            self.owe_deactivate(owner, pool, size, requested, oversize);
        }
    }

    /// Pays into this cell the debts of another cell (an exited thread's, folded into this
    /// one) owed up to `owed`, `paid` being those already paid; returns the blocks paid
    /// (allocations plus deactivations).
    pub(crate) fn pay(&self, paid: &mut [u64; DEBTS], owed: &[u64; DEBTS]) -> u64 {
        let mut blocks = 0u64;
        for (i, (&owed, paid)) in owed.iter().zip(paid).enumerate() {
            if let Some(n) = unpaid(owed, *paid) {
                *paid = owed;
                debt_stat(self, i).decrease(n);
                if COUNT_DEBTS.contains(&i) {
                    blocks = blocks.saturating_add(n);
                }
            }
        }
        blocks
    }

    /// The cell of slot `owner`, unless it is this writer's or none (then this cell counts
    /// the decrease itself: the sums stay exact).
    fn owner(&self, owner: u32) -> Option<&StatsCell> {
        let cell = self.gens.slots.get(owner).and_then(OnceLock::get);
        debug_assert!(cell.is_some(), "a block's owner slot {owner} has no cell");
        cell.map(AsRef::as_ref)
    }

    #[cold]
    #[inline(never)]
    fn owe_free(&self, owner: u32, pool: PoolKind, size: u64) {
        match self.owner(owner) {
            Some(cell) => cell.owe_free(pool, size),
            None => {
                self.allocation().decrease(pool, 1);
                self.allocated_bytes().decrease(pool, size);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn owe_deactivate(&self, owner: u32, pool: PoolKind, size: u64, requested: u64, over: bool) {
        match self.owner(owner) {
            Some(cell) => cell.owe_deactivate(pool, size, requested, over),
            None => {
                self.deactivate(pool, size, requested);
                if over {
                    self.oversize_allocations.decrease(1);
                }
            }
        }
    }
}

impl std::ops::Deref for StatsWriter<'_> {
    type Target = CellStats;
    #[inline]
    fn deref(&self) -> &CellStats {
        &self.cell.stats
    }
}

impl Drop for StatsWriter<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.outer && self.cell.seq.load(R) & 1 == 1 {
            self.cell.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accumulated totals are saturating adds on the cached path; reads clamp them,
    /// so a total past `i64::MAX` reads `i64::MAX` (never negative), and the `all` figure
    /// sums the pools without wrapping.
    #[test]
    fn accumulated_totals_read_clamped_at_i64_max() {
        let gens = CellsShared::default();
        let cell = StatsCell::default();
        {
            let st = cell.write(&gens);
            for _ in 0..3 {
                st.allocated_bytes().increase(PoolKind::Small, 1 << 62);
                st.allocated_bytes().decrease(PoolKind::Small, 1 << 62);
            }
            st.allocated_bytes().increase(PoolKind::Large, 1 << 62);
            st.hand_out(PoolKind::Large, 4096, 4000);
            st.deactivate(PoolKind::Large, 4096, 4000);
        }
        let stats = cell.read(&gens);
        let a = &stats.allocated_bytes;
        assert_eq!(
            (a.small_pool.allocated, a.small_pool.freed),
            (i64::MAX, i64::MAX)
        );
        assert_eq!(a.small_pool.current, 0);
        assert_eq!(a.large_pool.allocated, (1 << 62) + 4096);
        assert_eq!((a.all.allocated, a.all.freed), (i64::MAX, i64::MAX));
        assert_eq!(a.all.current, (1 << 62) + 4096);
        assert_eq!(a.all.peak, (1 << 62) + 4096);
        let active = &stats.active_bytes.large_pool;
        assert_eq!((active.current, active.peak, active.freed), (0, 4096, 4096));
        assert_eq!(stats.requested_bytes.all.peak, 4000);
        assert_eq!(stats.allocation.large_pool.allocated, 1);
    }

    /// The derived `allocated` total (`freed + current - base`) stays exact across a reset
    /// of the accumulated totals with blocks live, and across a merge (a retired cell).
    #[test]
    fn allocated_total_exact_across_reset_and_merge() {
        let stat = CellStat::default();
        stat.increase(100);
        stat.decrease(30);
        assert_eq!((stat.load().allocated, stat.load().freed), (100, 30));
        stat.reset_accumulated();
        assert_eq!((stat.load().allocated, stat.load().freed), (0, 0));
        stat.increase(5);
        stat.decrease(10);
        let s = stat.load();
        assert_eq!((s.current, s.peak, s.allocated, s.freed), (65, 100, 5, 10));
        stat.merge(&Stat {
            current: 7,
            peak: 9,
            allocated: 20,
            freed: 13,
        });
        let s = stat.load();
        assert_eq!((s.current, s.peak, s.allocated, s.freed), (72, 109, 25, 23));
        stat.increase(1);
        assert_eq!(stat.load().allocated, 26);
    }

    /// Two registered cells: slot 0 hands a block out, slot 1 frees it. Readers subtract
    /// the debt before the owner folds it; the owner's next write folds it before its
    /// increase computes a peak; a peak reset requested after the free (the owner not
    /// having written since) does not count the freed block.
    #[test]
    fn a_debt_is_read_at_once_and_folded_at_the_owner_s_next_write() {
        let shared = CellsShared::default();
        let cells: Vec<Arc<StatsCell>> = (0..2)
            .map(|slot| {
                let cell = Arc::new(StatsCell::new(slot));
                shared
                    .slots
                    .get_or_create(slot)
                    .set(cell.clone())
                    .ok()
                    .unwrap();
                cell
            })
            .collect();
        let (owner, debtor) = (&cells[0], &cells[1]);
        let hand_out = |n: u64| {
            let st = owner.write(&shared);
            for _ in 0..n {
                st.hand_out(PoolKind::Large, 1 << 20, 1000);
                st.oversize_allocations.increase(1);
            }
        };
        let free = || {
            let st = debtor.write(&shared);
            st.free_of(0, PoolKind::Large, 1 << 20);
            st.deactivate_of(0, PoolKind::Large, 1 << 20, 1000, true);
        };
        hand_out(2);
        free();
        free();
        let figures = |s: &MemoryStats| {
            (
                s.allocated_bytes.large_pool.current,
                s.allocated_bytes.all.peak,
                s.allocated_bytes.all.freed,
                s.active.all.current,
                s.requested_bytes.all.current,
                s.oversize_allocations.current,
            )
        };
        let read = owner.read(&shared);
        assert_eq!(figures(&read), (0, 2 << 20, 2 << 20, 0, 0, 0));
        assert_eq!(read.allocation.all.allocated, 2);
        assert_eq!(read.allocation.all.freed, 2);
        // The debtor's cell counts nothing.
        assert_eq!(debtor.read(&shared).allocation.all.freed, 0);
        assert_eq!(debtor.read(&shared).allocation.all.current, 0);
        // A peak reset requested now (the owner has not written since the frees).
        owner.note_peak_reset();
        shared.bump_peak();
        let read = owner.read(&shared);
        assert_eq!(figures(&read), (0, 0, 2 << 20, 0, 0, 0));
        hand_out(1);
        let read = owner.read(&shared);
        assert_eq!(figures(&read), (1 << 20, 1 << 20, 2 << 20, 1, 1000, 1));
        assert_eq!(read.allocated_bytes.all.allocated, 3 << 20);
        free();
        hand_out(1);
        let read = owner.read(&shared);
        assert_eq!(figures(&read), (1 << 20, 1 << 20, 3 << 20, 1, 1000, 1));
        assert!(!owner.pending.load(R), "folded");
        // Recycled (once nothing is owed any more): a new cell's figures.
        free();
        owner.recycle();
        let read = owner.read(&shared);
        assert_eq!(figures(&read), (0, 0, 0, 0, 0, 0));
        assert_eq!(read.allocation.all.allocated, 0);
        hand_out(1);
        assert_eq!(
            figures(&owner.read(&shared)),
            (1 << 20, 1 << 20, 0, 1, 1000, 1)
        );
    }
}
