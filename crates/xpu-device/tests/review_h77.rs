//! Review h77: caa490c (`EarlierWaits::status` keeps its first answer other than `Pending`),
//! attacked with sequences of safe public calls. PoCL on the CPU (`POCL_DEVICES="pthread
//! pthread" XPU_REQUIRE_DEVICE=1`), debug build (`cargo test -p xpu-device --test review_h77`).
//!
//! No finding: every test below holds. Order comes from user events and a thread known
//! blocked in `clFinish`; every wait is bounded.

mod common;

use common::{blocked_in_futex, this_tid, true_within};

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::EventStatus;

const BOUND: Duration = Duration::from_secs(60);

/// Held (a cached `Failed` is cleared by a finish begun after the marker, and only by one).
/// `hb` = barrier on gate `h`; `w` = barrier on `g`; `g` fails (-5); thread T: `q.finish()`,
/// known blocked (on `h`); `m` = ordered marker, enqueued after T's finish began: PoCL
/// completes it at once and it reads `(Error(-5), true, false)` (cached). `h` completes, T's
/// finish → `Ok`. `m` still reads `(Error(-5), true, false)` and `drained_by_finish()` is
/// false (T began before `m`; before caa490c it read `Complete` here once T returned, as
/// review h74 intended, unless it was read before). Then `q.finish()` (begun after `m`):
/// `drained_by_finish()` is true (what xpu-alloc, xpu-host and xpu-event read), and a new
/// marker reads `(Complete, false, true)`.
#[test]
fn a_failed_answer_read_during_a_racing_finish_is_cleared_by_a_later_finish() {
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
    let (tx, rx) = mpsc::channel();
    let q2 = q.clone();
    let t = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        q2.finish()
    });
    let tid = rx.recv().unwrap();
    assert!(
        true_within(BOUND, || blocked_in_futex(&tid) && blocked_in_futex(&tid)),
        "the finishing thread never blocked"
    );
    let m = q.enqueue_ordered_marker().unwrap();
    q.flush().unwrap();
    assert!(
        true_within(BOUND, || m.event().status().ok()
            == Some(EventStatus::Complete)),
        "precondition: PoCL completes the marker ahead of the gate"
    );
    let failed = (EventStatus::Error(-5), true, false);
    assert_eq!(
        common::marker_reading(&m),
        failed,
        "during the racing finish"
    );
    assert!(!t.is_finished());
    h.set_complete().unwrap();
    let (done, r) = xpu_testing_join(t);
    assert!(done && r, "the racing finish");
    assert_eq!(
        common::marker_reading(&m),
        failed,
        "after the racing finish (kept)"
    );
    assert!(!m.drained_by_finish(), "a finish begun before the marker");
    q.finish().unwrap();
    assert!(
        m.drained_by_finish(),
        "a finish begun after the marker returned"
    );
    let m2 = q.enqueue_ordered_marker().unwrap();
    m2.event().wait().unwrap();
    assert_eq!(
        common::marker_reading(&m2),
        (EventStatus::Complete, false, true)
    );
    drop((hb, w));
}

fn xpu_testing_join(t: std::thread::JoinHandle<Result<(), xpu_device::ClError>>) -> (bool, bool) {
    let ok = true_within(BOUND, || t.is_finished());
    if !ok {
        return (false, false);
    }
    (true, t.join().unwrap().is_ok())
}

/// Held (`Pending` is never kept; a kept `Complete` is not changed by later waits). `w` =
/// barrier on `g` (pending); `m` = ordered marker: `orders_waiters()` false,
/// `follows_failed_wait()` false, status not `Complete`, many times; `g` completes: `m` reads
/// `(Complete, false, true)`. Then `w2` = barrier on `g2`, `g2` fails: `m` (before it) still
/// reads `(Complete, false, true)`; a marker `m3` after it reads `Error(-5)` once the driver
/// completes it; `q.finish()`, a marker after it reads `Complete`.
#[test]
fn pending_is_not_kept_and_a_kept_complete_ignores_later_waits() {
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    let g = dev.create_user_event().unwrap();
    let w = q.enqueue_barrier(&[&g]).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    q.flush().unwrap();
    for _ in 0..50 {
        let (s, f, o) = common::marker_reading(&m);
        assert!(s != EventStatus::Complete && !f && !o, "{s:?} {f} {o}");
    }
    g.set_complete().unwrap();
    m.event().wait().unwrap();
    let ok = (EventStatus::Complete, false, true);
    assert!(
        true_within(BOUND, || common::marker_reading(&m) == ok),
        "{:?}",
        common::marker_reading(&m)
    );
    let g2 = dev.create_user_event().unwrap();
    let w2 = q.enqueue_barrier(&[&g2]).unwrap();
    g2.set_failed(-5).unwrap();
    let m3 = q.enqueue_ordered_marker().unwrap();
    q.flush().unwrap();
    assert!(true_within(BOUND, || m3.event().status().ok().is_some_and(
        |s| s == EventStatus::Complete || matches!(s, EventStatus::Error(_))
    )));
    assert_eq!(
        common::marker_reading(&m),
        ok,
        "the marker before the failed wait"
    );
    assert!(
        matches!(m3.status().unwrap(), EventStatus::Error(_)),
        "{:?}",
        m3.status()
    );
    assert!(m3.follows_failed_wait() && !m3.orders_waiters());
    q.finish().unwrap();
    let m4 = q.enqueue_ordered_marker().unwrap();
    m4.event().wait().unwrap();
    assert_eq!(common::marker_reading(&m4), ok);
    drop((w, w2));
}
