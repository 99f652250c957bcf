//! Forwards between user events that would close a cycle are refused (`CODE_FORWARD_CYCLE`):
//! each forward holds its target until its source is over, so the events of a cycle, once the
//! application dropped them, could never be set and their waiters would wait for ever (review
//! h40's open hang, `failing_waits_beside_other_threads.rs`). What is not a cycle still forwards.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use xpu_device::backend::EventStatus;
use xpu_device::CODE_FORWARD_CYCLE;

/// How long a driver's completion callbacks may take to set a forward's target.
const SETTLE: Duration = Duration::from_secs(10);

#[test]
fn a_user_event_forwarded_to_itself_is_refused() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let u = dev.create_user_event().unwrap();
    let err = u.forward_to(&u).unwrap_err();
    assert_eq!(err.code, CODE_FORWARD_CYCLE);
    assert_eq!(err.code_name(), Some("XPU_FORWARD_CYCLE"));
    assert_eq!(err.function, "forward_to");
    // Nothing was made: the event is set as any other, and its waiter runs.
    let barrier = q.enqueue_barrier(&[&u]).unwrap();
    u.set_complete().unwrap();
    q.finish().unwrap();
    // NVIDIA's status may lag its finish (seen on an H100: `Submitted` just after it).
    assert!(common::settles(SETTLE, || barrier.status() == Ok(EventStatus::Complete)));
}

#[test]
fn a_forward_closing_a_cycle_of_three_is_refused_and_the_chain_still_forwards() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    let (u, t, v) = (
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
    );
    u.forward_to(&t).unwrap();
    t.complete_when_over(&v).unwrap();
    assert_eq!(
        v.forward_to(&u).map_err(|e| e.code),
        Err(CODE_FORWARD_CYCLE),
        "v reaches u through t: the forward closes a cycle"
    );
    assert_eq!(
        v.complete_when_over(&u).map_err(|e| e.code),
        Err(CODE_FORWARD_CYCLE),
        "complete_when_over makes the same edge"
    );
    // The chain u -> t -> v passes a failure along (absorbed by the last edge).
    u.set_failed(-5).unwrap();
    assert!(common::settles(SETTLE, || t.status()
        == Ok(EventStatus::Error(-5))
        && v.status() == Ok(EventStatus::Complete)));
}

#[test]
fn a_forward_back_to_an_event_that_is_over_is_made() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    let u = dev.create_user_event().unwrap();
    let t = dev.create_user_event().unwrap();
    u.forward_to(&t).unwrap();
    u.set_complete().unwrap();
    assert!(common::settles(SETTLE, || t.status() == Ok(EventStatus::Complete)));
    // u is over: its forward to t is no edge any more, so t -> u closes nothing (u keeps its
    // status: a target already set is left as it is).
    t.forward_to(&u).unwrap();
    let w = dev.create_user_event().unwrap();
    // And a fresh event may forward to either.
    w.forward_to(&u).unwrap();
    w.forward_to(&t).unwrap();
    w.set_complete().unwrap();
    assert_eq!(u.status().unwrap(), EventStatus::Complete);
}

#[test]
fn two_events_forwarded_to_each_other_at_once_make_one_forward() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    for _ in 0..200 {
        let u = Arc::new(dev.create_user_event().unwrap());
        let t = Arc::new(dev.create_user_event().unwrap());
        let start = Arc::new(Barrier::new(2));
        let other = {
            let (u, t, start) = (Arc::clone(&u), Arc::clone(&t), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                t.forward_to(&u).map_err(|e| e.code)
            })
        };
        start.wait();
        let mine = u.forward_to(&t).map_err(|e| e.code);
        let theirs = other.join().unwrap();
        let refused = [mine, theirs]
            .iter()
            .filter(|r| **r == Err(CODE_FORWARD_CYCLE))
            .count();
        assert_eq!(
            (refused, mine.is_ok() || theirs.is_ok()),
            (1, true),
            "exactly one of the two forwards is made ({mine:?}, {theirs:?})"
        );
        // Dropped unset, the two fail and their waiter is over: no hang.
        let barrier = q.enqueue_barrier(&[&u, &t]).unwrap();
        drop((u, t));
        // NVIDIA's first finish after the failure reports it (-14 on an H100), PoCL's not.
        common::finish_after_failure(&q);
        assert!(common::settles(SETTLE, || barrier
            .status()
            .is_ok_and(common::terminal)));
    }
}
