//! The process-wide initialization state machine: `lazy_init`, `lazy_call`, re-entrancy.

use std::cell::Cell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{BoxError, LazyError};
use crate::registry::device_lazy_init;
use crate::{OPENCL, QUEUED_CALLS_WAIT_LIMIT};

/// A queued call: run at initialization, re-run if a later call of the same init failed.
type QueuedCall = Arc<dyn Fn() -> Result<(), BoxError> + Send + Sync>;

/// Set once `lazy_init` ran every queued call; set under the `QUEUE` lock, so a call queued
/// before it is set is run by that init, and a call arriving after it runs at once.
static INITIALIZED: AtomicBool = AtomicBool::new(false);
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// Set while an initialization runs user code under [`INIT_LOCK`]: its queued calls, or a
/// routine given to [`register_backend`](crate::register_backend) under [`OPENCL`].
static RUNNING_QUEUE: AtomicBool = AtomicBool::new(false);

static QUEUE: Mutex<Vec<(QueuedCall, &'static Location<'static>)>> = Mutex::new(Vec::new());

thread_local! {
    static INITIALIZING: Cell<bool> = const { Cell::new(false) };
}

/// True once the runtime is initialized, as `torch.xpu.is_initialized`: false until a
/// [`lazy_init`] (or [`init`]) has finished, its queued calls included, so a thread that reads
/// `true` finds every [`lazy_call`] queued before that initialization done. False in a bad
/// fork child.
///
/// One difference with torch.xpu, kept so that the flag and a forked child agree whenever no
/// initialization is running: OpenCL cannot count devices without initializing its driver
/// (there is no NVML), so an enumeration outside [`lazy_init`] (`device_count`,
/// `is_available`, `get_device_properties`, a stream, an allocation, called directly) makes
/// this true once that enumeration is complete, where torch.xpu answers `False` although such
/// a fork is already poisoned; the calls queued with [`lazy_call`] still run at the next
/// [`lazy_init`] (every facade call that needs the runtime runs it). While a [`lazy_init`]
/// that enumerated runs its queued calls, or after one of them failed, this is false although
/// a child forked then is a bad fork ([`is_in_bad_fork`] there), as in torch. See
/// `xpu_device::fork`.
pub fn is_initialized() -> bool {
    (INITIALIZED.load(Ordering::Acquire) || xpu_device::fork::driver_initialized_outside_init())
        && !xpu_device::fork::is_in_bad_fork()
}

/// True in a child forked after the parent touched the OpenCL driver, as
/// `torch.xpu._is_in_bad_fork`.
pub fn is_in_bad_fork() -> bool {
    xpu_device::fork::is_in_bad_fork()
}

/// Initializes the runtime now, as `torch.xpu.init`.
///
/// # Errors
/// As [`lazy_init`].
pub fn init() -> Result<(), LazyError> {
    lazy_init()
}

/// Marks this thread as initializing while it lives; clears the mark when dropped, on a
/// queued call's panic too (torch clears `is_initializing` in a `finally`), so the thread's
/// next `lazy_init` initializes for real instead of returning at once.
struct Initializing;

impl Initializing {
    fn begin() -> Self {
        INITIALIZING.with(|f| f.set(true));
        Initializing
    }
}

impl Drop for Initializing {
    fn drop(&mut self) {
        // `try_with`: a drop during thread teardown must not panic.
        let _ = INITIALIZING.try_with(|f| f.set(false));
    }
}

/// Initializes the runtime on first use; what every facade call runs first. Cheap once
/// initialized (one atomic load).
///
/// Steps: fail with `BadFork` in a bad fork child (before any lock: a parent's thread may have
/// held it at the fork); return if initialized or if this thread is initializing
/// (re-entrancy: a queued call that calls into the runtime does not deadlock); take the init
/// lock (other threads wait here); initialize the OpenCL backend (device enumeration; at least
/// one device is required); run the queued calls in order, including calls queued meanwhile
/// (by the queued calls themselves or by other threads): each runs exactly once; mark
/// initialized. While the queued calls run, another thread waits at most
/// [`QUEUED_CALLS_WAIT_LIMIT`] (a queued call may be waiting for it). A failing queued call leaves the runtime uninitialized with its queue intact,
/// so the next call retries everything (as torch's `_lazy_init`).
///
/// # Errors
/// `BadFork`, `InitFailed` (backend routine), `QueuedCallFailed` (with the queuing location),
/// `QueuedCallsPending` (another thread's queued calls ran past the limit).
pub fn lazy_init() -> Result<(), LazyError> {
    if xpu_device::fork::is_in_bad_fork() {
        return Err(LazyError::BadFork);
    }
    if INITIALIZED.load(Ordering::Acquire) {
        return Ok(());
    }
    if INITIALIZING.with(Cell::get) {
        return Ok(());
    }
    // A thread that a queued call waits for (it was started by it, so it comes once the
    // queue runs) waits a bounded time; the others wait as torch's threads do.
    let _guard = if RUNNING_QUEUE.load(Ordering::Acquire) {
        INIT_LOCK
            .try_lock_for(QUEUED_CALLS_WAIT_LIMIT)
            .ok_or(LazyError::QueuedCallsPending {
                waited_ms: u64::try_from(QUEUED_CALLS_WAIT_LIMIT.as_millis()).unwrap_or(u64::MAX),
            })?
    } else {
        INIT_LOCK.lock()
    };
    if INITIALIZED.load(Ordering::Acquire) {
        return Ok(());
    }
    let _initializing = Initializing::begin();
    // An enumeration this initialization starts counts for `is_initialized` only once the
    // initialization, queued calls included, has finished.
    xpu_device::fork::enumerate_as_initialization(run_init)
}

fn run_init() -> Result<(), LazyError> {
    /// Clears [`RUNNING_QUEUE`] when the user code is done, failed or panicked.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING_QUEUE.store(false, Ordering::Release);
        }
    }
    let _running = Running;
    // A routine registered in place of the built-in enumeration is user code too.
    if crate::registry::runs_user_code(OPENCL) {
        RUNNING_QUEUE.store(true, Ordering::Release);
    }
    device_lazy_init(OPENCL)?;
    RUNNING_QUEUE.store(true, Ordering::Release);
    // Run the queue by position, re-reading it after each call: calls appended while earlier
    // ones run (by them, or by another thread) are run too. The queue is cleared, and
    // INITIALIZED set, under the queue lock once no call is left, so `lazy_call` either
    // appends before that (and the call runs here) or sees INITIALIZED (and runs it itself).
    let mut next = 0;
    loop {
        let item = {
            let mut queue = QUEUE.lock();
            match queue.get(next) {
                Some((call, origin)) => Some((Arc::clone(call), *origin)),
                None => {
                    queue.clear();
                    INITIALIZED.store(true, Ordering::Release);
                    None
                }
            }
        };
        let Some((call, origin)) = item else {
            return Ok(());
        };
        // No lock is held while user code runs.
        call().map_err(|source| LazyError::QueuedCallFailed {
            origin: origin.to_string(),
            source,
        })?;
        next += 1;
    }
}

/// Runs `f` now when the runtime is initialized (its queue has run), else queues it to run,
/// in order, at initialization (as `torch.xpu._lazy_call`); a call queued while another thread
/// initializes runs in that initialization, exactly once. The call site is kept for error
/// messages. `f` may run more than once if an earlier initialization attempt failed. Never
/// blocks on an initialization in progress.
///
/// # Errors
/// `BadFork` in a bad fork child (nothing is queued); when initialized: `f`'s error, as
/// `CallFailed` (it ran at once, not at initialization).
#[track_caller]
pub fn lazy_call<F>(f: F) -> Result<(), LazyError>
where
    F: Fn() -> Result<(), BoxError> + Send + Sync + 'static,
{
    let origin = Location::caller();
    if xpu_device::fork::is_in_bad_fork() {
        return Err(LazyError::BadFork);
    }
    // Not queued: the call's own error (as torch's `_lazy_call` on an initialized runtime).
    let run_now = |f: F| f().map_err(LazyError::CallFailed);
    if INITIALIZED.load(Ordering::Acquire) {
        return run_now(f);
    }
    let mut queue = QUEUE.lock();
    if INITIALIZED.load(Ordering::Acquire) {
        drop(queue);
        return run_now(f);
    }
    queue.push((Arc::new(f), origin));
    Ok(())
}

/// Number of calls waiting for initialization (0 in a bad fork child, where the queue is
/// never run and its lock is not taken).
pub fn queued_calls() -> usize {
    if xpu_device::fork::is_in_bad_fork() {
        return 0;
    }
    QUEUE.lock().len()
}
