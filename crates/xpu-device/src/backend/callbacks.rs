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
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};

use opencl3::event as cle;
use parking_lot::Mutex;

use super::keyed::Keyed;
use super::{raw, release};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A closure registered with [`ClEvent::on_complete`](super::ClEvent::on_complete).
pub(crate) type CompleteFn = Box<dyn FnOnce(i32) + Send + 'static>;

static SENDER: OnceLock<Sender<Job>> = OnceLock::new();
static START: Mutex<()> = Mutex::new(());
/// Closures registered and not yet run (their captures not yet dropped).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Registrations taken out of [`REGISTRY`] (by the driver's callback or a sweep) and not yet
/// posted to the callback thread: counted under the registry's lock when taken, so that
/// [`wait_for_callbacks`], whose sweep takes the lock after, sees each of them either still
/// registered or counted here.
static DELIVERING: AtomicUsize = AtomicUsize::new(0);

/// How long [`wait_for_callbacks`] waits for registrations another thread is posting
/// ([`DELIVERING`]): their posting is a status query and a channel send, so this bounds only a
/// thread that stalls in the driver (the wait then goes on without them rather than hang).
const DELIVERING_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

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
pub(crate) fn post(f: CompleteFn, status: i32) {
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
/// that the caller waited for) has been handed over, so this then waits for it to finish; so
/// does the callback of an event that had completed when this was called, whether the driver
/// has handed it over, is handing it over, or has not yet (then it is delivered here). A thread
/// that stalls inside the driver while handing one over is waited for 2 s at most.
pub fn wait_for_callbacks() {
    if crate::fork_state::is_in_bad_fork() || ON_CALLBACK_THREAD.with(Cell::get) {
        return;
    }
    let Some(tx) = SENDER.get() else {
        return;
    };
    // The closures of events already over that the driver has not handed over yet: delivered
    // here, so that the wait below covers them.
    sweep(true);
    // Those another thread took out of the registry and is posting (the driver's callback
    // mid-way, or another thread's sweep): posted before the marker below, so that it comes
    // after them on the callback thread. Without this a callback whose event had completed
    // could still be on its way when this returned (1 of 2,000 rounds in 5 of 120 runs of
    // `tests/callbacks_after_completion.rs` with two busy loops beside it, PoCL).
    let start = std::time::Instant::now();
    while DELIVERING.load(Ordering::SeqCst) > 0 && start.elapsed() < DELIVERING_LIMIT {
        std::thread::yield_now();
    }
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

// Registrations not handed over yet.
//
// OpenCL 3.0 §5.11.4 calls a `CL_COMPLETE` callback "when the command completes or terminates
// abnormally", but PoCL (3.1) never calls it for a command that failed through a failed event
// of its wait list: a closure given to the driver directly would never run, and what it owns
// would leak (a pinned buffer's copy keeps the whole buffer alive through one). So the driver
// is given only a key; the closure waits in `REGISTRY` with a reference to its event, and is
// handed to the callback thread by whichever comes first: the driver's callback, or a
// [`sweep_failed`] that reads the event's error status. Whoever removes the key delivers it,
// so the closure runs once.

/// One event reference owned by a registration (not counted in `live_objects`: the
/// registration is counted as a pending callback). Released when the last `Arc` of it drops,
/// on the callback thread or a sweeping thread, never in the driver's callback.
struct RegisteredEvent(raw::cl_event);

// SAFETY: a `cl_event` handle is usable from any thread (OpenCL 3.0 appendix A.2: the calls
// made on it here, clGetEventInfo and clReleaseEvent, are thread-safe); this owns one
// reference, released once in `Drop`.
unsafe impl Send for RegisteredEvent {}
// SAFETY: as above; `&self` only reads the status.
unsafe impl Sync for RegisteredEvent {}

impl Drop for RegisteredEvent {
    fn drop(&mut self) {
        // SAFETY: the reference retained by `register`, released exactly once, here.
        release::note("clReleaseEvent", unsafe { cle::release_event(self.0) });
    }
}

/// A closure waiting for its event, with the event.
struct Registration {
    event: Arc<RegisteredEvent>,
    f: CompleteFn,
}

struct Registry {
    pending: Keyed<Registration>,
    /// [`register`] sweeps once this many closures wait (then twice what is left), so that
    /// failures nothing else sweeps are found at O(1) amortized cost per registration.
    sweep_at: usize,
}

/// Registration sweeps start once this many closures wait.
const FIRST_SWEEP: usize = 64;
const EXECUTION_STATUS: u32 = 0x11D3;

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pending: Keyed::new(),
    sweep_at: FIRST_SWEEP,
});

/// Hands a registration to the callback thread with `status`; its event reference goes
/// with it (released there, after the closure).
fn deliver(registration: Registration, status: i32) {
    let Registration { event, f } = registration;
    post(
        Box::new(move |status| {
            let _event = event;
            f(status);
        }),
        status,
    );
}

/// The driver's callback: `user_data` is a registration's key.
extern "C" fn on_status(event: raw::cl_event, status: i32, user_data: *mut c_void) {
    let key = user_data as usize;
    // No driver call and no user code under the lock; nothing here panics.
    let registration = {
        let mut registry = REGISTRY.lock();
        let taken = registry.pending.take(key);
        if taken.is_some() {
            DELIVERING.fetch_add(1, Ordering::SeqCst);
        }
        taken
    };
    if let Some(registration) = registration {
        deliver(registration, final_status(event, status));
        DELIVERING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The status a closure gets: the driver's, unless it says `CL_COMPLETE` (0) for a command
/// whose execution status is an error. NVIDIA calls the `CL_COMPLETE` callback of a marker
/// that failed through its wait list with 0 while the event reads -5 (H100, 2026-12-05);
/// OpenCL 3.0 §5.11.4 passes an abnormally terminated command's error code instead. One
/// `clGetEventInfo` (allowed in a callback, §5.11.4), only when the driver says 0.
pub(super) fn final_status(event: raw::cl_event, status: i32) -> i32 {
    if status != 0 {
        return status;
    }
    match cle::get_event_info(event, EXECUTION_STATUS).map(|v| v.to_int()) {
        Ok(code) if code < 0 => code,
        _ => status,
    }
}

/// Registers `f` to run on the callback thread with `event`'s final status (see
/// [`ClEvent::on_complete`](super::ClEvent::on_complete); [`start`] has run).
///
/// # Errors
/// A failed `clRetainEvent` or `clSetEventCallback`'s code (then `f` is dropped here without
/// running).
pub(crate) fn register(event: raw::cl_event, f: CompleteFn) -> Result<(), i32> {
    // SAFETY: `event` is live (the caller's wrapper owns a reference for the call).
    unsafe { cle::retain_event(event) }?;
    let registration = Registration {
        event: Arc::new(RegisteredEvent(event)),
        f,
    };
    // Counted before the driver can hand it over (its run uncounts it).
    registered();
    let (key, sweep) = {
        let mut registry = REGISTRY.lock();
        let key = registry.pending.insert(registration);
        (key, registry.pending.len() >= registry.sweep_at)
    };
    // The driver may call back at once, on this thread: the lock is not held.
    match cle::set_event_callback(event, cle::CL_COMPLETE, on_status, key as *mut c_void) {
        Ok(()) => {
            if sweep {
                sweep_failed();
            }
            Ok(())
        }
        Err(code) => {
            // The driver never saw the key. A sweep may have delivered it meanwhile (its
            // event had failed): then the closure runs, as if registered.
            let Some(registration) = REGISTRY.lock().pending.take(key) else {
                return Ok(());
            };
            unregistered();
            drop(registration);
            Err(code)
        }
    }
}

/// Hands over, with their error status, the closures whose event terminated abnormally and
/// that the driver has not handed over (PoCL never does: see above). Runs wherever a failure
/// starts in the runtime (with the forwards' sweep), when `live_objects` is read, and from
/// [`register`] when the waiting closures doubled. No wait; no driver call under the lock.
pub(crate) fn sweep_failed() {
    sweep(false);
}

/// [`sweep_failed`], and with `complete_too` also the closures whose event completed
/// (`CL_COMPLETE`) and that the driver has not handed over yet (it calls back asynchronously:
/// [`wait_for_callbacks`]). The driver's later callback finds the key taken and does nothing
/// (keys are never reused).
fn sweep(complete_too: bool) {
    let events: Vec<(usize, Arc<RegisteredEvent>)> = {
        let registry = REGISTRY.lock();
        registry
            .pending
            .iter()
            .map(|(key, r)| (key, Arc::clone(&r.event)))
            .collect()
    };
    if events.is_empty() {
        return;
    }
    let failed: Vec<(usize, i32)> = events
        .iter()
        .filter_map(|(key, e)| {
            let status = cle::get_event_info(e.0, EXECUTION_STATUS).ok()?.to_int();
            (status < 0 || (complete_too && status == 0)).then_some((*key, status))
        })
        .collect();
    let taken: Vec<(Registration, i32)> = {
        let mut registry = REGISTRY.lock();
        let taken: Vec<(Registration, i32)> = failed
            .into_iter()
            .filter_map(|(key, code)| registry.pending.take(key).map(|r| (r, code)))
            .collect();
        DELIVERING.fetch_add(taken.len(), Ordering::SeqCst);
        registry.sweep_at = FIRST_SWEEP.max(2 * registry.pending.len());
        taken
    };
    // Released outside the lock (the registrations delivered meanwhile may hold the last).
    drop(events);
    for (registration, code) in taken {
        deliver(registration, code);
        DELIVERING.fetch_sub(1, Ordering::SeqCst);
    }
}
