//! Fork, for real: a child forked before enumeration initializes; a child forked after it is a
//! bad fork that refuses the driver at once and still answers the parent's device count; the
//! parent's `driver_initialized` flag agrees with the child. One test: the order matters.
use std::time::Duration;

use xpu_device::fork::{self, ChildExit};

const BOUND: Duration = Duration::from_secs(20);

#[test]
fn enumeration_is_what_makes_a_forked_child_a_bad_fork() {
    assert!(!fork::driver_touched(), "nothing touched the driver yet");
    assert!(!fork::driver_initialized());
    let before = fork::fork_report(BOUND).unwrap();
    assert!(
        !before.in_bad_fork,
        "a child forked before enumeration is clean"
    );

    // SAFETY: the parent has not loaded the OpenCL driver, so the child loads its own copy;
    // it touches no lock or state of the parent's other threads (the test harness's).
    let child = unsafe {
        fork::run_in_forked_child(
            || match xpu_device::devices() {
                Ok(d) if !d.is_empty() && !fork::is_in_bad_fork() => 0,
                Ok(_) => 2,
                Err(_) => 3,
            },
            BOUND,
        )
    }
    .unwrap();
    let n = xpu_device::device_count();
    if n == 0 {
        assert!(
            !xpu_device::require_device(),
            "XPU_REQUIRE_DEVICE=1 but no device"
        );
        eprintln!("fork: skipped, no OpenCL device");
        return;
    }
    assert_eq!(
        child,
        ChildExit::Exited(0),
        "a child forked before enumeration initializes normally"
    );

    // `device_count` alone initialized the driver: the flag says so, and the child agrees.
    assert!(fork::driver_touched());
    assert!(fork::driver_initialized());
    let after = fork::fork_report(BOUND).unwrap();
    assert_eq!(
        after,
        fork::ForkReport {
            in_bad_fork: true,
            devices_refused: true,
            device_count: n.min(63),
        },
        "bad fork child: devices() refuses, device_count() is the parent's, not 0"
    );
    assert!(!fork::is_in_bad_fork(), "the parent is unaffected");
    assert!(xpu_device::devices().is_ok());
}

#[test]
fn a_hanging_child_is_killed_at_the_bound() {
    // SAFETY: the child only loops on a local counter (no call at all), which any forked child
    // may do.
    let exit = unsafe {
        fork::run_in_forked_child(
            || {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            },
            Duration::from_millis(200),
        )
    }
    .unwrap();
    assert_eq!(exit, ChildExit::TimedOut);
}
