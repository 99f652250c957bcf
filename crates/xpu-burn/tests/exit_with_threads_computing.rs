//! Exit while other threads compute: a process whose `main` returns while threads still run burn
//! ops exits cleanly (child processes of this binary; nextest runs it alone,
//! `.config/nextest.toml`).
//!
//! Review h30: a process whose `main` returns while other threads still run burn ops must
//! exit cleanly, as one that returns with work in flight does (`exit_with_work_in_flight.rs`).
//! On the reviewed commit (b598fe9) it did not: the exit handler drains the queues once, but
//! the threads keep enqueueing kernels (and building programs) while the shared libraries'
//! destructors run, and 5 of 20 children died (SIGSEGV, or SIGABRT with "LLVM ERROR:
//! Scalarization of scalable vectors is not supported." from a PoCL worker). A real
//! application returns from `main` with a data loader or metrics thread still computing.
//!
//! Each child gets an empty PoCL kernel cache (`POCL_CACHE_DIR`): with the kernels already
//! cached no compile runs and the children exited cleanly even before the fix; with an empty
//! one, 20 of 20 died (2026-12-05). Fixed in xpu-device's `at_exit`: other threads are parked
//! before the drain, and the exit handler is registered again after the first host waits, so
//! that it runs before the exit handlers LLVM registers during PoCL's first compiles.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use burn_tensor::Tensor;
use xpu_burn::{Xpu, XpuDevice};

/// Set in the child processes of [`a_process_that_returns_while_threads_compute_exits_cleanly`].
const CHILD: &str = "XPU_H30_EXIT_WITH_THREADS_CHILD";

/// The child: three threads compute on the devices for ever (new shapes, so new work-group
/// sizes for the driver to compile); `main` returns once each has finished a few rounds.
/// Does nothing outside a child.
#[test]
fn child_returns_while_threads_compute() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..3usize {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let d = XpuDevice::new(t % xpu::device_count());
            let mut i = 0usize;
            loop {
                let n = 1 + (i * 7919 + t * 104_729) % 5000;
                let a = Tensor::<Xpu, 2>::ones([n, 3], &d);
                let b = (a.clone().transpose().exp() + 1.0).sum_dim(1).cumsum(0);
                let _ = b.into_data();
                if i == 2 {
                    let _ = tx.send(());
                }
                i += 1;
            }
        });
    }
    for _ in 0..3 {
        rx.recv().unwrap();
    }
}

#[test]
fn a_process_that_returns_while_threads_compute_exits_cleanly() {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for run in 0..6 {
        // An empty kernel cache of its own: the child's kernels are compiled while it exits.
        let cache =
            std::env::temp_dir().join(format!("xpu-h30-pocl-cache-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let out = std::process::Command::new(&exe)
            .args([
                "child_returns_while_threads_compute",
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("POCL_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&cache);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            failed.push(format!("run {run}: {} ({tail})", out.status));
        }
    }
    assert!(
        failed.is_empty(),
        "runs that did not exit cleanly:\n{}",
        failed.join("\n")
    );
}
