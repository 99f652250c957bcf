//! The `xpu` command: a thin dispatcher with one module per subcommand.
//!
//! Adding a subcommand: write `src/<name>.rs` with a `clap::Args` struct named `Args` and a
//! `pub fn run(args: &Args) -> anyhow::Result<ExitCode>`, declare the module below, add a
//! variant to [`Command`] and an arm to [`dispatch`]. Nothing else here needs to change.
#![forbid(unsafe_code)]

mod bench;
mod bench_typed;
mod demo;
mod info;
mod plot;
mod replay;
mod scaling;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// xpu: a GPU runtime over OpenCL with torch.xpu's surface (devices, streams, events,
/// caching allocators).
#[derive(Debug, Parser)]
#[command(name = "xpu", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands, one module each.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the device table (`--json` for a machine-readable list).
    Info(info::Args),
    /// Show the runtime at work: the device table, a real replay of a bundled allocator
    /// trace with its memory summary and plot, and a two-stream event pipeline.
    Demo(demo::Args),
    /// Replay an allocator trace through the caching allocator (real device or simulated).
    Replay(replay::Args),
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
        Command::Bench(args) => bench::run(args),
        Command::PlotScaling(args) => scaling::run(args),
        Command::LazyInitProbe(args) => bench::run_probe(args),
    }
}

/// Writes `text` to stdout. A closed pipe (`xpu info | head -1`) ends the output quietly
/// instead of panicking as `println!` does.
///
/// # Errors
/// Any other write failure.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match dispatch(&cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xpu: error: {e:#}");
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
}
