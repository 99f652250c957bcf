//! The trace vocabulary read back: the reader of the allocator trace format
//! ([`read_trace`], `ACTION ADDR SIZE STREAM` lines in the [`TraceAction`] names that
//! [`xpu_caching::History`] writes). The replay engine that drives an allocator with a trace is
//! [`crate::run`].

mod parse;

use thiserror::Error;

pub use parse::{read_trace, Action, Trace, TraceEvent};
pub use xpu_caching::TraceAction;

/// A trace that could not be read ([`ReplayError::Trace`](crate::ReplayError::Trace) wraps it).
#[derive(Debug, Error)]
pub enum TraceError {
    /// The trace could not be read (the I/O error is the source).
    #[error("reading the trace failed")]
    Io(#[from] std::io::Error),
    /// A line is not `ACTION ADDR SIZE STREAM` (single spaces, a lowercase action name,
    /// decimal integers).
    #[error("malformed trace line {line}: '{text}': {reason} (expected `ACTION ADDR SIZE STREAM`: a lowercase action name and three decimal integers, separated by single spaces)")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// The line.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The trace has no event line (an empty file, or only `#` comments).
    #[error("the trace is empty: no `ACTION ADDR SIZE STREAM` line")]
    Empty,
    /// The trace has event lines but no `alloc`: nothing to replay.
    #[error("the trace has no `alloc` line ({lines} event lines): nothing to replay")]
    NoAlloc {
        /// Event lines read.
        lines: u64,
    },
}
