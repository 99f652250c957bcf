//! Fork safety: once the process has touched the OpenCL driver, a child created by `fork()`
//! inherits driver state it cannot use (PoCL's worker threads do not survive a fork and the
//! child hangs; GPU drivers fail similarly). As torch does, a `pthread_atfork` child handler
//! is installed the first time the runtime touches the driver (device enumeration), and in such
//! a child every runtime entry point reports a "bad fork" error instead of calling the driver.
//! A child forked before the driver was touched initializes normally.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static BAD_FORK: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

extern "C" fn child_after_fork() {
    // Async-signal-safe: a single atomic store.
    BAD_FORK.store(true, Ordering::SeqCst);
}

/// Installs the child handler once. Called by discovery before the first driver call.
pub(crate) fn note_driver_touched() {
    REGISTER.call_once(|| {
        // SAFETY: pthread_atfork with a plain `extern "C"` child handler that performs only an
        // atomic store, which is async-signal-safe as POSIX requires of handlers run in the
        // child; the prepare and parent handlers are absent (None).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
        if rc != 0 {
            tracing::warn!(rc, "pthread_atfork failed: fork safety checks are off");
        }
    });
}

/// True in a child process forked after this process touched the OpenCL driver.
pub fn is_in_bad_fork() -> bool {
    BAD_FORK.load(Ordering::Relaxed)
}

/// True once the fork handler is installed (the driver was touched).
pub fn driver_touched() -> bool {
    REGISTER.is_completed()
}

/// The message of the bad-fork error.
pub const BAD_FORK_MESSAGE: &str = "cannot use the xpu runtime in a forked subprocess: the \
     parent process had already initialized OpenCL. To use xpu with several processes, start \
     them with spawn (std::process::Command, or multiprocessing's 'spawn' start method) \
     instead of fork";

/// Test support: runs `child` in a forked child process and returns its exit code.
///
/// The child runs `child` and exits with its return value through `_exit` (no atexit handlers,
/// no unwinding into the parent's frames; a panic in the child exits with 101). Only for tests
/// of fork behavior: call it from a test binary whose other threads hold no locks that `child`
/// needs.
///
/// # Errors
/// The `fork` or `waitpid` failure as an `io::Error`.
#[doc(hidden)]
pub fn run_in_forked_child(child: impl FnOnce() -> i32) -> std::io::Result<i32> {
    // SAFETY: fork() has no memory-safety preconditions; in the child we only run `child` and
    // then _exit, never returning into the parent's stack frames.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: _exit terminates the child immediately without running the parent's atexit
        // handlers or destructors, which is what a forked test child needs.
        unsafe { libc::_exit(code) };
    }
    let mut status: libc::c_int = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer for waitpid.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Ok(128 + libc::WTERMSIG(status))
    }
}
