//! `xpu demo` (run by `cargo xtask demo`): the runtime at work on real input.
//!
//! Stages, in order, each announced as it starts:
//! 1. the device table;
//! 2. a real replay of the bundled allocator trace `resnet18_train_small.trace.gz` on the
//!    default device with real OpenCL memory (progress bar), its summary next to the
//!    simulated replay's peaks and PyTorch's, and the allocator's `memory_summary`;
//! 3. the two-stream pipeline with event timings;
//! 4. an SVG plot of the replay and a snapshot pickle for PyTorch's memory visualizer,
//!    written to paths it prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;

use crate::info::format_bytes;
use crate::replay::{self, compare, Mode, Record};

/// File name of the bundled trace.
const TRACE: &str = "resnet18_train_small.trace.gz";

/// Options of `xpu demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Smaller pipeline buffer (for CI); the replay is the same.
    #[arg(long)]
    pub quick: bool,
    /// The trace to replay (default: the bundled `data/traces/resnet18_train_small.trace.gz`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Directory for the plot (default: `target/xpu-demo` of the repository, else a
    /// temporary directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The repository root this binary was built from.
fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The bundled trace: under `data/traces` of the working directory, of an ancestor of the
/// executable, or of the repository this binary was built from.
fn bundled_trace() -> anyhow::Result<PathBuf> {
    let rel = Path::new("data/traces").join(TRACE);
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    roots.push(repo_root());
    roots
        .iter()
        .map(|r| r.join(&rel))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "bundled trace {} not found (pass --trace PATH)",
                rel.display()
            )
        })
}

/// Where the plot goes.
fn out_dir(args: &Args) -> PathBuf {
    if let Some(dir) = &args.out {
        return dir.clone();
    }
    let root = repo_root();
    if root.join("Cargo.toml").is_file() {
        root.join("target/xpu-demo")
    } else {
        std::env::temp_dir().join("xpu-demo")
    }
}

fn say(text: &str) -> anyhow::Result<()> {
    crate::print_out(text)
}

/// Stage 2 and 4: the real replay, the simulated one, PyTorch's figures, the summary and
/// the plot.
fn replay_stage(args: &Args, device: usize) -> anyhow::Result<bool> {
    let trace = match &args.trace {
        Some(t) => t.clone(),
        None => bundled_trace()?,
    };
    say(&format!(
        "\n== replay of {} on device {device} with real OpenCL memory (the caching allocator)\n",
        trace.display()
    ))?;
    // The allocator's configuration comes from XPU_ALLOC_CONF, as in any program using xpu.
    let env_config = std::env::var(xpu_alloc::CONFIG_ENV).ok();
    let config = env_config.as_deref();
    let real = replay::replay_file(
        &trace,
        Mode::Device(device),
        config,
        Record {
            series: true,
            progress: true,
            history: true,
        },
    )?;
    let r = &real.outcome.report;
    say(&replay::render_summary(r))?;
    say("\n== the same trace on a simulated device (no memory touched)\n")?;
    let sim = replay::replay_file(&trace, Mode::H200, config, Record::default())?;
    let s = &sim.outcome.report;
    let same = (s.peak_allocated, s.peak_reserved, s.segment_allocs)
        == (r.peak_allocated, r.peak_reserved, r.segment_allocs);
    say(&format!(
        "  simulated: peak allocated {} ({} B), peak reserved {} ({} B), {} segments ({:.3} s)\n  \
         real and simulated peaks agree: {}\n",
        format_bytes(s.peak_allocated),
        s.peak_allocated,
        format_bytes(s.peak_reserved),
        s.peak_reserved,
        s.segment_allocs,
        s.wall_s,
        if same { "yes" } else { "NO" }
    ))?;
    if let Some(reference) = compare::reference_for(&trace) {
        say(&compare::render(r, &reference))?;
    }
    if let Some(core) = &real.core {
        say(&format!(
            "\n== memory_summary of device {device} after the replay\n"
        ))?;
        say(&core.memory_summary(false))?;
    }
    let path = out_dir(args).join("resnet18_replay.svg");
    crate::plot::replay_svg(
        &path,
        &real.outcome.series,
        &format!("{} on device {device} (real OpenCL memory)", r.trace),
    )?;
    say(&format!(
        "\n== plot of allocated and reserved bytes over the trace: {}\n",
        path.display()
    ))?;
    if let Some(snapshot) = &real.outcome.snapshot {
        let pickle = path.with_extension("pickle");
        snapshot.save(&pickle)?;
        say(&format!(
            "== snapshot with the replay's {} history entries, for PyTorch's memory visualizer \
             (pytorch.org/memory_viz): {}\n",
            snapshot.device_traces.iter().map(Vec::len).sum::<usize>(),
            pickle.display()
        ))?;
    }
    Ok(same)
}

/// Stage 3: stream A fills a buffer, stream B waits on A's event and copies it.
fn pipeline_stage(args: &Args, device: usize) -> anyhow::Result<bool> {
    let bytes = if args.quick { 1 << 20 } else { 64 << 20 };
    say("\n== two-stream pipeline (events order the streams; timings from profiling)\n")?;
    let report = xpu_event::demo::two_stream_pipeline(device, bytes)?;
    say(&format!("{report}\n"))?;
    Ok(report.mismatched_bytes == 0)
}

/// Runs the demo stages in order and stops at the first failing one.
///
/// # Errors
/// A stage's failure.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    say("== xpu demo: devices\n")?;
    if !crate::info::print_table()? {
        return Ok(ExitCode::FAILURE);
    }
    let device = xpu_device::current_device();
    let replay_ok = replay_stage(args, device)?;
    let pipeline_ok = pipeline_stage(args, device)?;
    say(&format!(
        "\n== demo finished in {:.1} s\n",
        start.elapsed().as_secs_f64()
    ))?;
    Ok(if replay_ok && pipeline_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
