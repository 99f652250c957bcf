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
//!   as `torch.cuda.memory._record_memory_history`); [`replay`]: reading traces.
//!
//! Contract: no device wait and no backend call that may block runs under an allocator
//! lock; no user code runs under one; a block returns to the cache only when the
//! stream-ordered contract of [`Backend`] says its last use is ordered before any reuse;
//! in a child forked after the backend's driver was initialized ([`Backend::is_bad_fork`])
//! no entry point takes an allocator lock or calls the backend, and drops leak.
#![forbid(unsafe_code)]

pub mod allocator;
pub mod backend;
pub mod config;
pub mod error;
pub mod history;
pub mod replay;
pub mod sim_stream;
pub mod size;
pub mod size_constants;
pub mod source;
pub mod stats;
pub mod stream;

pub use crate::allocator::thread_cache::{ThreadCacheKey, ThreadCaches};
pub use crate::allocator::{
    Allocation, BlockSnapshot, BlockState, CachingAllocator, DeferredDrop, SegmentSnapshot,
    SharedState, WeakShard,
};
pub use crate::backend::{Backend, MarkerStatus};
pub use crate::config::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy};
pub use crate::error::{CacheError, DeviceFailure, OomReport};
pub use crate::history::{History, TraceAction, TraceEntry};
pub use crate::sim_stream::SimBackend;
pub use crate::size::PoolKind;
pub use crate::source::{
    Fault, HookedSource, SegmentSource, SimulatedCounters, SimulatedSource, SourceError,
    SourceHooks, SourceSegment,
};
pub use crate::stats::{MemoryStats, Stat, StatArray};
pub use crate::stream::{MarkerError, StreamKey};
