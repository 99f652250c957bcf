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
//! A target set twice keeps its first status (the callback and a sweep may both set it).

use std::sync::{Mutex, PoisonError};

use opencl3::event as cle;

use super::{ClEvent, EventStatus};

struct Forward {
    source: ClEvent,
    target: ClEvent,
}

static FORWARDS: Mutex<Vec<Forward>> = Mutex::new(Vec::new());

/// Keeps the forward from `source` to `target` until `source` is over, then sweeps.
pub(super) fn register(source: &ClEvent, target: &ClEvent) {
    FORWARDS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Forward {
            source: source.clone(),
            target: target.clone(),
        });
    sweep();
}

/// Drops the forwards whose source is over, first setting the target of each whose source
/// failed to that error status; repeats while that failed more (a target may be the source of
/// another forward through the commands waiting on it). No wait; no lock held while a status
/// is set or an event released.
pub(super) fn sweep() {
    loop {
        let (failed, done) = {
            let mut forwards = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
            if forwards.is_empty() {
                return;
            }
            let (mut failed, mut done) = (Vec::new(), Vec::new());
            let mut i = 0;
            while i < forwards.len() {
                match forwards[i].source.status() {
                    Ok(EventStatus::Error(code)) => failed.push((forwards.swap_remove(i), code)),
                    // Complete: the callback sets the target. Unreadable: nothing to learn.
                    Ok(EventStatus::Complete) | Err(_) => done.push(forwards.swap_remove(i)),
                    Ok(_) => i += 1,
                }
            }
            (failed, done)
        };
        drop(done);
        if failed.is_empty() {
            return;
        }
        for (forward, code) in failed {
            // A target already set (by the callback, or foreign code) refuses a second status:
            // nothing to do then.
            let _ = cle::set_user_event_status(forward.target.as_raw(), code);
        }
    }
}
