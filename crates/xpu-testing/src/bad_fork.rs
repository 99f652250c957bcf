//! The bad-fork scenario tests of the layers: each reproduces a parent's state in a fresh
//! process, makes that process a bad fork (`xpu_device::fork::simulate_bad_fork`, the flag the
//! `pthread_atfork` child handler sets) and checks that every entry point refuses at once.

use std::fmt::Debug;
use std::time::Duration;

/// What a bad-fork scenario prints once every check passed ([`done`]).
pub const DONE: &str = "SCENARIO DONE";

/// How long a bad-fork scenario may run: an entry point that waits (for a lock, an event or
/// the driver) instead of refusing hangs, and the hang is caught as a failure.
pub const BOUND: Duration = Duration::from_secs(30);

/// A whole bad-fork test ([`scenario_test`](crate::scenario_test) for the running test):
/// `body` runs in a fresh process for `scenario`, bounded by [`BOUND`], and must end with
/// [`done`].
///
/// # Panics
/// As [`scenario_test`](crate::scenario_test).
pub fn bad_fork_test(scenario: &str, body: fn()) {
    crate::scenario_test(&crate::child::test_name(), scenario, BOUND, DONE, body);
}

/// Prints `what = result` and asserts that `result` is a layer's own `BadFork` error: the
/// unit variant of that name, as its derived `Debug` writes it (a wrapped one, such as
/// `Device(BadFork)`, is not the layer's own refusal).
///
/// # Panics
/// When `result` is anything else.
pub fn assert_bad_fork<T: Debug, E: Debug>(what: &str, result: Result<T, E>) {
    println!("{what} = {result:?}");
    assert!(
        matches!(&result, Err(e) if format!("{e:?}") == "BadFork"),
        "{what}: expected BadFork, got {result:?}"
    );
}

/// Prints [`DONE`]: the scenario's checks all passed.
pub fn done() {
    println!("{DONE}");
}
