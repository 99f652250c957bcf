//! What the examples share (not an example itself: a folder without `main.rs`).

use std::fmt::Display;
use std::process::ExitCode;

/// Runs an example's `body`: success exits 0; an error prints `error: {e}` on stderr and
/// exits with a failure status.
pub fn main<E: Display>(body: impl FnOnce() -> Result<(), E>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
