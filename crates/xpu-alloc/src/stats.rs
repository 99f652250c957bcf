//! Allocator statistics with PyTorch's definitions (reference §4.13).
//!
//! Each thread keeps its own cell of these statistics and readers sum the cells: see
//! "Statistics under concurrency" on [`crate::DeviceCore`] for what a peak means then.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::size::PoolKind;

pub use xpu_host::Stat;

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

/// All statistics of one device's allocator, as `torch.cuda.memory_stats` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Blocks handed out (count): +1 at hand-out, −1 at the free call.
    pub allocation: StatArray,
    /// Segments obtained from the device (count).
    pub segment: StatArray,
    /// Blocks handed out and not yet reusable (count): −1 when the free completes.
    pub active: StatArray,
    /// Free blocks inside split segments, which cannot be released (count).
    pub inactive_split: StatArray,
    /// Bytes of handed-out blocks (rounded sizes).
    pub allocated_bytes: StatArray,
    /// Bytes of segments obtained from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Requested (unrounded) bytes of active blocks.
    pub requested_bytes: StatArray,
    /// Allocations that succeeded only after releasing every cached segment.
    pub num_alloc_retries: u64,
    /// Allocations that failed with an out-of-memory error.
    pub num_ooms: u64,
    /// Times every outstanding stream marker was waited for (empty_cache, last OOM retry).
    pub num_sync_all_streams: u64,
    /// Segment allocations made on the device.
    pub num_device_alloc: u64,
    /// Segment releases made on the device.
    pub num_device_free: u64,
    /// Handed-out blocks of at least `max_split_size` bytes (count).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes (count).
    pub oversize_segments: Stat,
    /// The configured `max_split_size` in bytes, −1 when unlimited (as PyTorch reports it).
    pub max_split_size: i64,
}

impl Default for MemoryStats {
    fn default() -> Self {
        Self {
            allocation: StatArray::default(),
            segment: StatArray::default(),
            active: StatArray::default(),
            inactive_split: StatArray::default(),
            allocated_bytes: StatArray::default(),
            reserved_bytes: StatArray::default(),
            active_bytes: StatArray::default(),
            inactive_split_bytes: StatArray::default(),
            requested_bytes: StatArray::default(),
            num_alloc_retries: 0,
            num_ooms: 0,
            num_sync_all_streams: 0,
            num_device_alloc: 0,
            num_device_free: 0,
            oversize_allocations: Stat::default(),
            oversize_segments: Stat::default(),
            max_split_size: -1,
        }
    }
}

impl MemoryStats {
    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// Sets every peak to its current value (as `torch.cuda.reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_peak();
            }
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// Zeroes every accumulated `allocated`/`freed` and the counters (`num_*`), as
    /// `torch.cuda.reset_accumulated_memory_stats`.
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_accumulated();
            }
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// Adds every statistic of `other` into `self` (`max_split_size` is left alone).
    pub fn merge(&mut self, other: &MemoryStats) {
        self.allocation.merge(&other.allocation);
        self.segment.merge(&other.segment);
        self.active.merge(&other.active);
        self.inactive_split.merge(&other.inactive_split);
        self.allocated_bytes.merge(&other.allocated_bytes);
        self.reserved_bytes.merge(&other.reserved_bytes);
        self.active_bytes.merge(&other.active_bytes);
        self.inactive_split_bytes.merge(&other.inactive_split_bytes);
        self.requested_bytes.merge(&other.requested_bytes);
        self.num_alloc_retries = self
            .num_alloc_retries
            .saturating_add(other.num_alloc_retries);
        self.num_ooms = self.num_ooms.saturating_add(other.num_ooms);
        self.num_sync_all_streams = self
            .num_sync_all_streams
            .saturating_add(other.num_sync_all_streams);
        self.num_device_alloc = self.num_device_alloc.saturating_add(other.num_device_alloc);
        self.num_device_free = self.num_device_free.saturating_add(other.num_device_free);
        self.oversize_allocations.merge(&other.oversize_allocations);
        self.oversize_segments.merge(&other.oversize_segments);
    }

    /// The statistics as sorted dotted keys, as Python's `torch.cuda.memory_stats()`
    /// flattens them (e.g. `allocated_bytes.all.current`, `num_ooms`).
    #[must_use]
    pub fn flat(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let arrays: [(&str, &StatArray); 9] = [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ];
        for (name, array) in arrays {
            array.flatten(name, &mut out);
        }
        let counters = [
            ("num_alloc_retries", self.num_alloc_retries),
            ("num_ooms", self.num_ooms),
            ("num_sync_all_streams", self.num_sync_all_streams),
            ("num_device_alloc", self.num_device_alloc),
            ("num_device_free", self.num_device_free),
        ];
        for (name, value) in counters {
            out.insert(name.to_owned(), signed(value));
        }
        flatten_stat(&self.oversize_allocations, "oversize_allocations", &mut out);
        flatten_stat(&self.oversize_segments, "oversize_segments", &mut out);
        out.insert("max_split_size".to_owned(), self.max_split_size);
        out
    }
}
