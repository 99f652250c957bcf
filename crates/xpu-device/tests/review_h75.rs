//! Review h75: 42cc841 (`Inner::drained`: each drained failed wait kept as `(number, status,
//! upto)`, `upto` the coverage of the earliest-begun covering finish, at most 256 per queue),
//! attacked with sequences of safe public calls. PoCL on the CPU (`POCL_DEVICES="pthread
//! pthread" XPU_REQUIRE_DEVICE=1`), a 2-core machine shared with other jobs, debug build
//! (`cargo test -p xpu-device --test review_h75`).
//!
//! Finding (failed at 42cc841, 5 of 5 runs; fixed since: a marker's first answer other than
//! `Pending` stays, `EarlierWaits::status`): the cap `DRAINED_FAILURES` (256) drops the oldest drained
//! failure, and a marker numbered in `number + 1 ..= upto` then reads its driver status
//! alone: a marker that read `Error(-5)` (after a finish, as `Inner::drained` documents: "a
//! status read once stays") reads `Complete`, `follows_failed_wait()` false and
//! `orders_waiters()` true after 256 more failed-wait + finish cycles. xpu-event's
//! `Event::elapsed_time` reads `follows_failed_wait` (`Recorded::failed_before`) and then
//! gives review h69's negative time again
//! (crates/xpu-event/tests/elapsed_time_after_many_drained_failures.rs).
//!
//! Held: see each test's doc.
//!
//! Order comes from user events; every wait is bounded.

mod common;

use common::true_within;

use std::time::Duration;

use xpu_device::backend::{CommandQueue, EventStatus};

const BOUND: Duration = Duration::from_secs(60);

/// `n` cycles of: barrier on a fresh user event, the event fails (-5), `q.finish()` → `Ok`
/// (each drains one failed wait).
fn failed_wait_and_finish(dev: &xpu_device::Device, q: &CommandQueue, n: usize) {
    for _ in 0..n {
        let g = dev.create_user_event().unwrap();
        let b = q.enqueue_barrier(&[&g]).unwrap();
        g.set_failed(-5).unwrap();
        q.finish().unwrap();
        drop(b);
    }
}

/// FINDING. On a fresh queue `q`: `hb` = barrier on gate `h`; `w` = barrier on `g`; `g` fails
/// (-5); `m` = ordered marker (PoCL completes it at once, `hb` still queued): `m` reads
/// `(Error(-5), true, false)` (status, follows_failed_wait, orders_waiters); `h` completes,
/// `q.finish()` → `Ok`: still `(Error(-5), true, false)` (held: `m` is in `w`'s
/// `number + 1 ..= upto`); 255 cycles of [barrier on a fresh user event, it fails, finish]:
/// still the same (held); one more cycle.
///
/// Expected (`Inner::drained`: "a status read once stays"; `OrderedMarker::follows_failed_wait`:
/// a wait before it "is known to have failed"): `(Error(-5), true, false)`. Observed:
/// `(Complete, false, true)`: the 257th drained failure pushed `w`'s entry out.
#[test]
fn a_marker_after_a_failed_wait_keeps_its_error_past_256_drained_failures() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    q.finish().unwrap();
    let h = dev.create_user_event().unwrap();
    let g = dev.create_user_event().unwrap();
    let hb = q.enqueue_barrier(&[&h]).unwrap();
    let w = q.enqueue_barrier(&[&g]).unwrap();
    g.set_failed(-5).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    assert!(
        true_within(BOUND, || m.event().status().ok()
            == Some(EventStatus::Complete)),
        "precondition: PoCL completes the marker ahead of the gate"
    );
    let early = common::marker_reading(&m);
    h.set_complete().unwrap();
    q.finish().unwrap();
    let after_finish = common::marker_reading(&m);
    failed_wait_and_finish(dev, &q, 255);
    let at_cap = common::marker_reading(&m);
    failed_wait_and_finish(dev, &q, 1);
    let past_cap = common::marker_reading(&m);
    drop((hb, w));
    let failed = (EventStatus::Error(-5), true, false);
    assert_eq!(early, failed, "precondition: before the finish");
    assert_eq!(after_finish, failed, "after the covering finish (held)");
    assert_eq!(at_cap, failed, "after 255 more drained failures (held)");
    assert_eq!(
        past_cap, failed,
        "a marker that read Error(-5) after the covering finish reads (status, \
         follows_failed_wait, orders_waiters) = {past_cap:?} after 256 more drained failures"
    );
}

/// Held. A marker after a finish that covered a failed wait reads `(Complete, false, true)`,
/// and keeps it across 300 more failed-wait + finish cycles (each drained entry's `upto` is
/// below it or its number above it). On a fresh queue: `w` = barrier on `g`, `g` fails,
/// `q.finish()`; `m` = ordered marker; 300 cycles.
#[test]
fn a_marker_after_a_covering_finish_stays_complete_across_300_drained_failures() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    q.finish().unwrap();
    let g = dev.create_user_event().unwrap();
    let w = q.enqueue_barrier(&[&g]).unwrap();
    g.set_failed(-5).unwrap();
    q.finish().unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    m.event().wait().unwrap();
    let first = common::marker_reading(&m);
    failed_wait_and_finish(dev, &q, 300);
    let later = common::marker_reading(&m);
    drop(w);
    let ok = (EventStatus::Complete, false, true);
    assert_eq!(first, ok);
    assert_eq!(later, ok);
}

/// Held. A marker enqueued after a failed wait and before any finish reads `Error(-5)`, and a
/// marker enqueued after 300 failure + finish cycles (the last failure covered) reads
/// `Complete`; one enqueued right after a 301st failed wait (no finish) reads `Error(-5)`
/// whatever the drained entries (undrained `failed` judges it).
#[test]
fn new_markers_after_300_cycles_are_judged_by_the_undrained_failure() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    q.finish().unwrap();
    failed_wait_and_finish(dev, &q, 300);
    let m_ok = q.enqueue_ordered_marker().unwrap();
    m_ok.event().wait().unwrap();
    let h = dev.create_user_event().unwrap();
    let g = dev.create_user_event().unwrap();
    let hb = q.enqueue_barrier(&[&h]).unwrap();
    let w = q.enqueue_barrier(&[&g]).unwrap();
    g.set_failed(-5).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    assert!(true_within(BOUND, || m.event().status().ok()
        == Some(EventStatus::Complete)));
    let s = common::marker_reading(&m);
    let follows = q.follows_failed_wait();
    h.set_complete().unwrap();
    q.finish().unwrap();
    drop((hb, w));
    assert_eq!(
        common::marker_reading(&m_ok),
        (EventStatus::Complete, false, true)
    );
    assert_eq!(s, (EventStatus::Error(-5), true, false));
    assert!(follows);
}
