//! Private memory pools (as `torch.cuda.MemPool` / `torch.xpu.MemPool`, reference §4.19).
//!
//! A [`MemPool`] is a caching allocator of its own on a device: its own shards (one per
//! stream), small and large free pools, segments and statistics, so its blocks are never
//! handed to the device's default pool or another pool, and never take theirs. It shares
//! the device allocator's segment source (or draws from a custom one,
//! [`MemPool::with_source`], as `MemPool(allocator=...)`), its reserved-bytes accounting and
//! its memory fraction: the device's `memory_reserved`, `mem_get_info` and fraction see pool
//! segments, and the device's [`crate::memory_stats`] includes every pool (as torch's
//! `memory_stats(device)` does). A freed [`crate::DataPtr`] returns to the pool that handed
//! it out.
//!
//! [`use_mem_pool`] routes the calling thread's allocations on the pool's device (through
//! the device's allocator: [`crate::allocate`], [`crate::raw_alloc`], typed buffers...) to
//! the pool until its guard drops; other threads are not routed (as torch's thread filter).
//!
//! # Lifetime
//! A pool lives while a [`MemPool`] handle (it is `Clone`) or one of its allocations lives.
//! When the last handle drops, the pool is "freeable" (torch's `use_count` 0): its cached
//! unused segments are released, and each stream's remaining segments once the last
//! allocation on them is freed. A segment is released only after the work enqueued on its
//! stream (and on the streams named by `record_stream`) before the release has completed;
//! that wait runs on a background thread (`xpu-pool-release`), so dropping a handle or an
//! allocation never blocks. [`wait_pool_releases`] waits for the releases handed over so
//! far; the device-wide [`crate::empty_cache`] does too. In a child forked after the parent
//! initialized OpenCL (a bad fork, `xpu_device::fork`), dropping the last handle leaks the
//! pool instead: no segment is released and no lock of the parent's is taken.
//!
//! # Details
//! - Layout: a `MemPool` is a `DeviceCore` of its own built with `CachingAllocator::with_setup`,
//!   whose segment source charges the device allocator's reserved bytes and memory fraction through
//!   its `SharedState` (its own source, or a custom `SegmentSource` with `MemPool::with_source`).
//!   The constructors that look the device allocator up live with the registry in `global`, so this
//!   module sits below `device_allocator`. With pools, the device's peak statistics become an upper
//!   bound; a freed `DataPtr` finds its pool by `Allocation::owner_id`.
//! - Routing is thread-local and the innermost `use_mem_pool` wins, with torch's
//!   `beginAllocateToPool` / `endAllocatePool` errors; `MemPool::empty_cache` / `release` are
//!   refused with the typed `PoolInUse`.
//! - `set_config` reaches every pool, one created meanwhile included (registering a pool and
//!   `DeviceAllocator::set_config` are serialized by the pool registry's lock, and a pool registers
//!   with the device allocator's configuration of that moment), and every device allocator, one
//!   created meanwhile by another thread included (the registry builds a device's allocator,
//!   context included, outside the configuration's lock and installs it under that lock with the
//!   configuration of that moment; `xpu_alloc::set_config` applies and stores a configuration under
//!   the same lock, so concurrent calls leave every allocator with the last one stored).
//! - A dropped pool's shards are torn down on the `xpu-pool-release` thread (its `DeferredDrop`
//!   hook) once their last block is freed, so no drop blocks; a custom source's `free` there may
//!   call the allocator (`wait_pool_releases` returns at once on that thread); a gone pool's source
//!   is dropped outside the pool registry's lock.
//! - Out of memory: an attempt that fails and is retried (a pool's, after the default pool's cache
//!   is released; the device allocator's, after pending pool releases) counts no `num_ooms` and
//!   traces no `oom` history entry; only the error returned does
//!   (`CachingAllocator::allocate_or_retry`). The report returned by the device allocator or a pool
//!   gives the device's allocated and reserved bytes, every pool included (as torch's message). The
//!   device `empty_cache` waits for pending releases, releases the unused segments of dropped pools
//!   that still hold allocations (freeable pools, `WeakShard::release_cached`), and leaves live
//!   pools' caches.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Condvar, Mutex};
use xpu_stream::Stream;

use xpu_caching::{SharedState, WeakShard};

use crate::cl_stream::{stream_key, ClBackend, ClStream};
use crate::data_ptr::DataPtr;
use crate::device_core::DeviceCore;
use crate::error::{check_fork, AllocError};
use crate::observe::MemorySnapshot;
use crate::source::{DynSource, SegmentMemory, SegmentSource, SourceError, SourceSegment};
use crate::stats::MemoryStats;
use crate::SegmentSnapshot;

/// The device-wide state of an allocator of this crate.
type Shared = SharedState<ClBackend>;

/// A pool id as torch's `MempoolId_t`: `(graph, user)`. Pools created by [`MemPool::new`],
/// [`MemPool::with_source`] and graph pool handles are `(0, n)`; pools a graph capture
/// creates for itself are `(n, 0)`; the default pool is `(0, 0)`. Unique in the process.
pub type MemPoolId = (u64, u64);

static NEXT_POOL: AtomicU64 = AtomicU64::new(1);

/// A pool number not given before in this process.
pub(crate) fn next_pool_number() -> u64 {
    NEXT_POOL.fetch_add(1, Ordering::Relaxed)
}

/// A private memory pool on one device (as `torch.cuda.MemPool`; see the module docs).
/// Cheap to clone: clones are handles of the same pool.
#[derive(Clone)]
pub struct MemPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    id: MemPoolId,
    device: usize,
    core: DeviceCore,
    /// The device allocator the pool belongs to (its routing key and shared accounting).
    parent: DeviceCore,
    /// Threads routing their allocations to this pool now.
    routing: AtomicUsize,
    /// The device allocator's pool registry (told about the pool's shards when it drops).
    registry: Weak<PoolRegistry>,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // In a child forked after OpenCL was initialized, the pool is leaked: the registry's
        // lock may have been held by a parent thread at the fork, and tearing down the core
        // would release its segments through the driver (on the `xpu-pool-release` thread).
        // One more reference to each core, never dropped, keeps them (as
        // `xpu_device::fork::take_unless_bad_fork`).
        if xpu_device::fork::is_in_bad_fork() {
            std::mem::forget(self.core.clone());
            std::mem::forget(self.parent.clone());
            return;
        }
        // The pool becomes freeable: its shards that live on through their allocations stay
        // reachable for the device's `empty_cache`; the others are torn down when the core
        // drops, right after this.
        if let Some(registry) = self.registry.upgrade() {
            registry.orphan(self.id, self.core.weak_shards());
        }
    }
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("id", &self.inner.id)
            .field("device", &self.inner.device)
            .finish_non_exhaustive()
    }
}

impl MemPool {
    pub(crate) fn build(
        parent: &DeviceCore,
        registry: &Arc<PoolRegistry>,
        custom: Option<Box<DynSource>>,
        id: MemPoolId,
    ) -> MemPool {
        let parent_shared = parent.shared();
        let history = parent_shared.history();
        let source = PoolSource {
            parent: parent_shared,
            custom,
        };
        // As given: `split_segments` left unset is the pool's source's choice.
        let config = parent.caching().given_config();
        let core = DeviceCore::with_setup(Box::new(source), config, history, run_in_background);
        MemPool {
            inner: Arc::new(PoolInner {
                id,
                device: parent.device(),
                core,
                parent: parent.clone(),
                routing: AtomicUsize::new(0),
                registry: Arc::downgrade(registry),
            }),
        }
    }

    /// The pool's id (as `MemPool.id`).
    #[must_use]
    pub fn id(&self) -> MemPoolId {
        self.inner.id
    }

    /// The pool's device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.inner.device
    }

    /// Id of the pool's allocator state (what [`DataPtr`]s of the pool carry).
    pub(crate) fn owner_id(&self) -> u64 {
        self.inner.core.id()
    }

    /// Whether `ptr` was handed out by this pool.
    #[must_use]
    pub fn owns(&self, ptr: &DataPtr) -> bool {
        ptr.owner_id() == Some(self.owner_id())
    }

    /// Allocates `size` bytes from this pool for use on `stream`, whatever the routing (the
    /// block is freed to the pool when the [`DataPtr`] drops). Size 0 gives an empty pointer.
    /// When the pool cannot grow (device memory or the memory fraction), the default pool's
    /// cached segments are released and the allocation retried once (as torch's
    /// `release_cached_blocks`).
    ///
    /// # Errors
    /// [`AllocError::StreamDevice`] for a stream of another device; otherwise as
    /// [`crate::DeviceCore::allocate_with`]: [`AllocError::OutOfMemory`],
    /// [`AllocError::MemoryFractionExceeded`] (the device's fraction, pools included),
    /// [`AllocError::TooLarge`], [`AllocError::Device`].
    pub fn allocate(&self, size: u64, stream: &Stream) -> Result<DataPtr, AllocError> {
        check_fork()?;
        if stream.device() != self.inner.device {
            return Err(AllocError::StreamDevice {
                stream: stream.device(),
                device: self.inner.device,
            });
        }
        let stream = *stream;
        // The first attempt's out-of-memory failure is retried once the default pool's cache
        // is released: not counted in `num_ooms` (the retry's is).
        self.inner
            .core
            .allocate_or_retry(
                size,
                stream_key(&stream),
                || ClStream::shared(stream),
                || {
                    // As torch's `release_cached_blocks` before it raises: the default
                    // pool's cache, and the caches of dropped pools (freeable pools).
                    self.inner.parent.empty_cache();
                    if let Some(registry) = self.inner.registry.upgrade() {
                        registry.empty_freeable();
                    }
                    wait_pool_releases();
                    true
                },
            )
            .map(|a| a.map_or_else(|| DataPtr::empty(self.inner.device), DataPtr::new))
            .map_err(|e| self.fraction_error(e.into()))
    }

    /// The pool's own OOM report does not know the device's fraction: name it when it is
    /// what refused the segment; and its allocated and reserved bytes are the device's (every
    /// pool included, as torch's message), which the fraction counts.
    fn fraction_error(&self, e: AllocError) -> AllocError {
        let parent = self.inner.parent.shared();
        match e {
            AllocError::OutOfMemory(report) => {
                let mut report = match self.inner.registry.upgrade() {
                    Some(registry) => {
                        device_figures(report, &registry.device_stats(&self.inner.parent))
                    }
                    None => report,
                };
                let allowed = parent.allowed();
                let over = allowed
                    .is_some_and(|a| parent.reserved().saturating_add(report.segment_size) > a);
                report.allowed = allowed;
                if over {
                    AllocError::MemoryFractionExceeded(report)
                } else {
                    AllocError::OutOfMemory(report)
                }
            }
            other => other,
        }
    }

    /// The pool's statistics (as `torch.cuda.memory_stats` restricted to the pool): its
    /// allocations, blocks and segments only, in bytes and counts. Exact for currents and
    /// accumulations; peaks as the device's (see
    /// [`CachingAllocator`](xpu_caching::CachingAllocator)).
    #[must_use]
    pub fn memory_stats(&self) -> MemoryStats {
        if xpu_device::fork::is_in_bad_fork() {
            return MemoryStats::default();
        }
        self.inner.core.memory_stats()
    }

    /// Bytes allocated from the pool now (peaks and the rest: [`MemPool::memory_stats`]).
    #[must_use]
    pub fn memory_allocated(&self) -> u64 {
        self.inner.core.memory_allocated()
    }

    /// Bytes the pool reserves from the device now (its segments).
    #[must_use]
    pub fn memory_reserved(&self) -> u64 {
        self.inner.core.memory_reserved()
    }

    /// The pool's segments and blocks, sorted by address.
    #[must_use]
    pub fn segments(&self) -> Vec<SegmentSnapshot> {
        self.inner.core.snapshot()
    }

    /// The pool's snapshot (as `MemPool.snapshot()`, i.e. `memory_snapshot(pool.id)`): its
    /// segments, each with `segment_pool_id` = [`MemPool::id`], and the device's history.
    ///
    /// # Errors
    /// [`crate::observe::ObserveError::DeviceIndex`] for a device index above
    /// [`crate::observe::MAX_SNAPSHOT_DEVICE`].
    pub fn snapshot(&self) -> Result<MemorySnapshot, crate::observe::ObserveError> {
        let mut snap = self.inner.core.memory_snapshot()?;
        for s in &mut snap.segments {
            s.segment_pool_id = self.inner.id;
        }
        Ok(snap)
    }

    /// Releases the pool's unused cached segments (as `torch.cuda.empty_cache` of one pool,
    /// `empty_cache(mempool_id)`): waits for the pool's pending frees and, per stream, for
    /// the work enqueued before the call, then frees every whole free segment. Segments with
    /// a live block stay. Returns once they are released.
    pub fn empty_cache(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.inner.core.empty_cache();
    }

    /// Threads routing their allocations to this pool now ([`use_mem_pool`]).
    #[must_use]
    pub fn routing_threads(&self) -> usize {
        self.inner.routing.load(Ordering::Acquire)
    }

    /// Releases every segment of the pool now (as torch's `releasePool` followed by
    /// `empty_cache(mempool_id)`): afterwards the pool reserves nothing (it grows again if
    /// used). Waits for the work enqueued on the pool's streams.
    ///
    /// # Errors
    /// [`AllocError::PoolInUse`] while an allocation of the pool is live or a thread routes
    /// to it; nothing is released then.
    pub fn release(&self) -> Result<(), AllocError> {
        check_fork()?;
        let stats = self.inner.core.memory_stats();
        let allocations = nonneg(stats.allocation.all.current);
        let routing = self.routing_threads() as u64;
        if allocations > 0 || routing > 0 {
            return Err(AllocError::PoolInUse {
                id: self.inner.id,
                allocations,
                routing,
            });
        }
        self.inner.core.empty_cache();
        Ok(())
    }
}

/// `report` with the allocated and reserved bytes of `device` (a device's statistics, every
/// pool included).
pub(crate) fn device_figures(
    mut report: xpu_caching::OomReport,
    device: &MemoryStats,
) -> xpu_caching::OomReport {
    report.allocated = nonneg(device.allocated_bytes.all.current);
    report.reserved = nonneg(device.reserved_bytes.all.current);
    report
}

fn nonneg(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A pool's view of the device's segments: the device allocator's source (or a custom
/// one), charged to the device allocator's reserved bytes and memory fraction.
struct PoolSource {
    parent: Shared,
    custom: Option<Box<DynSource>>,
}

impl PoolSource {
    fn source(&self) -> &DynSource {
        match &self.custom {
            Some(s) => s.as_ref(),
            None => self.parent.source(),
        }
    }
}

impl SegmentSource for PoolSource {
    type Memory = SegmentMemory;
    fn device(&self) -> usize {
        self.parent.device()
    }
    fn name(&self) -> String {
        self.source().name()
    }
    fn total_memory(&self) -> u64 {
        self.parent.source().total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.source().max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.source().base_addr_align()
    }
    fn free_memory(&self) -> Option<u64> {
        self.parent.source().free_memory()
    }
    fn free_needs_sync(&self) -> bool {
        self.source().free_needs_sync()
    }
    fn splits_segments(&self) -> bool {
        self.source().splits_segments()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment, SourceError> {
        self.parent.allocate_segment_from(self.source(), size)
    }
    fn free(&self, segment: SourceSegment) {
        self.parent.release_segment_to(self.source(), segment);
    }
}

/// The pools of one device allocator, for its device-wide statistics and configuration.
#[derive(Default)]
pub(crate) struct PoolRegistry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    /// State of every pool not yet gone (a pool is gone once no handle, allocation or
    /// pending release holds its state), with its handle while one lives.
    pools: Vec<(Shared, Weak<PoolInner>, MemPoolId)>,
    /// Statistics of gone pools, folded together (their currents are zero).
    retired: MemoryStats,
    /// Shards of dropped pools (freeable pools), alive while they hold allocations, with
    /// their pool's id.
    orphans: Vec<(MemPoolId, WeakShard<ClBackend>)>,
}

impl RegistryInner {
    /// Forgets the gone pools (their statistics folded into `retired`) and returns their
    /// last state handles, to be dropped once the registry's lock is released: dropping one
    /// drops the pool's segment source, user code for a custom one (its `Drop` may call the
    /// allocator).
    #[must_use]
    fn prune(&mut self) -> Vec<Shared> {
        let retired = &mut self.retired;
        let mut gone = Vec::new();
        self.pools.retain(|(shared, _, _)| {
            if shared.in_use() {
                return true;
            }
            retired.merge(&shared.memory_stats());
            gone.push(shared.clone());
            false
        });
        gone
    }
}

impl PoolRegistry {
    /// Adds `pool`, giving it its device allocator's current configuration: `pool` read it
    /// when built, and a [`PoolRegistry::set_config`] since (from user code that ran in
    /// between, such as a custom source's) did not reach it yet. Under the registry's lock,
    /// as `set_config`, so a pool misses no configuration change.
    pub(crate) fn register(&self, pool: &MemPool) {
        let mut inner = self.inner.lock();
        let config = pool.inner.parent.caching().given_config();
        if pool.inner.core.caching().given_config() != config {
            pool.inner.core.set_config(config);
        }
        let gone = inner.prune();
        inner.pools.push((
            pool.inner.core.shared(),
            Arc::downgrade(&pool.inner),
            pool.id(),
        ));
        drop(inner);
        drop(gone);
    }

    fn orphan(&self, id: MemPoolId, shards: Vec<WeakShard<ClBackend>>) {
        let mut inner = self.inner.lock();
        inner.orphans.retain(|(_, s)| s.is_live());
        inner.orphans.extend(shards.into_iter().map(|s| (id, s)));
    }

    /// The shards of dropped pools that still live (through their allocations), with their
    /// pools' ids.
    fn live_orphans(&self) -> Vec<(MemPoolId, WeakShard<ClBackend>)> {
        let mut inner = self.inner.lock();
        inner.orphans.retain(|(_, s)| s.is_live());
        inner.orphans.clone()
    }

    /// The segments of dropped pools that live on through their allocations (torch's
    /// freeable pools), each with its pool's id: the device's statistics count them, so its
    /// snapshot shows them. Each shard is read under its own lock, none under the
    /// registry's.
    /// Also the segments such a pool still reserves outside its shards (review h87): those
    /// of shards whose teardown waits for a pending free's marker, and releases kept while
    /// their marker read pending ([`SharedState::detached_snapshot`](xpu_caching::SharedState::detached_snapshot)).
    pub(crate) fn dropped_pool_segments(
        &self,
    ) -> Vec<(MemPoolId, Vec<xpu_caching::SegmentSnapshot>)> {
        let dropped: Vec<(MemPoolId, Shared)> = {
            let inner = self.inner.lock();
            inner
                .pools
                .iter()
                .filter(|(_, handle, _)| handle.strong_count() == 0)
                .map(|(shared, _, id)| (*id, shared.clone()))
                .collect()
        };
        let mut out: Vec<(MemPoolId, Vec<xpu_caching::SegmentSnapshot>)> = self
            .live_orphans()
            .into_iter()
            .map(|(id, shard)| (id, shard.snapshot()))
            .collect();
        out.extend(
            dropped
                .iter()
                .map(|(id, shared)| (*id, shared.detached_snapshot())),
        );
        out.retain(|(_, segments)| !segments.is_empty());
        out
    }

    /// Releases the cached unused segments of dropped pools (torch's freeable pools) that
    /// still hold allocations: each once its stream's work is done. Call without any
    /// allocator lock held.
    /// Returns whether a dropped pool's shard was still live (so something may have been
    /// released).
    pub(crate) fn empty_freeable(&self) -> bool {
        let shards = self.live_orphans();
        // Each runs under no lock; a shard whose last allocation was freed meanwhile drops
        // in its `release_cached` (torn down in the background).
        for (_, shard) in &shards {
            shard.release_cached();
        }
        !shards.is_empty()
    }

    /// The pools with a live handle.
    pub(crate) fn live(&self) -> Vec<MemPool> {
        let inner = self.inner.lock();
        inner
            .pools
            .iter()
            .filter_map(|(_, p, _)| p.upgrade())
            .map(|inner| MemPool { inner })
            .collect()
    }

    /// Whether `owner` (a [`DataPtr`]'s owner id) is one of these pools.
    pub(crate) fn contains(&self, owner: u64) -> bool {
        self.inner
            .lock()
            .pools
            .iter()
            .any(|(s, _, _)| s.id() == owner)
    }

    /// The device's statistics: the default pool's (`core`, the device allocator's) plus
    /// every private pool's, as torch's `memory_stats` counts a device.
    pub(crate) fn device_stats(&self, core: &DeviceCore) -> MemoryStats {
        let mut stats = core.memory_stats();
        stats.merge(&self.stats());
        stats
    }

    /// Every pool's statistics added together (gone pools included).
    pub(crate) fn stats(&self) -> MemoryStats {
        let mut inner = self.inner.lock();
        let gone = inner.prune();
        let mut total = inner.retired;
        for (shared, _, _) in &inner.pools {
            total.merge(&shared.memory_stats());
        }
        drop(inner);
        drop(gone);
        total
    }

    pub(crate) fn reset_peak(&self) {
        let mut inner = self.inner.lock();
        inner.retired.reset_peak();
        for (shared, _, _) in &inner.pools {
            shared.reset_peak_stats();
        }
    }

    pub(crate) fn reset_accumulated(&self) {
        let mut inner = self.inner.lock();
        inner.retired.reset_accumulated();
        for (shared, _, _) in &inner.pools {
            shared.reset_accumulated_stats();
        }
    }

    /// Replaces the configuration of `parent` (the device allocator's default pool) and of
    /// every pool, under the registry's lock: a pool registered concurrently gets it either
    /// here or from `parent` in [`PoolRegistry::register`].
    pub(crate) fn set_config(&self, parent: &DeviceCore, config: crate::config::AllocConfig) {
        let inner = self.inner.lock();
        for (shared, _, _) in &inner.pools {
            shared.set_config(config.clone());
        }
        parent.set_config(config);
    }
}

// ---- routing -------------------------------------------------------------------------

struct Route {
    /// Id of the device allocator whose allocations are routed.
    parent: u64,
    pool: MemPool,
    /// Unique to this routing: a [`MemPoolGuard`] ends its own routing only.
    token: u64,
}

/// The next routing's token.
static NEXT_ROUTE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Drop for Route {
    fn drop(&mut self) {
        // Also when the thread exits with a routing never ended (a forgotten guard).
        self.pool.inner.routing.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    static ROUTES: RefCell<Vec<Route>> = const { RefCell::new(Vec::new()) };
}

/// The pool the calling thread routes `parent`'s allocations to (the innermost routing).
#[inline]
pub(crate) fn routed(parent: u64) -> Option<MemPool> {
    ROUTES
        .try_with(|routes| {
            let routes = routes.try_borrow().ok()?;
            if routes.is_empty() {
                return None;
            }
            routes
                .iter()
                .rev()
                .find(|r| r.parent == parent)
                .map(|r| r.pool.clone())
        })
        .ok()
        .flatten()
}

/// Starts routing the calling thread's allocations on `pool`'s device to `pool` (as
/// torch's `_cuda_beginAllocateCurrentThreadToPool`); [`use_mem_pool`] is the scoped form.
/// Routings nest: the innermost active one applies. Other threads are not affected.
///
/// # Errors
/// [`AllocError::AlreadyRecordingToPool`] when this thread already routes to `pool`;
/// [`AllocError::RoutingUnavailable`] when called while the thread exits, from a
/// thread-local destructor that runs after the thread's routing state was destroyed;
/// [`AllocError::BadFork`] in a bad fork child.
pub fn begin_allocate_to_pool(pool: &MemPool) -> Result<(), AllocError> {
    begin_route(pool).map(drop)
}

/// [`begin_allocate_to_pool`], returning the routing's token.
fn begin_route(pool: &MemPool) -> Result<u64, AllocError> {
    check_fork()?;
    let parent = pool.inner.parent.id();
    let unavailable = || AllocError::RoutingUnavailable {
        device: pool.device(),
        id: pool.id(),
    };
    // `try_with`: the routing state is gone once its destructor ran at thread exit (a later
    // thread-local destructor may still call this); a panic there would abort the process.
    // The borrow cannot be taken already (no user code runs while it is held), but a
    // failure is an error too, never a panic.
    ROUTES
        .try_with(|routes| {
            let Ok(mut routes) = routes.try_borrow_mut() else {
                return Err(unavailable());
            };
            if routes
                .iter()
                .any(|r| Arc::ptr_eq(&r.pool.inner, &pool.inner))
            {
                return Err(AllocError::AlreadyRecordingToPool {
                    device: pool.device(),
                    id: pool.id(),
                });
            }
            pool.inner.routing.fetch_add(1, Ordering::AcqRel);
            let token = NEXT_ROUTE.fetch_add(1, Ordering::Relaxed);
            routes.push(Route {
                parent,
                pool: pool.clone(),
                token,
            });
            Ok(token)
        })
        .unwrap_or_else(|_| Err(unavailable()))
}

/// Ends the calling thread's routing `token` if it still runs (a guard's end).
fn end_route(token: u64) {
    let removed = ROUTES
        .try_with(|routes| {
            let mut routes = routes.try_borrow_mut().ok()?;
            let pos = routes.iter().rposition(|r| r.token == token)?;
            Some(routes.remove(pos))
        })
        .ok()
        .flatten();
    // The route (and its pool handle) drops here, outside the thread-local borrow.
    drop(removed);
}

/// Ends the calling thread's routing to `pool` (as torch's `_cuda_endAllocateToPool`).
///
/// # Errors
/// [`AllocError::NotRecordingToPool`] when this thread does not route to `pool`.
pub fn end_allocate_to_pool(pool: &MemPool) -> Result<(), AllocError> {
    let removed = ROUTES
        .try_with(|routes| {
            let mut routes = routes.try_borrow_mut().ok()?;
            let pos = routes
                .iter()
                .rposition(|r| Arc::ptr_eq(&r.pool.inner, &pool.inner))?;
            Some(routes.remove(pos))
        })
        .ok()
        .flatten();
    match removed {
        Some(route) => {
            // The route (and its pool handle) drops here, outside the thread-local borrow.
            drop(route);
            Ok(())
        }
        None => Err(AllocError::NotRecordingToPool {
            device: pool.device(),
            id: pool.id(),
        }),
    }
}

/// Routes the calling thread's allocations on `pool`'s device to `pool` until the guard
/// drops (as `torch.cuda.use_mem_pool(pool)`): [`crate::allocate`], [`crate::raw_alloc`],
/// [`crate::DeviceAllocator::allocate`] of the device's allocator and everything above them
/// (typed buffers, workspaces) take their blocks from the pool. Other threads are not
/// routed. The guard is not `Send` (routing belongs to the thread).
///
/// ```no_run
/// # fn main() -> Result<(), xpu_alloc::AllocError> {
/// let stream = xpu_stream::current_stream(0)?;
/// let pool = xpu_alloc::MemPool::new(0)?;
/// let block = {
///     let _routed = xpu_alloc::use_mem_pool(&pool)?;
///     xpu_alloc::allocate(1 << 20, &stream)? // 1 MiB from the pool
/// };
/// assert!(pool.owns(&block));
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`begin_allocate_to_pool`]: [`AllocError::AlreadyRecordingToPool`] when this thread
/// already routes to `pool`; [`AllocError::RoutingUnavailable`] from a thread-local
/// destructor at thread exit, once the routing state is gone.
pub fn use_mem_pool(pool: &MemPool) -> Result<MemPoolGuard, AllocError> {
    let token = begin_route(pool)?;
    Ok(MemPoolGuard {
        pool: pool.clone(),
        token,
        _not_send: PhantomData,
    })
}

/// Scope of a [`use_mem_pool`] routing; dropping it ends the routing.
#[must_use = "the routing ends when the guard drops"]
#[derive(Debug)]
pub struct MemPoolGuard {
    pool: MemPool,
    /// Its routing (ended by the guard's drop unless already ended).
    token: u64,
    _not_send: PhantomData<*const ()>,
}

impl MemPoolGuard {
    /// The pool allocations are routed to.
    #[must_use]
    pub fn pool(&self) -> &MemPool {
        &self.pool
    }
}

impl Drop for MemPoolGuard {
    fn drop(&mut self) {
        // Its own routing only: one already ended by an explicit `end_allocate_to_pool` is
        // gone, and a later routing to the same pool is another's.
        end_route(self.token);
    }
}

// ---- background releases ---------------------------------------------------------------

type Job = Box<dyn FnOnce() + Send>;

struct Releaser {
    tx: Mutex<Option<crossbeam::channel::Sender<Job>>>,
    /// Jobs handed over and not finished.
    pending: Mutex<usize>,
    done: Condvar,
    /// Threads waiting in [`wait_pool_releases`] (see [`pool_release_waiters`]).
    waiters: std::sync::atomic::AtomicUsize,
}

fn releaser() -> &'static Releaser {
    static R: OnceLock<Releaser> = OnceLock::new();
    R.get_or_init(|| {
        let (tx, rx) = crossbeam::channel::unbounded::<Job>();
        let spawned = std::thread::Builder::new()
            .name("xpu-pool-release".to_owned())
            .spawn(move || {
                ON_RELEASE_THREAD.set(true);
                for job in rx {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                        tracing::warn!("a private pool's segment release panicked");
                    }
                    let r = releaser();
                    let mut pending = r.pending.lock();
                    *pending = pending.saturating_sub(1);
                    r.done.notify_all();
                }
            });
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(error = %e, "no release thread: private pools release in place");
                None
            }
        };
        Releaser {
            tx: Mutex::new(tx),
            pending: Mutex::new(0),
            done: Condvar::new(),
            waiters: std::sync::atomic::AtomicUsize::new(0),
        }
    })
}

thread_local! {
    /// True on the `xpu-pool-release` thread, whose jobs run user code (a custom source's
    /// `free`) that may wait for the releases: the running job and those queued behind it.
    static ON_RELEASE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a pool shard's teardown (waiting for its streams, then releasing its segments) on
/// the release thread.
fn run_in_background(job: Job) {
    let r = releaser();
    let sender = r.tx.lock().clone();
    let Some(sender) = sender else {
        job();
        return;
    };
    *r.pending.lock() += 1;
    if let Err(crossbeam::channel::SendError(job)) = sender.send(job) {
        let mut pending = r.pending.lock();
        *pending = pending.saturating_sub(1);
        drop(pending);
        job();
    }
}

/// Whether releases of dropped private pools are waiting or running.
pub(crate) fn releases_pending() -> bool {
    *releaser().pending.lock() > 0
}

/// Waits until every segment release of dropped private pools handed to the background
/// thread so far is done (each waits for the work on its stream first, so this waits for
/// that work too). Returns at once when none is pending, in a bad fork child, and on the
/// release thread itself (a custom segment source's `free` called by a release: the
/// releases left run after the one calling).
pub fn wait_pool_releases() {
    if xpu_device::fork::is_in_bad_fork() || ON_RELEASE_THREAD.get() {
        return;
    }
    let r = releaser();
    let mut pending = r.pending.lock();
    if *pending == 0 {
        return;
    }
    r.waiters.fetch_add(1, Ordering::AcqRel);
    while *pending > 0 {
        r.done.wait(&mut pending);
    }
    r.waiters.fetch_sub(1, Ordering::AcqRel);
}

/// Test support: how many threads are waiting in [`wait_pool_releases`] for pending
/// releases now. A scenario knows from it that an allocation's first attempt failed and its
/// retry waits for the releases (the failed attempt leaves no other trace: no `num_ooms`,
/// no history entry).
#[doc(hidden)]
#[must_use]
pub fn pool_release_waiters() -> usize {
    releaser().waiters.load(Ordering::Acquire)
}

/// Test support: returns once the release thread (`xpu-pool-release`) has run every job
/// handed to it before this call, in any state of the process, a simulated bad fork
/// included: a marker job goes through the same FIFO channel, so when it runs every earlier
/// job has finished (unlike [`wait_pool_releases`], which returns at once in a bad fork
/// child). A scenario then knows that a release handed over before the call has happened.
/// Never call it in a real bad-fork child (the thread does not exist there: this would wait
/// forever), only in a process made one by `xpu_device::fork::simulate_bad_fork`, whose
/// parent threads live on.
#[doc(hidden)]
pub fn flush_release_thread() {
    let (done_tx, done_rx) = crossbeam::channel::bounded::<()>(1);
    // Through the same path as a shard's teardown: on the thread after every job handed to it
    // so far, or in place when there is no thread (then every release ran in place too).
    run_in_background(Box::new(move || {
        let _ = done_tx.send(());
    }));
    // An error would mean the marker was dropped unrun (no thread left): nothing to wait for.
    let _ = done_rx.recv();
}
