//! `xpu-alloc`: the caching device allocator of the xpu runtime (PyTorch's caching
//! allocator rules, sharded per stream), with its configuration and statistics.
//!
//! Layers:
//! - the caching algorithm ([`xpu_caching::CachingAllocator`]) and [`config`](mod@config),
//!   [`size`], [`stats`], [`stream`], [`sim_stream`], the trace vocabulary and history
//!   ([`History`], [`TraceAction`]): from the backend-independent `xpu-caching` crate
//!   (re-exported here);
//! - [`ClBackend`]: this crate's implementation of the caching allocator's backend trait
//!   (OpenCL markers and barriers on [`StreamRef`]s, or simulated streams), and [`source`]:
//!   where segments come from ([`BufferSource`]: OpenCL buffers; [`SimulatedSource`]);
//! - [`DeviceCore`]: the caching allocator of one device over [`ClBackend`], handing out
//!   [`DataPtr`]s (with the `raw_alloc` address table);
//! - [`DeviceAllocator`] and the crate-level functions ([`allocate`], [`record_stream`],
//!   [`empty_cache`], [`memory_stats`], ...): one allocator per OpenCL device, created on
//!   first use, over `xpu_stream` streams;
//! - [`MemPool`]: private memory pools of a device (as `torch.cuda.MemPool`), with
//!   [`use_mem_pool`] routing the calling thread's allocations to one;
//! - [`observe`]: `memory_summary`, snapshots (JSON, and the pickle of PyTorch's memory
//!   visualizer) and history recording ([`record_memory_history`]).
//! - [`host`]: the pinned-host allocator, re-exported from the `xpu-host` crate (also at the
//!   root: [`HostPtr`], [`HostCopy`], ...); [`DataPtr`] implements its [`DeviceMemory`].
//!
//! Contract: safe code cannot reach memory outside its own allocation (views and copy
//! regions are borrowed from the [`DataPtr`] and bounded by its requested size); a block
//! returns to the cache only after the markers of every stream that used it completed; no
//! user code and no driver wait runs under an allocator lock. [`ClBackend`] provides the
//! stream-ordered contract of `xpu_caching::Backend` with in-order OpenCL queues, flushed
//! markers and barriers.
//!
//! ```
//! # fn main() -> Result<(), xpu_alloc::AllocError> {
//! # if xpu_device::device_count() == 0 { return Ok(()); }
//! let stream = xpu_stream::get_stream_from_pool(0, 0)?;
//! let buf = xpu_alloc::allocate(1 << 20, &stream)?; // 1 MiB, freed on drop
//! assert!(xpu_alloc::memory_allocated(0)? >= 1 << 20);
//! // Raw interop values (the segment's cl_mem, not retained, and the byte offset); to pass the
//! // block to a kernel, give `&buf` to xpu-kernel's launch builder (one argument, exactly it).
//! let (_mem, _offset) = buf.cl_mem_and_offset()?;
//! drop(buf);
//! xpu_alloc::empty_cache();
//! # Ok(()) }
//! ```
//!
//! # Details
//! - `ClBackend`'s types: `StreamRef` (a device stream, `ClStream`, holding its queue, or a
//!   simulated one); `StreamMarker` (an OpenCL marker, flushed, or a simulated one, or `Idle` for
//!   an allocation stream whose external queue was released before the allocator first saw it: no
//!   work can use its memory, so its cached segments are released as others); a device-side wait is
//!   `clEnqueueBarrierWithWaitList`; memory is `SegmentMemory` (an OpenCL buffer, or simulated).
//! - `DataPtr` wraps the core's `Allocation`; its other methods are the core's, by `Deref`.
//!   `memory_kind:svm` was removed and is a typed `ConfigError::Unsupported` (at parse time and in
//!   `xpu::init()`): SVM blocks had no copy or kernel-argument path.
//! - `AllocError` maps the core's `CacheError` variant for variant. Device failures stay typed:
//!   `AllocError::Device(Box<DeviceError>)` for an OpenCL one (a `DeviceFailure` holding a
//!   `DeviceError` is downcast back, and a device-layer `BadFork` becomes `AllocError::BadFork`),
//!   and `AllocError::Source(DeviceFailure)` for any other source's, both displayed
//!   `device error: …`. A failed stream operation is `AllocError::Stream(MarkerError)` holding the
//!   `xpu_stream::StreamError` (`ClBackend`'s marker calls keep theirs, an OpenCL code as
//!   `StreamError::OpenCl`), and `is_bad_fork` sees a bad fork inside it; `ClStream::try_shared`
//!   fails with the `StreamError`, so `?` makes a bad fork `AllocError::BadFork`.
//! - `DeviceMemory for DataPtr`: pinned-host copies to and from a block. The region it lends
//!   carries the `DataPtr` as its `RegionLender`: before a copy enqueues, `before_copy` records
//!   a stream other than the allocation stream as `record_stream` and orders it after
//!   relocation copies, even when a wrapper type passes the region on. The crate re-exports xpu-host, so
//!   `xpu_alloc::HostPtr`, `HostCopy` and the rest keep working.
//! - Device addresses: buffer segments get a unique address range from the allocator (the device
//!   has no pointer for a `cl_mem`); `DataPtr::cl_mem_and_offset` gives a block's kernel arguments
//!   as raw values (the segment's `cl_mem`, not retained, and the offset: valid only for the
//!   block's bytes while its `DataPtr` lives).
//! - Relocation (`relocation:merge`, the default; `relocation:off` turns it off): a large block
//!   (a request above 1 MiB; small blocks move only under `relocation:merge_all`) may move while its
//!   `DataPtr` lives, until its place is first observed. `DataPtr::address`,
//!   `cl_mem_and_offset`, `block_cl_mem`, `set_kernel_arg`, device regions and `raw_alloc`
//!   observe it (fixed for good, as torch's `data_ptr`); views and `xpu_kernel` launches hold a
//!   `BlockPin` only while they enqueue, and prepare a block for a command on another stream
//!   (it then never moves, and waits for its last move's copies). docs/relocation.md.
//! - Views are scoped to the allocation: no safe API hands out a `Buffer` of allocator memory (a
//!   retained segment handle would outlive the block, reach its neighbours and keep released
//!   segments alive). `DataPtr::view` borrows the `DataPtr` and checks every read, write, fill and
//!   copy against the requested size; raw pointers get `with_raw_view(ptr, |view| ..)`, which keeps
//!   the block allocated while the closure runs (a `raw_delete` meanwhile takes effect after it)
//!   and runs it under no lock.
//! - No user code under an allocator lock: the stream closure of `allocate_with` runs before any
//!   lock (a concurrent registration of the same stream drops the extra handle unlocked);
//!   `with_raw` clones its entry and releases the table lock before calling the closure;
//!   `Allocation::with_segment` shares the segment and runs its closure after the stream's lock is
//!   released.
#![forbid(unsafe_code)]

mod cl_stream;
pub use xpu_caching::config;
mod data_ptr;
mod device_allocator;
mod device_core;
mod device_ptr;
mod error;
mod global;
mod host_copy;
mod mem_pool;
pub mod observe;
mod raw;
pub use xpu_caching::{sim_stream, size, stats, stream};
pub mod source;

pub use crate::cl_stream::{stream_key, ClBackend, ClStream, EventMarker, StreamMarker, StreamRef};
pub use crate::config::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy, Relocation};
pub use crate::data_ptr::{BlockArgError, BlockPin, BlockView, DataPtr, PendingMove};
pub use crate::device_allocator::DeviceAllocator;
pub use crate::device_core::DeviceCore;
pub use crate::device_ptr::DevicePtr;
pub use crate::error::{AllocError, DeviceFailure, OomReport};
pub use crate::global::{
    allocate, allocate_current, current_config, device_allocator, empty_cache,
    max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated, memory_fraction,
    memory_reserved, memory_stats, memory_stats_flat, raw_alloc, raw_alloc_with_stream,
    raw_cl_mem_and_offset, raw_delete, record_stream, reset_accumulated_stats, reset_peak_stats,
    set_config, set_memory_fraction, with_raw_view, CONFIG_ENV,
};
pub use crate::mem_pool::{
    begin_allocate_to_pool, end_allocate_to_pool, flush_release_thread, pool_release_waiters,
    use_mem_pool, wait_pool_releases, MemPool, MemPoolGuard, MemPoolId,
};
pub use crate::observe::device::{
    memory_history, memory_snapshot, memory_summary, record_memory_history,
};
pub use crate::observe::{History, MemorySnapshot, TraceAction, TraceEntry};
pub use crate::size::PoolKind;
pub use crate::source::{
    device_splits_segments, sub_buffers_safe_on, BufferMemory, BufferSource, Fault, HookedSource,
    SegmentMemory, SegmentSource, SimulatedSource, SourceError, SourceHooks, SourceSegment,
    SubBuffers, SUB_BUFFERS_PER_SEGMENT,
};
pub use crate::stats::{MemoryStats, Stat, StatArray};
pub use crate::stream::{MarkerError, StreamKey};
pub use xpu_caching::{BlockSnapshot, BlockState, RelocationStats, SegmentSnapshot};
/// The pinned-host allocator, re-exported from the `xpu-host` crate.
pub use xpu_host as host;
pub use xpu_host::{
    host_allocate, host_allocate_on, host_empty_cache, host_memory_stats, host_record_event,
    host_reset_accumulated_stats, host_reset_peak_stats, DeviceMemory, DeviceRegion, HostAllocator,
    HostBytes, HostCopy, HostError, HostMemoryStats, HostPtr,
};
