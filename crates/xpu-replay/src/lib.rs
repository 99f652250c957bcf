//! `xpu-replay`: trace replay for xpu. A tool crate, not part of the runtime: no library
//! crate depends on it (`xpu replay` and `xpu replay-all` of xpu-cli use it).
//!
//! A trace is the allocator's event log in the text format of the shared PyTorch traces
//! (`ACTION ADDR SIZE STREAM` lines, gzip or plain), as `torch.cuda.memory._record_memory_history`
//! records it and as xpu's own history writes it (`xpu_caching::history::write_trace`,
//! `xpu_alloc::observe::history::trace_text`). This crate
//! - reads one ([`read_trace`]: [`Trace`], [`TraceEvent`], [`TraceError`]), and
//! - drives the caching allocator with it ([`run`], [`run_reader`], [`replay_trace`]: the
//!   engine), on a simulated device (a `SimulatedSource` that follows the recording's segment
//!   addresses, [`SegmentAddresses`]; a simulated H200 by default, [`H200_CAPACITY`]) or on an
//!   existing allocator of a real device ([`ReplayTarget::Core`]), reporting peaks, segment
//!   counts and call times ([`ReplayReport`], [`ReplaySeries`]).
//!
//! It uses the runtime's public API only: `xpu_alloc::DeviceCore`, the simulated segment
//! source and streams of `xpu-caching` (re-exported by `xpu-alloc`), and the trace vocabulary
//! ([`TraceAction`]).
//!
//! Errors are typed ([`ReplayError`]); a malformed trace is an error naming its line, never
//! a panic.
#![forbid(unsafe_code)]

mod engine;
mod report;
mod trace;

pub use engine::{
    replay_trace, run, run_reader, ProgressFn, ReplayError, ReplayOptions, ReplayOutcome,
    ReplayTarget, SegmentAddresses, StreamFactory, H200_CAPACITY, H200_MAX_ALLOC, PROGRESS_EVERY,
};
pub use report::{ReplayReport, ReplaySeries};
pub use trace::{read_trace, Action, Trace, TraceAction, TraceError, TraceEvent};
