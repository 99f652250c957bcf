//! The forwards of [`ClEvent::forward_to`] that may still have to pass on a failure.
//!
//! A forward sets its target from the driver's completion callback, which OpenCL 3.0 §5.11.4
//! calls "when the command completes or terminates abnormally". PoCL (3.1) never calls it
//! for a command that failed (through a failed event of its wait list): the target would stay
//! unset and every command waiting on it (a cross-device wait) would wait forever. So each
//! forward is also kept here until its source is over, and [`sweep`] sets the target of every
//! forward whose source failed, to the same error status. It runs wherever a failure starts
//! in the runtime: after a user event is set to an error status ([`ClEvent::set_failed`], an
//! unset user event failed on drop, a forward passing on a failure), after a forward is
//! registered (its source may have failed already) and when [`super::live_objects`] is read.
//! A failure set through a raw handle by foreign code reaches the targets at the next sweep.
//! A target set twice keeps its first status (the callback and a sweep may both set it). A
//! forward of [`ClEvent::complete_when_over`] absorbs a failure: its target is completed
//! (`CL_COMPLETE`) where another forward's would be failed.
//!
//! The driver's callback gets a key, not the target: the clone of the target it needs waits
//! in [`TARGETS`], taken by the callback or, for a source that failed (whose callback PoCL
//! never makes), by the sweep that passes the failure on. Whoever takes it releases it, so a
//! failed forward leaves no event reference behind.

use std::sync::{Mutex, PoisonError};

use super::keyed::Keyed;
use super::{ClEvent, EventStatus};

struct Forward {
    source: ClEvent,
    target: ClEvent,
    /// The key of the target's clone in [`TARGETS`], for the driver's callback.
    key: usize,
    /// Whether a failed source completes the target instead of failing it
    /// ([`ClEvent::complete_when_over`]).
    absorbs: bool,
}

impl Forward {
    /// The status the target gets when the source failed with `code`.
    fn status_for(&self, code: i32) -> i32 {
        if self.absorbs {
            0
        } else {
            code
        }
    }
}

/// The targets' clones waiting for their source's callback, by key, with whether the forward
/// absorbs a failure.
static TARGETS: Mutex<Keyed<(ClEvent, bool)>> = Mutex::new(Keyed::new());

/// Keeps a clone of `target` for a callback; returns its key (never 0).
pub(super) fn hold_target(target: &ClEvent, absorbs: bool) -> usize {
    let clone = target.clone();
    TARGETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert((clone, absorbs))
}

/// Takes the clone kept under `key` and whether its forward absorbs a failure, if nobody took
/// it yet (the caller releases it, outside the lock).
pub(super) fn take_target(key: usize) -> Option<(ClEvent, bool)> {
    TARGETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take(key)
}

struct Forwards {
    list: Vec<Forward>,
    /// [`register`] sweeps once the list is this long (then twice what is left), so the list
    /// stays about as long as the number of unfinished forwards at a time, at O(1) amortized.
    sweep_at: usize,
}

/// Registration sweeps start once this many forwards are kept.
const FIRST_SWEEP: usize = 64;

static FORWARDS: Mutex<Forwards> = Mutex::new(Forwards {
    list: Vec::new(),
    sweep_at: FIRST_SWEEP,
});

/// Keeps the forward from `source` to `target` until `source` is over. When `source` has
/// failed already, sets `target` at once.
/// `key` is the target's clone held for the callback ([`hold_target`]). `user_source`: the
/// source is a user event, so the forward may close a cycle of forwards between user events
/// ([`closes_cycle`]); then nothing is kept, the target's clone is dropped (the callback
/// then finds nothing to set) and `false` is returned.
pub(super) fn register(
    source: &ClEvent,
    target: &ClEvent,
    key: usize,
    absorbs: bool,
    user_source: bool,
) -> bool {
    if let Ok(EventStatus::Error(code)) = source.status() {
        fail(target, if absorbs { 0 } else { code });
        // The driver may never call back for a failed source.
        drop(take_target(key));
        return true;
    }
    let full = {
        let mut forwards = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked and pushed under one lock: two threads forwarding two events to each other
        // cannot both pass the check.
        if user_source && closes_cycle(&forwards.list, source, target) {
            drop(forwards);
            drop(take_target(key));
            return false;
        }
        forwards.list.push(Forward {
            // Unguarded: the application's last wrapper of an unset user event still fails
            // it on drop (then the sweep fails the target).
            source: source.clone_unguarded(),
            target: target.clone(),
            key,
            absorbs,
        });
        forwards.list.len() >= forwards.sweep_at
    };
    // A failure between the status read above and the push is seen here (or by the sweep of
    // the thread that set it, which runs after its status is set).
    if full || matches!(source.status(), Ok(EventStatus::Error(_))) {
        sweep();
    }
    true
}

/// Whether a forward from the user event `source` to `target` would close a cycle: `target`
/// is `source`, or reaches it through kept forwards whose sources are not over yet. Each event
/// of such a cycle is a forward's target, held (guarded) by it until its source is over, so
/// once the application dropped its own wrappers none can be set any more: every command
/// waiting on one would wait for ever. A forward through a command (a command waiting on a
/// user event, forwarded to another) is not seen here: the runtime keeps no wait lists.
fn closes_cycle(list: &[Forward], source: &ClEvent, target: &ClEvent) -> bool {
    let goal = source.as_raw();
    let mut seen = vec![target.as_raw()];
    let mut next = 0;
    while let Some(&at) = seen.get(next) {
        next += 1;
        if at == goal {
            return true;
        }
        for f in list.iter().filter(|f| f.source.as_raw() == at) {
            let live = !matches!(
                f.source.status(),
                Ok(EventStatus::Complete | EventStatus::Error(_))
            );
            let to = f.target.as_raw();
            if live && !seen.contains(&to) {
                seen.push(to);
            }
        }
    }
    false
}

/// Sets the user event `target` to the error status `code` (or `CL_COMPLETE`, 0, for a forward
/// that absorbs failures). A target already set (by the callback, or foreign code) refuses a
/// second status: nothing to do then.
fn fail(target: &ClEvent, code: i32) {
    if super::held::set_user_status(target.as_raw(), code).is_ok() && code < 0 {
        // The commands waiting on `target` failed too: they may be other forwards' sources.
        sweep();
    }
}

/// Drops the forwards whose source is over, first setting the target of each whose source
/// failed to that error status; repeats while that failed more (a target may be the source of
/// another forward through the commands waiting on it). No wait; no lock held while a status
/// is set or an event released.
pub(super) fn sweep() {
    loop {
        // The closures of `on_complete` waiting for a failed event, which the driver may
        // never hand over (see `callbacks`).
        super::callbacks::sweep_failed();
        let (failed, done) = {
            let mut guard = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
            let forwards = &mut *guard;
            if forwards.list.is_empty() {
                return;
            }
            let (mut failed, mut done) = (Vec::new(), Vec::new());
            let mut i = 0;
            let list = &mut forwards.list;
            while i < list.len() {
                match list[i].source.status() {
                    Ok(EventStatus::Error(code)) => failed.push((list.swap_remove(i), code)),
                    // Complete: the callback sets the target. Unreadable: nothing to learn.
                    Ok(EventStatus::Complete) | Err(_) => done.push(list.swap_remove(i)),
                    Ok(_) => i += 1,
                }
            }
            forwards.sweep_at = FIRST_SWEEP.max(2 * list.len());
            (failed, done)
        };
        drop(done);
        if failed.is_empty() {
            return;
        }
        for (forward, code) in failed {
            // See `fail`; the loop sweeps again instead of recursing.
            let _ = super::held::set_user_status(forward.target.as_raw(), forward.status_for(code));
            // The driver may never call back for the failed source: its clone goes now.
            drop(take_target(forward.key));
        }
    }
}
