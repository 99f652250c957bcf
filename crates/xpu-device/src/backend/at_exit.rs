//! The process's exit waits, for a bounded time, for the commands its queues still hold.
//!
//! Why: PoCL builds a kernel for its CPU devices in its worker threads when the kernel first
//! runs. A process that returns from `main` with such work in flight runs the shared
//! libraries' destructors (`_dl_fini`: LLVM's pass registry among them) while a worker still
//! compiles, and dies with SIGABRT ("Failed to create kernel compiler pass") or SIGSEGV: 7 or
//! more of 40 runs of `xpu-burn`'s `exit_with_work_in_flight` test (2026-12-04). CUDA's
//! runtime lets a process exit with work in flight; a safe program must be able to.
//!
//! How: the first queue the backend wraps registers an exit handler with `on_exit` (glibc;
//! `atexit` elsewhere), after the driver is loaded, so it runs before the libraries'
//! destructors, which glibc runs last. Every wrapper of a queue is counted in a registry; a
//! queue whose last wrapper is dropped after commands were enqueued through its wrappers
//! stays in it (once, with one reference), with a marker after its last command, until that
//! marker is over (a program that drops its queue with kernels still to compile, or a thread
//! that unwinds, and then returns: the drain did not wait for that work, and a core dump of
//! review h33's backlog child showed LLVM's exit destructors under a PoCL worker compiling a
//! kernel of such a queue, 2026-12-06); the count and that hand-over are one lock section
//! (review h44: two wrappers dropped at once forgot the queue, 2 of 200,000 rounds). At exit,
//! the handler enqueues a marker on every live queue, flushes it and polls the markers (and
//! the dropped queues') until all are over, as long as the process makes progress
//! ([`drain_while_busy`]). Once a failure was passed on to a command, markers no longer tell
//! (PoCL 3.1 completes a marker enqueued after a failed command while commands before it stay
//! queued: review h44, 7 of 10 such processes died with SIGSEGV), so the drain then also waits
//! for the driver's threads to go idle. It gives up after
//! [`DRAIN_LIMIT`] without CPU work on the driver's threads (a busy thread of the program does
//! not count, review h37) (a queue held by a user event that nobody will set cannot hang the
//! exit), or after [`DRAIN_CAP`] in all (PoCL working through a backlog of kernels to compile
//! is waited for: review h33, 4 of 22 processes died under a fixed 2 s bound). Given up at
//! the cap, the driver is still working, and the libraries' destructors would run under its
//! compiles (review h37's backlog longer than the cap: SIGSEGV after the 30 s wait in a CI
//! run, 2026-12-06): the process then ends at once with its exit status (`_exit`, stdio
//! flushed), skipping the exit handlers registered before this one and the libraries'
//! destructors, as a process ending with CUDA work in flight abandons that work. So it does
//! when the wait for another thread's driver call gave up with the call still in progress
//! (NVIDIA builds review h37's 800 kernels for longer than the cap: the destructors run
//! under that build died with SIGSEGV, 1 of 3 children on an H100, 2026-12-06). Nothing is
//! drained in a bad fork child (the queues belong to the parent).
//!
//! Other threads (review h30, `xpu-burn/tests/exit_with_threads_computing.rs`): `main` may
//! return while other threads still enqueue and build programs. Every enqueue and build of
//! the backend, and every read of a program's binary (PoCL generates the kernels' code in the
//! calling thread for it, review h33), is a `DriverEntry`: a per-thread count of the calls in progress and a check
//! of an exit flag. The exit handler sets the flag, waits until no other thread is inside
//! such a call (while they or the driver work, as the drain does: under load a build inside
//! the fixed 2 s wait this replaced outlived it and the exit crashed, 1 of 8 children in a
//! fresh clone's run), and only then drains the queues; a thread that tries to enter after
//! the flag was set gets an error (`CODE_PROCESS_EXITING`) instead of reaching the driver (so
//! does creating a kernel or a program from a binary, and a program or kernel it drops is not
//! released: PoCL runs LLVM for those, and the refused thread goes on, unwinding); it
//! used to be parked for the rest of the process, which hung an exit handler (registered
//! before the first queue) that joins such a thread, 4 of 4 (review h37).
//!
//! Order: glibc runs exit handlers in the reverse order of their registration, and PoCL's
//! LLVM registers the destructors of statics it builds lazily (`SDNode::getValueTypeList`'s
//! among them) during its first kernel compiles, in PoCL's worker threads, after the first
//! queue was wrapped: those ran before the handler and tore down the compiles it waited
//! for (with PoCL's kernel cache empty, 20 of 20 processes of review h30's test and 10 of 10
//! of `exit_with_work_in_flight` died). So the thread that loads the program (the main
//! thread) gets a thread-local `MainThreadExit` before `main` (`.init_array`); glibc's
//! `exit` drops the calling thread's locals before it runs any exit handler, and drops the
//! main thread's only there (a main thread that ends alone with `pthread_exit` skips its
//! thread-local destructors: glibc 2.36, checked 2026-12-05). Its drop does the handler's
//! work: stops the other threads' driver calls, then drains (the compiles in flight finish
//! and register what they register). Only the first of the two drains; the handler then
//! returns at once. It drains only once the other threads are stopped: a drain while they
//! still enqueued grew their backlog for as long as it waited (review h33's backlog test: 13
//! to 15 s in the first drain, then the handler's 30 s cap). A process that exits from
//! another thread (`std::process::exit`) has only the handlers' order.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{raw, ClEvent, CommandQueue, EventStatus};
use crate::error::{ClError, CODE_PROCESS_EXITING};

/// How long an exit drain waits for the queues' commands without progress: it gives up once
/// the driver's threads (see [`drain_while_busy`]) used less than a twentieth of this in CPU
/// time over the last such window (a queue held by a user event nobody sets, or a GPU's long
/// kernel: the driver idles; a twentieth, so that slow progress on a loaded machine counts). The wait for other threads' driver calls in
/// progress gives up the same way (their own CPU time counts too: a build compiles in its
/// calling thread).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The longest the exit drain waits while the process makes progress (PoCL still compiling
/// and running a backlog of kernels: with a fixed 2 s bound, 4 of 22 processes of review
/// h33's backlog test died under LLVM's destructors); past it, the process ends at once with
/// its exit status (see the module docs). An exit from the main thread drains once (the main
/// thread's guard, or else the exit handler). A thread the program started
/// while the devices were enumerated counts as the driver's: if it computes on the CPU while
/// the queues are held, such an exit waits up to this cap (other threads count only where no
/// driver thread is known).
pub const DRAIN_CAP: Duration = Duration::from_secs(30);

/// A raw queue handle, as an address (a plain integer: the registry only compares it, and
/// [`drain`] retains the queue before using it).
type QueueAddr = usize;

/// Live queues: each handle with the number of wrappers ([`CommandQueue`]s) that hold it, and
/// whether commands were enqueued through any of them (then the last one's drop retires the
/// queue, see [`wrapper_dropped`]).
static QUEUES: Mutex<Vec<(QueueAddr, usize, bool)>> = Mutex::new(Vec::new());

/// Set once a failure was passed on to a command ([`note_failure`]) or a marker the exit
/// judges by failed (see [`pending`]): from then on an exit's drain, its markers over,
/// also waits for the driver's threads to go idle, and reports `false` (it cannot know that
/// every command ran). A driver may end a command after a failed one while commands before
/// the failure stay queued: PoCL 3.1 completed a marker enqueued after a cancelled one at once,
/// with a gated command before both still queued (review h44).
static UNSURE: AtomicBool = AtomicBool::new(false);

/// Notes that an error status was passed on to a command (a user event set to one): see
/// [`UNSURE`]. One store.
pub(super) fn note_failure() {
    UNSURE.store(true, Ordering::SeqCst);
}

/// Queues whose last wrapper was dropped while their commands may still run, each with a
/// reference of its own and a marker after its last command (`None`: not enqueued yet, or
/// none could be; the exit's drain enqueues one). A program that drops its queue (or a thread that unwinds)
/// with kernels still to compile and then returns must be drained as a live queue is (a core
/// dump of review h33's backlog child: LLVM's exit destructors under a PoCL worker compiling a
/// kernel of a dropped queue). Lock order: [`QUEUES`], then this.
static RETIRED: Mutex<Vec<(QueueAddr, Option<ClEvent>)>> = Mutex::new(Vec::new());

static REGISTER: Once = Once::new();

/// Set once the exit began: [`DriverEntry`]s of other threads are refused from then on.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Set by the first run of the exit handler; later runs (earlier registrations) return.
static EXIT_DRAINED: AtomicBool = AtomicBool::new(false);

/// Every live thread's count of driver calls in progress (see [`DriverEntry`]), with its
/// Linux thread id.
static THREADS: Mutex<Vec<(Arc<AtomicU32>, libc::pid_t)>> = Mutex::new(Vec::new());

/// This thread's entry in [`THREADS`], removed again when the thread ends.
struct ThreadSlot(Arc<AtomicU32>);

impl ThreadSlot {
    fn new() -> Self {
        let slot = Arc::new(AtomicU32::new(0));
        // SAFETY: gettid takes no argument and cannot fail.
        let tid = unsafe { libc::gettid() };
        THREADS.lock().push((Arc::clone(&slot), tid));
        Self(slot)
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        let mut threads = THREADS.lock();
        if let Some(i) = threads.iter().position(|(s, _)| Arc::ptr_eq(s, &self.0)) {
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
        if !main || !REGISTER.is_completed() {
            return;
        }
        // The process exits (glibc drops the main thread's locals in `exit` only): the exit
        // handler's work, before any exit handler ran, LLVM's late-registered destructors
        // among them.
        if exit_drain() {
            // Given up with a driver call in progress or the driver still working at the
            // cap: a handler registered now
            // runs first of all (glibc runs a handler registered during the exit next), with
            // the exit status, and ends the process before LLVM's destructors.
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: `end_now_at_exit` never unwinds and touches no state that exit tears
            // down before it runs.
            unsafe {
                on_exit(end_now_at_exit, std::ptr::null_mut());
            }
        }
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
/// until no other thread holds one. Entering after the exit began is refused with
/// [`CODE_PROCESS_EXITING`](crate::error::CODE_PROCESS_EXITING) (unless this thread already
/// holds one: a nested call goes on, so that the outer call can end; and not on the thread
/// that exits). Costs one thread-local atomic add and one load of a flag that changes once.
pub(super) struct DriverEntry {
    counted: bool,
    /// Dropped on the thread that entered (its count).
    _thread: PhantomData<*const ()>,
}

impl DriverEntry {
    /// Enters the driver call `function`; refused when the process is exiting and this thread
    /// is outside every driver call (and not the exiting one). On a thread whose locals are
    /// being torn down it is not counted.
    ///
    /// # Errors
    /// `CODE_PROCESS_EXITING` (no driver call made) once the exit began.
    pub(super) fn enter(function: &'static str) -> Result<Self, ClError> {
        // SeqCst on both sides (here the add, then the flag's load; the handler the flag's
        // store, then the counts' loads): either the handler sees this count or this thread
        // sees the flag.
        let outer = SLOT.try_with(|s| s.0.fetch_add(1, Ordering::SeqCst) == 0);
        let Ok(outer) = outer else {
            return Ok(Self {
                counted: false,
                _thread: PhantomData,
            });
        };
        if outer && EXITING.load(Ordering::SeqCst) && !DRAINING.try_with(Cell::get).unwrap_or(false)
        {
            let _ = SLOT.try_with(|s| s.0.fetch_sub(1, Ordering::SeqCst));
            return Err(ClError::new(function, CODE_PROCESS_EXITING));
        }
        Ok(Self {
            counted: true,
            _thread: PhantomData,
        })
    }
}

impl Drop for DriverEntry {
    fn drop(&mut self) {
        if self.counted {
            let _ = SLOT.try_with(|s| s.0.fetch_sub(1, Ordering::SeqCst));
        }
    }
}

/// Whether the process is exiting and this thread is not the one that exits (drains): then
/// a program or kernel dropped here is not released (PoCL's release of a program frees LLVM
/// modules, which must not run beside the libraries' teardown; the process is ending).
pub(super) fn exiting_elsewhere() -> bool {
    EXITING.load(Ordering::SeqCst) && !DRAINING.try_with(Cell::get).unwrap_or(false)
}

/// Registers the exit handler: it runs before every handler registered before it.
fn register() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `drain_at_exit` never unwinds (it catches panics) and touches only statics that
    // live for the whole process.
    let _ = unsafe { on_exit(drain_at_exit, std::ptr::null_mut()) };
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    // SAFETY: as above.
    let _ = unsafe { libc::atexit(drain_at_exit) };
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    /// glibc's `on_exit(3)`: `atexit` whose function also gets the exit status.
    fn on_exit(
        function: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
/// Ends the process at once with `status` (`_exit`), stdio flushed: the exit handlers
/// registered before this one and the libraries' destructors do not run. For an exit that
/// gave up waiting for another thread's driver call, or whose drain gave up at
/// [`DRAIN_CAP`] with the driver still working: those destructors (LLVM's)
/// would run under PoCL's compiles (review h37's backlog longer than the cap: SIGSEGV after
/// the 30 s wait in a CI run, 2026-12-06), as a process ending with CUDA work in flight
/// abandons it.
fn end_now(status: libc::c_int) -> ! {
    // SAFETY: fflush(NULL) flushes every open output stream; _exit ends the process and never
    // returns.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(status)
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn end_now_at_exit(status: libc::c_int, _: *mut libc::c_void) {
    end_now(status);
}

/// Counts one more wrapper of `queue`; registers the exit handler at the first.
pub(super) fn wrapper_created(queue: raw::cl_command_queue) {
    REGISTER.call_once(register);
    let addr = queue as QueueAddr;
    let mut queues = QUEUES.lock();
    match queues.iter_mut().find(|(q, _, _)| *q == addr) {
        Some((_, n, _)) => *n += 1,
        None => queues.push((addr, 1, false)),
    }
}

/// `clFlush` of `queue` when a [`CommandQueue`] wrapper of it is alive, else nothing (a raw
/// handle read from an event may name a queue whose last reference is gone). Under the
/// registry's lock, which a wrapper's drop takes before it releases its reference, so the
/// queue stays alive for the call; `clFlush` runs no callback of the runtime.
pub(super) fn flush_if_wrapped(queue: raw::cl_command_queue) {
    let addr = queue as QueueAddr;
    let queues = QUEUES.lock();
    if queues.iter().any(|&(q, n, _)| q == addr && n > 0) {
        let _ = opencl3::command_queue::flush(queue);
    }
}

/// Counts one wrapper of `queue` less (before it releases its reference); `enqueued`: whether
/// commands were enqueued through the dropping wrapper's clones since one of them last
/// reported it. When the last wrapper goes and commands were enqueued through any of them,
/// the queue moves to [`RETIRED`] with a reference of the registry's (one entry a queue), in
/// the same lock section as the count, and `true` is returned: the caller then enqueues a
/// marker after the queue's last command and hands it to [`retired_marker`]. A wrapper family
/// that enqueued nothing (a borrowed wrapper of a user's queue, made and dropped around a
/// query) retires nothing.
pub(super) fn wrapper_dropped(queue: raw::cl_command_queue, enqueued: bool) -> bool {
    let addr = queue as QueueAddr;
    let mut retire = false;
    {
        let mut queues = QUEUES.lock();
        if let Some(i) = queues.iter().position(|(q, _, _)| *q == addr) {
            queues[i].2 |= enqueued;
            queues[i].1 -= 1;
            if queues[i].1 == 0 {
                let (_, _, dirty) = queues.swap_remove(i);
                if dirty && !crate::fork_state::in_bad_fork() {
                    let mut retired = RETIRED.lock();
                    if retired.iter().any(|(q, _)| *q == addr) {
                        retire = true;
                    } else {
                        // SAFETY: the dropping wrapper still holds its reference, so the
                        // queue is live; this reference is released by `prune_retired`.
                        let retained =
                            unsafe { opencl3::command_queue::retain_command_queue(queue) };
                        if retained.is_ok() {
                            retired.push((addr, None));
                            retire = true;
                        }
                    }
                }
            }
        }
    }
    prune_retired();
    retire
}

/// Hands the retired `queue` its marker (after its last command; `None` where none could be
/// enqueued: the exit's drain then enqueues one). A newer marker replaces an older one.
pub(super) fn retired_marker(queue: raw::cl_command_queue, marker: Option<ClEvent>) {
    let addr = queue as QueueAddr;
    let old = {
        let mut retired = RETIRED.lock();
        match retired.iter_mut().find(|(q, _)| *q == addr) {
            Some((_, m)) => std::mem::replace(m, marker),
            None => marker,
        }
    };
    drop(old);
}

/// Releases the retired queues whose marker is over (each with its marker), outside the
/// registry's locks; a queue retired without a marker stays until the exit's drain. A marker
/// that failed releases its queue too but leaves the exit unsure ([`UNSURE`]).
pub(super) fn prune_retired() {
    if crate::fork_state::in_bad_fork() {
        // The queues belong to the parent: no driver call here.
        return;
    }
    let over: Vec<(QueueAddr, Option<ClEvent>)> = {
        let mut retired = RETIRED.lock();
        if retired.is_empty() {
            return;
        }
        let mut over = Vec::new();
        let mut i = 0;
        while i < retired.len() {
            let done = retired[i].1.as_ref().is_some_and(|m| !pending(m));
            if done {
                over.push(retired.swap_remove(i));
            } else {
                i += 1;
            }
        }
        over
    };
    for (addr, marker) in over {
        drop(marker);
        // SAFETY: `wrapper_dropped` retained this reference for the registry; nothing else
        // uses it.
        let _ =
            unsafe { opencl3::command_queue::release_command_queue(addr as raw::cl_command_queue) };
    }
}

/// Whether `marker` (after a queue's commands) may still run: queued, submitted or running.
/// A failed one is over but sets [`UNSURE`]: a command before it failed, and a driver may
/// then end the marker while earlier commands stay queued. One whose status cannot be read
/// is over (nothing more can be learned).
fn pending(marker: &ClEvent) -> bool {
    match marker.status() {
        Ok(EventStatus::Queued | EventStatus::Submitted | EventStatus::Running) => true,
        Ok(EventStatus::Error(_)) => {
            UNSURE.store(true, Ordering::SeqCst);
            false
        }
        _ => false,
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn drain_at_exit(status: libc::c_int, _: *mut libc::c_void) {
    if exit_drain() {
        end_now(status);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
extern "C" fn drain_at_exit() {
    exit_drain();
}

/// The exit's work, once per process (not in a bad fork child): stops the other threads'
/// driver calls, then drains the queues. Returns whether the process must end before the
/// libraries' destructors ([`end_now`]): another thread is still inside a driver call (the
/// wait for it gave up: NVIDIA's build of review h37's 800 kernels outlasted the 30 s cap,
/// and the destructors run under it died with SIGSEGV, 1 of 3 children on an H100,
/// 2026-12-06), or the drain gave up at [`DRAIN_CAP`] with the driver still working.
fn exit_drain() -> bool {
    if EXIT_DRAINED.swap(true, Ordering::SeqCst) || crate::fork_state::in_bad_fork() {
        return false;
    }
    // A panic must not unwind into libc.
    std::panic::catch_unwind(|| {
        let _ = DRAINING.try_with(|d| d.set(true));
        let stopped = stop_other_threads(DRAIN_LIMIT, DRAIN_CAP);
        let start = Instant::now();
        let drained = drain_while_busy(DRAIN_LIMIT, DRAIN_CAP);
        !stopped || (!drained && start.elapsed() >= DRAIN_CAP)
    })
    .unwrap_or(false)
}

/// Sets the exit flag, then waits until no other thread is inside a driver call, for as long
/// as those threads or the driver's work (a build compiles in its calling thread; under load
/// one takes seconds): it gives up as [`drain_while_busy`] does, after `stall` without their
/// CPU progress or after `cap`. From then on no other thread enters the driver through the
/// runtime; returns whether none is inside it any more (`false`: the wait gave up).
fn stop_other_threads(stall: Duration, cap: Duration) -> bool {
    EXITING.store(true, Ordering::SeqCst);
    let own = SLOT.try_with(|s| Arc::clone(&s.0)).ok();
    let others: Vec<(Arc<AtomicU32>, libc::pid_t)> = THREADS
        .lock()
        .iter()
        .filter(|(s, _)| own.as_ref().is_none_or(|o| !Arc::ptr_eq(o, s)))
        .cloned()
        .collect();
    // Every such thread's CPU time, inside a driver call or not, so that the measure only
    // grows.
    let tids: Vec<libc::pid_t> = others.iter().map(|&(_, tid)| tid).collect();
    let mut give_up = busy_for(stall, cap, || {
        progress_cpu_time().saturating_add(cpu_time_of(&tids))
    });
    loop {
        if others.iter().all(|(s, _)| s.load(Ordering::SeqCst) == 0) {
            return true;
        }
        if give_up() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until every command enqueued so far on every live queue (and on every dropped one
/// still kept for the exit) is over, or until `limit` has passed; returns whether all were
/// over. Never blocks in the driver: a marker per queue is polled (OpenCL 3.0 §5.11), 1 ms
/// apart. Once a failure was passed on to a command in this process, markers no longer tell
/// (see the module docs): the markers over, it waits for the driver's threads to go idle
/// (under 12.5 ms of CPU time in 250 ms, within `limit`) and returns `false`.
pub fn drain(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    drain_until(|| Instant::now() >= deadline)
}

/// Waits until every command enqueued so far on every live queue is over, for as long as the
/// driver works: returns `false` once the driver's threads (those that appeared while the
/// devices were enumerated or a context was created; where none is known, every thread but
/// this one) used less than `stall / 20` of CPU time within a window of `stall`, or once `cap`
/// has passed; `true` when all were over. The exit's drains use it with [`DRAIN_LIMIT`] and
/// [`DRAIN_CAP`]: PoCL compiles and runs kernels in its worker threads, so a backlog it works
/// through is waited for, and a queue that no thread advances (held by a user event; or a
/// GPU's kernel, which costs the host no CPU time) is given up after one idle window, as
/// [`drain`] does.
pub fn drain_while_busy(stall: Duration, cap: Duration) -> bool {
    drain_until(busy_for(stall, cap, progress_cpu_time))
}

/// The "give up" test of a wait for work measured by `cpu` (a CPU-time clock): true once
/// `cap` passed since this was made, or once `cpu` advanced less than `stall / 20` within a
/// window of `stall` (5% of one core: slow progress on a loaded machine still counts, an idle
/// driver does not).
fn busy_for(stall: Duration, cap: Duration, cpu: impl Fn() -> Duration) -> impl FnMut() -> bool {
    let start = Instant::now();
    let mut window = (start, cpu());
    move || {
        let now = Instant::now();
        if now.duration_since(start) >= cap {
            return true;
        }
        if now.duration_since(window.0) < stall {
            return false;
        }
        let used = cpu();
        let idle = used.saturating_sub(window.1) < stall / 20;
        window = (now, used);
        idle
    }
}

/// The threads the driver made (Linux thread ids): the ones that appeared while the devices
/// were enumerated or a context was created ([`note_driver_threads`]). PoCL starts its worker
/// threads when its devices are enumerated; they build and run the kernels. A thread another
/// part of the program started meanwhile is counted too (the drain then waits longer, never
/// shorter).
static DRIVER_THREADS: Mutex<Vec<libc::pid_t>> = Mutex::new(Vec::new());

/// The process's threads now (`/proc/self/task`; empty where it cannot be read).
pub(crate) fn threads_now() -> Vec<libc::pid_t> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Counts the threads that exist now but not in `before` as the driver's (see
/// [`DRIVER_THREADS`]).
pub(crate) fn note_driver_threads(before: &[libc::pid_t]) {
    let new: Vec<libc::pid_t> = threads_now()
        .into_iter()
        .filter(|t| !before.contains(t))
        .collect();
    if new.is_empty() {
        return;
    }
    let mut known = DRIVER_THREADS.lock();
    for t in new {
        if !known.contains(&t) {
            known.push(t);
        }
    }
}

/// CPU time the driver's threads ([`DRIVER_THREADS`]) used so far, from
/// `/proc/self/task/<tid>/stat` (user and system time, in clock ticks); `None` when none is
/// known. A thread that ended counts nothing.
fn driver_cpu_time() -> Option<Duration> {
    let threads = DRIVER_THREADS.lock().clone();
    (!threads.is_empty()).then(|| cpu_time_of(&threads))
}

/// CPU time the threads `tids` of this process used so far, from `/proc/self/task/<tid>/stat`
/// (user and system time, in clock ticks); a thread that ended counts nothing.
fn cpu_time_of(tids: &[libc::pid_t]) -> Duration {
    if tids.is_empty() {
        return Duration::ZERO;
    }
    // SAFETY: sysconf takes a constant name and cannot fail in a way that harms.
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&t| t > 0)
        .unwrap_or(100);
    let total: u64 = tids
        .iter()
        .filter_map(|tid| {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            // Fields after the command name (which may hold spaces), from field 3 on: utime
            // and stime are fields 14 and 15.
            let rest = &stat[stat.rfind(')')? + 2..];
            let mut fields = rest.split(' ').skip(11);
            let user: u64 = fields.next()?.parse().ok()?;
            let system: u64 = fields.next()?.parse().ok()?;
            Some(user + system)
        })
        .sum();
    Duration::from_millis(total.saturating_mul(1000) / ticks)
}

/// The CPU time that measures the drain's progress: the driver's threads' where they are
/// known, else every thread's but this one.
fn progress_cpu_time() -> Duration {
    driver_cpu_time().unwrap_or_else(others_cpu_time)
}

/// CPU time the process's threads other than this one used so far (both clocks of
/// `clock_gettime`, POSIX; zero where one cannot be read, which reads as no progress).
fn others_cpu_time() -> Duration {
    fn clock(id: libc::clockid_t) -> Option<Duration> {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec for the call's duration.
        let rc = unsafe { libc::clock_gettime(id, &mut t) };
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u32::try_from(t.tv_nsec).ok()?;
        (rc == 0).then(|| Duration::new(secs, nanos))
    }
    match (
        clock(libc::CLOCK_PROCESS_CPUTIME_ID),
        clock(libc::CLOCK_THREAD_CPUTIME_ID),
    ) {
        (Some(process), Some(thread)) => process.saturating_sub(thread),
        _ => Duration::ZERO,
    }
}

/// Polls a marker on every live queue (and the dropped queues' markers), 1 ms apart, until all
/// are over (`true`) or `give_up` says so (`false`); once markers no longer tell ([`UNSURE`]),
/// then also until the driver's threads are idle, returning `false`.
fn drain_until(mut give_up: impl FnMut() -> bool) -> bool {
    if crate::fork_state::in_bad_fork() {
        return false;
    }
    // Each live queue, and each retired one without a marker, retained under the registry
    // locks, so that none is released meanwhile; the retired queues' markers.
    let (retained, mut markers): (Vec<raw::cl_command_queue>, Vec<ClEvent>) = {
        let queues = QUEUES.lock();
        let retired = RETIRED.lock();
        let unmarked = retired.iter().filter(|(_, m)| m.is_none()).map(|&(q, _)| q);
        let retained = queues
            .iter()
            .map(|&(addr, _, _)| addr)
            .chain(unmarked)
            .filter_map(|addr| {
                let q = addr as raw::cl_command_queue;
                // SAFETY: the registry lists queues that a live wrapper holds a reference to,
                // and the wrapper's drop takes the lock before releasing it; a retired queue
                // holds a reference of the registry's, released only once it left the list.
                let ok = unsafe { opencl3::command_queue::retain_command_queue(q) }.is_ok();
                ok.then_some(q)
            })
            .collect();
        let markers = retired.iter().filter_map(|(_, m)| m.clone()).collect();
        (retained, markers)
    };
    // The wrappers own the references retained above (and count themselves in; the registry
    // lock is free again).
    let queues: Vec<CommandQueue> = retained
        .into_iter()
        .map(|q| CommandQueue::counted(q, false))
        .collect();
    markers.extend(queues.iter().filter_map(|q| {
        let m = q.enqueue_marker(&[]).ok()?;
        let _ = q.flush();
        Some(m)
    }));
    // (Once none is pending, every marker was read: a failed one set `UNSURE`.)
    while markers.iter().any(pending) {
        if give_up() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if !UNSURE.load(Ordering::SeqCst) {
        return true;
    }
    // A marker failed (now or before): commands before it may still be queued or running
    // (review h44: 7 of 10 processes returning with a cancelled command after kernels still to
    // compile died with SIGSEGV). Wait for the driver's threads to go idle instead.
    let mut idle = busy_for(IDLE_WINDOW, Duration::MAX, progress_cpu_time);
    while !idle() && !give_up() {
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// The window in which the driver's threads must use less than a twentieth of it in CPU
/// time to count as idle, once markers no longer tell ([`UNSURE`]): 25 clock ticks of 10 ms
/// (a compile advances them every tick).
const IDLE_WINDOW: Duration = Duration::from_millis(250);
