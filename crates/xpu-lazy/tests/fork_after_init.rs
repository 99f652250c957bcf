//! A child forked after the parent initialized the runtime is a bad fork that refuses the
//! driver at once and still knows the parent's device count; the parent is unaffected. (The
//! child runs xpu-device's fixed, async-signal-safe report: this crate's tests may not fork
//! themselves. `bad_fork_entry_points.rs` checks this crate's entry points in a bad fork.)
mod common;

use std::time::Duration;

#[test]
fn child_forked_after_init_is_a_bad_fork() {
    if common::scenario().is_some() {
        return;
    }
    if !common::have_device("fork_after_init") {
        return;
    }
    xpu_lazy::init().unwrap();
    assert!(xpu_lazy::is_initialized());
    let report = xpu_device::fork::fork_report(Duration::from_secs(20)).unwrap();
    assert_eq!(
        report,
        xpu_device::fork::ForkReport {
            in_bad_fork: true,
            devices_refused: true,
            device_count: xpu_device::device_count().min(63),
        }
    );
    // The parent is unaffected.
    assert!(xpu_lazy::is_initialized());
    assert!(!xpu_lazy::is_in_bad_fork());
    xpu_lazy::init().unwrap();
}
