//! Allocator statistics with PyTorch's definitions (reference §4.13).
//!
//! Each thread keeps its own cell of these statistics and readers sum the cells: see
//! "Statistics under concurrency" on [`CachingAllocator`](crate::CachingAllocator) for what a peak means then.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::size::PoolKind;

/// One statistic: current value, peak of the current value, and accumulated increases
/// (`allocated`) and decreases (`freed`), as PyTorch's `Stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest `current` since creation or the last [`Stat::reset_peak`].
    pub peak: i64,
    /// Sum of all increases since creation or the last [`Stat::reset_accumulated`].
    pub allocated: i64,
    /// Sum of all decreases since creation or the last [`Stat::reset_accumulated`].
    pub freed: i64,
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Stat {
    /// A statistic with these four figures (for comparisons in tests and reports).
    #[must_use]
    pub const fn new(current: i64, peak: i64, allocated: i64, freed: i64) -> Stat {
        Stat {
            current,
            peak,
            allocated,
            freed,
        }
    }

    /// Adds `n`: `current += n`, `peak = max(peak, current)`, `allocated += n`. Saturates
    /// at the `i64` range (an `n` above `i64::MAX` counts as `i64::MAX`).
    #[inline]
    pub fn increase(&mut self, n: u64) {
        let n = signed(n);
        self.current = self.current.saturating_add(n);
        self.peak = self.peak.max(self.current);
        self.allocated = self.allocated.saturating_add(n);
    }

    /// Subtracts `n`: `current -= n`, `freed += n`. Saturates as [`Stat::increase`].
    #[inline]
    pub fn decrease(&mut self, n: u64) {
        let n = signed(n);
        self.current = self.current.saturating_sub(n);
        self.freed = self.freed.saturating_add(n);
    }

    /// Sets `peak = current`.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Sets `allocated = freed = 0`.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }

    /// Adds every field of `other` (aggregation of per-thread cells; peaks add up to an
    /// upper bound of the combined peak).
    pub fn merge(&mut self, other: &Stat) {
        self.current = self.current.saturating_add(other.current);
        self.peak = self.peak.saturating_add(other.peak);
        self.allocated = self.allocated.saturating_add(other.allocated);
        self.freed = self.freed.saturating_add(other.freed);
    }
}

/// Writes `stat`'s four fields under `prefix` (`{prefix}.current`, ...).
fn flatten_stat(stat: &Stat, prefix: &str, out: &mut BTreeMap<String, i64>) {
    out.insert(format!("{prefix}.current"), stat.current);
    out.insert(format!("{prefix}.peak"), stat.peak);
    out.insert(format!("{prefix}.allocated"), stat.allocated);
    out.insert(format!("{prefix}.freed"), stat.freed);
}

/// One [`Stat`] for all pools together and one per pool, as PyTorch's `StatArray`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// The small pool (blocks of at most 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    /// Increases `all` and the statistic of `pool` by `n`.
    #[inline]
    pub fn increase(&mut self, pool: PoolKind, n: u64) {
        self.all.increase(n);
        self.pool_mut(pool).increase(n);
    }

    /// Decreases `all` and the statistic of `pool` by `n`.
    #[inline]
    pub fn decrease(&mut self, pool: PoolKind, n: u64) {
        self.all.decrease(n);
        self.pool_mut(pool).decrease(n);
    }

    /// The statistic of one pool.
    #[must_use]
    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    #[inline]
    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    fn each_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }

    fn each(&self) -> [&Stat; 3] {
        [&self.all, &self.small_pool, &self.large_pool]
    }

    fn merge(&mut self, other: &StatArray) {
        self.all.merge(&other.all);
        self.small_pool.merge(&other.small_pool);
        self.large_pool.merge(&other.large_pool);
    }

    fn flatten(&self, prefix: &str, out: &mut BTreeMap<String, i64>) {
        flatten_stat(&self.all, &format!("{prefix}.all"), out);
        flatten_stat(&self.small_pool, &format!("{prefix}.small_pool"), out);
        flatten_stat(&self.large_pool, &format!("{prefix}.large_pool"), out);
    }
}

/// The one list of [`MemoryStats`]' fields, by kind (per-pool arrays, counters, single
/// statistics), with their docs: `memory_stats_fields!(m)` calls `m!` with the list. Every
/// per-field definition and loop expands it: [`MemoryStats`] and its methods here, the
/// per-thread statistics cell of the caching allocator (`allocator/stats_cell.rs`).
#[doc(hidden)]
#[macro_export]
macro_rules! memory_stats_fields {
    ($then:ident) => {
        $then! {
            arrays: [
                /// Blocks handed out (count): +1 at hand-out, −1 at the free call.
                allocation,
                /// Segments obtained from the device (count).
                segment,
                /// Blocks handed out and not yet reusable (count): −1 when the free completes.
                active,
                /// Free blocks inside split segments, which cannot be released (count).
                inactive_split,
                /// Bytes of handed-out blocks (rounded sizes).
                allocated_bytes,
                /// Bytes of segments obtained from the device.
                reserved_bytes,
                /// Bytes of active blocks.
                active_bytes,
                /// Bytes of inactive split blocks.
                inactive_split_bytes,
                /// Requested (unrounded) bytes of active blocks.
                requested_bytes,
            ],
            counters: [
                /// Allocations that succeeded only after releasing every cached segment.
                num_alloc_retries,
                /// Allocations that failed with an out-of-memory error.
                num_ooms,
                /// Times every outstanding stream marker was waited for (empty_cache, last OOM retry).
                num_sync_all_streams,
                /// Segment allocations made on the device.
                num_device_alloc,
                /// Segment releases made on the device.
                num_device_free,
            ],
            stats: [
                /// Handed-out blocks of at least `max_split_size` bytes (count), under the
                /// configuration in effect when each block was handed out: a free subtracts
                /// exactly what its hand-out added, whatever `set_config` changed in between
                /// (PyTorch compares with the limit in effect at the free, so its counter drifts
                /// when `_set_allocator_settings` moves `max_split_size`).
                oversize_allocations,
                /// Segments of at least `max_split_size` bytes (count), under the configuration
                /// in effect when each segment was obtained: a release subtracts exactly what
                /// obtaining it added, as for `oversize_allocations`.
                oversize_segments,
            ],
        }
    };
}

macro_rules! define_memory_stats {
    (
        arrays: [$($(#[$ad:meta])* $a:ident,)*],
        counters: [$($(#[$cd:meta])* $c:ident,)*],
        stats: [$($(#[$sd:meta])* $s:ident,)*],
    ) => {
        /// All statistics of one device's allocator, as `torch.cuda.memory_stats` reports them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
        pub struct MemoryStats {
            $($(#[$ad])* pub $a: StatArray,)*
            $($(#[$cd])* pub $c: u64,)*
            $($(#[$sd])* pub $s: Stat,)*
            /// The configured `max_split_size` in bytes, −1 when unlimited (as PyTorch reports it).
            pub max_split_size: i64,
        }

        impl Default for MemoryStats {
            fn default() -> Self {
                Self {
                    $($a: StatArray::default(),)*
                    $($c: 0,)*
                    $($s: Stat::default(),)*
                    max_split_size: -1,
                }
            }
        }

        impl MemoryStats {
            /// Sets every peak to its current value (as `torch.cuda.reset_peak_memory_stats`).
            pub fn reset_peak(&mut self) {
                $(self.$a.each_mut().into_iter().for_each(Stat::reset_peak);)*
                $(self.$s.reset_peak();)*
            }

            /// Calls `f` with each statistic of `self` and the same statistic of `a` and
            /// of `b` (the per-pool arrays' three and the single ones; not the counters).
            pub(crate) fn zip_stats(
                &mut self,
                a: &MemoryStats,
                b: &MemoryStats,
                mut f: impl FnMut(&mut Stat, &Stat, &Stat),
            ) {
                $(
                    for ((s, x), y) in self.$a.each_mut().into_iter()
                        .zip(a.$a.each())
                        .zip(b.$a.each())
                    {
                        f(s, x, y);
                    }
                )*
                $(f(&mut self.$s, &a.$s, &b.$s);)*
            }

            /// Zeroes every accumulated `allocated`/`freed` and the counters (`num_*`), as
            /// `torch.cuda.reset_accumulated_memory_stats`.
            pub fn reset_accumulated(&mut self) {
                $(self.$a.each_mut().into_iter().for_each(Stat::reset_accumulated);)*
                $(self.$s.reset_accumulated();)*
                $(self.$c = 0;)*
            }

            /// Adds every statistic of `other` into `self` (`max_split_size` is left alone).
            pub fn merge(&mut self, other: &MemoryStats) {
                $(self.$a.merge(&other.$a);)*
                $(self.$c = self.$c.saturating_add(other.$c);)*
                $(self.$s.merge(&other.$s);)*
            }

            /// The statistics as sorted dotted keys, as Python's `torch.cuda.memory_stats()`
            /// flattens them (e.g. `allocated_bytes.all.current`, `num_ooms`).
            #[must_use]
            pub fn flat(&self) -> BTreeMap<String, i64> {
                let mut out = BTreeMap::new();
                $(self.$a.flatten(stringify!($a), &mut out);)*
                $(out.insert(stringify!($c).to_owned(), signed(self.$c));)*
                $(flatten_stat(&self.$s, stringify!($s), &mut out);)*
                out.insert("max_split_size".to_owned(), self.max_split_size);
                out
            }
        }
    };
}

memory_stats_fields!(define_memory_stats);
