//! `xpu demo` (run by `cargo xtask demo`): the runtime at work on real input.
//!
//! Stages, in order; each later issue adds its own stage as a function here and a call in
//! [`run`]:
//! 1. the device table (now);
//! 2. a real replay of a bundled allocator trace on the default device (observability issue);
//! 3. a two-stream pipeline with event timings (streams and events issue).

use std::process::ExitCode;

/// Options of `xpu demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {}

/// Runs the demo stages in order and stops at the first failing one.
///
/// # Errors
/// A stage's failure.
pub fn run(_args: &Args) -> anyhow::Result<ExitCode> {
    crate::print_out("== xpu demo: devices\n")?;
    if !crate::info::print_table()? {
        return Ok(ExitCode::FAILURE);
    }
    crate::print_out(
        "\n== coming next: a trace replay on the device (caching allocator) and a two-stream\n   \
         event pipeline; later stages of the demo add them here.\n",
    )?;
    Ok(ExitCode::SUCCESS)
}
