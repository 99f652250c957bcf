//! The process-wide initialization state machine: `lazy_init`, `lazy_call`, re-entrancy.

use std::cell::Cell;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{BoxError, LazyError};
use crate::registry::device_lazy_init;

/// The device type of the built-in OpenCL backend.
pub const OPENCL: &str = "opencl";

/// A queued call: run at initialization, re-run if a later call of the same init failed.
type QueuedCall = Arc<dyn Fn() -> Result<(), BoxError> + Send + Sync>;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static INIT_LOCK: Mutex<()> = Mutex::new(());
static QUEUE: Mutex<Vec<(QueuedCall, &'static Location<'static>)>> = Mutex::new(Vec::new());

thread_local! {
    static INITIALIZING: Cell<bool> = const { Cell::new(false) };
}

/// True once initialization finished and this process is not a bad fork child, as
/// `torch.xpu.is_initialized`.
pub fn is_initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire) && !xpu_device::fork::is_in_bad_fork()
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

fn clear_flag() {
    INITIALIZING.with(|f| f.set(false));
}

/// Initializes the runtime on first use; what every facade call runs first. Cheap once
/// initialized (one atomic load).
///
/// Steps: return if initialized or if this thread is initializing (re-entrancy: a queued call
/// that calls into the runtime does not deadlock); take the init lock (other threads wait
/// here); fail with `BadFork` in a bad fork child; initialize the OpenCL backend (device
/// enumeration; at least one device is not required); run the queued calls in order; mark
/// initialized. A failing queued call leaves the runtime uninitialized with its queue intact,
/// so the next call retries everything (as torch's `_lazy_init`).
///
/// # Errors
/// `BadFork`, `InitFailed` (backend routine), `QueuedCallFailed` (with the queuing location).
pub fn lazy_init() -> Result<(), LazyError> {
    if INITIALIZED.load(Ordering::Acquire) {
        if xpu_device::fork::is_in_bad_fork() {
            return Err(LazyError::BadFork);
        }
        return Ok(());
    }
    if INITIALIZING.with(Cell::get) {
        return Ok(());
    }
    let _guard = INIT_LOCK.lock();
    if INITIALIZED.load(Ordering::Acquire) {
        return Ok(());
    }
    if xpu_device::fork::is_in_bad_fork() {
        return Err(LazyError::BadFork);
    }
    crate::register_builtin_backends();
    INITIALIZING.with(|f| f.set(true));
    let result = run_init();
    clear_flag();
    result?;
    INITIALIZED.store(true, Ordering::Release);
    Ok(())
}

fn run_init() -> Result<(), LazyError> {
    device_lazy_init(OPENCL)?;
    let calls: Vec<_> = QUEUE.lock().clone();
    for (call, origin) in calls {
        call().map_err(|source| LazyError::QueuedCallFailed {
            origin: origin.to_string(),
            source,
        })?;
    }
    QUEUE.lock().clear();
    Ok(())
}

/// Runs `f` now when the runtime is initialized, else queues it to run, in order, at
/// initialization (as `torch.xpu._lazy_call`). The call site is kept for error messages.
/// `f` may run more than once if an earlier initialization attempt failed.
///
/// # Errors
/// When initialized: `f`'s error, as `QueuedCallFailed` with this call site.
#[track_caller]
pub fn lazy_call<F>(f: F) -> Result<(), LazyError>
where
    F: Fn() -> Result<(), BoxError> + Send + Sync + 'static,
{
    let origin = Location::caller();
    if is_initialized() {
        return f().map_err(|source| LazyError::QueuedCallFailed {
            origin: origin.to_string(),
            source,
        });
    }
    QUEUE.lock().push((Arc::new(f), origin));
    Ok(())
}

/// Number of calls waiting for initialization.
pub fn queued_calls() -> usize {
    QUEUE.lock().len()
}
