//! Fork safety.
//!
//! # The rule
//! OpenCL has no driver-free device count (CUDA has NVML): `clGetPlatformIDs` /
//! `clGetDeviceIDs` load and initialize the vendor driver (PoCL starts its worker threads,
//! NVIDIA's library initializes CUDA), and a child created by `fork()` inherits driver state it
//! cannot use (PoCL's workers do not survive a fork and the child hangs; GPU drivers fail
//! similarly). So, in xpu, **enumerating devices is initializing the driver**:
//!
//! - the first device enumeration (from any layer: `device_count`, `is_available`,
//!   `get_device_properties`, `xpu_lazy::init`, the first stream or allocation...) installs a
//!   `pthread_atfork` child handler, as torch does;
//! - a child forked after enumeration started is a **bad fork**: [`is_in_bad_fork`] is true
//!   and every runtime entry point of every layer returns its `BadFork` error at once, without
//!   calling the driver or taking a lock that a thread of the parent may have held;
//! - [`driver_initialized`] is true exactly when a child forked now would be a bad fork.
//!   The one exception is an enumeration that failed (no runtime, no device): its outcome is
//!   kept for the process, a child never calls the driver either, so it is not a bad fork;
//! - `xpu_lazy::is_initialized` reports [`driver_initialized_outside_init`] (an enumeration
//!   that was not part of `lazy_init`, such as `device_count`: true once it is complete, so a
//!   child forked after such a call and the flag agree, where torch.xpu's flag stays false) or
//!   a `lazy_init` that has finished, its queued calls included (as torch's flag: while
//!   `lazy_init` still runs its queued calls the flag is false, though a child forked then is
//!   already a bad fork, as in torch);
//! - in a bad-fork child, [`device_count`] and
//!   [`is_available`](crate::is_available) answer the parent's enumeration, copied into the
//!   child (as torch's cached `device_count`), without calling the driver. Only a child forked
//!   while the parent was still enumerating answers 0.
//!
//! A child forked before any enumeration initializes normally.
//!
//! # Layer by layer
//! In a bad-fork child the entry points of every layer return their layer's `BadFork` after one
//! atomic load, before any lock or driver call:
//! - xpu-device: discovery, devices, properties (not the raw `backend` handles).
//! - xpu-stream: also `CaptureGuard::begin` and `enqueue_queue`, before any lock; the capture
//!   queries `is_capturing` / `device_is_capturing` answer false without the capture registry's
//!   lock or a stream's capture lock; a parent's `CaptureGuard` dropped there keeps its mark; a
//!   `QueueRef` holding the last reference to an external stream's queue leaks it.
//! - xpu-event: the test `Gate` included.
//! - xpu-host: allocation and `HostCopy` copies; its functions without a result do nothing, its
//!   statistics are zero, `HostPtr` views are empty and do not wait.
//! - xpu-alloc: also `BufferSource::allocate` called directly, `DataPtr::view`, the exact `cl_mem`,
//!   `DataPtr::cl_mem_and_offset`, `with_raw_view`, `raw_cl_mem_and_offset`,
//!   `DeviceAllocator::mem_pools` and `ClBackend`'s marker operations, also through a `StreamRef`
//!   whose queue the parent resolved (a device marker counts as complete unqueried). The
//!   allocator's `empty_cache`, `reset_peak_stats`, `reset_accumulated_stats` and `set_config` do
//!   nothing and its `memory_stats` are zero; the same for its `DeviceCore`, however obtained (from
//!   `DeviceAllocator::core`, a `MemPool` or `DeviceCore::new`), and for xpu-caching's
//!   `CachingAllocator` inside it. `DeviceCore::raw_delete` / `with_raw` refuse before the raw
//!   table's lock.
//! - xpu-caching: the check is the backend's `Backend::is_bad_fork` hook (default `false`;
//!   `ClBackend` answers `is_in_bad_fork`, one relaxed load), asked first by every
//!   `CachingAllocator`, `SharedState`, `WeakShard` and `Allocation` method, which refuses with
//!   `CacheError::BadFork` (`AllocError::BadFork`: `allocate`, `record_stream`,
//!   `set_memory_fraction`, `SharedState::allocate_segment_from`) or does nothing (`empty_cache`,
//!   resets, `set_config`, `release_cached`) or answers a neutral value (zero statistics and byte
//!   figures, fraction 1.0, `mem_get_info` `(0, 0)`, the default configuration, no snapshot, shards
//!   or history); the cached allocate path asks once (the device allocator's `allocate` relies on
//!   it), the free path once, in `Allocation`'s drop.
//! - xpu-kernel: programs (also a lookup of the in-memory or disk program cache), functions,
//!   launches, typed memory, interop regions `ClRegion` (refused before `clCreateSubBuffer`, cached
//!   or not); graphs: every capture (also one whose closure ran at the fork), each `Capture`
//!   command, `CaptureLaunch::arg` / `enqueue`, `graph_pool_handle` and `Graph::replay` are
//!   `GraphError::BadFork`, and `Graph::len` / `uses_command_buffer` take no lock.
//! - xpu-lazy and the facade.
//!
//! Drops leak there: dropping a parent's `DataPtr`, `HostPtr`, `MemPool`, `Event`, `Gate`,
//! `Launch`, `Function`, `Program`, `ExternalStream`, `Graph`, `Capture` or `CaptureLaunch` in the
//! child leaks it: the last `MemPool` handle its core and cached segments, without the pool
//! registry's lock or the `xpu-pool-release` thread; an `Allocation`, a shard (its segments,
//! markers and stream) and a `CachingAllocator`'s last handle leak in their own drops, so no
//! teardown reaches the backend, the segment source or the statistics' lock; the last `Function`
//! handle its pooled kernels, the last `Program` handle its program; a graph its kernels, command
//! buffers, blocks and private pool; `DataPtr` and `HostPtr` through `take_unless_bad_fork`, a
//! `DataPtr`'s block through `Allocation`'s drop and its cached sub-buffer through its own guard.
//!
//! Errors: every layer's error type (`DeviceError`, `StreamError`, `EventError`, `HostError`,
//! `AllocError`, `BlockArgError`, `MemoryError`, `InteropError`, `KernelError`, `GraphError`,
//! `LazyError`; and the tool crate xpu-replay's `ReplayError`) has `is_bad_fork`, true for its own
//! `BadFork` and asking the lower-layer errors it wraps (or holds as a source), so
//! `xpu::Error::is_bad_fork`, one delegation per variant, finds a bad fork however deep it is
//! nested (`GraphError` is not wrapped by the facade: ask it directly).
//!
//! Tests: `run_in_forked_child` is `unsafe` (the child of a multi-threaded process may only do
//! async-signal-safe work); the safe `fork_report` forks and runs a fixed async-signal-safe
//! scenario, and the crates above test their `BadFork` paths in a re-executed test process with
//! `simulate_bad_fork` (a scenario reads what its no-op calls left after `end_simulated_bad_fork`,
//! and waits for the `xpu-pool-release` thread with `xpu_alloc::flush_release_thread`, a FIFO
//! barrier). The fork state itself (`fork_state`, re-exported here) is a leaf module that discovery
//! records into and errors and entry points read. An enumeration outside `lazy_init` is attributed
//! with `enumerate_as_initialization`.

use std::time::{Duration, Instant};

use crate::discovery::{device_count, devices};
use crate::error::DeviceError;
pub use crate::fork_state::{
    driver_initialized, driver_initialized_outside_init, driver_touched, end_simulated_bad_fork,
    enumerate_as_initialization, in_bad_fork, is_in_bad_fork, refuse_in_bad_fork,
    simulate_bad_fork, take_unless_bad_fork, BAD_FORK_MESSAGE,
};

/// How a forked child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// It exited with this status.
    Exited(i32),
    /// A signal (this number) killed it.
    Signaled(i32),
    /// It had not finished within the timeout and was killed with `SIGKILL`.
    TimedOut,
}

/// What a child forked now sees, from [`fork_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkReport {
    /// [`is_in_bad_fork`] in the child.
    pub in_bad_fork: bool,
    /// In a bad-fork child: [`devices`] returned `BadFork` (at once).
    pub devices_refused: bool,
    /// In a bad-fork child: [`device_count`] (capped at 63). 0 in a
    /// child that is not a bad fork (the scenario does not enumerate there).
    pub device_count: usize,
}

/// Forks a child that runs a fixed scenario and reports it: whether it is a bad fork and, if
/// so, what `devices()` and `device_count()` answer there. The child runs only
/// async-signal-safe code (atomic loads, then `_exit`; in a bad fork neither call reaches the
/// driver, a lock or the allocator), so this is safe to call from any thread of a
/// multi-threaded process. The parent waits at most `timeout`, then kills the child.
///
/// # Errors
/// A failed `fork` or `waitpid`; `TimedOut` (as an `io::Error`) when the child did not finish
/// in time, or an exit status the scenario never produces.
pub fn fork_report(timeout: Duration) -> std::io::Result<ForkReport> {
    // SAFETY: the child runs only the closure below: atomic loads (`is_in_bad_fork`, the
    // `OnceLock` state and length read by `devices` / `device_count` in a bad fork, which
    // return before any lock, allocation or driver call) and then `_exit` — all
    // async-signal-safe, as POSIX requires in the child of a multi-threaded process. When the
    // child is not a bad fork it calls nothing at all.
    let exit = unsafe {
        run_in_forked_child(
            || {
                if !is_in_bad_fork() {
                    return 0;
                }
                let refused = matches!(devices(), Err(DeviceError::BadFork));
                let count = device_count().min(63) as i32;
                1 | (i32::from(refused) << 1) | (count << 2)
            },
            timeout,
        )
    }?;
    match exit {
        ChildExit::Exited(code) if (0..256).contains(&code) => Ok(ForkReport {
            in_bad_fork: code & 1 != 0,
            devices_refused: code & 2 != 0,
            device_count: (code >> 2) as usize,
        }),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("fork_report: the child ended with {other:?}"),
        )),
    }
}

/// Test support: runs `child` in a forked child process, waits at most `timeout` for it
/// (polling `waitpid(WNOHANG)`; then `SIGKILL`), and returns how it ended.
///
/// The child runs `child` and exits with its return value through `_exit` (no atexit handlers,
/// no unwinding into the parent's frames; a panic in the child exits with 101).
///
/// # Safety
/// The child is a copy of the calling process in which only the calling thread exists. When
/// the process has other threads (the test harness, OpenCL's worker threads, a thread inside
/// the allocator), POSIX allows the child only async-signal-safe functions until it exits, and
/// the caller must ensure `child` respects this: it must not use an OpenCL driver that the
/// parent had loaded (nor another library that is not fork-safe), and must not depend on a lock, a `OnceLock` being
/// initialized, or any state another thread of the parent may have been changing at the time
/// of the fork (such a child may hang — bounded here by `timeout` — or worse). xpu's entry
/// points meet this in a bad-fork child: they return `BadFork` after one atomic load. When
/// the calling process is single-threaded, `child` may do anything.
///
/// ```no_run
/// use xpu_device::fork::{run_in_forked_child, ChildExit};
/// // SAFETY: the child only returns a constant.
/// let exit = unsafe { run_in_forked_child(|| 7, std::time::Duration::from_secs(5)) }.unwrap();
/// assert_eq!(exit, ChildExit::Exited(7));
/// ```
///
/// The same call from safe code does not compile (E0133: call to unsafe function):
///
/// ```compile_fail,E0133
/// let _ = xpu_device::fork::run_in_forked_child(|| 7, std::time::Duration::from_secs(5));
/// ```
///
/// # Errors
/// The `fork`, `waitpid` or `kill` failure as an `io::Error`.
#[doc(hidden)]
pub unsafe fn run_in_forked_child(
    child: impl FnOnce() -> i32,
    timeout: Duration,
) -> std::io::Result<ChildExit> {
    // SAFETY: fork() has no memory-safety preconditions of its own; what the child may do is
    // the caller's obligation (see # Safety). In the child we run `child` and then _exit,
    // never returning into the parent's stack frames.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: _exit terminates the child immediately without running the parent's atexit
        // handlers or destructors, which is what a forked child needs.
        unsafe { libc::_exit(code) };
    }
    wait_bounded(pid, timeout)
}

/// Waits for child `pid` at most `timeout`, then kills it.
fn wait_bounded(pid: libc::pid_t, timeout: Duration) -> std::io::Result<ChildExit> {
    let start = Instant::now();
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer for waitpid.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r == pid {
            break;
        }
        if start.elapsed() >= timeout {
            // SAFETY: kill and waitpid on our own child, which has not been reaped yet;
            // `status` is a valid out-pointer.
            let (k, w) = unsafe {
                (
                    libc::kill(pid, libc::SIGKILL),
                    libc::waitpid(pid, &mut status, 0),
                )
            };
            if k < 0 || w < 0 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(ChildExit::TimedOut);
        }
        // A bound on the wait, not an ordering: the child's result does not depend on it.
        std::thread::sleep(Duration::from_millis(2));
    }
    if libc::WIFEXITED(status) {
        Ok(ChildExit::Exited(libc::WEXITSTATUS(status)))
    } else {
        Ok(ChildExit::Signaled(libc::WTERMSIG(status)))
    }
}
