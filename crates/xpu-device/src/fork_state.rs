//! The process's fork state: whether the driver was touched, the enumeration's outcome and
//! whether this process is a bad-fork child (the rule is documented on [`crate::fork`],
//! which re-exports the public items). A leaf: discovery records into it, errors and every
//! entry point read it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Once;

static BAD_FORK: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

/// Enumeration not finished (or not started: see `REGISTER`).
const PENDING: u8 = 0;
/// Enumeration found at least one device.
const READY: u8 = 1;
/// Enumeration failed; its error is kept and no later call touches the driver.
const FAILED: u8 = 2;
static DRIVER: AtomicU8 = AtomicU8::new(PENDING);
/// Whether the process's enumeration ran inside [`enumerate_as_initialization`] (stored by the
/// enumerating thread before the outcome exists, so before `DRIVER` leaves `PENDING`).
static ENUMERATED_AS_INITIALIZATION: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread runs [`enumerate_as_initialization`].
    static IN_INITIALIZATION: Cell<bool> = const { Cell::new(false) };
}

extern "C" fn child_after_fork() {
    // Async-signal-safe: one atomic load and one atomic store. The handler is installed right
    // before the first driver call, so "installed and not failed" means the driver was (or is
    // being) initialized in the parent.
    if DRIVER.load(Ordering::SeqCst) != FAILED {
        BAD_FORK.store(true, Ordering::SeqCst);
    }
}

/// Installs the child handler once. Called by discovery before the first driver call.
pub(crate) fn note_driver_touched() {
    REGISTER.call_once(|| {
        // SAFETY: pthread_atfork with a plain `extern "C"` child handler that performs only
        // atomic loads and stores, which are async-signal-safe as POSIX requires of handlers
        // run in the child; the prepare and parent handlers are absent (None).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
        if rc != 0 {
            tracing::warn!(rc, "pthread_atfork failed: fork safety checks are off");
        }
    });
}

/// Records whether the enumeration starting now on this thread is part of an initialization
/// (called by discovery by the one thread that enumerates, before the outcome exists).
pub(crate) fn note_enumeration_started() {
    let inside = IN_INITIALIZATION.try_with(Cell::get).unwrap_or(false);
    ENUMERATED_AS_INITIALIZATION.store(inside, Ordering::Relaxed);
}

/// Runs `f`, attributing a device enumeration that `f` starts on this thread to an
/// initialization that finishes later than the enumeration: [`driver_initialized_outside_init`]
/// then stays false, so that the initializer (`xpu_lazy::lazy_init`, which runs its queued
/// calls after enumerating) reports initialized only once it is done, as `torch.xpu`'s flag.
/// The fork rule is unchanged: a child forked once the enumeration started is a bad fork.
/// Re-entrant; the mark is cleared when `f` returns or unwinds.
pub fn enumerate_as_initialization<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            // `try_with`: a drop during thread teardown must not panic.
            let _ = IN_INITIALIZATION.try_with(|c| c.set(self.0));
        }
    }
    let before = IN_INITIALIZATION.with(|c| c.replace(true));
    let _reset = Reset(before);
    f()
}

/// Records the outcome of the process's enumeration (called by discovery after the cached
/// outcome exists; cheap when unchanged).
pub(crate) fn note_enumerated(found_devices: bool) {
    let state = if found_devices { READY } else { FAILED };
    if DRIVER.load(Ordering::Relaxed) != state {
        DRIVER.store(state, Ordering::SeqCst);
    }
}

/// True in a child process forked after this process initialized the OpenCL driver (device
/// enumeration), as `torch.xpu._is_in_bad_fork`. One atomic load: every layer checks it first.
#[inline]
pub fn is_in_bad_fork() -> bool {
    BAD_FORK.load(Ordering::Relaxed)
}

/// `Err(bad_fork)` in a bad fork child, `Ok(())` otherwise: the first check of every layer's
/// entry points (one atomic load, before any lock, wait or driver call), each layer passing
/// its own `BadFork` error.
///
/// # Errors
/// `bad_fork` when [`is_in_bad_fork`].
#[inline]
pub fn refuse_in_bad_fork<E>(bad_fork: E) -> Result<(), E> {
    if is_in_bad_fork() {
        Err(bad_fork)
    } else {
        Ok(())
    }
}

/// What a `Drop` may release: the contents of `slot` (taken out of it), or `None` in a bad
/// fork child, where they are leaked instead: they are the parent's driver state, and
/// releasing them could call the driver or take a lock that a thread of the parent held at
/// the fork.
#[inline]
pub fn take_unless_bad_fork<T>(slot: &mut Option<T>) -> Option<T> {
    let value = slot.take();
    if is_in_bad_fork() {
        std::mem::forget(value);
        return None;
    }
    value
}

/// Alias of [`is_in_bad_fork`].
#[inline]
pub fn in_bad_fork() -> bool {
    is_in_bad_fork()
}

/// True once the fork handler is installed: enumeration started (it may have failed).
pub fn driver_touched() -> bool {
    REGISTER.is_completed()
}

/// True once device enumeration succeeded in this process (the OpenCL driver is initialized)
/// and this process is not a bad-fork child. Exactly then a child forked now is a bad fork
/// (see the module docs). `xpu_lazy::is_initialized` reports
/// [`driver_initialized_outside_init`] or its own completed initialization.
pub fn driver_initialized() -> bool {
    DRIVER.load(Ordering::Acquire) == READY && !is_in_bad_fork()
}

/// [`driver_initialized`], and the enumeration that initialized the driver was not started
/// inside [`enumerate_as_initialization`] (`device_count`, `is_available`, a stream, an
/// allocation, ... called directly). `xpu_lazy::is_initialized` reports this, or its own
/// completed initialization.
pub fn driver_initialized_outside_init() -> bool {
    driver_initialized() && !ENUMERATED_AS_INITIALIZATION.load(Ordering::Relaxed)
}

/// Test support: makes this process behave as a bad-fork child from now on (irreversible):
/// every entry point of every layer returns `BadFork`. It lets the crates above, whose tests
/// may not fork (only this crate may hold `unsafe`), exercise their `BadFork` paths in a
/// subprocess; the real fork is tested in [`crate::fork`] and through
/// [`fork_report`](crate::fork::fork_report).
#[doc(hidden)]
pub fn simulate_bad_fork() {
    BAD_FORK.store(true, Ordering::SeqCst);
}

/// Test support: ends a [`simulate_bad_fork`], so that a scenario can check, with the
/// ordinary entry points, what the calls it made as a bad-fork child left unchanged (a
/// statistics reset or a configuration change that must have done nothing there). Only
/// for processes made a bad fork by [`simulate_bad_fork`]: a real bad-fork child stays one.
#[doc(hidden)]
pub fn end_simulated_bad_fork() {
    BAD_FORK.store(false, Ordering::SeqCst);
}

/// The message of the bad-fork error.
pub const BAD_FORK_MESSAGE: &str = "cannot use the xpu runtime in a forked subprocess: the \
     parent process had already initialized OpenCL. To use xpu with several processes, start \
     them with spawn (std::process::Command, or multiprocessing's 'spawn' start method) \
     instead of fork";
