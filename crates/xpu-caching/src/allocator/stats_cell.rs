//! A statistics cell with one writer at a time and lock-free readers (a sequence lock).
//!
//! Each thread's cell is written only by its thread (the cached path then makes plain
//! relaxed loads and stores: no read-modify-write, no lock); readers copy a cell between
//! two reads of its sequence word and retry while a write is in progress, so a read sees
//! the cell between two operations. Resets requested by other threads are not written into
//! the cell: they bump a generation that readers apply to their copy and the owner applies
//! at its next write.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

use crate::memory_stats_fields;
use crate::size::PoolKind;
use crate::stats::{MemoryStats, Stat, StatArray};

const R: Ordering = Ordering::Relaxed;

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
        }
    };
}

memory_stats_fields!(define_cell_stats);

/// Reset generations of a device allocator: bumped by `reset_peak_stats` /
/// `reset_accumulated_stats`, applied lazily by every cell.
#[derive(Default)]
pub(crate) struct Generations {
    peak: AtomicU64,
    accumulated: AtomicU64,
}

impl Generations {
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
#[derive(Default)]
pub(crate) struct StatsCell {
    /// Odd while a write is in progress.
    seq: AtomicU64,
    /// Reset generations already applied to `stats`.
    peak_gen: AtomicU64,
    accumulated_gen: AtomicU64,
    stats: CellStats,
}

impl StatsCell {
    /// Opens a write. The caller guarantees that no other thread writes this cell at the
    /// same time (the cell is the thread's own, or the caller holds the cell's lock); a
    /// nested write on the same thread joins the outer one.
    #[inline]
    pub(crate) fn write<'a>(&'a self, gens: &'a Generations) -> StatsWriter<'a> {
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
    fn open(&self, seq: u64, gens: &Generations) {
        self.seq.store(seq.wrapping_add(1), R);
        fence(Ordering::Release);
        let (peak, accumulated) = gens.load();
        if peak != self.peak_gen.load(R) {
            self.stats.reset_peak();
            self.peak_gen.store(peak, R);
        }
        if accumulated != self.accumulated_gen.load(R) {
            self.stats.reset_accumulated();
            self.accumulated_gen.store(accumulated, R);
        }
    }

    /// Publishes the write in progress (the sequence value becomes even).
    #[inline]
    fn close(&self) {
        let seq = self.seq.load(R);
        self.seq.store(seq.wrapping_add(1), Ordering::Release);
    }

    /// A copy of the cell between two writes, with resets of `gens` not yet applied by the
    /// writer applied to the copy.
    pub(crate) fn read(&self, gens: &Generations) -> MemoryStats {
        let (peak, accumulated) = gens.load();
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let mut stats = self.stats.load();
                let applied = (self.peak_gen.load(R), self.accumulated_gen.load(R));
                fence(Ordering::Acquire);
                if self.seq.load(R) == before {
                    // Generations only grow: a cell ahead of `gens` was reset after `gens`
                    // was read, and needs nothing.
                    if applied.0 < peak {
                        stats.reset_peak();
                    }
                    if applied.1 < accumulated {
                        stats.reset_accumulated();
                    }
                    return stats;
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

/// An open write on a [`StatsCell`]; closes it on drop. Dereferences to the statistics.
pub(crate) struct StatsWriter<'a> {
    cell: &'a StatsCell,
    gens: &'a Generations,
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
        let gens = Generations::default();
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
}
