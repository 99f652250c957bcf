//! `xpu replay TRACE`: replays a recorded allocator trace through the caching allocator,
//! on a device with real OpenCL memory or on a simulated device, and reports peaks,
//! segment counts and call times (optionally as JSON, as a plot, and next to PyTorch's
//! figures).

pub mod compare;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use xpu_alloc::{AllocConfig, ClStream, DeviceAllocator, DeviceCore};
use xpu_replay::{
    self as replay, ReplayOptions, ReplayOutcome, ReplayReport, ReplayTarget, StreamFactory,
    H200_CAPACITY, H200_MAX_ALLOC,
};

use crate::alloc_conf::AllocConfArg;
use crate::info::format_bytes;

/// Options of `xpu replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Trace file (`ACTION ADDR SIZE STREAM` lines, gzip or plain).
    pub trace: PathBuf,
    /// Where the replay allocates.
    #[command(flatten)]
    pub target: TargetArgs,
    /// The allocator configuration.
    #[command(flatten)]
    pub alloc: AllocConfArg,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// The files the replay writes.
    #[command(flatten)]
    pub files: OutputFiles,
    /// Show PyTorch's figures for the trace next to ours.
    #[arg(long)]
    pub compare: bool,
}

/// Where `xpu replay` allocates: a device, or a simulated one.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// Replay on this device with real OpenCL memory (default: device 0, the process's
    /// current device). Not with `--simulate`.
    #[arg(long, conflicts_with = "simulate")]
    pub device: Option<usize>,
    /// Replay on a simulated device (no device memory): an H200's capacity (139.8 GiB,
    /// largest allocation 34.95 GiB) unless `--capacity` is given. Its segments get the
    /// trace's `segment_alloc` addresses while the replay's segment sequence agrees with the
    /// recording's, then fresh ones.
    #[arg(long)]
    pub simulate: bool,
    /// Capacity in bytes of the simulated device (needs `--simulate`; at least 1); its
    /// largest allocation is then the smaller of this and the H200's 34.95 GiB. Allocations
    /// that do not fit fail and are counted (OOMs), and `--compare` then gives no verdict.
    #[arg(long, requires = "simulate", value_parser = clap::value_parser!(u64).range(1..))]
    pub capacity: Option<u64>,
}

impl TargetArgs {
    /// The replay's [`Mode`]: `--simulate` is a simulated H200, or a simulated device of
    /// `--capacity` bytes (its largest allocation the H200's, at most the capacity);
    /// otherwise `--device`, else the current device.
    ///
    /// # Errors
    /// The device does not exist or there is no OpenCL runtime
    /// ([`crate::resolve_device`]).
    pub fn mode(&self) -> anyhow::Result<Mode> {
        Ok(if self.simulate {
            match self.capacity {
                Some(capacity) => Mode::Simulate {
                    capacity,
                    max_alloc: capacity.min(H200_MAX_ALLOC),
                },
                None => Mode::H200,
            }
        } else {
            Mode::Device(crate::resolve_device(self.device)?)
        })
    }
}

/// The files `xpu replay` writes after the replay; their directories are checked before it.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputFiles {
    /// Draw allocated and reserved bytes over the trace's events into this SVG file (with
    /// `--compare`, PyTorch's peak reserved bytes as reference lines). Its directory must
    /// exist.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Record the allocator's history during the replay and write a snapshot with it at the
    /// end: a pickle for PyTorch's memory visualizer when the name ends in `.pickle` or
    /// `.pkl`, JSON otherwise. Its directory must exist.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
}

impl OutputFiles {
    /// Checks, before the work starts, that each file given can be created: its directory
    /// exists ([`crate::check_parent`]).
    ///
    /// # Errors
    /// A missing directory, naming the option.
    pub fn check_dirs(&self) -> anyhow::Result<()> {
        for (option, path) in [("--plot", &self.plot), ("--snapshot", &self.snapshot)] {
            if let Some(path) = path {
                crate::check_parent(option, path)?;
            }
        }
        Ok(())
    }

    /// What the replay records for these files (the per-event series for the plot, the
    /// history for the snapshot), with a progress bar when `progress`.
    #[must_use]
    pub fn record(&self, progress: bool) -> Record {
        Record {
            series: self.plot.is_some(),
            progress,
            history: self.snapshot.is_some(),
        }
    }
}

/// Where a replay allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Real OpenCL memory of this device.
    Device(usize),
    /// A simulated device. Bytes.
    Simulate {
        /// Capacity.
        capacity: u64,
        /// Largest single allocation.
        max_alloc: u64,
    },
}

impl Mode {
    /// A simulated H200 (the device the shared traces were recorded on).
    pub const H200: Mode = Mode::Simulate {
        capacity: H200_CAPACITY,
        max_alloc: H200_MAX_ALLOC,
    };
}

/// A finished replay: the figures, the per-event series (when asked) and, for a device
/// replay, the allocator it used (for `memory_summary`).
pub struct Replayed {
    /// Report and series.
    pub outcome: ReplayOutcome,
    /// The device allocator of a [`Mode::Device`] replay.
    pub core: Option<DeviceCore>,
}

/// A fresh caching allocator over real OpenCL memory of `device` (not the process's
/// shared one, so the figures are the replay's alone) and the replay target over it: trace
/// stream 0 is the thread's current stream of the device, every other trace stream a pool
/// stream.
fn device_target(
    device: usize,
    config: Option<&str>,
) -> anyhow::Result<(DeviceCore, ReplayTarget)> {
    let config = config
        .map(AllocConfig::parse)
        .transpose()?
        .unwrap_or_default();
    let allocator = DeviceAllocator::new(device, config)?;
    let core = allocator.core().clone();
    let props = xpu_device::get_device_properties(device)?;
    let main = xpu_stream::current_stream(device)?;
    let streams: StreamFactory = Arc::new(move |n| {
        let stream = if n == 0 {
            main
        } else {
            xpu_stream::get_stream_from_pool(xpu_stream::PRIORITY_NORMAL, device).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no pool stream for trace stream {n}; using the current stream");
                main
            })
        };
        ClStream::shared(stream)
    });
    let name = format!(
        "device {device}: {} ({}), OpenCL {:?} memory",
        props.name,
        props.platform_name,
        allocator.memory_kind()
    );
    Ok((
        core.clone(),
        ReplayTarget::Core {
            core,
            name,
            streams,
        },
    ))
}

/// The trace a replay reads.
#[derive(Debug, Clone, Copy)]
pub enum TraceSource<'a> {
    /// A file (gzip or plain).
    File(&'a Path),
    /// Bytes built into the binary (the demo's trace), under a file name.
    Embedded {
        /// File name, for the report and PyTorch's figures.
        name: &'a str,
        /// The file's bytes (gzip or plain).
        bytes: &'static [u8],
    },
}

impl TraceSource<'_> {
    /// How the trace is named in messages: the path, or the name with "(built in)".
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            TraceSource::File(p) => p.display().to_string(),
            TraceSource::Embedded { name, .. } => format!("{name} (built into xpu)"),
        }
    }

    /// PyTorch's figures for the trace (see [`compare::reference_for`]).
    #[must_use]
    pub fn reference(&self) -> Option<compare::Reference> {
        match self {
            TraceSource::File(p) => compare::reference_for(p),
            TraceSource::Embedded { name, .. } => compare::from_table(name),
        }
    }
}

/// What a replay records besides its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Allocated and reserved bytes after every event (for a plot).
    pub series: bool,
    /// A progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
    /// The allocator's history, and a snapshot with it at the end.
    pub history: bool,
}

/// Replays the trace `source` in `mode`, recording what `record` asks for.
///
/// # Errors
/// An unreadable or malformed trace (the error names the line number and the line), a bad
/// configuration, or a device failure.
pub fn replay_file(
    source: TraceSource<'_>,
    mode: Mode,
    config: Option<&str>,
    record: Record,
) -> anyhow::Result<Replayed> {
    let (target, core) = match mode {
        Mode::Simulate {
            capacity,
            max_alloc,
        } => (
            ReplayTarget::Simulate {
                capacity,
                max_alloc,
            },
            None,
        ),
        Mode::Device(d) => {
            let (core, target) = device_target(d, config)?;
            (target, Some(core))
        }
    };
    let bar = record.progress.then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("  replaying {bar:40} {pos}/{len} events ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let options = ReplayOptions {
        target,
        addresses: replay::SegmentAddresses::default(),
        config: config.map(str::to_owned),
        record_series: record.series,
        progress: bar.clone().map(|bar| -> replay::ProgressFn {
            Arc::new(move |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })
        }),
        history: record.history.then_some(usize::MAX),
    };
    let result = match source {
        TraceSource::File(path) => replay::run(path, &options),
        TraceSource::Embedded { name, bytes } => replay::run_reader(name, bytes, &options),
    }
    .with_context(|| format!("replaying {}", source.describe()));
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(Replayed {
        outcome: result?,
        core,
    })
}

/// The lines a replay did not act on, as a note for the summary: skipped actions by name,
/// frees of addresses with no live allocation, and the recorded moves (replayed and not).
fn notes(r: &ReplayReport) -> String {
    let mut out = String::new();
    if !r.skipped.is_empty() {
        let by_name: Vec<String> = r.skipped.iter().map(|(a, n)| format!("{a} {n}")).collect();
        out.push_str(&format!(
            "\n  skipped lines      {} ({})",
            r.skipped.values().sum::<u64>(),
            by_name.join(", ")
        ));
    }
    if r.unmatched_frees > 0 {
        out.push_str(&format!(
            "\n  unmatched frees    {} (free_requested of an address with no live allocation: \
             ignored)",
            r.unmatched_frees
        ));
    }
    if r.live_address_reused > 0 {
        out.push_str(&format!(
            "\n  reused addresses   {} (alloc at an address still live: the earlier allocation \
             freed first)",
            r.live_address_reused
        ));
    }
    if r.moves > 0 || r.unmatched_moves > 0 {
        out.push_str(&format!(
            "\n  recorded moves     {} (move_from/move_to pairs: the block renamed, no call)",
            r.moves
        ));
    }
    if r.unmatched_moves > 0 {
        out.push_str(&format!(
            "\n  unmatched moves    {} (move lines of no live allocation or without their \
             pair: ignored)",
            r.unmatched_moves
        ));
    }
    out
}

/// The report as a few readable lines.
#[must_use]
pub fn render_summary(r: &ReplayReport) -> String {
    let bytes = |b: u64| format!("{:>10} ({b} B)", format_bytes(b));
    format!(
        "replay of {} ({} mode) on {}\n  \
         events             {} ({} allocations){}\n  \
         peak requested     {}\n  \
         peak allocated     {}\n  \
         peak reserved      {}\n  \
         reserved/requested {:.3}\n  \
         segments           {} allocated, {} freed{}\n  \
         alloc retries      {}, OOMs {}\n  \
         allocator calls    alloc mean {:.0} ns (p99 {:.0} ns), free mean {:.0} ns\n  \
         wall time          {:.3} s\n",
        r.trace,
        r.mode,
        r.device,
        r.events,
        r.allocs,
        notes(r),
        bytes(r.peak_requested),
        bytes(r.peak_allocated),
        bytes(r.peak_reserved),
        r.reserved_over_requested,
        r.segment_allocs,
        r.segment_frees,
        r.segments_at_recorded_address
            .map(|n| format!(" ({n} at the recording's address)"))
            .unwrap_or_default(),
        r.alloc_retries,
        r.ooms,
        r.alloc_ns_mean,
        r.alloc_ns_p99,
        r.free_ns_mean,
        r.wall_s,
    )
}

/// Runs `xpu replay`.
///
/// # Errors
/// See [`replay_file`]; a failed plot or write.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    args.files.check_dirs()?;
    let config = args.alloc.replay_text()?;
    let mode = args.target.mode()?;
    let record = args.files.record(matches!(mode, Mode::Device(_)));
    let source = TraceSource::File(&args.trace);
    let replayed = replay_file(source, mode, config.as_deref(), record)?;
    let report = &replayed.outcome.report;
    let reference = if args.compare {
        source.reference()
    } else {
        None
    };
    if let Some(path) = &args.files.plot {
        crate::plot::replay_svg(
            path,
            &replayed.outcome.series,
            &format!("{} ({})", report.trace, report.mode),
            &compare::reference_lines(reference.as_ref()),
        )?;
        crate::print_err(&format!("plot written to {}", path.display()));
    }
    if let (Some(path), Some(snapshot)) = (&args.files.snapshot, &replayed.outcome.snapshot) {
        snapshot
            .save(path)
            .with_context(|| format!("writing {}", path.display()))?;
        crate::print_err(&format!("snapshot written to {}", path.display()));
    }
    if args.json {
        let mut value = serde_json::to_value(report)?;
        if args.compare {
            value["pytorch"] = serde_json::to_value(&reference)?;
        }
        crate::print_out(&(serde_json::to_string(&value)? + "\n"))?;
    } else {
        crate::print_out(&render_summary(report))?;
        if args.compare {
            match &reference {
                Some(r) => crate::print_out(&compare::render(report, r))?,
                None => crate::print_out(
                    "compared with PyTorch: no summary.json beside the trace and no table entry\n",
                )?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
