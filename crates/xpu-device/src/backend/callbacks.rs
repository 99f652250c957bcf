//! The runtime's completion-callback thread: user closures registered with
//! [`ClEvent::on_complete`](super::ClEvent::on_complete) never run on a driver thread.
//!
//! The driver's callback (`clSetEventCallback`, OpenCL 3.0 §5.11.4) only moves the closure and
//! the status into a channel; one thread per process, named `xpu-callbacks` and started on the
//! first registration, runs them one after the other. So a closure may block (`finish()`,
//! `wait()`), which on the driver's thread deadlocks it (seen with PoCL), and a panic is caught
//! here: its payload is dropped under `catch_unwind` too, and forgotten if that drop panics, so
//! no closure can abort the process.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::OnceLock;

use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

static SENDER: OnceLock<Sender<Job>> = OnceLock::new();
static START: Mutex<()> = Mutex::new(());
/// Closures registered and not yet run (their captures not yet dropped).
static PENDING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ON_CALLBACK_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Starts the callback thread if needed.
///
/// # Errors
/// The thread could not be spawned (the OS's error).
pub(crate) fn start() -> std::io::Result<()> {
    if SENDER.get().is_some() {
        return Ok(());
    }
    let _guard = START.lock();
    if SENDER.get().is_some() {
        return Ok(());
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("xpu-callbacks".into())
        .spawn(move || run(rx))?;
    let _ = SENDER.set(tx);
    Ok(())
}

fn run(rx: Receiver<Job>) {
    ON_CALLBACK_THREAD.with(|c| c.set(true));
    for job in rx {
        run_caught(job);
    }
}

/// Runs `job`; a panic is caught and its payload dropped where a panicking `Drop` cannot
/// escape (if it panics, that second payload is forgotten: a leak, never an abort).
fn run_caught(job: Job) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
        tracing::error!("an event completion callback panicked");
        if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(second);
        }
    }
}

/// True on the runtime's callback thread (`xpu-callbacks`), where a closure registered with
/// [`ClEvent::on_complete`](super::ClEvent::on_complete) runs. What a closure drops is dropped
/// here too, so a destructor that would wait for device work (a caching allocator's shard
/// teardown) asks this and hands the wait to another thread: a wait here delays every later
/// callback. One thread-local read.
pub fn on_callback_thread() -> bool {
    ON_CALLBACK_THREAD.try_with(Cell::get).unwrap_or(false)
}

/// Counts one registered closure (see [`pending`]).
pub(crate) fn registered() {
    PENDING.fetch_add(1, Ordering::Relaxed);
}

/// Undoes [`registered`] for a closure that will never run (registration failed).
pub(crate) fn unregistered() {
    PENDING.fetch_sub(1, Ordering::Relaxed);
}

/// Hands `f(status)` to the callback thread. Called from the driver's thread: never panics,
/// never runs user code there. `start` has run (registration calls it first).
pub(crate) fn post(f: Box<dyn FnOnce(i32) + Send + 'static>, status: i32) {
    let job: Job = Box::new(move || {
        // The guard counts the closure as done once it ran and its captures were dropped,
        // also when it panics.
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                PENDING.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let _done = Done;
        f(status);
    });
    match SENDER.get() {
        Some(tx) => {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                // The thread is gone (it never exits while the process runs): dropping the
                // closure here would run its captures' destructors on the driver's thread.
                std::mem::forget(job);
            }
        }
        None => std::mem::forget(job),
    }
}

/// Closures registered with `on_complete` that have not run yet (including those of events
/// that have not completed).
pub(crate) fn pending() -> usize {
    PENDING.load(Ordering::Relaxed)
}

/// Blocks until every completion callback already handed over by the driver has run, on the
/// runtime's callback thread (`xpu-callbacks`). Returns at once on that thread itself (waiting
/// there would wait for itself), when no callback was ever registered, and in a bad-fork child
/// (see [`crate::fork`]: the parent's callback thread does not exist there, so the wait would
/// never end).
///
/// The driver hands a callback over when it reports the event's completion, asynchronously
/// (OpenCL 3.0 §5.11.4): after [`ClEvent::wait`](super::ClEvent::wait) returns, the event's
/// callbacks may still be on their way. A callback whose effect was observed (it opened a gate
/// that the caller waited for) has been handed over, so this then waits for it to finish.
pub fn wait_for_callbacks() {
    if crate::fork_state::is_in_bad_fork() || ON_CALLBACK_THREAD.with(Cell::get) {
        return;
    }
    let Some(tx) = SENDER.get() else {
        return;
    };
    let (done_tx, done_rx) = mpsc::sync_channel::<()>(1);
    if tx
        .send(Box::new(move || {
            let _ = done_tx.send(());
        }))
        .is_ok()
    {
        let _ = done_rx.recv();
    }
}
