//! Backends by device type: each registers an init routine; `device_lazy_init(type)`
//! initializes just that one, once (the generalization of torch's `cuda_lazy_init`).

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, ReentrantMutex};

use crate::error::{BoxError, LazyError};

/// A backend's init routine.
pub type InitFn = fn() -> Result<(), BoxError>;

struct Backend {
    device_type: &'static str,
    init: InitFn,
    done: &'static AtomicBool,
    lock: &'static ReentrantMutex<()>,
}

static BACKENDS: Mutex<Vec<Backend>> = Mutex::new(Vec::new());

/// Registers `init` under `device_type` (e.g. `"opencl"`). Registering a type twice replaces
/// the routine if it has not run yet; otherwise the new routine is ignored.
pub fn register_backend(device_type: &'static str, init: InitFn) {
    if xpu_device::fork::is_in_bad_fork() {
        // Never initialized here; and the parent may have held the lock at the fork.
        return;
    }
    let mut b = BACKENDS.lock();
    if let Some(existing) = b.iter_mut().find(|x| x.device_type == device_type) {
        if !existing.done.load(Ordering::Acquire) {
            existing.init = init;
        }
        return;
    }
    b.push(Backend {
        device_type,
        init,
        done: Box::leak(Box::new(AtomicBool::new(false))),
        lock: Box::leak(Box::new(ReentrantMutex::new(()))),
    });
}

/// Device types registered so far.
/// In a bad fork child: those visible without waiting for a lock the parent may have held.
pub fn registered_backends() -> Vec<&'static str> {
    let list = if xpu_device::fork::is_in_bad_fork() {
        BACKENDS.try_lock()
    } else {
        Some(BACKENDS.lock())
    };
    list.map(|b| b.iter().map(|b| b.device_type).collect())
        .unwrap_or_default()
}

/// Initializes the backend registered under `device_type`, once per process. Concurrent
/// callers wait for the first; a failed routine leaves the backend uninitialized, so the
/// next call retries. Re-entrant on the initializing thread.
///
/// # Errors
/// `UnknownBackend`, `BadFork`, or `InitFailed` with the routine's error.
pub fn device_lazy_init(device_type: &str) -> Result<(), LazyError> {
    if xpu_device::fork::is_in_bad_fork() {
        return Err(LazyError::BadFork);
    }
    let (init, done, lock, name) = {
        let b = BACKENDS.lock();
        let x = b
            .iter()
            .find(|x| x.device_type == device_type)
            .ok_or_else(|| LazyError::UnknownBackend(device_type.to_string()))?;
        (x.init, x.done, x.lock, x.device_type)
    };
    if done.load(Ordering::Acquire) {
        return Ok(());
    }
    let _g = lock.lock();
    if done.load(Ordering::Acquire) {
        return Ok(());
    }
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
    BACKENDS
        .lock()
        .iter()
        .any(|b| b.device_type == device_type && b.done.load(Ordering::Acquire))
}
