//! Re-entrancy of the backend registry (`register_backend` / `device_lazy_init`): a backend routine
//! asking for its own backend runs once, the built-in backend is registered before the first lazy
//! init, and routines that join threads reaching the runtime do not hang.
//!
//! Review h22: xpu-lazy's backend registry (`register_backend` / `device_lazy_init`).
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

static REENTRANT_RUNS: AtomicUsize = AtomicUsize::new(0);

/// An init routine that, like a queued call, reaches the runtime again on its own thread
/// (here: asks for its own backend), as torch's re-entrant `_lazy_init` allows.
fn reentrant_init() -> Result<(), xpu_lazy::BoxError> {
    if REENTRANT_RUNS.fetch_add(1, Ordering::SeqCst) > 3 {
        // Never reached once the re-entrant call returns at once; bounded here so the failing
        // version reports a count instead of overflowing the stack.
        return Err("the init routine was re-entered more than 3 times".into());
    }
    xpu_lazy::device_lazy_init("review_h22_reentrant")?;
    Ok(())
}

/// `device_lazy_init` is documented "Re-entrant on the initializing thread", but its lock is a
/// `ReentrantMutex` and `done` is still false during the routine, so a routine that asks for
/// its own backend (directly, or through code that needs it) runs the routine again, and again:
/// unbounded recursion, a stack overflow (abort) through safe calls. Torch's `_lazy_init`
/// returns at once on the initializing thread. Expected: the nested call returns at once and
/// the routine runs exactly once.
#[test]
fn a_backend_routine_asking_for_its_own_backend_runs_once() {
    xpu_lazy::register_backend("review_h22_reentrant", reentrant_init);
    let outcome = xpu_lazy::device_lazy_init("review_h22_reentrant");
    assert_eq!(
        REENTRANT_RUNS.load(Ordering::SeqCst),
        1,
        "the routine ran once ({outcome:?})"
    );
    outcome.unwrap();
    assert!(xpu_lazy::is_backend_initialized("review_h22_reentrant"));
}

/// The built-in OpenCL backend (`xpu_lazy::OPENCL`, "the device type of the built-in OpenCL
/// backend") is only put into the registry by the first `lazy_init`: before it,
/// `device_lazy_init(OPENCL)` fails with `UnknownBackend("opencl")` and `registered_backends()`
/// does not list it (torch's `device_lazy_init(kXPU)` initializes). Run in a fresh process.
#[test]
fn the_builtin_backend_is_registered_before_the_first_lazy_init() {
    common::scenario_test(
        "the_builtin_backend_is_registered_before_the_first_lazy_init",
        "builtin",
        Duration::from_secs(60),
        "builtin backend ok",
        || {
            assert!(
                xpu_lazy::registered_backends().contains(&xpu_lazy::OPENCL),
                "{:?}",
                xpu_lazy::registered_backends()
            );
            xpu_lazy::device_lazy_init(xpu_lazy::OPENCL).unwrap();
            assert!(xpu_lazy::is_backend_initialized(xpu_lazy::OPENCL));
            println!("builtin backend ok");
        },
    );
}

/// A backend routine that does its work on a helper thread it joins (a thread pool, scoped
/// threads), the helper reaching the same backend.
fn joining_init() -> Result<(), xpu_lazy::BoxError> {
    std::thread::scope(|s| {
        s.spawn(|| xpu_lazy::device_lazy_init("review_h22_joined"))
            .join()
    })
    .map_err(|_| "the helper thread panicked")??;
    Ok(())
}

/// Review h10's deadlock, through the registry: `register_backend` takes user code, and while
/// it runs, `device_lazy_init` of the same type on another thread waits for the backend's lock
/// with no limit (`lazy_init` bounds that wait for its queued calls,
/// `QUEUED_CALLS_WAIT_LIMIT`). A routine that joins a helper reaching its backend hangs both
/// threads forever. Expected: the helper's wait ends with an error after the limit, so the
/// routine fails and the caller gets `InitFailed`; nothing is marked initialized. Run in a
/// fresh process, killed after 60 s.
#[test]
fn a_backend_routine_that_joins_a_thread_reaching_its_backend_does_not_hang() {
    common::scenario_test(
        "a_backend_routine_that_joins_a_thread_reaching_its_backend_does_not_hang",
        "joined",
        Duration::from_secs(60),
        "joined routine returned",
        || {
            xpu_lazy::register_backend("review_h22_joined", joining_init);
            let err = xpu_lazy::device_lazy_init("review_h22_joined").unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("did not finish within 10000 ms"),
                "{message}"
            );
            assert!(!xpu_lazy::is_backend_initialized("review_h22_joined"));
            println!("joined routine returned");
        },
    );
}

/// A routine registered under the built-in type that does its work on a helper thread it
/// joins, the helper calling `lazy_init`.
fn joining_opencl_init() -> Result<(), xpu_lazy::BoxError> {
    std::thread::scope(|s| s.spawn(xpu_lazy::lazy_init).join())
        .map_err(|_| "the helper thread panicked")??;
    Ok(())
}

/// Once a routine registered under `OPENCL` before the first initialization is honoured (the
/// fix above; on the reviewed commit only after a first `lazy_init` whose enumeration failed),
/// `lazy_init` runs user code under its init lock before its queued calls, while
/// a thread arriving then waits for that lock with no limit (the limit only applies while the
/// queued calls run): a routine joining a helper that calls `lazy_init` deadlocks. Expected:
/// the helper's wait ends after the limit (`QueuedCallsPending`), the routine fails with it,
/// and `lazy_init` reports that. Run in a fresh process, killed after 60 s.
#[test]
fn a_user_opencl_routine_that_joins_a_thread_calling_lazy_init_does_not_hang() {
    common::scenario_test(
        "a_user_opencl_routine_that_joins_a_thread_calling_lazy_init_does_not_hang",
        "joined_opencl",
        Duration::from_secs(60),
        "joined opencl routine returned",
        || {
            xpu_lazy::register_backend(xpu_lazy::OPENCL, joining_opencl_init);
            let message = xpu_lazy::lazy_init().unwrap_err().to_string();
            assert!(
                message.contains("did not finish within 10000 ms"),
                "{message}"
            );
            assert!(!xpu_lazy::is_initialized());
            println!("joined opencl routine returned");
        },
    );
}
