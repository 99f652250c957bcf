//! Commands (markers, barriers, copies, fills, launches, transfers, unmaps) whose last wrapper
//! dropped before the command was over: the runtime keeps their reference until the command
//! is over, then releases it.
//!
//! Why: PoCL (3.1) aborts the process (`PTHREAD ERROR in pocl_update_event_failed`, from
//! `clSetUserEventStatus` or a later command of the queue) when a marker or barrier whose
//! event the application already released is failed through its wait list (a user event set
//! to an error status, or a failed command it waits on). The same failure is handled cleanly
//! while the application still holds the event. Commands that use memory objects (copies,
//! fills, kernels, unmaps) are exposed as well: PoCL keeps one more reference to such a
//! command's event per buffer (the buffer's "last event"), but drops it when a later command
//! uses the buffer or the buffer is freed (review h32: a fill followed by another fill of its
//! buffer, two launches on one buffer, a pinned buffer's unmap, each aborted). OpenCL 3.0
//! §5.11 lets an application release an event at any time, so this is a driver defect; safe
//! code must not reach it, and the runtime drops many events at once (every barrier it
//! enqueues for a wait, launches without an event, the unmap of a pinned buffer). PoCL 4.0
//! retains the command while it passes a failure on: only the queues of PoCL before 4.0
//! ([`super::Platform::frees_failed_events`]) hand their commands' events here (and ask for
//! an event where they would pass NULL), so NVIDIA's launches and copies pay none of this; a
//! raw event wrapped from foreign code is handed here whatever its driver.
//!
//! A command failed through its wait list is not over for this purpose as soon as its status
//! reads failed: PoCL writes the error status first, passes the failure on to the commands
//! waiting on it, and only then drops the queue's reference and locks the event once more. A
//! reference released in that window by another thread (one that read the status) is the
//! last one again (review h29 saw the abort once, in a loaded run). Within PoCL the whole
//! passing-on runs inside the `clSetUserEventStatus` call that started it, so every error
//! status the runtime sets goes through [`set_user_status`], which counts the calls in
//! progress, and an event whose status is an error is over only while none is
//! ([`is_over`]). A failure started through a raw handle by foreign code is not counted.
//!
//! The list is pruned (its finished events released) when it has doubled since the last
//! pruning, and whenever [`super::live_objects`] is read, so it holds about as many events as
//! are unfinished at once. Reading a status is one non-blocking `clGetEventInfo`; nothing here
//! waits, and the lock is never held across a driver call that can call back.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use opencl3::event as cle;

use super::{raw, release};

/// Pruning starts once this many events are held.
const FIRST_PRUNE: usize = 64;
const EXECUTION_STATUS: u32 = 0x11D3;
/// `CL_INVALID_OPERATION`: a user event whose status was set already.
const CL_INVALID_OPERATION: i32 = -59;

/// One owned event reference (also `notify_lists`' entries).
pub(super) struct HeldEvent(pub(super) raw::cl_event);

// SAFETY: a `cl_event` handle is usable from any thread (OpenCL 3.0 appendix A.2: every call
// made on it here, clGetEventInfo and clReleaseEvent, is thread-safe); the list owns one
// reference per entry, released exactly once (by `prune`).
unsafe impl Send for HeldEvent {}

struct Held {
    events: Vec<HeldEvent>,
    prune_at: usize,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    events: Vec::new(),
    prune_at: FIRST_PRUNE,
});

/// Calls of `clSetUserEventStatus` with an error status in progress ([`set_user_status`]).
static FAILING: AtomicUsize = AtomicUsize::new(0);

/// Whether a queue of PoCL before 4.0 was seen ([`note_frees_failed_events`]): only then do
/// error statuses exclude that platform's enqueues ([`EXCLUSION`]).
static FREES_FAILED_EVENTS: AtomicBool = AtomicBool::new(false);

/// Error statuses set by the runtime (write) against the wait-list checks and enqueue calls
/// of PoCL-before-4.0 queues (read). PoCL 3.1 enters a command in the notify list of each
/// event it waits on without looking at a failed status, and passes a failure on only once,
/// within the `clSetUserEventStatus` call: a command entered after that never runs (review
/// h32). A queue of such a platform checks its wait list for failed events (then it waits on
/// a stand-in instead) and enqueues under the read side, also a command with an empty wait
/// list (it waits on the queue's previous command: a failure passed on while PoCL enters it
/// in that command's notify list crashed, review h38), and a blocking transfer as a
/// non-blocking one and a host wait outside the lock; a failure is set, and passed on,
/// under the write side: each sees the other's work whole. Neither side waits for a command
/// or calls user code while holding it, and PoCL 3.1 calls no completion callback for a
/// failed command (so none runs inside the write side). A process that never saw such a
/// queue takes neither side.
static EXCLUSION: RwLock<()> = RwLock::new(());

thread_local! {
    /// Whether this thread holds the write side of [`EXCLUSION`].
    static EXCLUDING: Cell<bool> = const { Cell::new(false) };
}

/// The write side of [`EXCLUSION`], marked held on its thread while it lives.
struct Excluding(#[allow(dead_code)] RwLockWriteGuard<'static, ()>);

impl Excluding {
    fn begin(guard: RwLockWriteGuard<'static, ()>) -> Excluding {
        EXCLUDING.set(true);
        Excluding(guard)
    }
}

impl Drop for Excluding {
    fn drop(&mut self) {
        EXCLUDING.set(false);
    }
}

/// Notes a queue of PoCL before 4.0: from now on error statuses exclude its enqueues.
pub(super) fn note_frees_failed_events() {
    FREES_FAILED_EVENTS.store(true, Ordering::SeqCst);
}

/// The read side of [`EXCLUSION`], for a wait-list check and enqueue call of a queue of PoCL
/// before 4.0: held from the check until the enqueue call returned, never over a wait.
pub(super) fn enqueue_side() -> RwLockReadGuard<'static, ()> {
    EXCLUSION.read()
}

/// User events whose status a thread is setting right now ([`set_user_status`]), with that
/// thread: each handle at most once, so that two setters of one event never both reach the
/// driver.
static SETTING: Mutex<Vec<(usize, ThreadId)>> = Mutex::new(Vec::new());

/// Signalled when a claim in [`SETTING`] is given up.
static SETTING_DONE: Condvar = Condvar::new();

/// How long a setter waits for another thread's claim on the same event before it gives up
/// and is refused (the holder makes one status read and one non-blocking driver call; the
/// bound only keeps a driver that called back into a second thread within the set, and that
/// thread setting the same event, from waiting for ever).
const CLAIM_WAIT: Duration = Duration::from_secs(2);

/// `clSetUserEventStatus` calls the runtime made ([`user_status_sets`]).
static USER_STATUS_SETS: AtomicU64 = AtomicU64::new(0);

/// How many times the runtime has called `clSetUserEventStatus` in this process (its own
/// sets: [`super::ClEvent::set_complete`] / `set_failed`, forwards, unset user events failed
/// at drop). For tests of the once-only rule ([`set_user_status`]); not a statistic.
#[doc(hidden)]
pub fn user_status_sets() -> u64 {
    USER_STATUS_SETS.load(Ordering::SeqCst)
}

/// A claim on setting one user event's status ([`SETTING`]), given up when dropped.
struct Setting(usize);

impl Setting {
    /// Claims `event`. While another thread holds its claim, waits until that thread has
    /// set it (or for [`CLAIM_WAIT`] at most): the caller then reads the status that thread
    /// set, so a refusal always means "set". `None` when this thread holds the claim already
    /// (a driver calling back within the set) or the wait gave up.
    fn claim(event: raw::cl_event) -> Option<Setting> {
        let key = event as usize;
        let me = std::thread::current().id();
        let deadline = Instant::now() + CLAIM_WAIT;
        let mut setting = SETTING.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match setting.iter().find(|c| c.0 == key) {
                None => break,
                Some(&(_, holder)) if holder == me => return None,
                Some(_) => {
                    let left = deadline.checked_duration_since(Instant::now())?;
                    setting = SETTING_DONE
                        .wait_timeout(setting, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        setting.push((key, me));
        Some(Setting(key))
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        let mut setting = SETTING.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = setting.iter().position(|c| c.0 == self.0) {
            setting.swap_remove(at);
        }
        drop(setting);
        SETTING_DONE.notify_all();
    }
}

/// `clSetUserEventStatus(event, status)`, counted in progress while `status` is an error
/// status (negative), for [`is_over`], and then under the write side of [`EXCLUSION`] once a
/// queue of PoCL before 4.0 was seen. The one way the runtime sets a user event's status.
///
/// Once only (OpenCL 3.0 §5.11.2; `CL_INVALID_OPERATION` otherwise): NVIDIA's driver accepts a
/// second call and overwrites the status, so a forward's late set turned a target already
/// completed into a failed one (review h50's model on an H100: a slot read `Error(-5)` after
/// `Complete`). Checked here for every driver: the caller claims the event, then finds it
/// still `CL_SUBMITTED`, then sets it. A concurrent setter on another thread waits for the
/// claim (bounded, [`Setting::claim`]) and then reads the status the first one set, so it is
/// refused only once the event is set (review h64). The claim's lock is held for the claim
/// alone, never over the driver call.
pub(super) fn set_user_status(event: raw::cl_event, status: i32) -> Result<(), i32> {
    let Some(_claim) = Setting::claim(event) else {
        return Err(CL_INVALID_OPERATION);
    };
    if !matches!(
        cle::get_event_info(event, EXECUTION_STATUS).map(|v| v.to_int()),
        Ok(cle::CL_SUBMITTED)
    ) {
        return Err(CL_INVALID_OPERATION);
    }
    USER_STATUS_SETS.fetch_add(1, Ordering::SeqCst);
    if status >= 0 {
        return cle::set_user_event_status(event, status);
    }
    // A failure passed on: markers after the failed command may end before earlier commands
    // ran (PoCL 3.1), so the exit can no longer judge the queues by their markers alone.
    super::at_exit::note_failure();
    // Not again on a thread that holds the write side already (a driver calling a completion
    // callback that sets a status synchronously, within the outer call): the lock does not
    // nest.
    let _excluded = (FREES_FAILED_EVENTS.load(Ordering::SeqCst) && !EXCLUDING.get())
        .then(|| Excluding::begin(EXCLUSION.write()));
    FAILING.fetch_add(1, Ordering::SeqCst);
    let set = cle::set_user_event_status(event, status);
    FAILING.fetch_sub(1, Ordering::SeqCst);
    set
}

/// Whether no error status set by the runtime is being passed on right now (see the module
/// docs).
pub(super) fn no_failure_in_progress() -> bool {
    FAILING.load(Ordering::SeqCst) == 0
}

/// True when the command of `event` is over: `CL_COMPLETE`; an error status while no error
/// status set by the runtime is still being passed on (see the module docs); or a status that
/// cannot be read (nothing more can be learned: the reference is released).
pub(super) fn is_over(event: raw::cl_event) -> bool {
    match cle::get_event_info(event, EXECUTION_STATUS).map(|v| v.to_int()) {
        Ok(0) | Err(_) => true,
        // The status read orders after the write of the error status, made after the
        // setter's increment: a setter still counted may still be passing it on.
        Ok(status) if status < 0 => FAILING.load(Ordering::SeqCst) == 0,
        Ok(_) => false,
    }
}

/// Takes over one reference to `event` (a command not over yet), which stays
/// counted in [`super::live_objects`] until it is released. Returns how many held references
/// it released (the caller uncounts them).
#[must_use]
pub(super) fn hold(event: raw::cl_event) -> usize {
    let over = {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.events.push(HeldEvent(event));
        if held.events.len() < held.prune_at {
            return 0;
        }
        let over = take_over(&mut held.events);
        held.prune_at = FIRST_PRUNE.max(2 * held.events.len());
        over
    };
    release_all(over)
}

/// Releases every held event whose command is over; returns how many (the caller uncounts
/// them).
#[must_use]
pub(super) fn prune() -> usize {
    let over = {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if held.events.is_empty() {
            return 0;
        }
        let over = take_over(&mut held.events);
        held.prune_at = FIRST_PRUNE.max(2 * held.events.len());
        over
    };
    release_all(over)
}

/// Removes the events that are over from `events` and returns them.
fn take_over(events: &mut Vec<HeldEvent>) -> Vec<HeldEvent> {
    let mut over = Vec::new();
    let mut i = 0;
    while i < events.len() {
        if is_over(events[i].0) {
            over.push(events.swap_remove(i));
        } else {
            i += 1;
        }
    }
    over
}

/// Releases the references of `events` (outside the list's lock); returns how many.
pub(super) fn release_all(events: Vec<HeldEvent>) -> usize {
    let n = events.len();
    for e in events {
        // SAFETY: the list owned exactly one reference to this live event; it is released
        // once, here, after its command is over.
        release::note("clReleaseEvent", unsafe { cle::release_event(e.0) });
    }
    n
}
