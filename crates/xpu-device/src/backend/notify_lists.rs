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
//! is released only once every event that may list it is over (complete, or failed): the
//! commands of its context created before it (its queue's previous command, the last command
//! on one of its buffers, its wait list's commands) and the user events of its wait list. A
//! user event it did not wait on, or another context's command, never lists it: an unset
//! cancellation token or a closed gate does not keep failed commands (review h40: 100,000
//! failures kept 67 MB). Pruning runs when the list has doubled
//! since the last one, and whenever [`super::live_objects`] is read, so the list holds about
//! as many events as are unfinished at once, plus the failed ones behind them. A failure
//! still being passed on (see `held`) keeps the failed events. Nothing here waits; the lock is
//! never held across a driver call that can call back (status queries and retains only; the
//! releases happen outside it).
//!
//! Creation order is told by two numbers per event, not by the list's order: a command takes a
//! [`Ticket`] before its enqueue call (its first number) and is registered after the call
//! returned (its last number), so an event created before another always has a first number
//! below the other's last, whichever thread registers first. A failed event is released only
//! when no such event pending, and no ticket of its context outstanding, has a first number
//! below its last: a
//! command enqueued on another thread before a failed one (its queue's previous command) is
//! waited for even while that thread has not registered it yet.
//!
//! Not covered: events of raw handles wrapped from foreign code.

use std::sync::{Mutex, MutexGuard, PoisonError};

use opencl3::event as cle;

use super::held::{release_all, HeldEvent};
use super::raw;

/// Pruning starts once this many events are registered.
const FIRST_PRUNE: usize = 64;
const EXECUTION_STATUS: u32 = 0x11D3;

struct Order {
    events: Vec<Entry>,
    /// The first numbers of the tickets taken and not registered or dropped yet, with their
    /// queues' contexts.
    outstanding: Vec<(u64, usize)>,
    /// The next number to hand out.
    next: u64,
    prune_at: usize,
}

/// A registered event, its numbers and what it may wait on (see the module docs).
struct Entry {
    event: HeldEvent,
    /// Taken before the event was created.
    first: u64,
    /// Taken after the event was created.
    last: u64,
    /// The context of a command's queue (0: unknown); unused for a user event.
    context: usize,
    /// A user event (it waits on nothing; commands wait on it only through their wait lists).
    user: bool,
    /// The events of the command's wait list, as handles (compared, never used).
    waits: Vec<usize>,
}

static ORDER: Mutex<Order> = Mutex::new(Order {
    events: Vec::new(),
    outstanding: Vec::new(),
    next: 0,
    prune_at: FIRST_PRUNE,
});

fn order() -> MutexGuard<'static, Order> {
    ORDER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A number taken before a command's enqueue call, with the command's queue's context and
/// wait list, handed to [`register`] with the command's event; dropped unused when the call
/// failed. While it is outstanding, no failed command of that context registered after it was
/// taken is released.
#[must_use]
pub(super) struct Ticket {
    first: u64,
    context: usize,
    waits: Vec<usize>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut order = order();
        forget_outstanding(&mut order, self.first);
    }
}

fn forget_outstanding(order: &mut Order, first: u64) {
    if let Some(i) = order.outstanding.iter().position(|&(n, _)| n == first) {
        order.outstanding.swap_remove(i);
    }
}

/// A ticket for a command about to be enqueued on a queue of `context` (0 when unknown) after
/// the events `waits` (see the module docs).
pub(super) fn ticket(context: usize, waits: impl IntoIterator<Item = raw::cl_event>) -> Ticket {
    let waits = waits.into_iter().map(|e| e as usize).collect();
    let mut order = order();
    let first = order.next;
    order.next += 1;
    order.outstanding.push((first, context));
    Ticket {
        first,
        context,
        waits,
    }
}

/// Registers the event `event` of the command enqueued under `ticket` (retained here; the
/// caller keeps its own reference). Only lets the ticket go when the event cannot be retained.
pub(super) fn register(event: raw::cl_event, ticket: Ticket) {
    push(event, ticket, false);
}

/// Registers a user event just created (it waits on nothing, so it is in no notify list;
/// a failed command that waited on it is kept while it is pending).
pub(super) fn register_user(event: raw::cl_event) {
    push(event, ticket(0, []), true);
}

fn push(event: raw::cl_event, mut ticket: Ticket, user: bool) {
    // SAFETY: the caller passes a live event it holds a reference to; this takes one more,
    // owned by the list.
    if unsafe { cle::retain_event(event) }.is_err() {
        return;
    }
    let (first, context, waits) = (
        ticket.first,
        ticket.context,
        std::mem::take(&mut ticket.waits),
    );
    let over = {
        let mut order = order();
        forget_outstanding(&mut order, first);
        // Taken out above, under the same lock as the entry's push.
        std::mem::forget(ticket);
        let last = order.next;
        order.next += 1;
        order.events.push(Entry {
            event: HeldEvent(event),
            first,
            last,
            context,
            user,
            waits,
        });
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
        let mut order = order();
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
    let status: Vec<Option<i32>> = order
        .events
        .iter()
        .map(|e| {
            cle::get_event_info(e.event.0, EXECUTION_STATUS)
                .map(|v| v.to_int())
                .ok()
        })
        .collect();
    let pending: Vec<&Entry> = order
        .events
        .iter()
        .zip(&status)
        .filter(|(_, s)| s.is_some_and(|s| s > 0))
        .map(|(e, _)| e)
        .collect();
    let quiet = super::held::no_failure_in_progress();
    // Whether each event may be released now.
    let free: Vec<bool> = order
        .events
        .iter()
        .zip(&status)
        .map(|(e, s)| match s {
            // Completed with success: every event it waited on completed before it.
            Some(0) => true,
            Some(s) if *s > 0 => false,
            // Failed (or unreadable): freed only when nothing that may still hold it in a
            // notify list is pending and no failure is being passed on.
            _ => quiet && !may_hold(e, &pending, &order.outstanding),
        })
        .collect();
    drop(pending);
    let mut over = Vec::new();
    let mut kept = Vec::with_capacity(free.len());
    for (e, free) in std::mem::take(&mut order.events).into_iter().zip(free) {
        if free {
            over.push(e.event);
        } else {
            kept.push(e);
        }
    }
    order.events = kept;
    order.prune_at = FIRST_PRUNE.max(2 * order.events.len());
    over
}

/// Whether the failed event `failed` may still be in the notify list of a pending event
/// (`pending`) or of a command not registered yet (`outstanding` tickets): a command of its
/// context created before it (its queue's previous command, the last command on one of its
/// buffers, one of its wait list), or a user event of its wait list. Another context's
/// commands, and user events it did not wait on, never list it.
fn may_hold(failed: &Entry, pending: &[&Entry], outstanding: &[(u64, usize)]) -> bool {
    let same_context =
        |context: usize| context == 0 || failed.context == 0 || context == failed.context;
    outstanding
        .iter()
        .any(|&(first, context)| first < failed.last && same_context(context))
        || pending.iter().any(|x| {
            if x.user {
                failed.waits.contains(&(x.event.0 as usize))
            } else {
                x.first < failed.last && same_context(x.context)
            }
        })
}

#[cfg(test)]
mod tests {
    use opencl3::command_queue as clq;

    use super::*;

    /// A marker on `queue` after `wait`, as an enqueue call returns it (not registered).
    fn marker(queue: raw::cl_command_queue, wait: &[raw::cl_event]) -> raw::cl_event {
        // SAFETY: a live queue and live events for the call (clEnqueueMarkerWithWaitList,
        // OpenCL 3.0 §5.12); the returned reference is the caller's.
        unsafe { clq::enqueue_marker_with_wait_list(queue, wait.len() as u32, wait.as_ptr()) }
            .expect("clEnqueueMarkerWithWaitList")
    }

    fn status(event: raw::cl_event) -> i32 {
        cle::get_event_info(event, EXECUTION_STATUS)
            .expect("clGetEventInfo")
            .to_int()
    }

    fn registered(event: raw::cl_event) -> bool {
        order().events.iter().any(|e| e.event.0 == event)
    }

    /// The window between an enqueue call's return and its registration: thread 1's command X
    /// waits behind a gate; thread 2's command F, enqueued after X on the same in-order queue
    /// (so listed in X's notify list), fails and is registered while X is not yet. Releasing
    /// F then would leave X's completion locking a freed event (the PoCL 3.1 abort of the
    /// module docs); F must stay registered until X is registered and over.
    #[test]
    fn a_failed_command_is_kept_while_a_command_created_before_it_is_not_registered_yet() {
        let dev = match crate::device(0) {
            Ok(dev) => dev,
            Err(e) if std::env::var_os("XPU_REQUIRE_DEVICE").is_none() => {
                eprintln!("skipped: no device ({e})");
                return;
            }
            Err(e) => panic!("XPU_REQUIRE_DEVICE is set and device 0 is missing: {e}"),
        };
        let queue = dev.create_queue(Default::default()).expect("a queue");
        if !queue.frees_failed_events() {
            eprintln!("skipped: the driver keeps failed events itself");
            return;
        }
        let q = queue.as_raw();
        let ctx = queue.context_raw().expect("the queue's context");
        let gate = cle::create_user_event(ctx).expect("clCreateUserEvent");
        let failing = cle::create_user_event(ctx).expect("clCreateUserEvent");

        let x_ticket = ticket(ctx as usize, [gate]);
        let x = marker(q, &[gate]);
        let f_ticket = ticket(ctx as usize, [failing]);
        let f = marker(q, &[failing]);
        register(f, f_ticket);
        super::super::held::set_user_status(failing, -5).expect("clSetUserEventStatus");
        assert!(status(f) < 0, "F failed through its wait: {}", status(f));

        prune();
        assert!(
            registered(f),
            "a failed command was released while a command created before it (its queue's \
             previous command, pending) was not registered yet"
        );
        register(x, x_ticket);
        prune();
        assert!(
            registered(f),
            "a failed command was released while its queue's previous command is pending"
        );

        cle::set_user_event_status(gate, 0).expect("clSetUserEventStatus");
        queue.finish().expect("clFinish");
        prune();
        assert!(!registered(x), "a completed command stays registered");
        assert!(
            !registered(f),
            "a failed command stays registered after every command before it is over"
        );
        for e in [x, f, gate, failing] {
            // SAFETY: the test's own reference to each event, released once.
            unsafe { cle::release_event(e) }.expect("clReleaseEvent");
        }
    }
}
