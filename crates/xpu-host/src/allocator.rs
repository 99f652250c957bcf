//! The caching pinned-host allocator (reference §5), keyed by (device, power-of-two size
//! class).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use xpu_device::backend::PinnedBuffer;
use xpu_device::DeviceError;

use super::block::Block;
use super::class::class_of;
use super::device::DeviceCache;
use super::error::HostError;
use super::pending::{Parked, PendingQueue};
use super::ptr::{HostPtr, Owner};
use super::stats::{Counters, HostMemoryStats};
use super::thread_cache::{self, BinSlots, CacheOwner};

/// State shared by an allocator and the [`HostPtr`]s it handed out.
#[derive(Debug)]
pub(crate) struct Shared {
    devices: Box<[OnceLock<DeviceCache>]>,
    pending: PendingQueue,
    counters: Counters,
    /// Unique among the allocators of the process (the threads' caches are keyed by it).
    id: u64,
    /// The process-wide allocator (its `HostPtr`s hold a `'static` reference, no count).
    global: bool,
    /// Whether freed blocks may go into the threads' caches (`thread_cache`).
    thread_cache: bool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A caching allocator of pinned host memory, as PyTorch's `CachingHostAllocator`.
///
/// - Requests round up to a power of two and are served only by a cached block of exactly
///   that size on the same device (blocks are never split or merged); a miss allocates a new
///   `CL_MEM_ALLOC_HOST_PTR` buffer mapped for the host.
/// - Blocks are host memory, but each buffer belongs to one device's OpenCL context, and a
///   device copies at full speed only from its own context's pinned memory: the cache is keyed
///   by (device, size class). A block may still be used with another device's streams (the
///   copy is then an ordinary host copy for that device), and the use is tracked the same way.
/// - A freed block whose use recorded streams ([`HostPtr::record_stream`], or automatically by
///   [`HostCopy`](super::HostCopy)) gets one marker per stream and rejoins its free list only
///   once all of them completed, and once every copy tracked on its buffer (any
///   `copy_pinned` of it, even without `record_stream`)
///   completed; pending blocks are processed, oldest first, at the start of every allocation.
///   Blocks in use or pending are never reused or released.
/// - The cached path (allocate + free of a cached size) makes no driver call and takes no
///   lock: a block freed with no recorded stream and no copy in flight goes into the freeing
///   thread's cache, and that thread's next allocation of the size class takes it back;
///   other allocations see it too (an allocation that would otherwise ask the driver,
///   `empty_cache`, the out-of-memory retry), and a thread that exits returns its blocks
///   (`crates/xpu-host/src/thread_cache.rs` states the rules). Statistics are atomics and
///   per-thread cells, exact at every read.
///
/// [`HostAllocator::global`] is the process-wide instance behind the `host_*` functions;
/// [`HostAllocator::new`] makes an independent one (its own blocks and statistics).
#[derive(Debug, Clone)]
pub struct HostAllocator(Arc<Shared>);

impl Default for HostAllocator {
    fn default() -> Self {
        Self::new()
    }
}

static GLOBAL: OnceLock<HostAllocator> = OnceLock::new();

impl HostAllocator {
    /// A new, empty allocator. Creates nothing on any device until the first allocation there.
    #[must_use]
    pub fn new() -> HostAllocator {
        Self::build(false, true)
    }

    /// A new, empty allocator whose freed blocks all take the shared free lists: no thread
    /// keeps blocks of it in its cache. Every statistic it reports is what
    /// [`HostAllocator::new`]'s report after the same calls (the reference the tests compare
    /// with); only which block an allocation gets may differ.
    #[must_use]
    pub fn without_thread_caches() -> HostAllocator {
        Self::build(false, false)
    }

    fn build(global: bool, thread_cache: bool) -> HostAllocator {
        let devices = (0..xpu_stream::MAX_DEVICES)
            .map(|_| OnceLock::new())
            .collect();
        HostAllocator(Arc::new(Shared {
            devices,
            pending: PendingQueue::default(),
            counters: Counters::default(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            global,
            thread_cache,
        }))
    }

    /// The process-wide allocator.
    pub fn global() -> &'static HostAllocator {
        GLOBAL.get_or_init(|| Self::build(true, true))
    }

    /// What a new [`HostPtr`] holds to reach this allocator.
    #[inline]
    fn owner(&self) -> Owner {
        if self.0.global {
            if let Some(global) = GLOBAL.get() {
                return Owner::Global(&global.0);
            }
        }
        Owner::Counted(Arc::clone(&self.0))
    }

    /// `size` bytes of pinned host memory for copies with the current device
    /// ([`xpu_device::current_device`]); see [`HostAllocator::allocate_on`].
    ///
    /// # Errors
    /// As [`HostAllocator::allocate_on`].
    pub fn allocate(&self, size: usize) -> Result<HostPtr, HostError> {
        crate::error::check_fork()?;
        self.allocate_on(xpu_device::current_device(), size)
    }

    /// `size` bytes of pinned host memory owned by `device`'s context, as
    /// `CachingHostAllocator::allocate`. Size 0 returns an empty pointer without touching
    /// the allocator. Otherwise processes pending blocks, then takes the most recently freed
    /// block of the size class (`size` rounded up to a power of two): first from the calling
    /// thread's cache, then from the shared free list (where the blocks of every thread's
    /// cache are taken before asking the driver), else allocates one.
    /// The contents of a reused block are whatever its last user left.
    ///
    /// # Errors
    /// `TooLarge` when the rounded size is above the device's largest allocation or above
    /// 2^48; `Device(InvalidDevice)` for a bad index; `OutOfMemory` when the driver has no
    /// room even after this device's cached blocks were released; other `Device` errors for
    /// failed driver calls; `BadFork` in a bad fork child (first, even for size 0).
    pub fn allocate_on(&self, device: usize, size: usize) -> Result<HostPtr, HostError> {
        crate::error::check_fork()?;
        if size == 0 {
            return Ok(HostPtr::empty(device));
        }
        let shared = &self.0;
        let cache = shared.cache(device)?;
        let requested = size as u64;
        let (class, rounded) = match class_of(requested) {
            Some((c, r)) if r <= cache.max_block => (c, r),
            other => {
                return Err(HostError::TooLarge {
                    device,
                    requested,
                    rounded: other.map_or(0, |(_, r)| r),
                    max: cache.max_block,
                })
            }
        };
        shared.process_pending(false);
        if shared.thread_cache {
            if let Some(block) = thread_cache::take(&**shared, device, class) {
                return Ok(HostPtr::new(self.owner(), block, size));
            }
        }
        let block = match cache.pop(class) {
            Some(b) => b,
            None => {
                // Before asking the driver: blocks kept out after a failed marker whose
                // stream was synchronized since come back (review h59: only
                // `process_events` and `empty_cache` asked again).
                if shared.pending.has_kept_out() {
                    shared.process_pending(true);
                    if let Some(b) = cache.pop(class) {
                        shared.counters.on_allocate(rounded);
                        return Ok(HostPtr::new(self.owner(), b, size));
                    }
                }
                shared.new_block(cache, rounded)?
            }
        };
        shared.counters.on_allocate(rounded);
        Ok(HostPtr::new(self.owner(), block, size))
    }

    /// Releases every cached block to the driver, as `CachingHostAllocator::empty_cache`:
    /// first processes pending blocks (waiting for the queue lock), then empties every free
    /// list and every thread's cache of this allocator. Blocks in use, or freed but still
    /// waiting for stream markers, are kept.
    /// Does nothing in a bad fork child (the parent's threads may have held the locks).
    pub fn empty_cache(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.0.process_pending(true);
        for cache in self.0.devices.iter().filter_map(OnceLock::get) {
            self.0.release_cached(cache, false);
        }
    }

    /// Processes pending blocks now (waiting for the queue lock): every block whose markers
    /// all completed rejoins its free list, oldest first, stopping at the first one still
    /// waiting; a block kept out after a failed marker rejoins once a synchronize of its
    /// stream begun after the marker returned. Allocation does this on its own (the kept-out
    /// blocks before it asks the driver for a new block); this is for reading exact
    /// statistics.
    /// Does nothing in a bad fork child.
    pub fn process_events(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.0.process_pending(true);
    }

    /// A snapshot of the statistics, as `torch.cuda.host_memory_stats()`. Does not process
    /// pending blocks. All zero in a bad fork child (as the device allocator's).
    #[must_use]
    pub fn memory_stats(&self) -> HostMemoryStats {
        if xpu_device::fork::is_in_bad_fork() {
            return HostMemoryStats::default();
        }
        self.0.counters.snapshot()
    }

    /// Sets every peak to its current value and clears the min/max durations, as
    /// `torch.cuda.reset_peak_host_memory_stats()`.
    /// Does nothing in a bad fork child.
    pub fn reset_peak_stats(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.0.counters.reset_peak();
    }

    /// Clears the accumulated values (`allocated`, `freed`, `num_host_alloc`,
    /// `num_host_free`, duration totals and counts), as
    /// `torch.cuda.reset_accumulated_host_memory_stats()`.
    /// Does nothing in a bad fork child.
    pub fn reset_accumulated_stats(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.0.counters.reset_accumulated();
    }
}

impl CacheOwner for Shared {
    #[inline]
    fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn bind(&self, device: usize, class: usize, slots: Arc<BinSlots>) {
        if let Some(cache) = self.devices.get(device).and_then(OnceLock::get) {
            cache.bind(class, slots);
        }
    }

    fn unbind(&self, device: usize, class: usize, slots: &Arc<BinSlots>) {
        if let Some(cache) = self.devices.get(device).and_then(OnceLock::get) {
            cache.unbind(class, slots);
        }
    }
}

impl Shared {
    /// The cache of `device`, created on first use.
    fn cache(&self, device: usize) -> Result<&DeviceCache, HostError> {
        let cell = self
            .devices
            .get(device)
            .ok_or_else(|| DeviceError::InvalidDevice {
                index: device,
                count: xpu_device::device_count(),
            })?;
        if let Some(c) = cell.get() {
            return Ok(c);
        }
        // Two racing threads may both build one; the loser's (empty) cache is dropped.
        let built = DeviceCache::new(device)?;
        Ok(cell.get_or_init(move || built))
    }

    /// Processes pending blocks; with none pending (the cached path), one atomic load here,
    /// without a call.
    #[inline]
    fn process_pending(&self, wait_for_lock: bool) {
        if self.pending.is_idle(wait_for_lock) {
            return;
        }
        self.pending
            .process(&self.counters, wait_for_lock, |b| self.make_reusable(b));
    }

    /// A block back on its free list.
    fn make_reusable(&self, block: Box<Block>) {
        self.counters.on_returned(block.size);
        match self.devices.get(block.device).and_then(OnceLock::get) {
            Some(cache) => cache.push(block),
            // Unreachable (a block exists only once its cache does); release rather than leak.
            None => self.release_one(block),
        }
    }

    /// A new block from the driver; on out-of-memory, releases this device's cached blocks
    /// and retries once.
    fn new_block(&self, cache: &DeviceCache, size: u64) -> Result<Box<Block>, HostError> {
        let len = usize::try_from(size).map_err(|_| HostError::TooLarge {
            device: cache.device,
            requested: size,
            rounded: size,
            max: cache.max_block,
        })?;
        let mut retried = false;
        loop {
            let t = Instant::now();
            match PinnedBuffer::new(cache.context, &cache.queue, len) {
                Ok(buffer) => {
                    self.counters.on_segment_alloc(size, t.elapsed());
                    return Ok(Box::new(Block::new(cache.device, size, buffer)));
                }
                Err(e) if is_out_of_memory(&e) && !retried => {
                    retried = true;
                    self.process_pending(true);
                    self.release_cached(cache, true);
                }
                Err(e) if is_out_of_memory(&e) => {
                    return Err(HostError::OutOfMemory {
                        device: cache.device,
                        size,
                        source: e,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Returns a block's memory to the driver (timed). The unmap is enqueued on the
    /// allocator's queue of the block's device; the caller flushes it.
    fn release(&self, block: Box<Block>) {
        let size = block.size;
        let t = Instant::now();
        drop(block);
        self.counters.on_segment_free(size, t.elapsed());
    }

    /// Releases every cached block of `cache`, then submits the unmaps (`clFlush`), or, with
    /// `wait`, waits for them (a marker) so that the memory is back before a retry.
    fn release_cached(&self, cache: &DeviceCache, wait: bool) {
        let blocks = cache.drain();
        if blocks.is_empty() {
            return;
        }
        for block in blocks {
            self.release(block);
        }
        // A marker wait rather than clFinish, which would also take (and hide) a release
        // failure kept for the user's next finish.
        let r = if wait {
            cache.queue.enqueue_marker(&[]).and_then(|m| m.wait())
        } else {
            cache.queue.flush()
        };
        if let Err(e) = r {
            tracing::warn!("pinned host cache of device {}: {e}", cache.device);
        }
    }

    /// Releases one block and submits its unmap.
    fn release_one(&self, block: Box<Block>) {
        let cache = self.devices.get(block.device).and_then(OnceLock::get);
        self.release(block);
        if let Some(Err(e)) = cache.map(|c| c.queue.flush()) {
            tracing::warn!("pinned host cache: {e}");
        }
    }

    /// Takes back a block from a dropped [`HostPtr`]. A block with recorded streams, or with
    /// copies still in flight on its buffer (made with the backend directly, without
    /// `record_stream`), waits in the pending queue; a block whose buffer was replaced through
    /// [`HostPtr::pinned_mut`] (its size no longer matches) is released, not cached. Any
    /// other block goes into this thread's cache (`thread_cache`), else onto its free list.
    pub(crate) fn free(this: &Arc<Shared>, mut block: Box<Block>) {
        if u64::try_from(block.buffer.len()).ok() != Some(block.size) {
            this.counters.on_returned(block.size);
            return this.release_one(block);
        }
        if block.streams_mut().is_empty() && !block.buffer.has_copies_in_flight() {
            if this.thread_cache {
                match thread_cache::put(this, block) {
                    Ok(()) => return,
                    Err(b) => block = b,
                }
            }
            return this.make_reusable(block);
        }
        this.free_used(block);
    }

    /// [`Shared::free`] of a block with recorded streams or copies in flight.
    #[cold]
    fn free_used(&self, block: Box<Block>) {
        match self.pending.park(block, &self.counters) {
            Parked::Waiting => {}
            Parked::Unsafe(block) => {
                self.counters.on_returned(block.size);
                self.release_one(block);
            }
        }
    }
}

fn is_out_of_memory(e: &DeviceError) -> bool {
    matches!(e, DeviceError::OpenCl(c) if c.is_out_of_memory())
}
