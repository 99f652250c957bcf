//! `xpu-caching`: the backend-independent caching allocator of xpu. It names no OpenCL crate
//! and no device type; `xpu-alloc` implements its [`Backend`] over OpenCL.
//!
//! - [`CachingAllocator`] (module [`allocator`]): PyTorch's caching allocator rules, sharded
//!   per stream, generic over a [`Backend`];
//! - [`backend`]: the seam ([`Backend`]: segment memory, streams, markers) and the
//!   stream-ordered contract the allocator relies on, stated once on the trait;
//!   [`source`]: where segments come from ([`SegmentSource`]);
//! - [`sim_stream`] and [`SimulatedSource`]: the simulated backend ([`SimBackend`]), on
//!   which this crate's unit tests run;
//! - [`config`](mod@config), [`size`] (over [`size_constants`]), [`stats`]: PyTorch's configuration grammar
//!   (`XPU_ALLOC_CONF`), size rules and statistics (one field list);
//! - [`history`]: the trace vocabulary ([`TraceAction`]) and the history ring ([`History`],
//!   as `torch.cuda.memory._record_memory_history`), written in the trace text format
//!   ([`history::write_trace`]). Reading traces back and replaying them is no part of the
//!   runtime: the `xpu-replay` tool crate does it, over this crate's public API.
//!
//! Contract: no device wait and no backend call that may block runs under an allocator
//! lock; no user code runs under one; a block returns to the cache only when the
//! stream-ordered contract of [`Backend`] says its last use is ordered before any reuse;
//! in a child forked after the backend's driver was initialized ([`Backend::is_bad_fork`])
//! no entry point takes an allocator lock or calls the backend, and drops leak.
//!
//! # Seams for allocators built on another's accounting
//! xpu-alloc's private pools use `CachingAllocator::with_setup` (a shared `History`, and a
//! `DeferredDrop` hook that runs each dropped shard's teardown, its markers waited for through
//! `Backend::wait` and then its segments released, elsewhere than in the drop),
//! `CachingAllocator::shared` (a `SharedState` handle: id, source, `allocate_segment_from` /
//! `release_segment_to` charged to this allocator's reserved bytes and fraction, statistics,
//! config), `CachingAllocator::weak_shards` (`WeakShard::release_cached`) and
//! `Allocation::owner_id`.
//!
//! # Segment sources
//! Segments come from a boxed `SegmentSource<Memory = B::Memory>`; only the slow path calls it, and
//! its `allocate` and `free` run under no allocator lock, so a source may call its allocator on the
//! same stream: segments released during an allocation (release policy, oversize release, garbage
//! collection) are taken out under the stream's shard lock and freed once it is dropped (after the
//! synchronize a source whose free does not wait needs), reserved bytes dropping as each is freed.
//! A segment of another size than asked, or overlapping a live segment of the allocator (its own
//! source's or one charged to it through `SharedState::allocate_segment_from`, so a private pool's
//! custom source cannot overlap the default pool) is freed again and the allocation fails with a
//! device error. `HookedSource<S, H>` runs `SourceHooks` around a source's allocate and free (rmm's
//! resource-adaptor idea). The simulated backend (`SimBackend`: `SimStream` / `SimMarker`,
//! `Simulated` memory from `SimulatedSource<M>`) reads its counters as one `Copy` snapshot under
//! one lock (`SimStream::counters` / `SimulatedSource::counters`); the allocator's unit tests run
//! on it and on a test backend whose markers hold or fail.
//!
//! # Errors
//! `CacheError`, `OomReport` and `DeviceFailure`: a backend's own error kept as its typed value,
//! shared, so the crate above can downcast it back, and equal by message. That covers a segment
//! source's device error and the failure inside `stream::MarkerError` (a failed marker record /
//! query / wait / synchronize, displayed `stream marker operation failed: …`). A stream of another
//! device gets no shard (`CacheError::StreamDevice`). A copy between segments
//! (`Backend::enqueue_copy`) fails with a `CopyError`: its ranges refused by the runtime itself
//! (`backend::check_copy`), or the backend's error kept as a `DeviceFailure`. xpu-alloc re-exports this crate's modules
//! (`xpu_alloc::config`, `size`, `stats`, `stream`, `sim_stream`, `observe::history`); `Stat` is
//! shared with xpu-host.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod backend;
pub mod config;
pub mod error;
pub mod history;
pub mod sim_stream;
pub mod size;
pub mod size_constants;
pub mod source;
pub mod stats;
pub mod stream;

pub use crate::allocator::thread_cache::{ThreadCacheKey, ThreadCaches};
pub use crate::allocator::{
    Allocation, BlockSnapshot, BlockState, CachingAllocator, DeferredDrop, PendingMove, PlacePin,
    RelocationStats, SegmentSnapshot, SharedState, WeakShard,
};
pub use crate::backend::{Backend, MarkerStatus};
pub use crate::config::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy, Relocation};
pub use crate::error::{CacheError, CopyEnd, CopyError, DeviceFailure, OomReport};
pub use crate::history::{History, TraceAction, TraceEntry};
pub use crate::sim_stream::SimBackend;
pub use crate::size::PoolKind;
pub use crate::source::{
    Fault, HookedSource, SegmentSource, SimulatedCounters, SimulatedSource, SourceError,
    SourceHooks, SourceSegment,
};
pub use crate::stats::{MemoryStats, Stat, StatArray};
pub use crate::stream::{MarkerError, StreamKey};
