//! Markers and barriers whose last wrapper dropped before the command was over: the runtime
//! keeps their reference until the command is over, then releases it.
//!
//! Why: PoCL (3.1) aborts the process (`PTHREAD ERROR in pocl_update_event_failed`, from
//! `clSetUserEventStatus` or a later command of the queue) when a marker or barrier whose
//! event the application already released is failed through its wait list (a user event set
//! to an error status, or a failed command it waits on). The same failure is handled cleanly
//! while the application still holds the event, and the other commands (copies, fills,
//! kernels) fail cleanly either way. OpenCL 3.0 §5.11 lets an application release an event at
//! any time, so this is a driver defect; safe code must not reach it, and every barrier the
//! runtime enqueues for a wait (`wait_event`, cross-device waits, gates, the allocator's
//! stream waits) drops its event at once.
//!
//! The list is pruned (its finished events released) when it has doubled since the last
//! pruning, and whenever [`super::live_objects`] is read, so it holds about as many events as
//! are unfinished at once. Reading a status is one non-blocking `clGetEventInfo`; nothing here
//! waits, and the lock is never held across a driver call that can call back.

use std::sync::{Mutex, PoisonError};

use opencl3::event as cle;

use super::{raw, release};

/// Pruning starts once this many events are held.
const FIRST_PRUNE: usize = 64;
const EXECUTION_STATUS: u32 = 0x11D3;

/// One owned event reference.
struct HeldEvent(raw::cl_event);

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

/// True when the command of `event` is over (`CL_COMPLETE` or an error status), or when its
/// status cannot be read (nothing more can be learned: the reference is released).
pub(super) fn is_over(event: raw::cl_event) -> bool {
    cle::get_event_info(event, EXECUTION_STATUS).map_or(true, |v| v.to_int() <= 0)
}

/// Takes over one reference to `event` (a marker or barrier not over yet), which stays
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
fn release_all(events: Vec<HeldEvent>) -> usize {
    let n = events.len();
    for e in events {
        // SAFETY: the list owned exactly one reference to this live event; it is released
        // once, here, after its command is over.
        release::note("clReleaseEvent", unsafe { cle::release_event(e.0) });
    }
    n
}
