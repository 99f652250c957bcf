//! Every event of a PoCL-before-4.0 platform (commands and user events), kept in creation
//! order until it may be freed without a dangling entry in another event's notify list.
//!
//! Why: PoCL (3.1) enters a command in the notify list of every event it waits on (its wait
//! list, and the queue's previous command). When the command fails through one of them (a
//! user event set to an error status, or a failed command), PoCL does not take it out of the
//! lists of the others still pending; once its last reference is released it is freed, and
//! the pending event's completion later locks it: `PTHREAD ERROR in
//! pocl_lock_events_inorder(): Invalid argument`, an abort (or a silent write into freed
//! memory). Review h29's tests, run as threads of one process, ended so 6 of 6 times; a
//! stream wait's barrier was freed while the queue's earlier marker still listed it
//! (`tests/failed_waits.rs` reproduces both shapes, 3 of 3). Other drivers register nothing.
//!
//! How: on such platforms each command's event ([`super::CommandQueue::command_event`]) and
//! each user event ([`super::ClEvent::user`]) is registered here with one reference of its
//! own, in order. An event that completed with success is released at the next pruning (its
//! notifiers all completed before it). An event whose status is an error, or cannot be read,
//! is released only once every event registered before it is over (complete, or failed):
//! the events it waits on were all created before it. Pruning runs when the list has doubled
//! since the last one, and whenever [`super::live_objects`] is read, so the list holds about
//! as many events as are unfinished at once, plus the failed ones behind them. A failure
//! still being passed on (see `held`) keeps the failed events. Nothing here waits; the lock is
//! never held across a driver call that can call back (status queries and retains only; the
//! releases happen outside it).
//!
//! Not covered: an event registered by another thread between its enqueue call's return and
//! its registration, while a command after it fails and is pruned in that window; events of
//! raw handles wrapped from foreign code.

use std::sync::{Mutex, PoisonError};

use opencl3::event as cle;

use super::held::{release_all, HeldEvent};
use super::raw;

/// Pruning starts once this many events are registered.
const FIRST_PRUNE: usize = 64;
const EXECUTION_STATUS: u32 = 0x11D3;

struct Order {
    events: Vec<HeldEvent>,
    prune_at: usize,
}

static ORDER: Mutex<Order> = Mutex::new(Order {
    events: Vec::new(),
    prune_at: FIRST_PRUNE,
});

/// Registers `event` (retained here; the caller keeps its own reference). Does nothing when
/// the event cannot be retained.
pub(super) fn register(event: raw::cl_event) {
    // SAFETY: the caller passes a live event it holds a reference to; this takes one more,
    // owned by the list.
    if unsafe { cle::retain_event(event) }.is_err() {
        return;
    }
    let over = {
        let mut order = ORDER.lock().unwrap_or_else(PoisonError::into_inner);
        order.events.push(HeldEvent(event));
        if order.events.len() < order.prune_at {
            return;
        }
        take_over(&mut order)
    };
    let _ = release_all(over);
}

/// Releases every registered event that may be freed now (see the module docs).
pub(super) fn prune() {
    let over = {
        let mut order = ORDER.lock().unwrap_or_else(PoisonError::into_inner);
        if order.events.is_empty() {
            return;
        }
        take_over(&mut order)
    };
    let _ = release_all(over);
}

/// Removes the events that may be freed from the list (keeping the others in order) and
/// returns them.
fn take_over(order: &mut Order) -> Vec<HeldEvent> {
    let mut over = Vec::new();
    let mut kept = Vec::with_capacity(order.events.len());
    // Whether every event before the current one is over.
    let mut all_over_before = true;
    for e in order.events.drain(..) {
        match cle::get_event_info(e.0, EXECUTION_STATUS).map(|v| v.to_int()) {
            // Completed with success: every event it waited on completed before it.
            Ok(0) => over.push(e),
            Ok(status) if status > 0 => {
                all_over_before = false;
                kept.push(e);
            }
            // Failed (or unreadable): freed only when nothing before it is pending any more
            // and no failure is being passed on; over for the events after it either way.
            _ if all_over_before && super::held::no_failure_in_progress() => over.push(e),
            _ => kept.push(e),
        }
    }
    order.events = kept;
    order.prune_at = FIRST_PRUNE.max(2 * order.events.len());
    over
}
