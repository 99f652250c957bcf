//! [`DeviceAllocator`]: the caching allocator of one OpenCL device, over real streams.

use std::sync::Arc;

use xpu_stream::Stream;

use crate::cl_stream::{stream_key, ClStream};
use crate::config::{AllocConfig, MemoryKind};
use crate::data_ptr::DataPtr;
use crate::device_core::DeviceCore;
use crate::device_ptr::DevicePtr;
use crate::error::{check_fork, AllocError};
use crate::mem_pool::{self, MemPool, MemPoolId, PoolRegistry};
use crate::source::BufferSource;
use crate::source::DynSource;
use crate::stats::MemoryStats;

/// The caching allocator of one device: segments are OpenCL buffers. One per device is created on first use by the crate-level functions
/// ([`crate::device_allocator()`]); more can be built for private use (tests, replays).
pub struct DeviceAllocator {
    core: DeviceCore,
    device: usize,
    memory_kind: MemoryKind,
    /// The device's private pools ([`MemPool`]).
    pools: Arc<PoolRegistry>,
}

impl DeviceAllocator {
    /// An allocator for `device` with `config`.
    ///
    /// # Errors
    /// [`AllocError::InvalidDevice`] for a bad index; [`AllocError::Device`] when the
    /// device's context cannot be created.
    pub fn new(device: usize, config: AllocConfig) -> Result<Self, AllocError> {
        check_fork()?;
        if device >= xpu_device::device_count() {
            return Err(AllocError::InvalidDevice { device });
        }
        let source = Box::new(BufferSource::new(device)?);
        let memory_kind = MemoryKind::Buffer;
        Ok(Self {
            core: DeviceCore::new(source, config),
            device,
            memory_kind,
            pools: Arc::default(),
        })
    }

    /// A private pool of this allocator (shares its source, unless `custom` is given, its
    /// reserved bytes and memory fraction; counted in its statistics).
    pub(crate) fn create_pool(&self, custom: Option<Box<DynSource>>, id: MemPoolId) -> MemPool {
        let pool = MemPool::build(&self.core, &self.pools, custom, id);
        self.pools.register(&pool);
        pool
    }

    /// The segments of this allocator's dropped private pools that live on through their
    /// allocations, with their pools' ids (for the device's snapshot).
    pub(crate) fn dropped_pool_segments(
        &self,
    ) -> Vec<(crate::MemPoolId, Vec<xpu_caching::SegmentSnapshot>)> {
        self.pools.dropped_pool_segments()
    }

    /// The private pools of this allocator that have a live handle.
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child (first: the pools' registry lock may have
    /// been held at the fork).
    pub fn mem_pools(&self) -> Result<Vec<MemPool>, AllocError> {
        check_fork()?;
        Ok(self.pools.live())
    }

    /// The pool the calling thread routes this allocator's allocations to.
    #[inline]
    fn routed(&self) -> Option<MemPool> {
        mem_pool::routed(self.core.id())
    }

    /// The device-independent allocator inside.
    #[must_use]
    pub fn core(&self) -> &DeviceCore {
        &self.core
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.device
    }

    /// The memory kind its segments are made of.
    #[must_use]
    pub fn memory_kind(&self) -> MemoryKind {
        self.memory_kind
    }

    /// Also the bad-fork check of every method taking a stream (before any lock).
    fn check_stream(&self, stream: &Stream) -> Result<(), AllocError> {
        check_fork()?;
        self.check_device(stream)
    }

    /// `stream` belongs to this allocator's device.
    #[inline]
    fn check_device(&self, stream: &Stream) -> Result<(), AllocError> {
        if stream.device() == self.device {
            Ok(())
        } else {
            Err(AllocError::StreamDevice {
                stream: stream.device(),
                device: self.device,
            })
        }
    }

    /// Allocates `size` bytes for use on `stream` (reused without synchronization by later
    /// allocations on the same stream once freed).
    ///
    /// # Errors
    /// [`AllocError::StreamDevice`] for a stream of another device; see
    /// [`DeviceCore::allocate_with`].
    ///
    /// While the calling thread routes this allocator to a private pool
    /// ([`crate::use_mem_pool`]), the block comes from that pool. When the default pool
    /// cannot grow and dropped pools are still releasing segments, those releases are waited
    /// for and the allocation retried once.
    pub fn allocate(&self, size: u64, stream: &Stream) -> Result<DataPtr, AllocError> {
        // The bad-fork check is the caching allocator's own, first thing in `allocate_with`
        // (a routed pool's `allocate` checks too): nothing before it takes a lock.
        self.check_device(stream)?;
        if let Some(pool) = self.routed() {
            return pool.allocate(size, stream);
        }
        let stream = *stream;
        // An out-of-memory failure of the first attempt is retried once pending pool
        // releases are done, and counted in `num_ooms` only once it is returned.
        self.core
            .allocate_or_retry(
                size,
                stream_key(&stream),
                || ClStream::shared(stream),
                || {
                    // As torch's `release_cached_blocks` before it raises: the caches of
                    // dropped pools (freeable pools) too, then the releases in progress.
                    let freeable = self.pools.empty_freeable();
                    let pending = mem_pool::releases_pending();
                    if pending {
                        mem_pool::wait_pool_releases();
                    }
                    freeable || pending
                },
            )
            .map(|a| a.map_or_else(|| DataPtr::empty(self.device), DataPtr::new))
            .map_err(|e| self.with_device_figures(e.into()))
    }

    /// An out-of-memory error of the default pool with the device's allocated and reserved
    /// bytes, private pools included (as torch's message, whose statistics count them): the
    /// memory fraction that refused it counts them too.
    fn with_device_figures(&self, e: AllocError) -> AllocError {
        match e {
            AllocError::OutOfMemory(report) => {
                AllocError::OutOfMemory(mem_pool::device_figures(report, &self.memory_stats()))
            }
            AllocError::MemoryFractionExceeded(report) => AllocError::MemoryFractionExceeded(
                mem_pool::device_figures(report, &self.memory_stats()),
            ),
            other => other,
        }
    }

    /// Allocates `size` bytes on this device's current stream of the calling thread.
    ///
    /// # Errors
    /// As [`DeviceAllocator::allocate`]; a stream error resolving the current stream.
    pub fn allocate_current(&self, size: u64) -> Result<DataPtr, AllocError> {
        check_fork()?;
        let stream = xpu_stream::current_stream(self.device)?;
        self.allocate(size, &stream)
    }

    /// Marks `ptr` as used on `stream` (as `Tensor.record_stream`). The allocator keeps a
    /// reference to the stream's queue from now on, so a stream dropped before `ptr` is
    /// freed still orders the block's reuse after the work enqueued on it.
    ///
    /// # Errors
    /// [`AllocError::InvalidDevicePointer`] for a pointer of another allocator;
    /// [`AllocError::StreamDevice`] for a stream of another device;
    /// [`AllocError::Stream`] for a stream whose queue is already released;
    /// [`AllocError::Capturing`] for a stream a graph is capturing (nothing recorded), as
    /// [`DataPtr::record_stream`].
    pub fn record_stream(&self, ptr: &DataPtr, stream: &Stream) -> Result<(), AllocError> {
        self.check_stream(stream)?;
        stream.check_not_capturing("record_stream")?;
        let stream = ClStream::try_shared(*stream)?;
        match ptr.owner_id() {
            Some(owner) if owner != self.core.id() && self.pools.contains(owner) => {
                ptr.record_stream_ref(&stream);
                Ok(())
            }
            _ => self.core.record_stream(ptr, &stream),
        }
    }

    /// Raw allocation on `stream` (as `raw_alloc_with_stream`): the block of
    /// [`DeviceAllocator::allocate`] (routing and retry included), kept in the address table
    /// until [`DeviceAllocator::raw_delete`].
    ///
    /// # Errors
    /// As [`DeviceAllocator::allocate`].
    pub fn raw_alloc(&self, size: u64, stream: &Stream) -> Result<DevicePtr, AllocError> {
        let ptr = self.allocate(size, stream)?;
        let address = self.core.adopt_raw(ptr);
        Ok(DevicePtr::owned(self.device, address, self.core.id()))
    }

    /// Frees a pointer from [`DeviceAllocator::raw_alloc`].
    ///
    /// # Errors
    /// [`AllocError::InvalidDevicePointer`] for a pointer not live from `raw_alloc` here (one
    /// that names another allocator included, whatever its address).
    pub fn raw_delete(&self, ptr: DevicePtr) -> Result<(), AllocError> {
        check_fork()?;
        if (ptr.device() != self.device || !ptr.may_belong_to(self.core.id())) && !ptr.is_null() {
            return Err(AllocError::InvalidDevicePointer {
                address: ptr.address(),
            });
        }
        self.core.raw_delete(ptr.address())
    }

    /// Releases the default pool's cached unused segments
    /// ([`CachingAllocator::empty_cache`](xpu_caching::CachingAllocator::empty_cache)) and
    /// those of dropped private pools (torch's freeable pools, reference §4.10: the unused
    /// segments of a dropped pool that still holds allocations, and the releases handed to
    /// the background thread), each after the work on its stream; live pools keep their
    /// cache ([`MemPool::empty_cache`] empties one). Does nothing in a bad fork child.
    pub fn empty_cache(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.core.empty_cache();
        self.pools.empty_freeable();
        mem_pool::wait_pool_releases();
    }

    /// The device's statistics (as `torch.xpu.memory_stats(device)`): the default pool's
    /// ([`CachingAllocator::memory_stats`](xpu_caching::CachingAllocator::memory_stats))
    /// plus every private pool's, dropped pools included (as torch's device statistics
    /// count private pools). Currents and accumulations are exact sums; a peak is the sum of
    /// the pools' peaks, an upper bound of the device's peak once private pools are used
    /// (within a pool, exact for the allocation figures when one thread allocates, whichever
    /// threads free: see [`CachingAllocator`](xpu_caching::CachingAllocator)'s statistics
    /// under concurrency).
    /// All zero in a bad fork child (the statistics'
    /// locks may have been held at the fork); the crate-level functions return `BadFork`.
    #[must_use]
    pub fn memory_stats(&self) -> MemoryStats {
        if xpu_device::fork::is_in_bad_fork() {
            return MemoryStats::default();
        }
        self.pools.device_stats(&self.core)
    }

    /// Sets every peak of the device, private pools included, to its current value. Does
    /// nothing in a bad fork child (the statistics' locks may have been held at the fork);
    /// the crate-level functions return `BadFork`.
    pub fn reset_peak_stats(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.core.reset_peak_stats();
        self.pools.reset_peak();
    }

    /// Zeroes the device's accumulated statistics, private pools included. Does nothing in a
    /// bad fork child, as [`DeviceAllocator::reset_peak_stats`].
    pub fn reset_accumulated_stats(&self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.core.reset_accumulated_stats();
        self.pools.reset_accumulated();
    }

    /// Replaces the configuration of the default pool and every private pool. Does nothing
    /// in a bad fork child (nothing can allocate there; the pools' locks may have been held
    /// at the fork), as the crate-level `set_config`.
    pub fn set_config(&self, config: AllocConfig) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.pools.set_config(&self.core, config);
    }
}
