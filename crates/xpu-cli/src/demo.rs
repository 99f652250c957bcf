//! `xpu demo` (run by `cargo xtask demo`): the runtime at work on real input.
//!
//! Stages, in order, each announced as it starts:
//! 1. the device table;
//! 2. a real replay of the bundled allocator trace `resnet18_train_small.trace.gz` on the
//!    default device with real OpenCL memory (progress bar), its summary next to the
//!    simulated replay's peaks and PyTorch's, and the allocator's `memory_summary`;
//! 3. the two-stream pipeline with event timings;
//! 4. an SVG plot of the replay and a snapshot pickle for PyTorch's memory visualizer,
//!    written to paths it prints (with stage 2);
//! 5. a two-layer MLP trained for 50 minibatch SGD steps by OpenCL C kernels (`crate::mlp`, the example model),
//!    its loss curve (every 10 steps) checked step by step against the CPU reference, and
//!    the caching allocator's summary after it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;

use crate::alloc_conf::AllocConfArg;
use crate::info::format_bytes;
use crate::replay::{self, compare, Mode, Record, TraceSource};

/// File name of the bundled trace.
const TRACE: &str = "resnet18_train_small.trace.gz";

/// The bundled trace, built into the binary (13 KB), so the demo runs wherever the binary
/// is, with no source tree.
const TRACE_BYTES: &[u8] = include_bytes!("../../../data/traces/resnet18_train_small.trace.gz");

/// Options of `xpu demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Smaller pipeline buffer (for CI); the replay is the same.
    #[arg(long)]
    pub quick: bool,
    /// The trace to replay (default: `resnet18_train_small.trace.gz`, built into xpu).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Directory for the plot and the snapshot, created when missing (default: `xpu-demo`
    /// in the system's temporary directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Where the plot goes (created when missing: it is the demo's own output directory).
fn out_dir(args: &Args) -> anyhow::Result<PathBuf> {
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("xpu-demo"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn say(text: &str) -> anyhow::Result<()> {
    crate::print_out(text)
}

/// The configuration of a simulated replay that mirrors device `device`'s allocator:
/// `config`, plus `split_segments:False` where the device's allocator does not split
/// segments (NVIDIA's OpenCL, `xpu_alloc::splits_segments_on`) and `config` leaves it unset.
///
/// # Errors
/// A bad configuration, a bad device index or no OpenCL runtime.
pub(crate) fn mirrored_config(
    device: usize,
    config: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let given = match config {
        Some(c) => xpu_alloc::AllocConfig::parse(c)?.split_segments.is_some(),
        None => false,
    };
    if given || xpu_alloc::device_splits_segments(device)? {
        return Ok(config.map(str::to_owned));
    }
    Ok(Some(match config {
        Some(c) if !c.trim().is_empty() => format!("{c},split_segments:False"),
        _ => "split_segments:False".to_owned(),
    }))
}

/// Stage 2 and 4: the real replay, the simulated one, PyTorch's figures, the summary and
/// the plot.
fn replay_stage(args: &Args, device: usize) -> anyhow::Result<bool> {
    let trace = match &args.trace {
        Some(t) => TraceSource::File(t),
        None => TraceSource::Embedded {
            name: TRACE,
            bytes: TRACE_BYTES,
        },
    };
    let out = out_dir(args)?;
    say(&format!(
        "\n== replay of {} on device {device} with real OpenCL memory (the caching allocator)\n",
        trace.describe()
    ))?;
    // The allocator's configuration comes from XPU_ALLOC_CONF, as in any program using xpu.
    let config = AllocConfArg::default().replay_text()?;
    let config = config.as_deref();
    let real = replay::replay_file(
        trace,
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
    let mirrored = mirrored_config(device, config)?;
    let sim = replay::replay_file(trace, Mode::H200, mirrored.as_deref(), Record::default())?;
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
    let reference = trace.reference();
    if let Some(reference) = &reference {
        say(&compare::render(r, reference))?;
    }
    if let Some(core) = &real.core {
        say(&format!(
            "\n== memory_summary of device {device} after the replay\n"
        ))?;
        say(&core.memory_summary(false))?;
    }
    let path = out.join("resnet18_replay.svg");
    crate::plot::replay_svg(
        &path,
        &real.outcome.series,
        &format!("{} on device {device} (real OpenCL memory)", r.trace),
        &crate::replay::compare::reference_lines(reference.as_ref()),
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
    let report = crate::pipeline::two_stream_pipeline(device, bytes)?;
    say(&format!("{report}\n"))?;
    Ok(report.mismatched_bytes == 0)
}

/// Steps of the demo's MLP training.
const MLP_STEPS: usize = 50;

/// Stage 5: the MLP trained on the device, its loss curve next to the CPU reference's, and
/// the allocator summary.
fn mlp_stage(device: usize) -> anyhow::Result<bool> {
    use crate::mlp::{compare_losses, CpuMlp, GpuMlp, MlpConfig};
    let config = MlpConfig {
        batch: 64,
        ..MlpConfig::default()
    };
    say(&format!(
        "\n== MLP {}-{}-{} trained with minibatch SGD ({} of {} samples a step) by OpenCL C \
         kernels ({MLP_STEPS} steps; each minibatch uploaded on a copy stream while the previous \
         step computes on another, ordered by events)\n",
        config.inputs, config.hidden, config.outputs, config.batch, config.samples
    ))?;
    let start = Instant::now();
    let gpu = GpuMlp::new(device, config)?.train(MLP_STEPS)?;
    let gpu_s = start.elapsed().as_secs_f64();
    let cpu = CpuMlp::new(config).train(MLP_STEPS);
    for (step, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        if step % 10 == 0 || step + 1 == MLP_STEPS {
            say(&format!(
                "  step {step:3}: loss {g:.6}   (CPU reference {c:.6})\n"
            ))?;
        }
    }
    let check = compare_losses(&gpu, &cpu, 1e-4);
    say(&format!(
        "  device {:.3} s (build included); every step's loss within 1e-4 of the CPU: {}\n",
        gpu_s,
        match &check {
            Ok(()) => "yes".to_owned(),
            Err(e) => format!("NO ({e})"),
        }
    ))?;
    say(&format!(
        "\n== memory_summary of device {device} after the training (the process's caching \
         allocator)\n"
    ))?;
    say(&xpu::memory_summary(Some(device), true)?)?;
    Ok(check.is_ok())
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
    let device = crate::resolve_device(None)?;
    let replay_ok = replay_stage(args, device)?;
    let pipeline_ok = pipeline_stage(args, device)?;
    let mlp_ok = mlp_stage(device)?;
    say(&format!(
        "\n== demo finished in {:.1} s\n",
        start.elapsed().as_secs_f64()
    ))?;
    Ok(if replay_ok && pipeline_ok && mlp_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
