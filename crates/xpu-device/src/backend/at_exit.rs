//! The process's exit waits, for a bounded time, for the commands its queues still hold.
//!
//! Why: PoCL builds a kernel for its CPU devices in its worker threads when the kernel first
//! runs. A process that returns from `main` with such work in flight runs the shared
//! libraries' destructors (`_dl_fini`: LLVM's pass registry among them) while a worker still
//! compiles, and dies with SIGABRT ("Failed to create kernel compiler pass") or SIGSEGV: 7 or
//! more of 40 runs of `xpu-burn`'s `exit_with_work_in_flight` test (2026-12-04). CUDA's
//! runtime lets a process exit with work in flight; a safe program must be able to.
//!
//! How: the first queue the backend wraps registers [`drain`] with `atexit` (after the driver
//! is loaded, so it runs before the libraries' destructors, which glibc runs last). Every
//! wrapper of a queue is counted in a registry. At exit, [`drain`] enqueues a marker on every
//! live queue, flushes it and polls the markers until all are over or [`DRAIN_LIMIT`] has
//! passed: a queue held by a user event that nobody will set cannot hang the exit. Nothing
//! is drained in a bad fork child (the queues belong to the parent).
//!
//! Not handled (review h30, `xpu-burn/tests/review_h30_exit_with_threads.rs`, ignored):
//! `main` returning while *other threads* still enqueue and build programs. They go on
//! during the drain and during the libraries' destructors; about 1 in 4 such processes died
//! on PoCL. Parking other threads' device work once the drain begins brought it to about 1 in
//! 20 (not landed: one more global atomic per enqueue, and still a crash): the rest die in a
//! compile already running in a PoCL worker, whose LLVM statics register their exit-time
//! destructors lazily, after [`drain`] was registered, so they run before it.

use std::sync::Once;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{raw, CommandQueue, EventStatus};

/// The longest an exit waits for the queues' commands.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A raw queue handle, as an address (a plain integer: the registry only compares it, and
/// [`drain`] retains the queue before using it).
type QueueAddr = usize;

/// Live queues: each handle with the number of wrappers ([`CommandQueue`]s) that hold it.
static QUEUES: Mutex<Vec<(QueueAddr, usize)>> = Mutex::new(Vec::new());

static REGISTER: Once = Once::new();

/// Counts one more wrapper of `queue`; registers [`drain`] at the first.
pub(super) fn wrapper_created(queue: raw::cl_command_queue) {
    REGISTER.call_once(|| {
        // SAFETY: `drain_at_exit` is an `extern "C" fn()` that never unwinds (it catches
        // panics) and touches only statics that live for the whole process.
        let _ = unsafe { libc::atexit(drain_at_exit) };
    });
    let addr = queue as QueueAddr;
    let mut queues = QUEUES.lock();
    match queues.iter_mut().find(|(q, _)| *q == addr) {
        Some((_, n)) => *n += 1,
        None => queues.push((addr, 1)),
    }
}

/// Counts one wrapper of `queue` less (before it releases its reference).
pub(super) fn wrapper_dropped(queue: raw::cl_command_queue) {
    let addr = queue as QueueAddr;
    let mut queues = QUEUES.lock();
    if let Some(i) = queues.iter().position(|(q, _)| *q == addr) {
        queues[i].1 -= 1;
        if queues[i].1 == 0 {
            queues.swap_remove(i);
        }
    }
}

extern "C" fn drain_at_exit() {
    // A panic must not unwind into libc.
    let _ = std::panic::catch_unwind(|| drain(DRAIN_LIMIT));
}

/// Waits until every command enqueued so far on every live queue is over, or until `limit`
/// has passed; returns whether all were over. Never blocks in the driver: a marker per queue
/// is polled (OpenCL 3.0 §5.11), 1 ms apart.
pub fn drain(limit: Duration) -> bool {
    if crate::fork_state::in_bad_fork() {
        return false;
    }
    let deadline = Instant::now() + limit;
    // Each live queue retained under the registry lock, so that none is released meanwhile.
    let retained: Vec<raw::cl_command_queue> = {
        let queues = QUEUES.lock();
        queues
            .iter()
            .filter_map(|&(addr, _)| {
                let q = addr as raw::cl_command_queue;
                // SAFETY: the registry lists queues that a live wrapper holds a reference to,
                // and the wrapper's drop takes the lock before releasing it.
                let ok = unsafe { opencl3::command_queue::retain_command_queue(q) }.is_ok();
                ok.then_some(q)
            })
            .collect()
    };
    // The wrappers own the references retained above (and count themselves in; the registry
    // lock is free again).
    let queues: Vec<CommandQueue> = retained.into_iter().map(CommandQueue::counted).collect();
    let markers: Vec<_> = queues
        .iter()
        .filter_map(|q| {
            let m = q.enqueue_marker(&[]).ok()?;
            let _ = q.flush();
            Some(m)
        })
        .collect();
    loop {
        let pending = markers.iter().any(|m| {
            matches!(
                m.status(),
                Ok(EventStatus::Queued | EventStatus::Submitted | EventStatus::Running)
            )
        });
        if !pending {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
