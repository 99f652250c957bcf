//! Trace replay: drive an allocator with a recorded PyTorch allocator trace and measure
//! peaks, segment counts and call times.
//!
//! Every `alloc` is replayed as a request of its size on its stream; every `free_requested`
//! frees the live block allocated at that address (a free of an address with no live block
//! is counted in [`ReplayReport::unmatched_frees`]; lines of other actions are skipped and
//! counted in [`ReplayReport::skipped`]). A move recorded by `relocation:merge` (a
//! `move_from` line and the `move_to` line right after it, see [`xpu_caching::history`])
//! only renames the live block: the block allocated at the old address is freed later by
//! the new one. It calls no allocator and counts as neither an allocation nor a free
//! ([`ReplayReport::moves`]); the replaying allocator moves blocks by its own configuration.
//! A move that does not pair up so is counted in [`ReplayReport::unmatched_moves`].
//!
//! A free whose `free_completed` does not follow at once is held back like a
//! `record_stream`'d block: a marker gated until the trace reaches its `free_completed`.
//! Peaks are sampled from the allocator's totals after every event.
//!
//! On a simulated device the segments get the recording's addresses (the trace's
//! `segment_alloc` lines) while the replay's segment sequence agrees with the recording's,
//! then fresh ones ([`SegmentAddresses`]): best fit breaks ties between equal free blocks by
//! address, so the layout follows the recording's only if the addresses do.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::size::GIB;
use xpu_alloc::source::RecordedSegment;
use xpu_alloc::{
    AllocConfig, AllocError, ConfigError, DataPtr, DeviceCore, MemorySnapshot, SimulatedSource,
    StreamKey, StreamRef,
};

use crate::report::{ReplayReport, ReplaySeries};
use crate::trace::{read_trace, Action, Trace, TraceError};

/// Capacity of the simulated H200 (139.8 GiB), in bytes.
// 139.8 GiB is not an integer number of bytes: truncated.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
pub const H200_CAPACITY: u64 = (139.8 * GIB as f64) as u64;
/// Largest single allocation of the simulated H200 (34.95 GiB), in bytes.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
pub const H200_MAX_ALLOC: u64 = (34.95 * GIB as f64) as u64;

/// Stream ids used for held-back frees start here (far from trace stream numbers).
const HOLD_STREAM_BASE: u64 = 1 << 48;

/// A replay failure.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The trace could not be read (the I/O error is the source).
    #[error("reading the trace failed")]
    Io(#[from] std::io::Error),
    /// The trace is not in the trace format (a malformed line, no event line, no `alloc`;
    /// a corrupt gzip stream).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The allocator configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The allocator failed with an error other than out-of-memory.
    #[error("allocator error during replay: {0}")]
    Alloc(#[from] AllocError),
}

impl ReplayError {
    /// True when the allocator failed with a bad fork ([`ReplayError::Alloc`] of
    /// [`AllocError::BadFork`]; see `xpu_device::fork`).
    pub fn is_bad_fork(&self) -> bool {
        matches!(self, ReplayError::Alloc(e) if e.is_bad_fork())
    }
}

/// Produces the stream handle for a trace stream number.
pub type StreamFactory = Arc<dyn Fn(u32) -> StreamRef + Send + Sync>;

/// Where the replay allocates.
#[derive(Clone)]
pub enum ReplayTarget {
    /// A simulated device (`xpu replay --simulate`).
    Simulate {
        /// Capacity in bytes.
        capacity: u64,
        /// Largest single allocation in bytes.
        max_alloc: u64,
    },
    /// An existing allocator (a real device), with its streams.
    Core {
        /// The allocator.
        core: DeviceCore,
        /// Device description for the report.
        name: String,
        /// Stream of each trace stream number.
        streams: StreamFactory,
    },
}

impl ReplayTarget {
    /// A simulated H200: 139.8 GiB, largest allocation 34.95 GiB.
    #[must_use]
    pub fn h200() -> Self {
        Self::Simulate {
            capacity: H200_CAPACITY,
            max_alloc: H200_MAX_ALLOC,
        }
    }
}

/// The addresses of a simulated replay's segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SegmentAddresses {
    /// The recording's: the k-th segment the replay allocates gets the address of the
    /// trace's k-th `segment_alloc` while the two segment sequences agree (same sizes, no
    /// overlap with a live segment), fresh ones after they part (the rule:
    /// [`SimulatedSource::with_recorded_addresses`](xpu_caching::source::SimulatedSource::with_recorded_addresses)).
    /// Ties between equal free blocks are then broken as in the recording.
    #[default]
    Recorded,
    /// Fresh ones only: every segment above the ones before (addresses only grow), whatever
    /// the recording did.
    Fresh,
}

/// Options of a replay.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Where to allocate.
    pub target: ReplayTarget,
    /// Segment addresses of a simulated target ([`SegmentAddresses::Recorded`] by default).
    /// Ignored for [`ReplayTarget::Core`] (the device chooses).
    pub addresses: SegmentAddresses,
    /// Allocator configuration string (`XPU_ALLOC_CONF` grammar) for a simulated target;
    /// `None`: defaults. Ignored for [`ReplayTarget::Core`] (configure the allocator).
    pub config: Option<String>,
    /// Record the per-event series.
    pub record_series: bool,
    /// Called as `(events done, events in all)` every [`PROGRESS_EVERY`] events and at the
    /// end (for a progress bar).
    pub progress: Option<ProgressFn>,
    /// Record the allocator's history during the replay (a ring of this many entries) and
    /// return a snapshot taken at the end ([`ReplayOutcome::snapshot`]).
    pub history: Option<usize>,
}

/// Progress callback of a replay: `(events done, events in all)`.
pub type ProgressFn = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Events between two calls of [`ReplayOptions::progress`].
pub const PROGRESS_EVERY: usize = 256;

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            target: ReplayTarget::h200(),
            addresses: SegmentAddresses::default(),
            config: None,
            record_series: false,
            progress: None,
            history: None,
        }
    }
}

/// Result of a replay.
#[derive(Clone, Debug)]
pub struct ReplayOutcome {
    /// The figures.
    pub report: ReplayReport,
    /// Totals after every event (empty unless requested).
    pub series: ReplaySeries,
    /// Snapshot with the recorded history at the end ([`ReplayOptions::history`]).
    pub snapshot: Option<MemorySnapshot>,
}

/// Replays the trace file at `path` (gzip or plain).
///
/// # Errors
/// See [`ReplayError`].
pub fn run(path: &Path, options: &ReplayOptions) -> Result<ReplayOutcome, ReplayError> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    run_reader(&name, std::fs::File::open(path)?, options)
}

/// Replays a trace read from `reader`, reported under the name `name`.
///
/// # Errors
/// See [`ReplayError`].
pub fn run_reader(
    name: &str,
    reader: impl Read,
    options: &ReplayOptions,
) -> Result<ReplayOutcome, ReplayError> {
    let trace = read_trace(reader)?;
    replay_trace(name, &trace, options)
}

struct Held {
    stream: Arc<SimStream>,
}

/// Replays a parsed trace.
///
/// # Errors
/// See [`ReplayError`].
pub fn replay_trace(
    name: &str,
    trace: &Trace,
    options: &ReplayOptions,
) -> Result<ReplayOutcome, ReplayError> {
    let mut simulated: Option<Arc<SimulatedSource>> = None;
    let (core, device, mode, streams): (DeviceCore, String, &str, StreamFactory) = match &options
        .target
    {
        ReplayTarget::Simulate {
            capacity,
            max_alloc,
        } => {
            let config = options
                .config
                .as_deref()
                .map(AllocConfig::parse)
                .transpose()?
                .unwrap_or_default();
            let mut source = SimulatedSource::new(0, *capacity, *max_alloc);
            if options.addresses == SegmentAddresses::Recorded {
                source = source.with_recorded_addresses(
                    trace
                        .events
                        .iter()
                        .filter(|e| e.action == Action::SegmentAlloc)
                        .map(|e| RecordedSegment {
                            address: e.addr,
                            size: e.size,
                        }),
                );
            }
            let source = Arc::new(source);
            simulated = Some(Arc::clone(&source));
            let device = format!("simulated ({capacity} bytes, max allocation {max_alloc} bytes)");
            let streams: StreamFactory =
                Arc::new(|s| StreamRef::from(SimStream::new(StreamKey::new(0, u64::from(s)))));
            (
                DeviceCore::new(Box::new(source), config),
                device,
                "simulate",
                streams,
            )
        }
        ReplayTarget::Core {
            core,
            name,
            streams,
        } => (core.clone(), name.clone(), "device", streams.clone()),
    };
    let dev = core.device();
    if let Some(entries) = options.history {
        core.memory_history().record_memory_history(true, entries);
    }
    let start = Instant::now();
    let mut live: HashMap<u64, (DataPtr, u64)> = HashMap::new();
    let mut held: HashMap<u64, Held> = HashMap::new();
    let mut stream_refs: HashMap<u32, StreamRef> = HashMap::new();
    let mut alloc_ns: Vec<u64> = Vec::new();
    let mut free_ns: Vec<u64> = Vec::new();
    let mut series = ReplaySeries::default();
    let (mut requested, mut peak_requested, mut peak_allocated, mut peak_reserved) =
        (0u64, 0u64, 0u64, 0u64);
    let mut allocs = 0u64;
    let mut failed = 0u64;
    let mut holds = 0u64;
    let mut unmatched_frees = 0u64;
    let mut live_address_reused = 0u64;
    // Addresses of allocations that failed (out of memory), whose free lines are expected.
    let mut failed_at: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let (mut moves, mut unmatched_moves) = (0u64, 0u64);
    let mut skip_next_completion: Option<u64> = None;
    // The index of a `move_to` that its `move_from` already replayed.
    let mut move_done: Option<usize> = None;
    for (i, event) in trace.events.iter().enumerate() {
        if let Some(progress) = options
            .progress
            .as_ref()
            .filter(|_| i % PROGRESS_EVERY == 0)
        {
            progress(i, trace.events.len());
        }
        match event.action {
            Action::Alloc => {
                allocs += 1;
                let stream = stream_refs
                    .entry(event.stream)
                    .or_insert_with(|| streams(event.stream))
                    .clone();
                let key = StreamKey::new(dev, u64::from(event.stream));
                let t = Instant::now();
                let result = core.allocate_with(event.size, key, || stream);
                alloc_ns.push(elapsed_ns(t));
                match result {
                    Ok(ptr) => {
                        requested += event.size;
                        failed_at.remove(&event.addr);
                        if let Some((old, size)) = live.insert(event.addr, (ptr, event.size)) {
                            requested -= size;
                            live_address_reused += 1;
                            drop(old);
                        }
                    }
                    Err(
                        AllocError::OutOfMemory(_)
                        | AllocError::MemoryFractionExceeded(_)
                        | AllocError::TooLarge { .. },
                    ) => {
                        failed += 1;
                        failed_at.insert(event.addr);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Action::FreeRequested => {
                if let Some((ptr, size)) = live.remove(&event.addr) {
                    requested -= size;
                    let next = trace.events.get(i + 1);
                    let immediate = next
                        .is_some_and(|n| n.action == Action::FreeCompleted && n.addr == event.addr);
                    if immediate {
                        skip_next_completion = Some(event.addr);
                    } else {
                        holds += 1;
                        let stream = SimStream::new(StreamKey::new(dev, HOLD_STREAM_BASE + holds));
                        stream.close_gate();
                        core.record_stream(&ptr, &StreamRef::from(stream.clone()))?;
                        held.insert(event.addr, Held { stream });
                    }
                    let t = Instant::now();
                    drop(ptr);
                    free_ns.push(elapsed_ns(t));
                } else if !failed_at.remove(&event.addr) {
                    unmatched_frees += 1;
                }
            }
            Action::FreeCompleted => {
                if skip_next_completion.take() != Some(event.addr) {
                    if let Some(h) = held.remove(&event.addr) {
                        h.stream.open_gate();
                    }
                }
            }
            Action::MoveFrom => {
                let to = trace.events.get(i + 1).filter(|n| {
                    n.action == Action::MoveTo && n.size == event.size && n.stream == event.stream
                });
                match (to, live.remove(&event.addr)) {
                    (Some(to), Some(block)) => {
                        moves += 1;
                        move_done = Some(i + 1);
                        if let Some((old, size)) = live.insert(to.addr, block) {
                            // A trace with a live block at the new place: dropped, as an
                            // `alloc` over a live address does.
                            requested -= size;
                            drop(old);
                        }
                    }
                    (_, block) => {
                        // Not replayed (a `move_to` after it is counted there).
                        unmatched_moves += 1;
                        if let Some(block) = block {
                            live.insert(event.addr, block);
                        }
                    }
                }
            }
            Action::MoveTo => {
                if move_done.take() != Some(i) {
                    unmatched_moves += 1;
                }
            }
            Action::SegmentAlloc | Action::SegmentFree | Action::Oom | Action::Snapshot => {}
        }
        let allocated = core.memory_allocated();
        let reserved = core.reserved_bytes();
        peak_requested = peak_requested.max(requested);
        peak_allocated = peak_allocated.max(allocated);
        peak_reserved = peak_reserved.max(reserved);
        if options.record_series {
            series.allocated.push(allocated);
            series.reserved.push(reserved);
            series.requested.push(requested);
        }
    }
    if let Some(progress) = &options.progress {
        progress(trace.events.len(), trace.events.len());
    }
    let wall_s = start.elapsed().as_secs_f64();
    let stats = core.memory_stats();
    // A peak inside one call (a growth made before the segments it replaces are released)
    // is seen by the statistics, not by the samples between events.
    peak_reserved = peak_reserved.max(u64::try_from(stats.reserved_bytes.all.peak).unwrap_or(0));
    drop(live);
    // A replay device index is a real device's or 0: always within a snapshot's bound.
    let snapshot = options.history.and_then(|_| core.memory_snapshot().ok());
    let report = ReplayReport {
        trace: name.to_owned(),
        device,
        mode: mode.to_owned(),
        events: trace.lines,
        allocs,
        skipped: trace.skipped.clone(),
        unmatched_frees,
        live_address_reused,
        moves,
        unmatched_moves,
        peak_requested,
        peak_allocated,
        peak_reserved,
        reserved_over_requested: ratio(peak_reserved, peak_requested),
        segment_allocs: stats.num_device_alloc,
        segment_frees: stats.num_device_free,
        segments_at_recorded_address: simulated
            .as_ref()
            .and_then(|source| source.recorded_addresses_followed()),
        relocation: core.config().relocates().then(|| core.relocation_stats()),
        alloc_retries: stats.num_alloc_retries,
        ooms: stats.num_ooms.max(failed),
        alloc_ns_mean: mean(&alloc_ns),
        alloc_ns_p99: percentile(&mut alloc_ns, 0.99),
        free_ns_mean: mean(&free_ns),
        wall_s,
    };
    Ok(ReplayOutcome {
        report,
        series,
        snapshot,
    })
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[allow(clippy::cast_precision_loss)]
fn mean(values: &[u64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64
    }
}

#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
fn percentile(values: &mut [u64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable();
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad fork met by the allocator during a replay is a bad fork of the replay, however
    /// the caller holds the error (the facade's `Error::Replay` asked this before the replay
    /// left the runtime crates); another allocator error is not.
    #[test]
    fn a_bad_fork_of_the_allocator_is_a_bad_fork_of_the_replay() {
        let bad_fork = ReplayError::Alloc(AllocError::BadFork);
        assert!(bad_fork.is_bad_fork());
        assert!(bad_fork
            .to_string()
            .contains(&AllocError::BadFork.to_string()));
        assert!(!ReplayError::Alloc(AllocError::InvalidDevice { device: 3 }).is_bad_fork());
        let config = AllocConfig::parse("no_such_key:1").unwrap_err();
        assert!(!ReplayError::Config(config).is_bad_fork());
    }
}
