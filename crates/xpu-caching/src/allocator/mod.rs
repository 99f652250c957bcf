//! [`CachingAllocator`]: the caching allocator of one device, generic over a [`Backend`].
//!
//! The design (sharding, statistics, cross-stream reuse, fragmentation policy) is documented
//! on [`CachingAllocator`]. Modules, by concept: [`Allocation`] (the handle of a block
//! handed out); `stream_state` and `shard` (one stream's blocks, segments, free pools and
//! pending frees behind its lock: best fit, split, coalescing, deferred frees); `pool`,
//! `block`, `slab`, `pending` (their storage), `policy_state` (what the fragmentation policy
//! remembers per stream); [`WeakShard`] (a weak handle on a shard); `grow`, `policy`, `oom`
//! (device-wide steps: new segments, the fragmentation policy, the OOM sequence with
//! cross-stream reuse);
//! `device_wide` (source, configuration, reserved bytes, fraction); `stats_cell`,
//! `stats_registry`, `thread_cache`, `shard_cache` (per-thread statistics and shard caches);
//! `free_cache`, `bin_slots` (the threads' caches of freed blocks); `snapshot`;
//! `place_cell` (a block's relocation state: pins, observed / off-stream bits, moves; the
//! arena of cells by slab index), `relocate` (moving live blocks before a growth:
//! `relocation:merge`, docs/relocation.md) and `relocation_stats` (its figures).

mod allocation;
pub(crate) mod bin_slots;
pub(crate) mod block;
pub(crate) mod device_wide;
pub(crate) mod free_cache;
mod grow;
mod oom;
pub(crate) mod pending;
pub(crate) mod place_cell;
mod policy;
pub(crate) mod policy_state;
pub(crate) mod pool;
mod relocate;
pub(crate) mod relocation_stats;
pub(crate) mod shard;
mod shard_cache;
pub(crate) mod slab;
pub(crate) mod snapshot;
pub(crate) mod stats_cell;
pub(crate) mod stats_registry;
pub(crate) mod stream_state;
pub(crate) mod thread_cache;
mod weak_shard;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

pub use allocation::{Allocation, PendingMove, PlacePin};
pub use device_wide::{BoxedSource, DeferredDrop, SharedState};
use oom::{DeferredOom, OnOom};
pub use relocation_stats::RelocationStats;
pub use snapshot::{BlockSnapshot, BlockState, SegmentSnapshot};
pub use weak_shard::WeakShard;

use self::device_wide::DeviceShared;
use self::grow::{free_released, hard_error, new_segment, release_batches};
use self::pending::wait_markers;
use self::shard::Shard;
use self::stats_cell::StatsWriter;
use self::stream_state::{Handed, Request, ShardState};
use self::thread_cache::{with_local, ThreadCacheKey};
use crate::backend::Backend;
use crate::config::{AllocConfig, ReleasePolicy};
use crate::error::CacheError;
use crate::history::{History, TraceAction};
use crate::size::MAX_REQUEST;
use crate::source::SegmentSource;
use crate::stats::MemoryStats;
use crate::stream::StreamKey;

/// Byte figures of [`CachingAllocator::memory_stats`] as methods (negative reads as 0).
macro_rules! byte_figures {
    ($($(#[$doc:meta])* $name:ident: $($field:ident).+,)*) => {$(
        $(#[$doc])*
        #[must_use]
        pub fn $name(&self) -> u64 {
            u64::try_from(self.memory_stats().$($field).+).unwrap_or(0)
        }
    )*};
}

struct ShardMap<B: Backend> {
    by_key: HashMap<StreamKey, Arc<Shard<B>>>,
    ordered: Vec<Arc<Shard<B>>>,
}

struct Inner<B: Backend> {
    shared: Arc<DeviceShared<B>>,
    shards: Mutex<ShardMap<B>>,
    oom_lock: Mutex<()>,
}

impl<B: Backend> Drop for Inner<B> {
    fn drop(&mut self) {
        // In a bad fork child the device-wide state (its segment source) is leaked; each
        // shard leaks its own state when it drops (see `Shard`'s drop).
        if B::is_bad_fork() {
            std::mem::forget(self.shared.clone());
        }
    }
}

/// The history [`CachingAllocator::memory_history`] answers in a bad fork child: empty, off,
/// and only ever touched in the child (so no thread of the parent held its lock).
static DETACHED_HISTORY: std::sync::OnceLock<History> = std::sync::OnceLock::new();

/// The caching allocator of one device over backend `B`, its segments from a
/// [`SegmentSource`] (cheap to clone: clones share the allocator). It relies on the
/// stream-ordered contract of [`Backend`] and on nothing else of the device. PyTorch's rules (reference §4): 512-byte rounding, optional
/// power-of-two divisions, small (<= 1 MiB) and large pools, best fit by (size, address)
/// per stream, split and oversize rules, coalescing, record_stream with deferred frees,
/// the OOM sequence, empty_cache, memory fraction, garbage collection and statistics.
///
/// # Sharding
/// State is sharded per stream: each stream's blocks, segments, free pools and pending
/// frees live in its own shard behind its own lock, so threads on different streams never
/// contend. The cached allocate/free path takes the stream's shard lock (its only
/// read-modify-write atomics besides the shard's reference count), updates the calling
/// thread's statistics cell with plain stores (see `cell`), reads a few read-mostly words
/// (config epoch, flags) and writes nothing shared with other streams or threads. Pending frees are processed at the start
/// of each allocation on the allocating stream's shard, one FIFO per marker stream (no
/// head-of-line blocking across streams). Only the OOM path and
/// [`CachingAllocator::empty_cache`] take every shard (in creation order, under one OOM lock).
///
/// # Threads' caches of freed blocks
/// Before that, a thread looks in its own cache of blocks it freed (as glibc's tcache): a
/// block freed with no `record_stream` on another stream goes into the freeing thread's
/// bin of (stream, requested size), and that thread's next allocation of the size on the
/// stream takes it back with no lock (three atomic read-modify-writes per allocate + free
/// pair: the shard handle's reference count twice, the bin slot's swap). Statistics are
/// counted at once in the thread's cell as the slow path counts them; the block's return to
/// its pool (coalescing) waits for a flush, which every statistics read, snapshot,
/// `empty_cache`, configuration or fraction change, OOM path, slow-path allocation on the
/// stream, shard teardown and the thread's exit performs. Private pools
/// ([`CachingAllocator::with_setup`]) have none. The rules and what they leave exact are in
/// `crates/xpu-caching/src/allocator/free_cache.rs`. A statistics read flushes only the
/// shards whose lock is free (it never waits for an allocation in progress).
///
/// # Waits and driver calls
/// No device wait runs under an allocator lock: the OOM path and `empty_cache` collect the
/// markers to wait for under the locks, release them, wait, then lock again; segments that
/// garbage collection, the release policy or an oversize release frees during an
/// allocation are taken out under the stream's lock and freed (after the synchronize a
/// source whose free does not wait needs) once it is released, so a segment source is never
/// called under an allocator lock. No driver call
/// or wait runs while a statistics write is open (see `cell`), so statistics readers never
/// wait for an allocation in progress, and a segment source may read statistics.
///
/// # The OOM sequence
/// After the stream's pool, a new segment and (with `max_split_size`) the release of
/// oversize blocks: every stream's completed frees, this stream's pool again, another
/// stream's whole cached segment (below); then wait for every pending free, **search again**
/// (a block that was only waiting for another stream is reused as it is, with no segment
/// released), release every cached whole segment (each once a marker on its stream
/// completes) and those an earlier release kept aside whose marker now reads complete (see
/// [`CachingAllocator::empty_cache`]), and allocate a segment once more. A size the device can never allocate
/// ([`CacheError::TooLarge`]) and other device errors end the sequence at once.
///
/// # Statistics under concurrency
/// Each thread updates its own statistics cell; [`CachingAllocator::memory_stats`] sums the
/// cells. Currents, accumulated `allocated`/`freed` and counters are exact sums. A free
/// counts in the cell of the thread that allocated the block (whichever thread frees it),
/// so a cell's allocated, active and requested figures follow its own live blocks. A peak is
/// the sum of the per-thread peaks: exactly the device-wide peak when one thread makes every
/// call since creation or the last [`CachingAllocator::reset_peak_stats`] (whatever the number of
/// streams); for the figures of allocations (`allocation`, `allocated_bytes`, `active`,
/// `active_bytes`, `requested_bytes`, `oversize_allocations`) also when one thread allocates
/// and others free (producer/consumer); an upper bound of it when several threads allocate
/// (their individual highs need not coincide), and for the segment, reserved and
/// inactive-split figures when several threads call. Cells of exited threads are folded into
/// one (peaks keep adding up).
/// A read concurrent with allocations sees each cell at some instant between operations
/// (a sequence lock: readers retry, writers never wait for readers).
///
/// # Cross-stream reuse under memory pressure
/// When a request can be served neither from its stream's cache nor by a new segment, and
/// before releasing every cached segment (PyTorch's last resort), the allocator looks for a
/// cached *whole* free segment of another stream that fits the request (same pool, best
/// fit, oversize rules). It records a marker on the owner stream, makes the allocating
/// stream wait for it (a device-side wait: no host synchronization) and moves the segment
/// to the allocating stream for good. Contract: all work that used the segment was enqueued
/// on its owner stream, or on streams named by `record_stream`, whose markers completed
/// before its blocks became free; so every command enqueued on the allocating stream after
/// the allocation runs after that work. Work on other streams that used the memory without
/// `record_stream` is the caller's responsibility, as in PyTorch.
///
/// # Fork safety
/// In a child process forked after its parent initialized the device's driver
/// ([`Backend::is_bad_fork`]), every method refuses with [`CacheError::BadFork`] or does
/// nothing / answers a neutral value (each says which), before any allocator lock, backend
/// or segment source call: a thread of the parent may have held a lock at the fork. Dropping
/// an [`Allocation`], a shard or the allocator's last handle there leaks what it holds. As
/// torch's `_lazy_init` refusing in a bad fork.
///
/// # Fragmentation policy
/// With `release_policy:before_grow` (the default), idle cached large segments are
/// consolidated into one instead of growing the reserved memory past its high-water mark,
/// what a consolidation released is regrown as one segment when needed again, and
/// small-pool segments grow with the stream's small-pool use (2 MiB up to 4 MiB); see
/// [`crate::config::ReleasePolicy`]. On 43 of the 45 PyTorch traces that
/// `crates/xpu-replay/tests/policy_must_hold.rs` replays (simulated H200), peak reserved bytes
/// and segment allocations stay at or below PyTorch's default; on two variable-shape traces peak reserved
/// stays below PyTorch's but segment allocations do not (up to 7% more; `xpu replay-all
/// DIR...` prints the figures). With `release_policy:on_oom`, segment sizes are PyTorch's and
/// cached segments are released only on the OOM path and by `empty_cache`: replays then
/// reproduce PyTorch's
/// figures exactly.
#[derive(Clone)]
pub struct CachingAllocator<B: Backend> {
    inner: Arc<Inner<B>>,
}

/// Result of the per-stream part of an allocation.
pub(crate) enum Outcome {
    Done(Handed),
    Exhausted(Request),
}

impl<B: ThreadCacheKey> CachingAllocator<B> {
    /// An allocator over `source` with `config`.
    #[must_use]
    pub fn new(source: BoxedSource<B>, config: AllocConfig) -> Self {
        Self::from_shared(DeviceShared::new(source, config))
    }

    fn from_shared(shared: DeviceShared<B>) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared: Arc::new(shared),
                shards: Mutex::new(ShardMap {
                    by_key: HashMap::new(),
                    ordered: Vec::new(),
                }),
                oom_lock: Mutex::new(()),
            }),
        }
    }

    /// An allocator over `source` with `config` that records its events in `history` (one
    /// shared with another allocator) and hands the teardown of each dropped shard
    /// (waiting for its stream's markers through [`Backend::wait`], then releasing its
    /// segments) to `deferred_drop` instead of running it in the drop (`None`: in the drop).
    /// xpu-alloc's private pools (`MemPool`) are built so, with a background thread, so no
    /// drop waits for the device.
    #[must_use]
    pub fn with_setup(
        source: BoxedSource<B>,
        config: AllocConfig,
        history: Arc<History>,
        deferred_drop: Option<DeferredDrop>,
    ) -> Self {
        let mut shared = DeviceShared::new(source, config);
        shared.history = history;
        shared.deferred_drop = deferred_drop;
        shared.thread_cache = false;
        shared.relocation_allowed = false;
        Self::from_shared(shared)
    }

    /// A handle on the device-wide state (identity, segment accounting, statistics,
    /// configuration), which outlives the allocator while its shards do: xpu-alloc's private
    /// pools charge their segments to their device allocator's through it.
    #[must_use]
    pub fn shared(&self) -> SharedState<B> {
        SharedState(self.inner.shared.clone())
    }

    /// Unique id of this allocator (what [`Allocation::owner_id`] of its blocks returns).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.shared.id
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.inner.shared.device()
    }

    /// The segment source.
    #[must_use]
    pub fn source(&self) -> &dyn SegmentSource<Memory = B::Memory> {
        self.inner.shared.source.as_ref()
    }

    /// Allocates `size` bytes for use on `stream`.
    ///
    /// # Errors
    /// See [`CachingAllocator::allocate_with`].
    #[inline]
    pub fn allocate(
        &self,
        size: u64,
        stream: &B::Stream,
    ) -> Result<Option<Allocation<B>>, CacheError> {
        self.allocate_with(size, B::stream_key(stream), || stream.clone())
    }

    /// Allocates `size` bytes for use on the stream `key`; `stream` is called only while
    /// this stream is not yet known, to get its handle. `stream` runs under no allocator
    /// lock, so it may call the allocator; when two threads register the same stream at once,
    /// one handle is kept and the other dropped (also under no lock). A zero size gives `None`
    /// without touching the allocator. The [`Allocation`] frees its block when dropped.
    ///
    /// # Errors
    /// [`CacheError::TooLarge`] when the request exceeds the device's largest allocation or
    /// 1 EiB; [`CacheError::StreamDevice`] for a stream (`key`) of another device;
    /// [`CacheError::OutOfMemory`] also when the reserved bytes would pass `i64::MAX`
    /// (the statistics' range), and after the full OOM sequence (`fraction` set when the
    /// memory fraction refused);
    /// [`CacheError::Device`] for other device errors; [`CacheError::BadFork`] in a bad fork
    /// child ([`Backend::is_bad_fork`]), first (also for size 0).
    #[inline]
    pub fn allocate_with(
        &self,
        size: u64,
        key: StreamKey,
        stream: impl FnOnce() -> B::Stream,
    ) -> Result<Option<Allocation<B>>, CacheError> {
        self.allocate_counting(size, key, stream, OnOom::Raise)
    }

    /// [`CachingAllocator::allocate_with`] with one retry: when the allocation fails out of
    /// memory, `before_retry` runs (under no allocator lock; it may free memory elsewhere,
    /// e.g. another allocator's cache, and call the allocator) and, when it returns `true`,
    /// the allocation is made again. `num_ooms` counts, and the history traces (`oom`), the
    /// out-of-memory errors returned to the caller (as PyTorch's, bumped and traced where
    /// `malloc` raises): a first attempt that is retried counts and traces none, whatever
    /// the retry gives. `stream` may be called by both
    /// attempts. xpu-alloc's private pools retry so after releasing the default pool's
    /// cache, its device allocator after waiting for dropped pools' releases.
    ///
    /// # Errors
    /// As [`CachingAllocator::allocate_with`] (the retry's error when it ran).
    pub fn allocate_or_retry(
        &self,
        size: u64,
        key: StreamKey,
        stream: impl Fn() -> B::Stream,
        before_retry: impl FnOnce() -> bool,
    ) -> Result<Option<Allocation<B>>, CacheError> {
        let deferred = DeferredOom::new(None);
        match self.allocate_counting(size, key, &stream, OnOom::Defer(&deferred)) {
            Err(CacheError::OutOfMemory { .. }) if before_retry() => {
                self.allocate_counting(size, key, stream, OnOom::Raise)
            }
            Err(e @ CacheError::OutOfMemory { .. }) => {
                let shared = &self.inner.shared;
                with_local(shared, |local| local.stats().num_ooms.bump());
                if let Some((free, rounded)) = deferred.get() {
                    shared
                        .history
                        .record(TraceAction::Oom, free, rounded, key.id);
                }
                Err(e)
            }
            other => other,
        }
    }

    /// The allocation; `on_oom`: whether an out-of-memory failure is counted in `num_ooms`
    /// and traced in the history now, or left to a caller that may retry it.
    #[inline(always)]
    fn allocate_counting(
        &self,
        size: u64,
        key: StreamKey,
        stream: impl FnOnce() -> B::Stream,
        on_oom: OnOom<'_>,
    ) -> Result<Option<Allocation<B>>, CacheError> {
        if B::is_bad_fork() {
            return Err(CacheError::BadFork);
        }
        let shared = &self.inner.shared;
        if size == 0 {
            return Ok(None);
        }
        let max_alloc = shared.max_alloc;
        if size > MAX_REQUEST || size > max_alloc {
            return Err(CacheError::TooLarge {
                device: shared.device(),
                requested: size,
                max: max_alloc.min(MAX_REQUEST),
            });
        }
        // The stream closure is user code: it runs before any allocator lock is taken
        // (and outside the thread-local state), so it may itself call the allocator.
        let found = with_local(shared, |mut local| {
            // A block this thread freed on this stream for this size (`free_cache`).
            if let Some(bins) = local.bins.as_deref_mut() {
                if let Some((shard, handed)) = bins.take(key, size, shared.config_epoch()) {
                    // Traced before a relocating block's cell is reset: from then on it may
                    // move, and its `alloc` must come before any `move_from` of it.
                    if shared.history.is_enabled() {
                        let addr = shard.traced_address(&handed);
                        shared
                            .history
                            .record(TraceAction::Alloc, addr, size, key.id);
                    }
                    if handed.relocating {
                        free_cache::reset_cell(&shard, &handed);
                    }
                    free_cache::count_hand_out(&mut local.cell.write(local.gens), &handed, size);
                    let slot = local.cell.slot();
                    return Some(Ok(Allocation::new(shard, handed, size, slot)));
                }
            }
            let shard = match local.shards.most_recent(key) {
                Some(shard) => shard,
                None => local.shards.find(key, |key| self.shard_of(key))?,
            };
            Some(self.allocate_on(shard, size, key, &local, on_oom))
        });
        if let Some(result) = found {
            return result.map(Some).map_err(|e| *e);
        }
        // A stream not known yet: only this device's streams get a shard (checked here, off
        // the cached path: a key of another device never finds a shard).
        if key.device != shared.device() {
            return Err(CacheError::StreamDevice {
                stream: key.device,
                device: shared.device(),
            });
        }
        let shard = self.insert_shard(key, stream());
        with_local(shared, |local| {
            local.shards.remember(key, &shard);
            self.allocate_on(shard, size, key, &local, on_oom)
        })
        .map(Some)
        .map_err(|e| *e)
    }

    /// The allocation proper, on the stream's shard (the error boxed: the cached path then
    /// moves a small result through the thread-local closure).
    #[inline(always)]
    fn allocate_on(
        &self,
        shard: Arc<Shard<B>>,
        size: u64,
        key: StreamKey,
        local: &thread_cache::Local<'_, B>,
        on_oom: OnOom<'_>,
    ) -> Result<Allocation<B>, Box<CacheError>> {
        let shared = &self.inner.shared;
        let outcome = {
            let mut state = shard.lock();
            let mut stats = local.stats();
            match fast_path(&shard, &mut state, size, &mut stats) {
                Ok(handed) => Outcome::Done(handed),
                Err(req) => {
                    grow_path(&shard.shared, &mut state, req, &mut stats).map_err(Box::new)?
                }
            }
        };
        let handed = match outcome {
            Outcome::Done(h) => h,
            Outcome::Exhausted(req) => self
                .oom_path(&shard, req, local, on_oom)
                .map_err(Box::new)?,
        };
        // A relocating block's `alloc` was traced at its hand-out, under the stream's lock
        // (it may move as soon as that lock is released). Recording off: one load, as ever.
        if shared.history.is_enabled() && !handed.relocating {
            shared
                .history
                .record(TraceAction::Alloc, handed.addr, size, key.id);
        }
        Ok(Allocation::new(shard, handed, size, local.cell.slot()))
    }

    /// The shard of `key` in the shard map, if it exists.
    fn shard_of(&self, key: StreamKey) -> Option<Arc<Shard<B>>> {
        self.inner.shards.lock().by_key.get(&key).cloned()
    }

    /// The shard of `key`, created with `stream` unless another thread created it since the
    /// lookup (then `stream` is dropped after the map lock is released: dropping a user's
    /// stream handle is user code).
    fn insert_shard(&self, key: StreamKey, stream: B::Stream) -> Arc<Shard<B>> {
        // Driver queries the first time for a queue: before the map's lock.
        let order_flag = B::stream_order_flag(&stream);
        let (shard, _unused) = {
            let mut map = self.inner.shards.lock();
            if let Some(shard) = map.by_key.get(&key) {
                (shard.clone(), Some(stream))
            } else {
                let rank = map.ordered.len();
                let shard = Arc::new(Shard::new(
                    key,
                    stream,
                    order_flag,
                    self.inner.shared.clone(),
                    rank,
                ));
                map.by_key.insert(key, shard.clone());
                map.ordered.push(shard.clone());
                (shard, None)
            }
        };
        shard
    }

    /// Weak handles of every shard (a dropped private pool's shards that live on through
    /// their allocations stay reachable for the device's `empty_cache`). None in a bad fork
    /// child (the shard map's lock may have been held at the fork).
    #[must_use]
    pub fn weak_shards(&self) -> Vec<WeakShard<B>> {
        if B::is_bad_fork() {
            return Vec::new();
        }
        self.inner
            .shards
            .lock()
            .ordered
            .iter()
            .map(|s| WeakShard(Arc::downgrade(s)))
            .collect()
    }

    fn all_shards(&self) -> Vec<Arc<Shard<B>>> {
        self.inner.shards.lock().ordered.clone()
    }

    /// Marks `allocation` as used on `stream` (as `Tensor.record_stream`): when it is freed,
    /// its block is reused only after a marker recorded then on `stream` completes. Ignored
    /// for the allocation stream.
    ///
    /// # Errors
    /// [`CacheError::BadFork`] in a bad fork child, first; [`CacheError::Foreign`] when
    /// `allocation` comes from another allocator.
    pub fn record_stream(
        &self,
        allocation: &Allocation<B>,
        stream: &B::Stream,
    ) -> Result<(), CacheError> {
        if B::is_bad_fork() {
            return Err(CacheError::BadFork);
        }
        if !Arc::ptr_eq(&allocation.shard.shared, &self.inner.shared) {
            return Err(CacheError::Foreign(allocation.address()));
        }
        allocation.record_stream(stream);
        Ok(())
    }

    /// Waits for every pending stream marker and releases every cached whole segment to
    /// the device (as `torch.cuda.empty_cache`). Blocks in split segments with a live part
    /// stay cached. A segment is released only after the work enqueued on its stream before
    /// this call has completed (a marker waited for without any allocator lock); until then
    /// it counts as reserved. A marker that still reads pending after its wait returned (on
    /// OpenCL: a wait of its stream enqueued by another thread, numbered before the marker,
    /// has not completed) keeps its segments aside, reserved: a later `empty_cache` (or the
    /// OOM path) frees them once it reads complete, never while it is pending or after it
    /// failed. Returns once every segment released is freed. Does nothing in a bad fork
    /// child.
    pub fn empty_cache(&self) {
        if B::is_bad_fork() {
            return;
        }
        let shared = &self.inner.shared;
        with_local(shared, |local| {
            local.stats().num_sync_all_streams.bump();
            let markers = self.with_all(|gs| {
                gs.iter()
                    .flat_map(|g| g.pending_markers())
                    .collect::<Vec<_>>()
            });
            wait_markers::<B>(&markers);
            let batches = self.with_all(|gs| {
                let mut st = local.stats();
                for g in gs.iter_mut() {
                    g.flush_thread_caches(&mut st);
                    g.process_events(&mut st);
                }
                gs.iter_mut()
                    .filter_map(|g| g.take_releasable(&mut st))
                    .collect::<Vec<_>>()
            });
            release_batches(batches, shared, &local);
        });
    }

    /// Frees into their shards the blocks every thread's cache holds (`free_cache`), each
    /// shard under its lock.
    fn flush_thread_caches(&self) {
        self.flush_thread_caches_of(true);
    }

    /// [`CachingAllocator::flush_thread_caches`] for a statistics read: skips a shard whose
    /// lock another thread holds (readers never wait for an allocation in progress; that
    /// shard's cached blocks read as freed, not yet back in its pool).
    fn flush_thread_caches_unlocked(&self) {
        self.flush_thread_caches_of(false);
    }

    /// `wait`: whether to wait for each shard's lock.
    fn flush_thread_caches_of(&self, wait: bool) {
        let shared = &self.inner.shared;
        if !shared.thread_cache {
            return;
        }
        let shards = self.all_shards();
        for shard in &shards {
            with_local(shared, |local| {
                let state = if wait {
                    Some(shard.lock())
                } else {
                    shard.try_lock()
                };
                if let Some(mut state) = state {
                    state.flush_thread_caches(&mut local.stats());
                }
            });
        }
    }

    /// Runs `f` with the OOM lock and every shard locked (in creation order: index = rank).
    fn with_all<R>(
        &self,
        f: impl FnOnce(&mut [parking_lot::MutexGuard<'_, ShardState<B>>]) -> R,
    ) -> R {
        let _oom = self.inner.oom_lock.lock();
        let shards = self.all_shards();
        let mut guards: Vec<_> = shards.iter().map(|s| s.lock()).collect();
        f(&mut guards)
    }

    /// Limits reserved memory to `fraction` of the device total (as
    /// `set_per_process_memory_fraction`): a new segment that would take the reserved bytes
    /// above the limit fails (after the usual cache release) with
    /// [`CacheError::OutOfMemory`] with `fraction` set.
    ///
    /// # Errors
    /// [`CacheError::BadFork`] in a bad fork child, first; [`CacheError::Fraction`] unless
    /// `0 < fraction <= 1`.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), CacheError> {
        if B::is_bad_fork() {
            return Err(CacheError::BadFork);
        }
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(CacheError::Fraction(fraction));
        }
        self.inner.shared.set_fraction(fraction);
        self.flush_thread_caches();
        Ok(())
    }

    /// The memory fraction (1.0 when none is set, and in a bad fork child).
    #[must_use]
    pub fn memory_fraction(&self) -> f64 {
        if B::is_bad_fork() {
            return 1.0;
        }
        self.inner.shared.fraction().unwrap_or(1.0)
    }

    /// Replaces the configuration (applies to the following allocations). Does nothing in a
    /// bad fork child.
    pub fn set_config(&self, config: AllocConfig) {
        if B::is_bad_fork() {
            return;
        }
        self.inner.shared.set_config(config);
        self.flush_thread_caches();
    }

    /// The current configuration, `split_segments` resolved (the segment source's choice
    /// where it was left unset; [`CachingAllocator::given_config`] keeps it unset); the
    /// default one in a bad fork child (the configuration's lock may have been held at the
    /// fork).
    #[must_use]
    pub fn config(&self) -> Arc<AllocConfig> {
        if B::is_bad_fork() {
            return Arc::new(AllocConfig::default());
        }
        self.inner.shared.config()
    }

    /// The configuration as last given ([`CachingAllocator::new`] or
    /// [`CachingAllocator::set_config`]): as [`CachingAllocator::config`], but with
    /// `split_segments` `None` where it was left to the segment source. For building another
    /// allocator over another source with the same configuration (a private pool). The
    /// default one in a bad fork child.
    #[must_use]
    pub fn given_config(&self) -> AllocConfig {
        if B::is_bad_fork() {
            return AllocConfig::default();
        }
        self.inner.shared.given_config()
    }

    /// All statistics (as `torch.cuda.memory_stats`); see [`crate::stats`] for how peaks
    /// are aggregated across threads. All zero in a bad fork child (the statistics' locks
    /// may have been held at the fork), as are the byte figures below.
    #[must_use]
    pub fn memory_stats(&self) -> MemoryStats {
        if B::is_bad_fork() {
            return MemoryStats::default();
        }
        self.flush_thread_caches_unlocked();
        let mut stats = self.inner.shared.stats.aggregate();
        let max_split = self.config().max_split_size;
        stats.max_split_size = i64::try_from(max_split).unwrap_or(-1);
        stats
    }

    /// What relocation ([`Relocation::Merge`](crate::config::Relocation::Merge)) did since
    /// the allocator was made: xpu's own figures, beyond PyTorch's statistics. All zero with
    /// relocation off (or a configuration that never relocates, [`AllocConfig::relocates`]),
    /// for a private pool, and in a bad fork child.
    #[must_use]
    pub fn relocation_stats(&self) -> RelocationStats {
        if B::is_bad_fork() {
            return RelocationStats::default();
        }
        self.inner.shared.relocation.read()
    }

    byte_figures! {
        /// Bytes handed out (as `torch.cuda.memory_allocated`).
        memory_allocated: allocated_bytes.all.current,
        /// Peak bytes handed out (as `torch.cuda.max_memory_allocated`).
        max_memory_allocated: allocated_bytes.all.peak,
        /// Bytes reserved from the device (as `torch.cuda.memory_reserved`).
        memory_reserved: reserved_bytes.all.current,
        /// Peak bytes reserved (as `torch.cuda.max_memory_reserved`).
        max_memory_reserved: reserved_bytes.all.peak,
    }

    /// Sets every peak to its current value (as `torch.cuda.reset_peak_memory_stats`). Does
    /// nothing in a bad fork child.
    pub fn reset_peak_stats(&self) {
        if B::is_bad_fork() {
            return;
        }
        self.flush_thread_caches();
        self.inner.shared.stats.reset_peak();
    }

    /// Zeroes accumulated statistics and counters (as
    /// `torch.cuda.reset_accumulated_memory_stats`). Does nothing in a bad fork child. Frees
    /// waiting in this thread's cache of freed blocks are counted first, as they would have
    /// been at their free (review h66: a free made before the reset was counted after it).
    pub fn reset_accumulated_stats(&self) {
        if B::is_bad_fork() {
            return;
        }
        self.flush_thread_caches();
        self.inner.shared.stats.reset_accumulated();
    }

    /// (free, total) device memory in bytes (as `torch.cuda.mem_get_info`): the device's
    /// free-memory query when it has one, else total minus this allocator's reserved bytes.
    /// `(0, 0)` in a bad fork child (no source query, no lock).
    #[must_use]
    pub fn mem_get_info(&self) -> (u64, u64) {
        if B::is_bad_fork() {
            return (0, 0);
        }
        let shared = &self.inner.shared;
        let total = shared.source.total_memory();
        let free = shared
            .source
            .free_memory()
            .unwrap_or_else(|| total.saturating_sub(shared.reserved()));
        (free, total)
    }

    /// The history of this allocator's events (as `torch.cuda.memory._record_memory_history`;
    /// off by default). See [`crate::history`]. In a bad fork child, an empty history of
    /// the child's own, off (the allocator's ring lock may have been held at the fork).
    #[must_use]
    pub fn memory_history(&self) -> &History {
        if B::is_bad_fork() {
            return DETACHED_HISTORY.get_or_init(History::new);
        }
        &self.inner.shared.history
    }

    /// Device-wide reserved bytes as the segment accounting sees them (no statistics
    /// aggregation; used by the replay to sample every event). 0 in a bad fork child.
    #[must_use]
    pub fn reserved_bytes(&self) -> u64 {
        if B::is_bad_fork() {
            return 0;
        }
        self.inner.shared.reserved()
    }
}

/// The per-stream part of an allocation as far as the stream's pool: events, rounding,
/// best fit. `Err` carries the request to [`grow_path`] (garbage collection, release
/// policy, new segment, oversize release), which also reports a size above the device's
/// largest allocation.
#[inline(always)]
fn fast_path<B: Backend>(
    shard: &Shard<B>,
    state: &mut ShardState<B>,
    size: u64,
    st: &mut StatsWriter<'_>,
) -> Result<Handed, Request> {
    let shared = &*shard.shared;
    state.refresh_config(shared);
    // Blocks of this stream in threads' caches return to its pool first: the slow path
    // sees every free block of the stream (`free_cache`).
    state.flush_thread_caches(st);
    state.process_events(st);
    if shard.pending_hint() {
        shard.note_pending(state);
    }
    // On a driver that breaks the stream's order after a failed wait: whether one failed
    // (status queries, no wait; the statistics write closed, as for markers).
    if shard.order_unsettled() || state.unordered {
        state.unordered = st.unlocked(|| shard.follows_failed_wait());
    }
    let req = state.request(size, shared.max_alloc);
    if req.rounded <= shared.max_alloc {
        if let Some(found) = state.search(&req, shared.gc_enabled()) {
            return Ok(state.alloc_pooled(found, &req, st));
        }
    }
    Err(req)
}

/// What follows a failed search of the stream's pool (kept out of the cached path's code).
#[cold]
#[inline(never)]
fn grow_path<B: Backend>(
    shared: &DeviceShared<B>,
    state: &mut MutexGuard<'_, ShardState<B>>,
    req: Request,
    st: &mut StatsWriter<'_>,
) -> Result<Outcome, CacheError> {
    let (size, max_alloc, gc) = (req.size, shared.max_alloc, shared.gc_enabled());
    if req.rounded > max_alloc {
        return Err(CacheError::TooLarge {
            device: shared.device(),
            requested: size,
            max: max_alloc,
        });
    }
    if let Some(handed) = relocate_before_grow(shared, state, &req, st) {
        return Ok(Outcome::Done(handed));
    }
    if gc {
        state.garbage_collect(shared);
    }
    let mut grow = req;
    // The occupied segments a consolidation counted in: this call's, moved into the segment
    // it allocates next (kept out of the stream's state, which other threads change while
    // the lock is released below).
    let mut evacuation = Vec::new();
    if state.config.release_policy == ReleasePolicy::BeforeGrow {
        if state.config.splits_segments() {
            grow.segment_size =
                policy::segment_size_before_grow(state, &req, shared, &mut evacuation);
        } else {
            // Unsplit segments are exactly their request: no policy sizes them, but idle
            // ones may make room.
            policy::release_idle_before_grow(state, &req, shared);
        }
    }
    // What garbage collection or the policy released is freed without the stream's lock.
    free_released(state, shared, st);
    match new_segment(state, &grow, shared, st) {
        Ok(h) => {
            // A consolidation that counted occupied segments in: their blocks move into
            // the new segment, and they are released.
            if !evacuation.is_empty() {
                policy::evacuate_into_new(state, h.block, &evacuation, st, shared);
                free_released(state, shared, st);
            }
            return Ok(Outcome::Done(h));
        }
        Err(f) => hard_error(f, shared, size)?,
    }
    if grow.segment_size != req.segment_size {
        match new_segment(state, &req, shared, st) {
            Ok(h) => return Ok(Outcome::Done(h)),
            Err(f) => hard_error(f, shared, size)?,
        }
    }
    // Freed whether or not enough was released (a partial release still frees segments).
    let released_enough = state.release_available_cached_blocks(&req);
    free_released(state, shared, st);
    if released_enough {
        match new_segment(state, &req, shared, st) {
            Ok(h) => return Ok(Outcome::Done(h)),
            Err(f) => hard_error(f, shared, size)?,
        }
    }
    Ok(Outcome::Exhausted(req))
}

/// [`Relocation::Merge`](crate::config::Relocation::Merge): serves `req` by moving live blocks instead of growing, or empties
/// segments for the release policy's consolidation (see `relocate`). Only for the default
/// allocators (not private pools), under `release_policy:before_grow` with split segments.
fn relocate_before_grow<B: Backend>(
    shared: &DeviceShared<B>,
    state: &mut ShardState<B>,
    req: &Request,
    st: &mut StatsWriter<'_>,
) -> Option<Handed> {
    if !shared.relocation_allowed || !stream_state::relocates_pool(&state.config, req.pool) {
        return None;
    }
    let raises = shared.would_raise_high_water(req.segment_size);
    relocate::relocate_for(state, req, st, &shared.relocation, raises)
}
