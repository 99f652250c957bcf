//! Statistics of the pinned-host allocator, as `torch.cuda.host_memory_stats` (reference §5).
//!
//! One deviation: the peaks of `allocation` and `allocated_bytes` are exact, what was in use
//! at one time over every size class. torch keeps those statistics per size bucket and sums
//! the buckets' peaks on read, an over-estimate (1 KiB freed, then 4 KiB: peaks 2 and 5,120
//! there, 1 and 4,096 here; review h78, `crates/xpu-host/tests/host_peaks_and_allocator_drop.rs`).
//!
//! Counters are atomics (no lock on the cached path); the timing statistics are only updated
//! when the driver is called (a new block, a released block) and sit behind a mutex. The
//! accumulated totals of the blocks that threads' caches take and return live in per-thread
//! cells ([`ThreadCell`]), summed on read (see `thread_cache` for why that is exact).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

pub use xpu_caching::Stat;

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A [`Stat`] updated with atomics: `peak` is kept with `fetch_max`, so it is exact.
#[derive(Debug, Default)]
pub(crate) struct AtomicStat {
    current: AtomicI64,
    peak: AtomicI64,
    allocated: AtomicI64,
    freed: AtomicI64,
}

impl AtomicStat {
    pub(crate) fn increase(&self, n: u64) {
        let n = signed(n);
        let now = self.current.fetch_add(n, Ordering::Relaxed) + n;
        // A plain load first: in steady state the peak is not exceeded and no second
        // read-modify-write is needed.
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        self.allocated.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn decrease(&self, n: u64) {
        let n = signed(n);
        self.current.fetch_sub(n, Ordering::Relaxed);
        self.freed.fetch_add(n, Ordering::Relaxed);
    }

    /// [`AtomicStat::increase`] without the accumulated total (kept in a [`ThreadCell`]).
    #[inline]
    pub(crate) fn increase_current(&self, n: u64) {
        let n = signed(n);
        let now = self.current.fetch_add(n, Ordering::Relaxed) + n;
        if now > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// [`AtomicStat::decrease`] without the accumulated total (kept in a [`ThreadCell`]).
    #[inline]
    pub(crate) fn decrease_current(&self, n: u64) {
        self.current.fetch_sub(signed(n), Ordering::Relaxed);
    }

    fn snapshot(&self) -> Stat {
        Stat {
            current: self.current.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            allocated: self.allocated.load(Ordering::Relaxed),
            freed: self.freed.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn reset_peak(&self) {
        self.peak
            .store(self.current.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub(crate) fn reset_accumulated(&self) {
        self.allocated.store(0, Ordering::Relaxed);
        self.freed.store(0, Ordering::Relaxed);
    }
}

/// Durations of driver calls, as PyTorch's `DurationStat`; all fields in microseconds
/// (rounded down from nanosecond sums).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurationStat {
    /// Sum of all durations since creation or the last accumulated reset, µs.
    pub total: u64,
    /// Longest duration since creation or the last peak reset, µs.
    pub max: u64,
    /// Shortest duration since creation or the last peak reset, µs (0 before any).
    pub min: u64,
    /// Number of durations since creation or the last accumulated reset.
    pub count: u64,
    /// `total / count`, µs (0 before any).
    pub avg: u64,
}

/// Nanosecond accumulator behind [`DurationStat`].
#[derive(Debug, Default)]
pub(crate) struct Durations {
    total_ns: u64,
    max_ns: u64,
    min_ns: Option<u64>,
    count: u64,
}

impl Durations {
    pub(crate) fn add(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.total_ns = self.total_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        self.min_ns = Some(self.min_ns.map_or(ns, |m| m.min(ns)));
        self.count += 1;
    }

    fn snapshot(&self) -> DurationStat {
        DurationStat {
            total: self.total_ns / 1000,
            max: self.max_ns / 1000,
            min: self.min_ns.unwrap_or(0) / 1000,
            count: self.count,
            avg: self.total_ns.checked_div(self.count).unwrap_or(0) / 1000,
        }
    }

    fn reset_peak(&mut self) {
        self.max_ns = 0;
        self.min_ns = None;
    }

    fn reset_accumulated(&mut self) {
        self.total_ns = 0;
        self.count = 0;
    }
}

/// What [`host_memory_stats`](super::host_memory_stats) returns, as
/// `torch.cuda.host_memory_stats()`. Sizes are the rounded block sizes, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMemoryStats {
    /// Blocks handed out. A freed block counts until the markers of its recorded streams
    /// complete (as PyTorch: it leaves the count when it rejoins its free list).
    pub allocation: Stat,
    /// Bytes of the blocks counted by `allocation`.
    pub allocated_bytes: Stat,
    /// Pinned blocks obtained from the driver and not yet released.
    pub segment: Stat,
    /// Bytes of the blocks counted by `segment`.
    pub reserved_bytes: Stat,
    /// Driver allocations (`CL_MEM_ALLOC_HOST_PTR` buffer + map) since the last accumulated
    /// reset.
    pub num_host_alloc: u64,
    /// Driver releases (unmap + release) since the last accumulated reset.
    pub num_host_free: u64,
    /// Durations of the driver allocations, µs.
    pub host_alloc_time: DurationStat,
    /// Durations of the driver releases, µs.
    pub host_free_time: DurationStat,
    /// Freed blocks still waiting for stream markers (not reusable yet). Not in PyTorch.
    pub pending_blocks: u64,
    /// Stream markers those blocks wait for. Not in PyTorch.
    pub pending_markers: u64,
}

/// Indices of a [`ThreadCell`]'s totals.
const ALLOC_N: usize = 0;
const FREED_N: usize = 1;
const ALLOC_BYTES: usize = 2;
const FREED_BYTES: usize = 3;

/// One thread's accumulated totals of one allocator (`allocation.allocated`,
/// `allocation.freed`, `allocated_bytes.allocated`, `allocated_bytes.freed`) for the
/// blocks its cache handed out and took back. Written by its thread only, with plain loads
/// and stores (no read-modify-write); read under [`Counters`]' registry lock. `base` is what
/// the last accumulated reset saw, written under that lock only.
#[derive(Debug, Default)]
pub(crate) struct ThreadCell {
    totals: [AtomicU64; 4],
    base: [AtomicU64; 4],
}

impl ThreadCell {
    #[inline]
    fn add(&self, i: usize, n: u64) {
        let w = &self.totals[i];
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// One block of `size` bytes in the allocated totals.
    #[inline]
    fn count_allocated(&self, size: u64) {
        self.add(ALLOC_N, 1);
        self.add(ALLOC_BYTES, size);
    }

    /// One block of `size` bytes in the freed totals.
    #[inline]
    fn count_freed(&self, size: u64) {
        self.add(FREED_N, 1);
        self.add(FREED_BYTES, size);
    }

    /// The totals since the last reset (wrapping differences, as `i64`).
    fn since_reset(&self) -> [i64; 4] {
        std::array::from_fn(|i| {
            let v = self.totals[i]
                .load(Ordering::Relaxed)
                .wrapping_sub(self.base[i].load(Ordering::Relaxed));
            #[allow(clippy::cast_possible_wrap)]
            let v = v as i64;
            v
        })
    }

    fn reset(&self) {
        for (t, b) in self.totals.iter().zip(&self.base) {
            b.store(t.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// All counters of one allocator.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub allocation: AtomicStat,
    pub allocated_bytes: AtomicStat,
    pub segment: AtomicStat,
    pub reserved_bytes: AtomicStat,
    pub num_host_alloc: AtomicU64,
    pub num_host_free: AtomicU64,
    pub pending_blocks: AtomicU64,
    pub pending_markers: AtomicU64,
    pub alloc_time: Mutex<Durations>,
    pub free_time: Mutex<Durations>,
    /// The cells of the threads with a cache of this allocator.
    cells: Mutex<Vec<Arc<ThreadCell>>>,
}

impl Counters {
    /// A block handed out (cached or new).
    pub(crate) fn on_allocate(&self, size: u64) {
        self.allocation.increase(1);
        self.allocated_bytes.increase(size);
    }

    /// A block back on its free list.
    pub(crate) fn on_returned(&self, size: u64) {
        self.allocation.decrease(1);
        self.allocated_bytes.decrease(size);
    }

    /// A block handed out by a thread's cache: as [`Counters::on_allocate`], the
    /// accumulated totals in the thread's `cell`.
    #[inline]
    pub(crate) fn on_cached_hand_out(&self, cell: &ThreadCell, size: u64) {
        self.allocation.increase_current(1);
        self.allocated_bytes.increase_current(size);
        cell.count_allocated(size);
    }

    /// A block taken into a thread's cache: as [`Counters::on_returned`], the accumulated
    /// totals in the thread's `cell`.
    #[inline]
    pub(crate) fn on_cached_return(&self, cell: &ThreadCell, size: u64) {
        self.allocation.decrease_current(1);
        self.allocated_bytes.decrease_current(size);
        cell.count_freed(size);
    }

    /// A new cell for a thread's cache.
    pub(crate) fn register(&self) -> Arc<ThreadCell> {
        let cell = Arc::new(ThreadCell::default());
        self.cells.lock().push(Arc::clone(&cell));
        cell
    }

    /// Folds an exiting thread's cell into the shared totals and forgets it (under the
    /// registry lock, so that a read counts it exactly once).
    pub(crate) fn retire(&self, cell: &Arc<ThreadCell>) {
        let mut cells = self.cells.lock();
        let t = cell.since_reset();
        let (a, b) = (&self.allocation, &self.allocated_bytes);
        a.allocated.fetch_add(t[ALLOC_N], Ordering::Relaxed);
        a.freed.fetch_add(t[FREED_N], Ordering::Relaxed);
        b.allocated.fetch_add(t[ALLOC_BYTES], Ordering::Relaxed);
        b.freed.fetch_add(t[FREED_BYTES], Ordering::Relaxed);
        cells.retain(|c| !Arc::ptr_eq(c, cell));
    }

    /// A new block from the driver, which took `took`.
    pub(crate) fn on_segment_alloc(&self, size: u64, took: Duration) {
        self.segment.increase(1);
        self.reserved_bytes.increase(size);
        self.num_host_alloc.fetch_add(1, Ordering::Relaxed);
        self.alloc_time.lock().add(took);
    }

    /// A block released to the driver, which took `took`.
    pub(crate) fn on_segment_free(&self, size: u64, took: Duration) {
        self.segment.decrease(1);
        self.reserved_bytes.decrease(size);
        self.num_host_free.fetch_add(1, Ordering::Relaxed);
        self.free_time.lock().add(took);
    }

    pub(crate) fn snapshot(&self) -> HostMemoryStats {
        let cells = self.cells.lock();
        let mut allocation = self.allocation.snapshot();
        let mut allocated_bytes = self.allocated_bytes.snapshot();
        for cell in cells.iter() {
            let t = cell.since_reset();
            allocation.allocated = allocation.allocated.wrapping_add(t[ALLOC_N]);
            allocation.freed = allocation.freed.wrapping_add(t[FREED_N]);
            allocated_bytes.allocated = allocated_bytes.allocated.wrapping_add(t[ALLOC_BYTES]);
            allocated_bytes.freed = allocated_bytes.freed.wrapping_add(t[FREED_BYTES]);
        }
        drop(cells);
        HostMemoryStats {
            allocation,
            allocated_bytes,
            segment: self.segment.snapshot(),
            reserved_bytes: self.reserved_bytes.snapshot(),
            num_host_alloc: self.num_host_alloc.load(Ordering::Relaxed),
            num_host_free: self.num_host_free.load(Ordering::Relaxed),
            host_alloc_time: self.alloc_time.lock().snapshot(),
            host_free_time: self.free_time.lock().snapshot(),
            pending_blocks: self.pending_blocks.load(Ordering::Relaxed),
            pending_markers: self.pending_markers.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn reset_peak(&self) {
        for s in self.stats() {
            s.reset_peak();
        }
        self.alloc_time.lock().reset_peak();
        self.free_time.lock().reset_peak();
    }

    pub(crate) fn reset_accumulated(&self) {
        let cells = self.cells.lock();
        for cell in cells.iter() {
            cell.reset();
        }
        for s in self.stats() {
            s.reset_accumulated();
        }
        self.num_host_alloc.store(0, Ordering::Relaxed);
        self.num_host_free.store(0, Ordering::Relaxed);
        self.alloc_time.lock().reset_accumulated();
        self.free_time.lock().reset_accumulated();
    }

    fn stats(&self) -> [&AtomicStat; 4] {
        [
            &self.allocation,
            &self.allocated_bytes,
            &self.segment,
            &self.reserved_bytes,
        ]
    }
}
