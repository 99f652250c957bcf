//! Device-wide state shared by all shards: the segment source, configuration, reserved
//! bytes and memory fraction. Touched on the cached path only by reading the config epoch.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::stats_cell::StatsWriter;
use super::stats_registry::StatsRegistry;
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::error::DeviceFailure;
use crate::history::History;
use crate::source::{SegmentSource, SourceError, SourceSegment};

/// The segment source of an allocator over backend `B`.
pub type BoxedSource<B> = Box<dyn SegmentSource<Memory = <B as Backend>::Memory>>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Most bytes one allocator reserves: the statistics count bytes in `i64` (as PyTorch's),
/// so a reservation past `i64::MAX` bytes is refused as out of memory rather than wrapping
/// the counters.
pub(crate) const MAX_RESERVED: u64 = i64::MAX as u64;

/// Runs a dropped shard's teardown somewhere (see
/// [`CachingAllocator::with_setup`](super::CachingAllocator::with_setup)): called from the
/// shard's drop with the teardown, which it must run exactly once (on another thread, or in
/// place when it has none).
pub type DeferredDrop = fn(Box<dyn FnOnce() + Send>);

/// Why a segment could not be obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SegmentFailure {
    /// The device has no room.
    OutOfMemory,
    /// The memory fraction forbids it.
    Fraction,
    /// The size can never be allocated (no retry).
    TooLarge,
    /// Another device error.
    Device(DeviceFailure),
}

#[derive(Debug, Default)]
struct Reserved {
    bytes: u64,
    high_water: u64,
    fraction: Option<f64>,
    allowed: Option<u64>,
}

/// A release of segments whose marker read pending or failed after its wait (a shard's
/// release batch), kept device-wide until a later release
/// ([`DeviceShared::take_kept_releases`]).
pub(crate) trait KeptRelease<B: Backend>: Send {
    /// Frees the segments if the marker now reads complete, else keeps the release again
    /// ([`DeviceShared::keep_release`]).
    fn free_kept(self: Box<Self>, shared: &DeviceShared<B>, st: &mut StatsWriter<'_>);
}

/// The segments of one device allocator taken out of their shards for release and not freed
/// yet, each under a note of its own (not its address: the source may hand a freed address
/// out again before the free that noted it returns; review h89). Each is noted under its
/// shard's lock as it is taken out, and forgotten once it is freed and the statistics no
/// longer count it. A leaf lock: held only to note, forget or copy.
#[derive(Default)]
pub(crate) struct Releasing(Mutex<(u64, BTreeMap<u64, crate::SegmentSnapshot>)>);

impl Releasing {
    /// Notes a segment of `stream` taken out for release; returns its note (never 0).
    pub(crate) fn note(
        &self,
        stream: crate::stream::StreamKey,
        address: u64,
        size: u64,
        pool: crate::size::PoolKind,
    ) -> u64 {
        let segment = crate::SegmentSnapshot {
            stream,
            address,
            size,
            pool,
            blocks: vec![crate::BlockSnapshot {
                address,
                size,
                requested: 0,
                // Free, as the statistics count it (not active): no allocation is behind it.
                state: crate::BlockState::Inactive,
            }],
        };
        let mut notes = self.0.lock();
        notes.0 += 1;
        let note = notes.0;
        notes.1.insert(note, segment);
        note
    }

    /// Forgets the segment noted as `note` (freed); nothing for 0.
    pub(crate) fn forget(&self, note: u64) {
        if note != 0 {
            self.0.lock().1.remove(&note);
        }
    }

    /// Adds the segments noted, as a snapshot shows them (one inactive block each), to
    /// `out`, the segments of shards read before: one already there (taken out of its
    /// shard after that shard was read) is not added again.
    pub(crate) fn extend_snapshot(&self, out: &mut Vec<crate::SegmentSnapshot>) {
        let listed: std::collections::HashSet<u64> = out.iter().map(|s| s.address).collect();
        let notes = self.0.lock();
        out.extend(
            notes
                .1
                .values()
                .filter(|s| !listed.contains(&s.address))
                .cloned(),
        );
    }
}

/// A dropped shard's state while its teardown runs ([`DeviceShared::begin_teardown`]).
pub(crate) trait InTeardown: Send + Sync {
    /// Its segments with their blocks, as a snapshot shows them (takes the state's lock).
    fn snapshot(&self) -> Vec<crate::SegmentSnapshot>;
}

/// State of one device allocator shared by its shards.
pub(crate) struct DeviceShared<B: Backend> {
    /// Unique id of this allocator instance (keys the thread-local caches).
    pub id: u64,
    pub source: BoxedSource<B>,
    /// `source.max_alloc_size()`, read once.
    pub max_alloc: u64,
    /// `source.device()`, read once.
    pub device: usize,
    /// `source.splits_segments()`, read once: what a configuration leaving `split_segments`
    /// unset gets. The source is user code (`SourceHooks`), and `set_config` runs under
    /// callers' locks (xpu-alloc's pool registry and configuration lock), so it never asks.
    source_splits: bool,
    /// Whether `relocation` may move this allocator's blocks: not for private pools (built
    /// with `CachingAllocator::with_setup`: graph pools keep their places, and custom
    /// sources may have registered their memory).
    pub relocation_allowed: bool,
    /// What relocation did ([`crate::config::Relocation`]).
    pub relocation: super::relocation_stats::RelocationCounters,
    config_epoch: AtomicU64,
    /// The configuration in effect (`split_segments` resolved: the source's choice where
    /// it was left unset), and `split_segments` as given.
    config: Mutex<(Arc<AllocConfig>, Option<bool>)>,
    gc_enabled: AtomicBool,
    /// Serializes the publications of `gc_enabled` (see [`DeviceShared::publish_gc`]).
    gc_update: Mutex<()>,
    reserved: Mutex<Reserved>,
    /// The live segments of `source` and of the sources charged here (address -> size): a
    /// new one must not overlap them, since blocks are told apart by address.
    live_ranges: Mutex<BTreeMap<u64, u64>>,
    /// Releases whose marker read pending after its wait returned (a shard's release batch,
    /// `stream_state::ReleaseBatch::free`): their segments stay out, counted as reserved,
    /// until a later release finds the marker complete ([`DeviceShared::take_kept_releases`]).
    /// A leaf lock: held only to push or take, over no call. Dropped with the allocator's
    /// state, a release still here keeps its segments out.
    kept_releases: Mutex<Vec<Box<dyn KeptRelease<B>>>>,
    /// Segments taken out of their shards to be released and not freed yet (waiting for
    /// their stream's work, kept while their marker reads pending, or in the source's
    /// `free`): still reserved, so snapshots show them (review h88).
    pub releasing: Arc<Releasing>,
    /// Dropped shards whose teardown still waits (for their pending frees' markers, their
    /// stream's work): their segments are still reserved, so snapshots show them (review
    /// h87). A leaf lock: held only to push, remove or clone the list.
    in_teardown: Mutex<Vec<Arc<dyn InTeardown>>>,
    pub stats: StatsRegistry,
    /// Recorded allocator events (off by default; see [`crate::history`]).
    pub history: Arc<History>,
    /// Where a dropped shard's teardown (waiting for its streams through the backend,
    /// releasing its segments) runs: `None` runs it in the drop itself; xpu-alloc's private
    /// pools hand it to a background thread, so a drop never waits for the device.
    pub deferred_drop: Option<DeferredDrop>,
    /// Whether threads keep freed blocks of this allocator in their caches (`free_cache`):
    /// not for the allocators built with `CachingAllocator::with_setup` (private pools).
    pub thread_cache: bool,
    /// Test hook: runs in `set_config` / `set_fraction` once the new value is stored and
    /// before `gc_enabled` is published (the window in which the other setter may run).
    #[cfg(test)]
    pub update_hook: Mutex<Option<UpdateHook>>,
}

/// Which setter reached [`DeviceShared::update_hook`].
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Update {
    Config,
    Fraction,
}

#[cfg(test)]
pub(crate) type UpdateHook = Arc<dyn Fn(Update) + Send + Sync>;

impl<B: Backend> DeviceShared<B> {
    pub(crate) fn new(source: BoxedSource<B>, mut config: AllocConfig) -> Self {
        let given = config.split_segments;
        let source_splits = source.splits_segments();
        config.split_segments.get_or_insert(source_splits);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            max_alloc: source.max_alloc_size(),
            device: source.device(),
            source_splits,
            relocation_allowed: true,
            relocation: super::relocation_stats::RelocationCounters::default(),
            source,
            config_epoch: AtomicU64::new(1),
            config: Mutex::new((Arc::new(config), given)),
            gc_enabled: AtomicBool::new(false),
            gc_update: Mutex::new(()),
            reserved: Mutex::new(Reserved::default()),
            live_ranges: Mutex::new(BTreeMap::new()),
            kept_releases: Mutex::new(Vec::new()),
            in_teardown: Mutex::new(Vec::new()),
            releasing: Arc::default(),
            stats: StatsRegistry::default(),
            history: Arc::default(),
            deferred_drop: None,
            thread_cache: true,
            #[cfg(test)]
            update_hook: Mutex::new(None),
        }
    }

    /// Runs the test hook of an update, if one is set (not under its lock).
    #[cfg(test)]
    fn run_update_hook(&self, update: Update) {
        let hook = self.update_hook.lock().clone();
        if let Some(hook) = hook {
            hook(update);
        }
    }

    pub(crate) fn device(&self) -> usize {
        self.device
    }

    /// Current config epoch (a load of a read-mostly word).
    pub(crate) fn config_epoch(&self) -> u64 {
        self.config_epoch.load(Ordering::Acquire)
    }

    pub(crate) fn config(&self) -> Arc<AllocConfig> {
        self.config.lock().0.clone()
    }

    /// The configuration as last given (`split_segments` `None` where the source decides).
    pub(crate) fn given_config(&self) -> AllocConfig {
        let (config, given) = &*self.config.lock();
        AllocConfig {
            split_segments: *given,
            ..(**config).clone()
        }
    }

    /// Replaces the configuration, then publishes whether garbage collection runs. Calls
    /// no user code (the source's splitting was read when the allocator was built), so
    /// callers may hold their own locks.
    pub(crate) fn set_config(&self, mut config: AllocConfig) {
        // A configuration that leaves segment splitting open gets the source's choice.
        let given = config.split_segments;
        config.split_segments.get_or_insert(self.source_splits);
        *self.config.lock() = (Arc::new(config), given);
        self.config_epoch.fetch_add(1, Ordering::AcqRel);
        #[cfg(test)]
        self.run_update_hook(Update::Config);
        self.publish_gc();
    }

    /// Stores whether garbage collection runs, from the configuration and fraction current
    /// now. Each setter stores its own part first and publishes after; publications are
    /// serialized by `gc_update` and each reads both parts afresh, so the last one sees
    /// every part stored before it: once racing `set_config` and `set_fraction` calls have
    /// all returned, the flag is that of the final configuration and fraction (a flag
    /// computed from a value read before another setter's store is never published after
    /// that setter's own publication). No other lock is held while the parts are read.
    fn publish_gc(&self) {
        let _serial = self.gc_update.lock();
        let gc = self.config.lock().0.garbage_collection_threshold > 0.0;
        let fraction_below_one = self.reserved.lock().fraction.is_some_and(|f| f < 1.0);
        self.gc_enabled
            .store(gc && fraction_below_one, Ordering::Release);
    }

    /// Garbage collection is active: a fraction below 1 and a threshold are set.
    pub(crate) fn gc_enabled(&self) -> bool {
        self.gc_enabled.load(Ordering::Relaxed)
    }

    /// Sets the memory fraction, then publishes whether garbage collection runs.
    pub(crate) fn set_fraction(&self, fraction: f64) {
        let total = self.source.total_memory();
        {
            let mut reserved = self.reserved.lock();
            reserved.fraction = Some(fraction);
            // Truncation is the intended rounding of an allowed byte count.
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            let allowed = (fraction * total as f64) as u64;
            reserved.allowed = Some(allowed);
        }
        #[cfg(test)]
        self.run_update_hook(Update::Fraction);
        self.publish_gc();
    }

    /// Bytes allowed by the memory fraction (`None` when none is set).
    pub(crate) fn allowed(&self) -> Option<u64> {
        self.reserved.lock().allowed
    }

    pub(crate) fn fraction(&self) -> Option<f64> {
        self.reserved.lock().fraction
    }

    /// Device-wide reserved bytes.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.lock().bytes
    }

    /// The device-wide reserved bytes and their highest value so far, read together.
    pub(crate) fn reserved_and_high_water(&self) -> (u64, u64) {
        let r = self.reserved.lock();
        (r.bytes, r.high_water)
    }

    /// Whether a new segment of `size` bytes would raise the reserved bytes above their
    /// highest value so far.
    pub(crate) fn would_raise_high_water(&self, size: u64) -> bool {
        let r = self.reserved.lock();
        r.bytes.saturating_add(size) > r.high_water
    }

    /// Obtains a segment, enforcing the memory fraction (reserved + size <= allowed) and
    /// [`MAX_RESERVED`] (out of memory beyond it). A segment of another size than `size`, or
    /// overlapping a live segment (a source breaking its contract), is freed again and
    /// reported as a device error.
    pub(crate) fn allocate_segment(
        &self,
        size: u64,
    ) -> Result<SourceSegment<B::Memory>, SegmentFailure> {
        self.allocate_segment_from(self.source.as_ref(), size)
    }

    /// Records `[address, address + size)` as a live segment of `source`, unless it wraps
    /// past the address space or overlaps a live one (the error's message).
    fn claim_range(&self, address: u64, size: u64) -> Result<(), String> {
        let Some(end) = address.checked_add(size) else {
            return Err(format!(
                "the segment source returned a segment at {address:#x} of {size} bytes, \
                 past the end of the address space"
            ));
        };
        let mut live = self.live_ranges.lock();
        let before = live.range(..=address).next_back();
        let after = live.range(address..end).next();
        if let Some((&at, &len)) = before
            .filter(|&(&a, &l)| a.saturating_add(l) > address)
            .or(after)
        {
            return Err(format!(
                "the segment source returned a segment at {address:#x} of {size} bytes \
                 overlapping the live segment at {at:#x} of {len} bytes"
            ));
        }
        live.insert(address, size);
        Ok(())
    }

    /// [`DeviceShared::allocate_segment`] from another `source`, charged to this allocator's
    /// reserved bytes and memory fraction (a private pool's segments). Its address range is
    /// recorded with this allocator's live segments too, so the segments of every source
    /// charged here (the device's default pool and its private pools) never overlap: blocks
    /// are told apart by address on the whole device (`raw_alloc`'s table, snapshots).
    pub(crate) fn allocate_segment_from(
        &self,
        source: &dyn SegmentSource<Memory = B::Memory>,
        size: u64,
    ) -> Result<SourceSegment<B::Memory>, SegmentFailure> {
        {
            let mut r = self.reserved.lock();
            let Some(total) = r.bytes.checked_add(size).filter(|&t| t <= MAX_RESERVED) else {
                return Err(SegmentFailure::OutOfMemory);
            };
            if r.allowed.is_some_and(|allowed| total > allowed) {
                return Err(SegmentFailure::Fraction);
            }
            r.bytes = total;
        }
        // Given back unless the segment is kept, also when the source (user code) panics.
        let charge = Charge {
            reserved: &self.reserved,
            size,
        };
        match source.allocate(size) {
            Ok(segment) if segment.size != size => {
                // A source that broke its contract: the blocks carved out of this segment
                // would lie past its end (or waste its tail); it goes straight back.
                let got = segment.size;
                source.free(segment);
                drop(charge);
                Err(SegmentFailure::Device(DeviceFailure::message(format!(
                    "the segment source returned a segment of {got} bytes for a request of \
                     {size} bytes"
                ))))
            }
            Ok(segment) if B::memory_len(&segment.memory).is_some_and(|len| len < segment.size) => {
                // A source that broke its contract the other way: its memory is smaller than
                // the segment, and commands on blocks past its end would reach outside it.
                let len = B::memory_len(&segment.memory).unwrap_or(0);
                source.free(segment);
                drop(charge);
                Err(SegmentFailure::Device(DeviceFailure::message(format!(
                    "the segment source returned a segment of {size} bytes whose memory \
                     holds {len} bytes"
                ))))
            }
            Ok(segment) => {
                if let Err(msg) = self.claim_range(segment.address, segment.size) {
                    // A source breaking its contract (addresses unique among live
                    // segments): the segment goes straight back.
                    source.free(segment);
                    drop(charge);
                    return Err(SegmentFailure::Device(DeviceFailure::message(msg)));
                }
                std::mem::forget(charge);
                let mut r = self.reserved.lock();
                r.high_water = r.high_water.max(r.bytes);
                Ok(segment)
            }
            Err(e) => {
                drop(charge);
                Err(match e {
                    SourceError::OutOfMemory => SegmentFailure::OutOfMemory,
                    SourceError::TooLarge { .. } => SegmentFailure::TooLarge,
                    SourceError::Device(msg) => SegmentFailure::Device(msg),
                })
            }
        }
    }

    /// Keeps a release batch whose marker read pending, for a later release
    /// ([`DeviceShared::take_kept_releases`]).
    pub(crate) fn keep_release(&self, batch: Box<dyn KeptRelease<B>>) {
        self.kept_releases.lock().push(batch);
    }

    /// Notes a dropped shard whose teardown begins: snapshots show its segments until
    /// [`DeviceShared::end_teardown`].
    pub(crate) fn begin_teardown(&self, state: Arc<dyn InTeardown>) {
        self.in_teardown.lock().push(state);
    }

    /// Forgets a shard noted by [`DeviceShared::begin_teardown`] (its teardown ended).
    pub(crate) fn end_teardown(&self, state: &Arc<dyn InTeardown>) {
        self.in_teardown.lock().retain(|s| !Arc::ptr_eq(s, state));
    }

    /// The segments of the dropped shards whose teardown still runs, each shard read under
    /// its own lock, none under the list's.
    pub(crate) fn in_teardown_snapshot(&self) -> Vec<crate::SegmentSnapshot> {
        let states = self.in_teardown.lock().clone();
        states.iter().flat_map(|s| s.snapshot()).collect()
    }

    /// The releases kept since their marker read pending, to free now if it reads complete
    /// ([`KeptRelease::free_kept`] keeps those still pending again). Their markers were
    /// waited for already: they are not waited for again. Their segments stay in
    /// [`DeviceShared::releasing`] (snapshots show them) until freed.
    pub(crate) fn take_kept_releases(&self) -> Vec<Box<dyn KeptRelease<B>>> {
        std::mem::take(&mut *self.kept_releases.lock())
    }

    /// Returns a segment to the source.
    pub(crate) fn release_segment(&self, segment: SourceSegment<B::Memory>) {
        self.release_segment_to(self.source.as_ref(), segment);
    }

    /// Returns a segment of [`DeviceShared::allocate_segment_from`] to its `source`.
    pub(crate) fn release_segment_to(
        &self,
        source: &dyn SegmentSource<Memory = B::Memory>,
        segment: SourceSegment<B::Memory>,
    ) {
        let size = segment.size;
        self.live_ranges.lock().remove(&segment.address);
        // Uncharged after the source's `free` returns, or as its panic unwinds (user code:
        // the segment was handed over either way).
        let _charge = Charge {
            reserved: &self.reserved,
            size,
        };
        source.free(segment);
    }
}

/// Bytes charged to the reserved total for a segment being obtained: given back when dropped
/// (the segment was refused or not obtained, or the source panicked), kept by forgetting it.
struct Charge<'a> {
    reserved: &'a Mutex<Reserved>,
    size: u64,
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        let mut r = self.reserved.lock();
        r.bytes = r.bytes.saturating_sub(self.size);
    }
}

impl<B: Backend> DeviceShared<B> {
    fn charge_failure(failure: SegmentFailure, size: u64) -> SourceError {
        match failure {
            SegmentFailure::OutOfMemory | SegmentFailure::Fraction => SourceError::OutOfMemory,
            SegmentFailure::TooLarge => SourceError::TooLarge { size },
            SegmentFailure::Device(msg) => SourceError::Device(msg),
        }
    }
}

/// A handle on a [`CachingAllocator`](super::CachingAllocator)'s device-wide state: its
/// identity, segment source, reserved bytes and memory fraction, statistics and
/// configuration ([`CachingAllocator::shared`](super::CachingAllocator::shared)). It stays
/// valid while the allocator, one of its shards (kept by live allocations) or a handle
/// lives. Cheap to clone.
#[derive(Clone)]
pub struct SharedState<B: Backend>(pub(crate) Arc<DeviceShared<B>>);

impl<B: Backend> SharedState<B> {
    /// Unique id of the allocator (as [`CachingAllocator::id`](super::CachingAllocator::id)).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.0.device
    }

    /// The allocator's segment source.
    #[must_use]
    pub fn source(&self) -> &dyn SegmentSource<Memory = B::Memory> {
        self.0.source.as_ref()
    }

    /// The segments this allocator still reserves outside its shards, as its
    /// [`snapshot`](super::CachingAllocator::snapshot) shows them: those of dropped shards
    /// whose teardown still waits, and those taken out to be released and not freed yet
    /// (kept while their marker reads pending among them). For a
    /// dropped private pool, whose allocator is gone while these are still reserved (counted
    /// in its statistics). None in a bad fork child. No driver call, no wait.
    #[must_use]
    pub fn detached_snapshot(&self) -> Vec<crate::SegmentSnapshot> {
        if B::is_bad_fork() {
            return Vec::new();
        }
        let mut out = self.0.in_teardown_snapshot();
        // Read last: a segment a teardown takes out meanwhile is shown once.
        self.0.releasing.extend_snapshot(&mut out);
        out
    }

    /// The allocator's event history; in a bad fork child a new empty one (the ring's lock
    /// may have been held at the fork).
    #[must_use]
    pub fn history(&self) -> Arc<History> {
        if B::is_bad_fork() {
            return Arc::default();
        }
        self.0.history.clone()
    }

    /// Obtains a segment of `size` bytes from `source` (any source of the same memory),
    /// charged to this allocator's reserved bytes and checked against its memory fraction
    /// and the `i64::MAX` reserved-bytes limit, as the allocator's own segments are.
    ///
    /// # Errors
    /// [`SourceError::OutOfMemory`] when `source` has no room, the fraction forbids it or
    /// the reserved bytes would pass `i64::MAX`; [`SourceError::Device`] when `source`
    /// returned a segment of another size (freed again); otherwise `source`'s error. In a
    /// bad fork child ([`Backend::is_bad_fork`]), first: [`SourceError::Device`] holding
    /// [`CacheError::BadFork`](crate::CacheError::BadFork).
    pub fn allocate_segment_from(
        &self,
        source: &dyn SegmentSource<Memory = B::Memory>,
        size: u64,
    ) -> Result<SourceSegment<B::Memory>, SourceError> {
        if B::is_bad_fork() {
            return Err(SourceError::Device(DeviceFailure::new(
                crate::CacheError::BadFork,
            )));
        }
        self.0
            .allocate_segment_from(source, size)
            .map_err(|f| DeviceShared::<B>::charge_failure(f, size))
    }

    /// Returns a segment of [`SharedState::allocate_segment_from`] to its `source` and
    /// uncharges it. In a bad fork child the segment is leaked (not returned, nothing
    /// uncharged).
    pub fn release_segment_to(
        &self,
        source: &dyn SegmentSource<Memory = B::Memory>,
        segment: SourceSegment<B::Memory>,
    ) {
        if B::is_bad_fork() {
            std::mem::forget(segment);
            return;
        }
        self.0.release_segment_to(source, segment);
    }

    /// Bytes the memory fraction allows (`None` when none is set, and in a bad fork child).
    #[must_use]
    pub fn allowed(&self) -> Option<u64> {
        if B::is_bad_fork() {
            return None;
        }
        self.0.allowed()
    }

    /// Reserved bytes now (segments of the allocator and those charged to it); 0 in a bad
    /// fork child.
    #[must_use]
    pub fn reserved(&self) -> u64 {
        if B::is_bad_fork() {
            return 0;
        }
        self.0.reserved()
    }

    /// The allocator's statistics (as
    /// [`CachingAllocator::memory_stats`](super::CachingAllocator::memory_stats)); all zero
    /// in a bad fork child.
    #[must_use]
    pub fn memory_stats(&self) -> crate::stats::MemoryStats {
        if B::is_bad_fork() {
            return crate::stats::MemoryStats::default();
        }
        self.0.stats.aggregate()
    }

    /// Sets every peak to its current value. Does nothing in a bad fork child.
    pub fn reset_peak_stats(&self) {
        if B::is_bad_fork() {
            return;
        }
        self.0.stats.reset_peak();
    }

    /// Zeroes the accumulated statistics. Does nothing in a bad fork child.
    pub fn reset_accumulated_stats(&self) {
        if B::is_bad_fork() {
            return;
        }
        self.0.stats.reset_accumulated();
    }

    /// Replaces the configuration. Does nothing in a bad fork child.
    pub fn set_config(&self, config: AllocConfig) {
        if B::is_bad_fork() {
            return;
        }
        self.0.set_config(config);
    }

    /// Whether anything besides this handle keeps the state alive (the allocator, a shard,
    /// another handle).
    #[must_use]
    pub fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}
