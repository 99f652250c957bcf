//! A process that exits while a device still runs its commands must exit cleanly. On PoCL it
//! did not: a process that enqueued work and returned from `main` without synchronizing died
//! in the shared libraries' teardown while a PoCL worker still compiled the kernel (SIGABRT in
//! 4 of 40 runs with warm kernel caches, SIGSEGV in 1 of 10 with cold ones, and 7 or more of
//! 40 runs of this test, 2026-12-04). xpu-device now drains its queues from an exit handler
//! (`xpu_device::backend::at_exit`), and every run exits cleanly.
//!
//! Half the runs get an empty PoCL kernel cache (`POCL_CACHE_DIR`), so that the kernel is
//! compiled while the process exits: all 10 such runs died (SIGSEGV, SIGILL or SIGABRT in
//! LLVM's code generator) until the drain also ran from the main thread's thread-local
//! destructors, before any exit handler (2026-12-05); with warm caches they had passed.

use burn_tensor::Tensor;
use xpu_burn::{Xpu, XpuDevice};

/// Set in the child processes of [`a_process_that_exits_with_work_in_flight_exits_cleanly`].
const CHILD: &str = "XPU_EXIT_WITH_WORK_IN_FLIGHT_CHILD";

/// The child: enqueues work on the last device and returns without synchronizing, so the
/// test binary exits with that work in flight. Does nothing outside a child.
#[test]
fn child_enqueues_and_returns() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let device = XpuDevice::new(xpu::device_count().saturating_sub(1));
    let t = Tensor::<Xpu, 4>::ones([3, 2, 3, 3], &device);
    let _ = t * 2.0;
}

#[test]
fn a_process_that_exits_with_work_in_flight_exits_cleanly() {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for run in 0..20 {
        let mut child = std::process::Command::new(&exe);
        child
            .args(["child_enqueues_and_returns", "--exact", "--test-threads=1"])
            .env(CHILD, "1");
        // Even runs: an empty kernel cache of their own.
        let cache = std::env::temp_dir().join(format!(
            "xpu-exit-in-flight-pocl-cache-{}-{run}",
            std::process::id()
        ));
        if run % 2 == 0 {
            let _ = std::fs::remove_dir_all(&cache);
            child.env("POCL_CACHE_DIR", &cache);
        }
        let out = child.output().unwrap();
        let _ = std::fs::remove_dir_all(&cache);
        if !out.status.success() {
            failed.push((run, out.status));
        }
    }
    assert!(
        failed.is_empty(),
        "runs that did not exit cleanly: {failed:?}"
    );
}
