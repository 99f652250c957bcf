//! The index of forwards from user events (the cycle check's, `forwards::closes_cycle`) costs
//! each forward a bounded number of index steps, kept and dropped: found by a probe of a
//! fan-out of forwards from one user event (2026-12-06). Dropping a forward from the index
//! scanned every forward kept from the same source, so the sweep that dropped a fan-out of
//! `n` forwards once their source completed made n^2 / 2 steps under the global lock (20,000
//! forwards: 1.2 s of `live_objects` on PoCL, stalling every forward in the process). Counted
//! with `forward_index_steps_on_this_thread`, no timing. Run in a child process (the forwards
//! list is global).

mod common;

use std::time::Duration;

use xpu_device::backend::{forward_index_steps_on_this_thread, live_objects, EventStatus};

/// Forwards from the one source.
const FAN_OUT: usize = 4_000;

/// How long a driver's completion callbacks may take to set a forward's target.
const SETTLE: Duration = Duration::from_secs(30);

#[test]
fn a_fan_out_of_forwards_is_indexed_and_dropped_in_steps_linear_in_its_size() {
    let Some((dev, _, _)) = common::device0_queue_in_child() else {
        return;
    };
    let root = dev.create_user_event().unwrap();
    let before = forward_index_steps_on_this_thread();
    let targets: Vec<_> = (0..FAN_OUT)
        .map(|_| {
            let t = dev.create_user_event().unwrap();
            root.forward_to(&t).unwrap();
            t
        })
        .collect();
    let kept = forward_index_steps_on_this_thread() - before;
    root.set_complete().unwrap();
    assert!(common::settles(SETTLE, || targets
        .iter()
        .all(|t| t.status() == Ok(EventStatus::Complete))));
    // Reading the live objects sweeps the forwards whose source is over, on this thread.
    let before = forward_index_steps_on_this_thread();
    let live = live_objects();
    let dropped = forward_index_steps_on_this_thread() - before;
    assert_eq!(live.callbacks, 0, "{live:?}");
    let bound = 4 * FAN_OUT as u64;
    assert!(
        kept <= bound && dropped <= bound,
        "{FAN_OUT} forwards from one user event: {kept} index steps to keep them, {dropped} \
         to drop them (at most {bound} each)"
    );
    println!("scenario-ok");
}

/// Links of the chain whose closing forward is refused.
const LINKS: usize = 2_000;

/// A forward closing a chain of `LINKS` pending forwards between user events is refused in
/// index steps linear in the chain (review h51's probe: the check of the path it found looked
/// each link's forward up by scanning the whole kept list, under the global lock: 35 to 40 ms
/// for 4,000 links on PoCL). Run in a child process (the forwards list is global).
#[test]
fn a_forward_closing_a_long_chain_is_refused_in_steps_linear_in_the_chain() {
    let Some((dev, _, _)) = common::device0_queue_in_child() else {
        return;
    };
    let mut chain = vec![dev.create_user_event().unwrap()];
    for i in 1..LINKS {
        let e = dev.create_user_event().unwrap();
        chain[i - 1].forward_to(&e).unwrap();
        chain.push(e);
    }
    let before = forward_index_steps_on_this_thread();
    let refusal = chain[LINKS - 1].forward_to(&chain[0]);
    let steps = forward_index_steps_on_this_thread() - before;
    assert_eq!(refusal.unwrap_err().code, xpu_device::CODE_FORWARD_CYCLE);
    chain[0].set_complete().unwrap();
    assert!(common::settles(SETTLE, || chain[LINKS - 1].status()
        == Ok(EventStatus::Complete)));
    let bound = 4 * LINKS as u64;
    assert!(
        steps <= bound,
        "a forward closing a chain of {LINKS} forwards: {steps} index steps to refuse it (at \
         most {bound})"
    );
    println!("scenario-ok");
}
