//! Backends by device type: each registers an init routine; `device_lazy_init(type)`
//! initializes just that one, once (the generalization of torch's `cuda_lazy_init`).
//! The built-in OpenCL backend ([`OPENCL`](crate::OPENCL)) is registered by the first use of
//! the registry, so every function here sees it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use parking_lot::Mutex;

use crate::error::{BoxError, LazyError};
use crate::{OPENCL, QUEUED_CALLS_WAIT_LIMIT};

/// A backend's init routine.
pub type InitFn = fn() -> Result<(), BoxError>;

struct Backend {
    device_type: &'static str,
    init: InitFn,
    /// The routine is the built-in OpenCL enumeration (no user code): waiting for it on
    /// another thread has no limit. A routine given to [`register_backend`] is user code.
    builtin: bool,
    done: &'static AtomicBool,
    lock: &'static Mutex<()>,
}

static BACKENDS: Mutex<Vec<Backend>> = Mutex::new(Vec::new());

thread_local! {
    /// The device types whose routine this thread is running (re-entrancy).
    static RUNNING: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread is running `device_type`'s routine (false during thread teardown).
fn running_here(device_type: &str) -> bool {
    RUNNING
        .try_with(|r| r.borrow().contains(&device_type))
        .unwrap_or(false)
}

/// Marks this thread as running a routine while it lives (also while a panic unwinds).
struct Running(&'static str);

impl Running {
    fn begin(device_type: &'static str) -> Self {
        let _ = RUNNING.try_with(|r| r.borrow_mut().push(device_type));
        Running(device_type)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // `try_with`: a drop during thread teardown must not panic.
        let _ = RUNNING.try_with(|r| {
            let mut r = r.borrow_mut();
            if let Some(i) = r.iter().rposition(|t| *t == self.0) {
                r.remove(i);
            }
        });
    }
}

/// Puts `init` under `device_type` (see [`register_backend`]); the caller holds `BACKENDS`.
fn insert(b: &mut Vec<Backend>, device_type: &'static str, init: InitFn, builtin: bool) {
    if let Some(existing) = b.iter_mut().find(|x| x.device_type == device_type) {
        if !existing.done.load(Ordering::Acquire) {
            existing.init = init;
            existing.builtin = builtin;
        }
        return;
    }
    b.push(Backend {
        device_type,
        init,
        builtin,
        done: Box::leak(Box::new(AtomicBool::new(false))),
        lock: Box::leak(Box::new(Mutex::new(()))),
    });
}

/// The registry, with the built-in OpenCL backend registered (once, on first use).
fn backends() -> parking_lot::MutexGuard<'static, Vec<Backend>> {
    static BUILTIN: Once = Once::new();
    let mut b = BACKENDS.lock();
    // Under the registry's lock, so nothing registers between the check and the insert.
    BUILTIN.call_once(|| insert(&mut b, OPENCL, crate::opencl_init, true));
    b
}

/// Whether `device_type`'s routine is still to run and is user code (a routine given to
/// [`register_backend`], not the built-in enumeration).
pub(crate) fn runs_user_code(device_type: &str) -> bool {
    backends()
        .iter()
        .any(|b| b.device_type == device_type && !b.builtin && !b.done.load(Ordering::Acquire))
}

/// Registers `init` under `device_type` (e.g. `"opencl"`). Registering a type twice replaces
/// the routine if it has not run yet; otherwise the new routine is ignored. The built-in
/// [`OPENCL`](crate::OPENCL) backend is registered before any routine given here, so a routine
/// registered under `"opencl"` before the first initialization replaces the built-in
/// enumeration (and [`lazy_init`](crate::lazy_init) runs it).
pub fn register_backend(device_type: &'static str, init: InitFn) {
    if xpu_device::fork::is_in_bad_fork() {
        // Never initialized here; and the parent may have held the lock at the fork.
        return;
    }
    insert(&mut backends(), device_type, init, false);
}

/// Device types registered so far, the built-in [`OPENCL`](crate::OPENCL) first.
/// In a bad fork child: those visible without waiting for a lock the parent may have held.
pub fn registered_backends() -> Vec<&'static str> {
    let list = if xpu_device::fork::is_in_bad_fork() {
        BACKENDS.try_lock()
    } else {
        Some(backends())
    };
    list.map(|b| b.iter().map(|b| b.device_type).collect())
        .unwrap_or_default()
}

/// Initializes the backend registered under `device_type`, once per process (the built-in
/// [`OPENCL`](crate::OPENCL) enumerates devices; [`lazy_init`](crate::lazy_init) also runs
/// the queued calls). Concurrent callers wait for the first; a failed routine leaves the
/// backend uninitialized, so the next call retries. Re-entrant: called by the routine itself
/// on its own thread (directly or through code that needs the backend), it returns `Ok` at
/// once without running the routine again, as torch's `_lazy_init` on the initializing
/// thread. While another thread runs a routine given to [`register_backend`] (user code),
/// this waits at most [`QUEUED_CALLS_WAIT_LIMIT`]: a routine that joins a thread reaching its
/// backend would otherwise deadlock with it. The wait for the built-in enumeration has no
/// limit.
///
/// # Errors
/// `UnknownBackend`, `BadFork`, `InitFailed` with the routine's error, `InitPending` when
/// another thread's routine ran past the limit (nothing changed; a later call retries).
pub fn device_lazy_init(device_type: &str) -> Result<(), LazyError> {
    if xpu_device::fork::is_in_bad_fork() {
        return Err(LazyError::BadFork);
    }
    let (init, builtin, done, lock, name) = {
        let b = backends();
        let x = b
            .iter()
            .find(|x| x.device_type == device_type)
            .ok_or_else(|| LazyError::UnknownBackend(device_type.to_string()))?;
        (x.init, x.builtin, x.done, x.lock, x.device_type)
    };
    if done.load(Ordering::Acquire) || running_here(name) {
        return Ok(());
    }
    let _g = if builtin {
        lock.lock()
    } else {
        lock.try_lock_for(QUEUED_CALLS_WAIT_LIMIT)
            .ok_or(LazyError::InitPending {
                backend: name,
                waited_ms: u64::try_from(QUEUED_CALLS_WAIT_LIMIT.as_millis()).unwrap_or(u64::MAX),
            })?
    };
    if done.load(Ordering::Acquire) {
        return Ok(());
    }
    let _running = Running::begin(name);
    init().map_err(|source| LazyError::InitFailed {
        backend: name,
        source,
    })?;
    done.store(true, Ordering::Release);
    Ok(())
}

/// True once `device_type`'s routine succeeded.
/// False in a bad fork child, as [`crate::is_initialized`].
pub fn is_backend_initialized(device_type: &str) -> bool {
    if xpu_device::fork::is_in_bad_fork() {
        return false;
    }
    backends()
        .iter()
        .any(|b| b.device_type == device_type && b.done.load(Ordering::Acquire))
}
