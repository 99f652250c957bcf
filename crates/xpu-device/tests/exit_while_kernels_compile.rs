//! Exit (`backend::at_exit`) while PoCL still compiles kernels: a process that returns, or calls
//! `exit` on another thread, with kernels to compile exits cleanly.
//!
//! Review h33 of ff4e5a4 (`backend::at_exit`): processes that exit while PoCL still compiles
//! a kernel. Each scenario runs in a child process with an empty PoCL kernel cache of its own
//! (`POCL_CACHE_DIR`): with the kernels cached, nothing compiles at exit and no scenario can
//! fail.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).
mod common;

use std::sync::mpsc;

use xpu_device::backend::{Buffer, CommandQueue, Kernel, MemFlags, Program};
use xpu_device::Device;

/// Names the scenario a child process runs ([`child_scenario`]).
const CHILD: &str = "XPU_H33_EXIT_CHILD";

/// `n` distinct kernels `k0`..`k{n-1}` (each `out[i] = f(i)`), distinct for each `salt`: each
/// is compiled by PoCL's worker when it first runs.
fn kernels_source(n: usize, salt: u32) -> String {
    (0..n)
        .map(|i| {
            format!(
                "__kernel void k{i}(__global float *out) {{
                    size_t g = get_global_id(0);
                    float x = (float)g * {salt}.0f;
                    for (int j = 0; j < {r}; j++)
                        x = sin(x) * {c}.5f + exp(x * 0.001f) - cos(x + {i}.0f);
                    out[g] = x;
                }}\n",
                r = 3 + i % 5,
                c = i + 1
            )
        })
        .collect()
}

/// Builds [`kernels_source`]`(n, salt)` and enqueues each kernel once on `q` (flushed),
/// sending on `first` once the first is enqueued.
fn launch_kernels(dev: &Device, q: &CommandQueue, n: usize, salt: u32, first: &mpsc::Sender<()>) {
    let ctx = dev.context().unwrap();
    let program = Program::build(ctx, dev.id(), &kernels_source(n, salt)).unwrap();
    let out = Buffer::new(ctx, 256 * 4, MemFlags::default()).unwrap();
    for i in 0..n {
        let mut k = Kernel::new(&program, &format!("k{i}")).unwrap();
        k.set_arg_buffer(0, &out).unwrap();
        // SAFETY: 256 work-items each write one float of `out` (256 floats); nothing else
        // borrows `out`, which the queue's commands keep alive.
        drop(unsafe { q.enqueue_kernel(&k, &[256], None, &[]) }.unwrap());
        q.flush().unwrap();
        if i == 0 {
            let _ = first.send(());
        }
    }
}

/// The child processes' scenarios. Does nothing outside a child.
#[test]
fn child_scenario() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let dev = xpu_device::device(0).unwrap();
    match scenario.as_str() {
        // A thread that never touched a device (a signal handler's, a watchdog's) ends the
        // process with `std::process::exit` while the main thread's kernels compile.
        "exit_from_another_thread" => {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                rx.recv().unwrap();
                std::process::exit(0);
            });
            let q = common::queue(dev);
            launch_kernels(dev, &q, 40, 1, &tx);
            q.finish().unwrap();
            // `exit` runs the exit handlers while this thread waits in `finish` (or parks
            // at its next enqueue): it never gets here.
            std::process::exit(3);
        }
        // Threads (one per device) enqueue fresh kernels faster than PoCL compiles and runs
        // them, never waiting; `main` returns once each has enqueued one round.
        "return_with_a_backlog" => {
            let (tx, rx) = mpsc::channel();
            for t in 0..2u32 {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let dev = xpu_device::device(t as usize % xpu_device::device_count()).unwrap();
                    let q = common::queue(dev);
                    for round in 0.. {
                        launch_kernels(dev, &q, 8, 100 + t * 1000 + round, &tx);
                    }
                });
            }
            rx.recv().unwrap();
            rx.recv().unwrap();
        }
        // A thread asks for a program's binary (`CL_PROGRAM_BINARIES`: PoCL generates the
        // kernels' code in the calling thread, about 0.1 s a kernel here) when `main` returns.
        "return_while_a_thread_takes_a_binary" => {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let ctx = dev.context().unwrap();
                // A queue: the exit drain is registered.
                let _q = common::queue(dev);
                for round in 0.. {
                    let program = Program::build(ctx, dev.id(), &kernels_source(4, 7 + round));
                    let _ = tx.send(());
                    let _ = program.unwrap().binary().unwrap();
                }
            });
            rx.recv().unwrap();
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Runs `scenario` in `runs` child processes, each with an empty kernel cache of its own;
/// returns a line for each that did not exit with status 0.
fn failed_children(scenario: &str, runs: usize) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for run in 0..runs {
        let cache = std::env::temp_dir().join(format!(
            "xpu-h33-pocl-cache-{}-{scenario}-{run}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&cache);
        let mut command = std::process::Command::new(&exe);
        xpu_device::pass_icd_env(&mut command);
        let out = command
            .args(["child_scenario", "--exact", "--test-threads=1"])
            .env(CHILD, scenario)
            .env("POCL_CACHE_DIR", &cache)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&cache);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            failed.push(format!("{scenario} run {run}: {} ({tail})", out.status));
        }
    }
    failed
}

/// Defect (review h33): `MainThreadExit` only runs when the main thread calls `exit`. Ended
/// from another thread, the process runs the exit handlers in reverse order of registration,
/// and LLVM registers its statics' destructors during the compile in flight, after the drain
/// handler: they run first and the compile dies under them (gdb: SIGSEGV in
/// `llvm::vfs::FileSystem::exists` under `pocl_check_kernel_disk_cache`, on a PoCL pthread
/// worker). 7 of 7 children died with SIGSEGV (2026-12-05). The module docs name the gap ("a
/// process that exits from another thread has only the handlers' order"); no hook runs on
/// an arbitrary thread's `exit` before the handlers, so there is no small fix.
#[test]
#[ignore = "defect found by review h33, not fixed: std::process::exit on a thread other than main while a kernel compiles dies (SIGSEGV in LLVM under a PoCL worker) in 7 of 7 cold-cache children; only the main thread's exit drains before LLVM's late-registered destructors"]
fn a_process_ended_by_exit_on_another_thread_while_a_kernel_compiles_exits_cleanly() {
    if !common::have_devices(1) {
        return;
    }
    let failed = failed_children("exit_from_another_thread", 4);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Defect (review h33): the exit drains were bounded (`DRAIN_LIMIT`, 2 s, twice: the main
/// thread's drain, then the handler's); when the queues held more work than that, the exit
/// went on to LLVM's destructors with PoCL's workers still compiling the queued kernels (an
/// instrumented run: both drains returned false after 2 s each although the other threads
/// were parked within 0.3 s). 4 of 22 children died with SIGSEGV (2026-12-05); the others
/// spent the full 4 s in the drains. Fixed: the exit drains wait while the process's other
/// threads make progress (`drain_while_busy`, up to `DRAIN_CAP`).
#[test]
fn a_process_that_returns_with_a_backlog_of_kernels_to_compile_exits_cleanly() {
    if !common::have_devices(1) {
        return;
    }
    let failed = failed_children("return_with_a_backlog", 8);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Defect (review h33): `Program::binary` (`clGetProgramInfo(CL_PROGRAM_BINARIES)`) is no
/// `DriverEntry`, but PoCL generates every kernel's code in the calling thread for it: the
/// exit handler neither waited for it nor parked the thread, and LLVM's destructors ran under
/// it: 3 of 6 children died (SIGABRT "Failed to create kernel compiler pass", or SIGSEGV,
/// 2026-12-05). Fixed: `binary` is a `DriverEntry` (18 of 18 pass).
#[test]
fn a_process_that_returns_while_a_thread_takes_a_program_binary_exits_cleanly() {
    if !common::have_devices(1) {
        return;
    }
    let failed = failed_children("return_while_a_thread_takes_a_binary", 6);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
