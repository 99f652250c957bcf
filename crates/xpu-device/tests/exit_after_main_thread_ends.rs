//! Exit after the main thread ended alone (`pthread_exit`): another thread keeps using the device
//! and ends the process; the exit guard does not park it.
//!
//! Review h37 of 083da6a (`backend::at_exit`): the main thread's guard parks every other
//! thread's driver calls for the rest of the process, on the claim that glibc drops the main
//! thread's locals only in `exit`. Here the main thread ends alone (`pthread_exit`) after a
//! queue was wrapped (the guard armed), and another thread then builds, runs and reads a
//! kernel and ends the process with `exit(0)`. Were the guard run by `pthread_exit`, that
//! thread would be parked at its first enqueue and the process would hang.
//!
//! Its own `main` (`harness = false`, C's `main`: `pthread_exit` unwinds no Rust frame of the
//! standard library's start-up). The scenario runs in a child process with an empty PoCL
//! kernel cache, killed after 120 s (a hang). On PoCL (`POCL_DEVICES="pthread pthread"
//! XPU_REQUIRE_DEVICE=1`).
#![no_main]

use std::io::Write;
use std::time::{Duration, Instant};

use xpu_device::backend::{Buffer, Kernel, MemFlags, Program, QueueOptions};

/// Set in the child process.
const CHILD: &str = "XPU_H37_MAIN_THREAD_ENDS_CHILD";

/// The line the child's worker writes once its kernel's results were right.
const DONE: &str = "h37: worker done, results right";

/// The test's name, as test runners list it.
const NAME: &str = "main_thread_ends_alone_and_another_thread_keeps_using_the_device";

/// The C entry point, `C-unwind`: `pthread_exit` ends the main thread by a forced unwind
/// through this frame, which a plain `extern "C"` function (no unwinding) turns into an abort
/// (the child died with SIGABRT and no message on the GPU machine's Ubuntu 24.04, glibc 2.39,
/// with PoCL 5.0 and with NVIDIA's driver alike; it passes there with `C-unwind`). Answers a runner's listing as libtest does (`--list`: one test, none
/// ignored; nextest lists with `--format terse`), so that `cargo nextest` runs it too; runs
/// the test for any other arguments that do not filter it out.
#[no_mangle]
extern "C-unwind" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        if !flag("--ignored") {
            println!("{NAME}: test");
        }
        return 0;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let selected = filters.is_empty()
        || filters.iter().any(|f| {
            if flag("--exact") {
                f.as_str() == NAME
            } else {
                NAME.contains(f.as_str())
            }
        });
    if !selected || flag("--ignored") {
        return 0;
    }
    parent()
}

/// Whether the process's main thread (thread id = process id) has ended: gone from
/// `/proc/self/task`, or a zombie there.
fn main_thread_ended() -> bool {
    // SAFETY: getpid takes no argument and cannot fail.
    let pid = unsafe { libc::getpid() };
    match std::fs::read_to_string(format!("/proc/self/task/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

fn child() -> libc::c_int {
    let dev = xpu_device::device(0).unwrap();
    // A queue wrapped on the main thread: the exit drain registered, the guard armed.
    let options = QueueOptions {
        profiling: false,
        priority: None,
    };
    std::mem::forget(dev.create_queue(options).unwrap());
    std::thread::spawn(move || {
        // Gate: the main thread has ended.
        while !main_thread_ended() {
            std::thread::sleep(Duration::from_millis(1));
        }
        eprintln!("h37: main thread ended; the worker enqueues");
        let q = dev.create_queue(options).unwrap();
        let ctx = dev.context().unwrap();
        let program = Program::build(
            ctx,
            dev.id(),
            "__kernel void scale_index(__global uint *out, uint k) {
                size_t i = get_global_id(0);
                out[i] = (uint)i * k;
            }",
        )
        .unwrap();
        let out = Buffer::new(ctx, 64 * 4, MemFlags::default()).unwrap();
        let mut k = Kernel::new(&program, "scale_index").unwrap();
        k.set_arg_buffer(0, &out).unwrap();
        k.set_arg(1, 3u32).unwrap();
        // SAFETY: 64 work-items each write one uint of `out` (64 uints); nothing else
        // borrows `out`, which the queue's commands keep alive.
        drop(unsafe { q.enqueue_kernel(&k, &[64], None, &[]) }.unwrap());
        let mut bytes = vec![0u8; 64 * 4];
        q.read(&out, 0, &mut bytes).unwrap();
        let got: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let want: Vec<u32> = (0..64).map(|i| i * 3).collect();
        assert_eq!(got, want);
        q.finish().unwrap();
        eprintln!("{DONE}");
        let _ = std::io::stderr().flush();
        std::process::exit(0);
    });
    // SAFETY: ends this (the main) thread alone; it holds no lock and no Rust frame of the
    // standard library's start-up is above it (C's `main`).
    unsafe { libc::pthread_exit(std::ptr::null_mut()) }
}

fn parent() -> libc::c_int {
    if xpu_device::device_count() == 0 {
        assert!(
            !xpu_device::require_device(),
            "XPU_REQUIRE_DEVICE=1 but no OpenCL device was found"
        );
        eprintln!("skipping exit_after_main_thread_ends: no device");
        return 0;
    }
    let exe = std::env::current_exe().unwrap();
    for run in 0..3 {
        let dir =
            std::env::temp_dir().join(format!("xpu-h37-main-ends-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let err_path = dir.join("stderr");
        let mut command = std::process::Command::new(&exe);
        xpu_device::pass_icd_env(&mut command);
        let mut child = command
            .env(CHILD, "1")
            .env("POCL_CACHE_DIR", dir.join("cache"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "exit_after_main_thread_ends run {run}: {status:?} after {:?}",
            start.elapsed()
        );
        assert!(
            status.is_some_and(|s| s.success()) && stderr.contains(DONE),
            "run {run}: {} ({stderr})",
            status.map_or_else(
                || "HANG (killed after 120 s)".to_string(),
                |s| s.to_string()
            )
        );
    }
    eprintln!("exit_after_main_thread_ends: ok");
    0
}
