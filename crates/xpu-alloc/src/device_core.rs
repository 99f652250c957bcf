//! [`DeviceCore`]: the caching allocator of one device over this crate's backend
//! ([`ClBackend`]), handing out [`DataPtr`]s, with the raw-address table of `raw_alloc`.
//! The algorithm is `xpu_caching::CachingAllocator`; see its documentation for the design
//! (sharding, statistics, OOM sequence, cross-stream reuse, fragmentation policy).

use std::sync::Arc;

use xpu_caching::CachingAllocator;

use crate::cl_stream::{ClBackend, StreamRef};
use crate::config::AllocConfig;
use crate::data_ptr::DataPtr;
use crate::error::{check_fork, AllocError};
use crate::raw::RawTable;
use crate::source::DynSource;

use crate::stream::StreamKey;

struct Inner {
    cache: CachingAllocator<ClBackend>,
    raw: RawTable,
    /// Unique in the process (never 0): what a [`DevicePtr`](crate::DevicePtr) of this
    /// allocator's raw table names as its owner.
    id: u64,
}

/// The next [`DeviceCore::id`].
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The caching allocator of one device over any [`SegmentSource`](crate::SegmentSource) of this crate's memory
/// (cheap to clone: clones share the allocator): `xpu_caching::CachingAllocator` over
/// [`ClBackend`], its allocations wrapped in [`DataPtr`]s. PyTorch's rules (reference §4):
/// 512-byte rounding, optional power-of-two divisions, small (<= 1 MiB) and large pools,
/// best fit by (size, address) per stream, split and oversize rules, coalescing,
/// record_stream with deferred frees, the OOM sequence, empty_cache, memory fraction,
/// garbage collection and statistics.
#[derive(Clone)]
pub struct DeviceCore {
    inner: Arc<Inner>,
}

impl DeviceCore {
    /// An allocator over `source` with `config`.
    #[must_use]
    pub fn new(source: Box<DynSource>, config: AllocConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                cache: CachingAllocator::new(source, config),
                raw: RawTable::default(),
                id: next_id(),
            }),
        }
    }

    /// An allocator whose events go to `history` and whose dropped shards' teardown runs in
    /// `deferred_drop` (a private pool's core; see `crate::mem_pool` and
    /// `xpu_caching::CachingAllocator::with_setup`).
    pub(crate) fn with_setup(
        source: Box<DynSource>,
        config: AllocConfig,
        history: Arc<xpu_caching::History>,
        deferred_drop: xpu_caching::DeferredDrop,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cache: CachingAllocator::with_setup(source, config, history, Some(deferred_drop)),
                raw: RawTable::default(),
                id: next_id(),
            }),
        }
    }

    /// Registers a live allocation (of any allocator) in this allocator's raw table, as
    /// [`DeviceCore::raw_alloc`] does (a routed `raw_alloc` of a private pool).
    pub(crate) fn adopt_raw(&self, ptr: DataPtr) -> u64 {
        let address = ptr.address();
        if address != 0 {
            self.inner.raw.insert(address, ptr);
        }
        address
    }

    /// The allocator's identity, unique in the process and never 0 (clones share it): the
    /// owner its raw pointers name, so that another allocator's pointer at the same address
    /// (every allocator of a device numbers its addresses from the same base) is refused
    /// rather than taken for one of its own.
    #[must_use]
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The backend-independent allocator inside.
    #[must_use]
    pub fn caching(&self) -> &CachingAllocator<ClBackend> {
        &self.inner.cache
    }

    /// Allocates `size` bytes for use on `stream`.
    ///
    /// # Errors
    /// See [`DeviceCore::allocate_with`].
    #[inline]
    pub fn allocate(&self, size: u64, stream: &StreamRef) -> Result<DataPtr, AllocError> {
        self.allocate_with(size, stream.key(), || stream.clone())
    }

    /// Allocates `size` bytes for use on the stream `key`; `stream` is called only while
    /// this stream is not yet known, to get its handle. `stream` runs under no allocator
    /// lock, so it may call the allocator; when two threads register the same stream at once,
    /// one handle is kept and the other dropped (also under no lock). A zero size gives an
    /// empty [`DataPtr`] without touching the allocator.
    ///
    /// # Errors
    /// [`AllocError::TooLarge`] when the request exceeds the device's largest allocation or
    /// 1 EiB; [`AllocError::OutOfMemory`] also when the reserved bytes would pass `i64::MAX`
    /// (the statistics' range); [`AllocError::OutOfMemory`] /
    /// [`AllocError::MemoryFractionExceeded`] after the full OOM sequence (see
    /// `xpu_caching::CachingAllocator`);
    /// [`AllocError::Device`] for other device errors; [`AllocError::BadFork`] in a bad fork
    /// child (see `xpu_device::fork`), first, before any lock (the caching allocator's own
    /// check, [`ClBackend`]'s `is_bad_fork`).
    #[inline]
    pub fn allocate_with(
        &self,
        size: u64,
        key: StreamKey,
        stream: impl FnOnce() -> StreamRef,
    ) -> Result<DataPtr, AllocError> {
        match self.inner.cache.allocate_with(size, key, stream)? {
            Some(allocation) => Ok(DataPtr::new(allocation)),
            None => Ok(DataPtr::empty(self.inner.cache.device())),
        }
    }

    /// Marks `ptr` as used on `stream` (as `Tensor.record_stream`): when `ptr` is freed, its
    /// block is reused only after a marker recorded then on `stream` completes. Ignored for
    /// an empty pointer and for the allocation stream.
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child, first;
    /// [`AllocError::InvalidDevicePointer`] when `ptr` comes from another allocator.
    pub fn record_stream(&self, ptr: &DataPtr, stream: &StreamRef) -> Result<(), AllocError> {
        check_fork()?;
        match ptr.allocation() {
            Some(allocation) => Ok(self.inner.cache.record_stream(allocation, stream)?),
            None => Ok(()),
        }
    }

    /// Allocates `size` bytes on stream `key` and returns the device address, to be freed
    /// by [`DeviceCore::raw_delete`] (as `raw_alloc`). Size 0 returns address 0.
    ///
    /// # Errors
    /// As [`DeviceCore::allocate_with`].
    pub fn raw_alloc<F>(&self, size: u64, key: StreamKey, stream: F) -> Result<u64, AllocError>
    where
        F: FnOnce() -> StreamRef,
    {
        let ptr = self.allocate_with(size, key, stream)?;
        Ok(self.adopt_raw(ptr))
    }

    /// Frees an address returned by [`DeviceCore::raw_alloc`] (address 0 is ignored). While a
    /// [`DeviceCore::with_raw`] closure on the address runs, the address is forgotten at once
    /// and the block freed when the closure returns.
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child, first (the raw table's lock may have been
    /// held at the fork); [`AllocError::InvalidDevicePointer`] for an address not live from
    /// `raw_alloc`.
    pub fn raw_delete(&self, address: u64) -> Result<(), AllocError> {
        check_fork()?;
        if address == 0 {
            return Ok(());
        }
        self.inner
            .raw
            .remove(address)
            .map(drop)
            .ok_or(AllocError::InvalidDevicePointer { address })
    }

    /// Runs `f` on the live [`DataPtr`] of a raw address. `f` runs without any allocator
    /// lock held (it may call the allocator, `raw_delete` of this address included), and the
    /// allocation stays alive until `f` returns: a `raw_delete` meanwhile takes effect then.
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child, first;
    /// [`AllocError::InvalidDevicePointer`] for an address not live from `raw_alloc`.
    pub fn with_raw<R>(
        &self,
        address: u64,
        f: impl FnOnce(&DataPtr) -> R,
    ) -> Result<R, AllocError> {
        check_fork()?;
        let ptr = self
            .inner
            .raw
            .get(address)
            .ok_or(AllocError::InvalidDevicePointer { address })?;
        Ok(f(&ptr))
    }

    /// Limits reserved memory to `fraction` of the device total (as
    /// `set_per_process_memory_fraction`).
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child, first; [`AllocError::InvalidFraction`]
    /// unless `0 < fraction <= 1`.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<(), AllocError> {
        Ok(self.inner.cache.set_memory_fraction(fraction)?)
    }
}

/// Everything else (statistics, configuration, fraction, `empty_cache`, snapshots, history)
/// is the backend-independent allocator's own API, which refuses, does nothing or answers a
/// neutral value in a bad fork child (see `xpu_caching::CachingAllocator`'s fork safety:
/// [`ClBackend`] answers `is_bad_fork` with `xpu_device::fork::is_in_bad_fork`).
impl std::ops::Deref for DeviceCore {
    type Target = CachingAllocator<ClBackend>;

    fn deref(&self) -> &CachingAllocator<ClBackend> {
        &self.inner.cache
    }
}
