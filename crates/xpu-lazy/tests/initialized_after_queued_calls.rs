//! `is_initialized` means what torch's flag means: false until `lazy_init` has finished, its
//! queued calls included (one process: one test, since initialization happens once).
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn is_initialized_stays_false_until_the_queued_calls_of_the_first_init_have_run() {
    // In a fresh process: finding a device here would enumerate outside `lazy_init`, which
    // (deliberately, see `is_initialized`) counts as initialized.
    common::scenario_test(
        "is_initialized_stays_false_until_the_queued_calls_of_the_first_init_have_run",
        "held-init",
        Duration::from_secs(60),
        "scenario-done",
        held_init,
    );
}

fn held_init() {
    assert!(!xpu_lazy::is_initialized(), "fresh process");
    // The hook: a queued call that says it runs, then holds the initialization until the test
    // lets it go. When it runs, the driver is initialized (enumeration came first).
    let held = common::hold_init();
    let done = Arc::clone(&held.finished);

    // Held inside the queued call: the driver is initialized (a child forked now would be a
    // bad fork), but the initialization has not finished, so the flag is false.
    assert!(xpu_device::fork::driver_initialized());
    let report = xpu_device::fork::fork_report(Duration::from_secs(20)).unwrap();
    assert!(
        report.in_bad_fork,
        "the fork rule holds during init: {report:?}"
    );
    let seen_while_held = xpu_lazy::is_initialized();
    assert_eq!(done.load(Ordering::SeqCst), 0);
    // Another thread reads the same.
    let other = std::thread::spawn(xpu_lazy::is_initialized).join().unwrap();
    println!("while the queued call holds init: is_initialized={seen_while_held} (other thread: {other})");

    held.release();
    assert!(
        !seen_while_held && !other,
        "is_initialized() was true while a queued call of the first initialization still ran"
    );
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert!(
        xpu_lazy::is_initialized(),
        "true once lazy_init has finished"
    );
    assert!(std::thread::spawn(xpu_lazy::is_initialized).join().unwrap());
    assert!(!xpu_lazy::is_in_bad_fork());
    println!("scenario-done");
}
