//! `xpu-caching`: the backend-independent parts of the xpu caching allocator. It names no
//! OpenCL crate and no device type; `xpu-alloc` builds the OpenCL allocator on it.
//!
//! - [`config`](mod@config), [`size`], [`stats`]: PyTorch's configuration grammar
//!   (`XPU_ALLOC_CONF`), size rules and statistics (one field list);
//! - [`stream`]: the stream/marker seam, the stream-ordered contract the allocator relies on
//!   ([`MarkerStream`], [`Marker`]); [`sim_stream`]: device-less streams whose markers
//!   complete when a gate opens;
//! - [`history`]: the trace vocabulary ([`TraceAction`]) and the history ring ([`History`],
//!   as `torch.cuda.memory._record_memory_history`);
//! - [`replay`]: reading traces in that vocabulary and the replay report;
//! - [`source`]: the segment source seam ([`SegmentSource`], its memory an associated type)
//!   and the simulated backend ([`SimulatedSource`]).
//!
//! Contract: pure data and rules; nothing here blocks on a device or runs user code.
#![forbid(unsafe_code)]

pub mod config;
pub mod history;
pub mod replay;
pub mod sim_stream;
pub mod size;
pub mod source;
pub mod stats;
pub mod stream;

pub use crate::config::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy};
pub use crate::history::{History, TraceAction, TraceEntry};
pub use crate::size::PoolKind;
pub use crate::source::{Fault, SegmentSource, SimulatedSource, SourceError, SourceSegment};
pub use crate::stats::{MemoryStats, Stat, StatArray};
pub use crate::stream::{Marker, MarkerError, MarkerStream, StreamKey, StreamRef};
