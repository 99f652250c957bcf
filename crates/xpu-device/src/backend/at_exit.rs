//! The process's exit waits, for a bounded time, for the commands its queues still hold.
//!
//! Why: PoCL builds a kernel for its CPU devices in its worker threads when the kernel first
//! runs. A process that returns from `main` with such work in flight runs the shared
//! libraries' destructors (`_dl_fini`: LLVM's pass registry among them) while a worker still
//! compiles, and dies with SIGABRT ("Failed to create kernel compiler pass") or SIGSEGV: 7 or
//! more of 40 runs of `xpu-burn`'s `exit_with_work_in_flight` test (2026-12-04). CUDA's
//! runtime lets a process exit with work in flight; a safe program must be able to.
//!
//! How: the first queue the backend wraps registers [`drain`] with `atexit` (after the driver
//! is loaded, so it runs before the libraries' destructors, which glibc runs last). Every
//! wrapper of a queue is counted in a registry. At exit, [`drain`] enqueues a marker on every
//! live queue, flushes it and polls the markers until all are over or [`DRAIN_LIMIT`] has
//! passed: a queue held by a user event that nobody will set cannot hang the exit. Nothing
//! is drained in a bad fork child (the queues belong to the parent).
//!
//! Other threads (review h30, `xpu-burn/tests/review_h30_exit_with_threads.rs`): `main` may
//! return while other threads still enqueue and build programs. Every enqueue and build of
//! the backend, and every read of a program's binary (PoCL generates the kernels' code in the
//! calling thread for it, review h33), is a `DriverEntry`: a per-thread count of the calls in progress and a check
//! of an exit flag. The exit handler sets the flag, waits (bounded) until no other thread is
//! inside such a call, and only then drains the queues; a thread that tries to enter after
//! the flag was set is parked for the rest of the process, before it reaches the driver.
//!
//! Order: glibc runs exit handlers in the reverse order of their registration, and PoCL's
//! LLVM registers the destructors of statics it builds lazily (`SDNode::getValueTypeList`'s
//! among them) during its first kernel compiles, in PoCL's worker threads, after the first
//! queue was wrapped: those ran before the handler and tore down the compiles it waited
//! for (with PoCL's kernel cache empty, 20 of 20 processes of review h30's test and 10 of 10
//! of `exit_with_work_in_flight` died). So the thread that loads the program (the main
//! thread) gets a thread-local `MainThreadExit` before `main` (`.init_array`); glibc's
//! `exit` drops the calling thread's locals before it runs any exit handler. Its drop drains
//! the queues (the compiles in flight finish and register what they register) and registers
//! the handler again, which then runs first of all. Only the handler's first run drains; a
//! later one returns at once. A process that exits from another thread
//! (`std::process::exit`) has only the handlers' order.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{raw, CommandQueue, EventStatus};

/// The longest one drain of an exit waits for the queues' commands. An exit from the main
/// thread drains twice (the main thread's guard, then the exit handler, which also waits
/// within this limit for other threads' driver calls in progress), so it may wait up to
/// twice this long when the queues' work does not finish (review h33).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// A raw queue handle, as an address (a plain integer: the registry only compares it, and
/// [`drain`] retains the queue before using it).
type QueueAddr = usize;

/// Live queues: each handle with the number of wrappers ([`CommandQueue`]s) that hold it.
static QUEUES: Mutex<Vec<(QueueAddr, usize)>> = Mutex::new(Vec::new());

static REGISTER: Once = Once::new();

/// Set once the exit handler began: [`DriverEntry`]s of other threads park from then on.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Set by the first run of the exit handler; later runs (earlier registrations) return.
static EXIT_DRAINED: AtomicBool = AtomicBool::new(false);

/// Every live thread's count of driver calls in progress (see [`DriverEntry`]).
static THREADS: Mutex<Vec<Arc<AtomicU32>>> = Mutex::new(Vec::new());

/// This thread's entry in [`THREADS`], removed again when the thread ends.
struct ThreadSlot(Arc<AtomicU32>);

impl ThreadSlot {
    fn new() -> Self {
        let slot = Arc::new(AtomicU32::new(0));
        THREADS.lock().push(Arc::clone(&slot));
        Self(slot)
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        let mut threads = THREADS.lock();
        if let Some(i) = threads.iter().position(|s| Arc::ptr_eq(s, &self.0)) {
            threads.swap_remove(i);
        }
    }
}

/// Dropped with the main thread's locals: in `exit`, before any exit handler runs (glibc's
/// `exit` runs the calling thread's thread-local destructors first).
struct MainThreadExit;

impl Drop for MainThreadExit {
    fn drop(&mut self) {
        // SAFETY: getpid and gettid take no argument and cannot fail.
        let main = unsafe { libc::gettid() == libc::getpid() };
        if !main || !REGISTER.is_completed() || EXIT_DRAINED.load(Ordering::SeqCst) {
            return;
        }
        // The process exits (or, in a program that ends its main thread alone, goes on: then
        // this is a bounded wait and one more registration). Commands in flight finish, with
        // the compiles they start, before any exit handler ran; the handler registered now
        // runs first of all, parks the other threads and drains again.
        let _ = std::panic::catch_unwind(|| drain(DRAIN_LIMIT));
        register();
    }
}

/// Runs on the thread that loads the program (the main thread, for a program linking
/// xpu-device) before `main`: gives that thread a [`MainThreadExit`].
extern "C" fn touch_main_thread_exit() {
    let _ = MAIN_THREAD_EXIT.try_with(|_| {});
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[link_section = ".init_array"]
static MAIN_THREAD_EXIT_AT_START: extern "C" fn() = touch_main_thread_exit;

thread_local! {
    static MAIN_THREAD_EXIT: MainThreadExit = const { MainThreadExit };
    static SLOT: ThreadSlot = ThreadSlot::new();
    /// Set on the thread that runs the exit handler: its own enqueues (the markers) go on.
    static DRAINING: Cell<bool> = const { Cell::new(false) };
}

/// One enqueue or program build in progress on this thread, for the exit handler: it waits
/// until no other thread holds one. Entering after the exit handler began parks the thread
/// for the rest of the process (unless it already holds one: a nested call goes on, so that
/// the outer call can end). Costs one thread-local atomic add and one load of a flag that
/// changes once.
pub(super) struct DriverEntry {
    counted: bool,
    /// Dropped on the thread that entered (its count).
    _thread: PhantomData<*const ()>,
}

impl DriverEntry {
    /// Enters; parks for ever when the process is exiting and this thread is outside every
    /// driver call (and not the exit handler's). On a thread whose locals are being torn down
    /// it is not counted.
    pub(super) fn enter() -> Self {
        // SeqCst on both sides (here the add, then the flag's load; the handler the flag's
        // store, then the counts' loads): either the handler sees this count or this thread
        // sees the flag.
        let outer = SLOT.try_with(|s| s.0.fetch_add(1, Ordering::SeqCst) == 0);
        let Ok(outer) = outer else {
            return Self {
                counted: false,
                _thread: PhantomData,
            };
        };
        if outer && EXITING.load(Ordering::SeqCst) && !DRAINING.try_with(Cell::get).unwrap_or(false)
        {
            let _ = SLOT.try_with(|s| s.0.fetch_sub(1, Ordering::SeqCst));
            loop {
                std::thread::park();
            }
        }
        Self {
            counted: true,
            _thread: PhantomData,
        }
    }
}

impl Drop for DriverEntry {
    fn drop(&mut self) {
        if self.counted {
            let _ = SLOT.try_with(|s| s.0.fetch_sub(1, Ordering::SeqCst));
        }
    }
}

/// Registers the exit handler (again): it then runs before every handler registered so far.
fn register() {
    // SAFETY: `drain_at_exit` is an `extern "C" fn()` that never unwinds (it catches panics)
    // and touches only statics that live for the whole process.
    let _ = unsafe { libc::atexit(drain_at_exit) };
}

/// Counts one more wrapper of `queue`; registers [`drain`] at the first.
pub(super) fn wrapper_created(queue: raw::cl_command_queue) {
    REGISTER.call_once(register);
    let addr = queue as QueueAddr;
    let mut queues = QUEUES.lock();
    match queues.iter_mut().find(|(q, _)| *q == addr) {
        Some((_, n)) => *n += 1,
        None => queues.push((addr, 1)),
    }
}

/// Counts one wrapper of `queue` less (before it releases its reference).
pub(super) fn wrapper_dropped(queue: raw::cl_command_queue) {
    let addr = queue as QueueAddr;
    let mut queues = QUEUES.lock();
    if let Some(i) = queues.iter().position(|(q, _)| *q == addr) {
        queues[i].1 -= 1;
        if queues[i].1 == 0 {
            queues.swap_remove(i);
        }
    }
}

extern "C" fn drain_at_exit() {
    if EXIT_DRAINED.swap(true, Ordering::SeqCst) || crate::fork_state::in_bad_fork() {
        return;
    }
    // A panic must not unwind into libc.
    let _ = std::panic::catch_unwind(|| {
        let deadline = Instant::now() + DRAIN_LIMIT;
        let _ = DRAINING.try_with(|d| d.set(true));
        park_other_threads(deadline);
        drain(deadline.saturating_duration_since(Instant::now()));
    });
}

/// Sets the exit flag, then waits until no other thread is inside a driver call (or until
/// `deadline`): from then on no other thread enqueues or builds.
fn park_other_threads(deadline: Instant) {
    EXITING.store(true, Ordering::SeqCst);
    let own = SLOT.try_with(|s| Arc::clone(&s.0)).ok();
    let others: Vec<Arc<AtomicU32>> = THREADS
        .lock()
        .iter()
        .filter(|s| own.as_ref().is_none_or(|o| !Arc::ptr_eq(o, s)))
        .cloned()
        .collect();
    while others.iter().any(|s| s.load(Ordering::SeqCst) != 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until every command enqueued so far on every live queue is over, or until `limit`
/// has passed; returns whether all were over. Never blocks in the driver: a marker per queue
/// is polled (OpenCL 3.0 §5.11), 1 ms apart.
pub fn drain(limit: Duration) -> bool {
    if crate::fork_state::in_bad_fork() {
        return false;
    }
    let deadline = Instant::now() + limit;
    // Each live queue retained under the registry lock, so that none is released meanwhile.
    let retained: Vec<raw::cl_command_queue> = {
        let queues = QUEUES.lock();
        queues
            .iter()
            .filter_map(|&(addr, _)| {
                let q = addr as raw::cl_command_queue;
                // SAFETY: the registry lists queues that a live wrapper holds a reference to,
                // and the wrapper's drop takes the lock before releasing it.
                let ok = unsafe { opencl3::command_queue::retain_command_queue(q) }.is_ok();
                ok.then_some(q)
            })
            .collect()
    };
    // The wrappers own the references retained above (and count themselves in; the registry
    // lock is free again).
    let queues: Vec<CommandQueue> = retained.into_iter().map(CommandQueue::counted).collect();
    let markers: Vec<_> = queues
        .iter()
        .filter_map(|q| {
            let m = q.enqueue_marker(&[]).ok()?;
            let _ = q.flush();
            Some(m)
        })
        .collect();
    loop {
        let pending = markers.iter().any(|m| {
            matches!(
                m.status(),
                Ok(EventStatus::Queued | EventStatus::Submitted | EventStatus::Running)
            )
        });
        if !pending {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
