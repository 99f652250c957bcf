//! Memory observability: a readable summary of the statistics, history recording of
//! allocator events, and snapshots a person or PyTorch's memory visualizer can read.
//!
//! - [`summary`]: [`memory_summary`], the table of `torch.cuda.memory_summary`;
//! - [`history`]: [`History`], a ring buffer of trace entries (as
//!   `torch.cuda.memory._record_memory_history`), exported in the trace text format of the
//!   shared PyTorch traces (which the `xpu-replay` tool crate reads back);
//! - [`snapshot`]: [`MemorySnapshot`], segments with their blocks plus the recorded history,
//!   in the dictionary shape of `torch.cuda.memory._snapshot()`, written as JSON;
//! - [`pickle`]: the same snapshot as a pickle file for PyTorch's memory visualizer;
//! - [`device`]: the same over the process's device allocators (by device index).
//!
//! The flat dotted-key view of the statistics (`allocated_bytes.all.current`, ...) is
//! [`crate::MemoryStats::flat`].

pub mod device;
pub use xpu_caching::history;
pub mod pickle;
pub mod snapshot;
pub mod summary;

use thiserror::Error;

pub use history::{History, TraceAction, TraceEntry};
pub use pickle::{snapshot_from_pickle, snapshot_to_pickle, write_pickle};
pub use snapshot::{
    memory_snapshot, BlockDict, FrameDict, MemorySnapshot, SegmentDict, TraceEntryDict,
    MAX_SNAPSHOT_DEVICE,
};
pub use summary::memory_summary;

/// A failure to export or read back an observability artifact.
#[derive(Debug, Error)]
pub enum ObserveError {
    /// Writing or reading a file failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The pickle encoder or decoder failed.
    #[error("pickle error: {0}")]
    Pickle(#[from] serde_pickle::Error),
    /// The JSON encoder or decoder failed.
    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),
    /// A snapshot of a device index beyond [`snapshot::MAX_SNAPSHOT_DEVICE`].
    #[error("device index {device} is beyond the largest a snapshot describes ({max})")]
    DeviceIndex {
        /// The device index.
        device: usize,
        /// The largest index allowed.
        max: usize,
    },
}
