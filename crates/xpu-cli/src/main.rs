//! The `xpu` command: a thin dispatcher with one module per subcommand.
//!
//! Adding a subcommand: write `src/<name>.rs` with a `clap::Args` struct named `Args` and a
//! `pub fn run(args: &Args) -> anyhow::Result<ExitCode>`, declare the module below, add a
//! variant to [`Command`] and an arm to [`dispatch`]. Nothing else here needs to change.
//!
//! Commands: `info [--json]` (device table), `demo` (the main job; its trace is built into the
//! binary), `bench [--json] [--config]`, `replay TRACE [--json] [--plot] [--compare] [--snapshot]`
//! (`--compare` also shows PyTorch's expandable-segments figure),
//! `replay-all DIR... [--json] [--config]` (a folder's table: xpu vs PyTorch default vs expandable
//! segments, with the geometric mean; in JSON each row carries PyTorch's figures as the `pytorch`
//! object of `replay --compare --json`; with several folders, the figures over all their traces
//! too), `plot-scaling`. Every command checks its device through
//! `xpu_device::device` first (one wording for a bad `XPU_DEVICE_TYPE` or an out-of-range index),
//! honours `XPU_ALLOC_CONF` (or `--config`) and rejects an invalid one (one flattened clap group,
//! `alloc_conf::AllocConfArg`, owns `--config` and its parsing for `replay`, `replay-all` and
//! `bench`; `replay`'s `--device` / `--simulate` / `--capacity` and `--plot` / `--snapshot` are
//! groups too, turning into its `Mode` and `Record`), writes only into existing directories, and
//! ends quietly (exit 0) when stdout is closed. Replay rejects a line that is not
//! `ACTION ADDR SIZE STREAM`, an empty trace and one without `alloc`; other actions are skipped and
//! counted, frees of unknown addresses counted; a recorded move (`move_from` then `move_to`, from
//! a `relocation:merge` history) renames the live block. The benchmarks of `xpu bench` (with the figures of
//! the `xpu-bench` tool crate), the trace reader and replay engine behind `replay`, `replay-all`
//! and `demo` (the `xpu-replay` tool crate) and the two-stream pipeline of `xpu demo` live with
//! the tools, not in the libraries.
// Commented `unsafe {}` blocks calling xpu's `unsafe fn`s (kernel launches), each in an item
// marked `#[allow(unsafe_code)]`; nothing else unsafe (`cargo xtask check-layers`).
#![deny(unsafe_code)]
// Output goes through `print_out` / `print_err`, which survive a closed pipe.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod alloc_bench;
mod alloc_conf;
mod bench;
mod bench_typed;
mod demo;
mod event_bench;
mod host_bench;
mod info;
/// The example MLP that `demo` trains (example code shared with the facade's example
/// `mlp_training`: see its header).
#[allow(dead_code)]
#[path = "../../xpu/examples/support/mlp.rs"]
mod mlp;
mod pipeline;
mod plot;
mod replay;
mod replay_all;
mod scaling;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// xpu: a GPU runtime over OpenCL with torch.xpu's surface (devices, streams, events,
/// caching allocators).
#[derive(Debug, Parser)]
#[command(
    name = "xpu",
    version,
    about,
    long_about = None,
    after_help = "Environment:\n  \
        XPU_DEVICE_TYPE=gpu|cpu|all  which devices are visible (default: the GPUs, else the CPUs)\n  \
        XPU_PLATFORM=<substring>     only OpenCL platforms whose name contains it \
        (case-insensitive)\n  \
        XPU_ALLOC_CONF=<config>      allocator settings, PYTORCH_CUDA_ALLOC_CONF grammar \
        (`--config` overrides it)\n  \
        XPU_KERNEL_CACHE=<dir>|0     where built OpenCL programs are cached (0: off)\n  \
        RUST_LOG=<filter>            log filter for stderr (default: warn)\n\n\
        Device indices count the visible devices from 0; without `--device` a command uses \
        device 0."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands, one module each.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the device table (`--json` for a machine-readable list).
    Info(info::Args),
    /// Show the runtime at work on device 0: the device table, a real replay of a bundled
    /// allocator trace with its memory summary and plot, a two-stream event pipeline, and a
    /// small MLP trained by OpenCL kernels, checked against the CPU.
    Demo(demo::Args),
    /// Replay an allocator trace through the caching allocator (real device or simulated).
    Replay(replay::Args),
    /// Replay every trace of one or more folders (simulated H200) and print xpu's figures next
    /// to PyTorch's, with the geometric mean of peak reserved over the expandable-segments
    /// figure (per folder, and over all the folders' traces).
    ReplayAll(replay_all::Args),
    /// Measure the runtime's speed figures (`--json` for one object).
    Bench(bench::Args),
    /// Plot the allocator's thread scaling (ours vs PyTorch) from bench JSON files as SVG.
    PlotScaling(scaling::Args),
    /// Time device enumeration and context creation in a fresh process (used by `bench`).
    #[command(hide = true)]
    LazyInitProbe(bench::ProbeArgs),
}

/// Runs one subcommand.
fn dispatch(command: &Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Info(args) => info::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Replay(args) => replay::run(args),
        Command::ReplayAll(args) => replay_all::run(args),
        Command::Bench(args) => bench::run(args),
        Command::PlotScaling(args) => scaling::run(args),
        Command::LazyInitProbe(args) => bench::run_probe(args),
    }
}

/// The marker error of a closed stdout: the reader went away (`xpu demo | head -6`), so the
/// command stops quietly (exit code 0, nothing on stderr).
#[derive(Debug, thiserror::Error)]
#[error("stdout was closed")]
pub(crate) struct StdoutClosed;

/// Writes `text` to stdout. The only way the `xpu` command writes to stdout (never
/// `println!`, which panics on a closed pipe).
///
/// # Errors
/// [`StdoutClosed`] when stdout is a closed pipe (`xpu info | head -1`): the caller
/// propagates it with `?` and [`main`] ends the command quietly; any other write failure.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        other => Ok(other?),
    }
}

/// Writes `text` and a newline to stderr, ignoring failures (a closed stderr must not turn a
/// message into a panic, as `eprintln!` does).
pub(crate) fn print_err(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Checks before the work starts that the file `path` (named by `option`) can be created:
/// its directory exists (none is created).
///
/// # Errors
/// The directory does not exist or is not a directory.
pub(crate) fn check_parent(option: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    anyhow::ensure!(
        dir.is_dir(),
        "{option} {}: the directory {} does not exist (create it first)",
        path.display(),
        dir.display()
    );
    Ok(())
}

/// The device a command runs on: `requested`, else the thread's current device, checked
/// against the runtime first, so every command reports the same causes with the same words:
/// the discovery error (no OpenCL runtime, a bad `XPU_DEVICE_TYPE`, no matching device) or
/// an out-of-range index ("device 9 is out of range: 2 device(s) available").
///
/// # Errors
/// The discovery error or the out-of-range index, as `xpu_device::device` gives them.
pub(crate) fn resolve_device(requested: Option<usize>) -> anyhow::Result<usize> {
    let index = requested.unwrap_or_else(xpu_device::current_device);
    xpu_device::device(index)?;
    Ok(index)
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings), coloured only when stderr is
/// a terminal.
fn init_tracing() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match dispatch(&cli.command) {
        Ok(code) => code,
        Err(e) if e.chain().any(|c| c.is::<StdoutClosed>()) => ExitCode::SUCCESS,
        Err(e) => {
            print_err(&format!("xpu: error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_info_json_and_demo() {
        let cli = Cli::try_parse_from(["xpu", "info", "--json"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Info(info::Args { json: true })
        ));
        let cli = Cli::try_parse_from(["xpu", "info"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Info(info::Args { json: false })
        ));
        let cli = Cli::try_parse_from(["xpu", "demo"]).unwrap();
        assert!(matches!(cli.command, Command::Demo(_)));
        assert!(Cli::try_parse_from(["xpu", "nope"]).is_err());
        assert!(Cli::try_parse_from(["xpu"]).is_err());
    }

    /// `xpu replay`'s target options keep their rules (`--device` conflicts with `--simulate`,
    /// `--capacity` requires it) and turn into the replay's mode; `--config` is the same
    /// option in `replay`, `replay-all` and `bench`.
    #[test]
    fn parses_the_replay_target_and_the_shared_config_option() {
        let replay = |extra: &[&str]| {
            let args = ["xpu", "replay", "t.trace"].iter().chain(extra);
            match Cli::try_parse_from(args).map(|c| c.command) {
                Ok(Command::Replay(args)) => Ok(args),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.kind()),
            }
        };
        let mode = |extra: &[&str]| replay(extra).unwrap().target.mode().unwrap();
        assert_eq!(mode(&["--simulate"]), replay::Mode::H200);
        assert_eq!(
            mode(&["--simulate", "--capacity", "1000"]),
            replay::Mode::Simulate {
                capacity: 1000,
                max_alloc: 1000
            }
        );
        assert_eq!(
            replay(&["--device", "0", "--simulate"]).unwrap_err(),
            clap::error::ErrorKind::ArgumentConflict
        );
        assert_eq!(
            replay(&["--capacity", "1000"]).unwrap_err(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        let args = replay(&["--simulate", "--plot", "p.svg", "--snapshot", "s.pkl"]).unwrap();
        assert_eq!(
            args.files.record(false),
            replay::Record {
                series: true,
                progress: false,
                history: true
            }
        );

        let config = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().command {
            Command::Replay(args) => args.alloc,
            Command::ReplayAll(args) => args.alloc,
            Command::Bench(args) => args.alloc,
            other => panic!("{other:?}"),
        };
        for argv in [
            &[
                "xpu",
                "replay",
                "t.trace",
                "--config",
                "max_split_size_mb:128",
            ][..],
            &[
                "xpu",
                "replay-all",
                "dir",
                "--config",
                "max_split_size_mb:128",
            ],
            &["xpu", "bench", "--config", "max_split_size_mb:128"],
        ] {
            let (text, _) = config(argv).alloc_config().unwrap();
            assert_eq!(text, "max_split_size_mb:128", "{argv:?}");
            let bad = [&argv[..argv.len() - 1], &["nope:1"]].concat();
            let e = config(&bad).alloc_config().unwrap_err();
            assert_eq!(e.to_string(), "invalid --config 'nope:1'", "{argv:?}");
        }
    }
}
