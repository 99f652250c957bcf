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
use xpu_alloc::replay::{
    self, ReplayOptions, ReplayOutcome, ReplayReport, ReplayTarget, StreamFactory, H200_CAPACITY,
    H200_MAX_ALLOC,
};
use xpu_alloc::{AllocConfig, ClStream, DeviceAllocator, DeviceCore};

use crate::info::format_bytes;

/// Options of `xpu replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Trace file (`ACTION ADDR SIZE STREAM` lines, gzip or plain).
    pub trace: PathBuf,
    /// Replay on this device with real OpenCL memory (default: the current device).
    #[arg(long, conflicts_with = "simulate")]
    pub device: Option<usize>,
    /// Replay on a simulated device (no device memory): an H200's capacity (139.8 GiB,
    /// largest allocation 34.95 GiB) unless `--capacity` is given.
    #[arg(long)]
    pub simulate: bool,
    /// Capacity in bytes of the simulated device.
    #[arg(long, requires = "simulate")]
    pub capacity: Option<u64>,
    /// Allocator configuration (`XPU_ALLOC_CONF` grammar, e.g. `max_split_size_mb:128`);
    /// default: the `XPU_ALLOC_CONF` environment variable.
    #[arg(long)]
    pub config: Option<String>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Draw allocated and reserved bytes over the event index into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Show PyTorch's figures for the trace next to ours.
    #[arg(long)]
    pub compare: bool,
    /// Record the allocator's history during the replay and write a snapshot with it at the
    /// end: a pickle for PyTorch's memory visualizer when the name ends in `.pickle` or
    /// `.pkl`, JSON otherwise.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
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

/// Replays the trace at `path` in `mode`, recording what `record` asks for.
///
/// # Errors
/// An unreadable or malformed trace (the error names the line number and the line), a bad
/// configuration, or a device failure.
pub fn replay_file(
    path: &Path,
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
    let result =
        replay::run(path, &options).with_context(|| format!("replaying {}", path.display()));
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(Replayed {
        outcome: result?,
        core,
    })
}

/// The report as a few readable lines.
#[must_use]
pub fn render_summary(r: &ReplayReport) -> String {
    let bytes = |b: u64| format!("{:>10} ({b} B)", format_bytes(b));
    format!(
        "replay of {} ({} mode) on {}\n  \
         events             {} ({} allocations)\n  \
         peak requested     {}\n  \
         peak allocated     {}\n  \
         peak reserved      {}\n  \
         reserved/requested {:.3}\n  \
         segments           {} allocated, {} freed\n  \
         alloc retries      {}, OOMs {}\n  \
         allocator calls    alloc mean {:.0} ns (p99 {:.0} ns), free mean {:.0} ns\n  \
         wall time          {:.3} s\n",
        r.trace,
        r.mode,
        r.device,
        r.events,
        r.allocs,
        bytes(r.peak_requested),
        bytes(r.peak_allocated),
        bytes(r.peak_reserved),
        r.reserved_over_requested,
        r.segment_allocs,
        r.segment_frees,
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
    let mode = if args.simulate {
        match args.capacity {
            Some(capacity) => Mode::Simulate {
                capacity,
                max_alloc: capacity.min(H200_MAX_ALLOC),
            },
            None => Mode::H200,
        }
    } else {
        Mode::Device(args.device.unwrap_or_else(xpu_device::current_device))
    };
    let record = Record {
        series: args.plot.is_some(),
        progress: matches!(mode, Mode::Device(_)),
        history: args.snapshot.is_some(),
    };
    // `--config` wins; otherwise the allocator's environment variable, as in a real program.
    let env_config = std::env::var(xpu_alloc::CONFIG_ENV).ok();
    let config = args.config.as_deref().or(env_config.as_deref());
    let replayed = replay_file(&args.trace, mode, config, record)?;
    let report = &replayed.outcome.report;
    let reference = if args.compare {
        compare::reference_for(&args.trace)
    } else {
        None
    };
    if let Some(path) = &args.plot {
        crate::plot::replay_svg(
            path,
            &replayed.outcome.series,
            &format!("{} ({})", report.trace, report.mode),
        )?;
        eprintln!("plot written to {}", path.display());
    }
    if let (Some(path), Some(snapshot)) = (&args.snapshot, &replayed.outcome.snapshot) {
        snapshot
            .save(path)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("snapshot written to {}", path.display());
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
