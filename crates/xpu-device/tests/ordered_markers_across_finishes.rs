//! Ordered markers across finishes that cover (or leave out) a failed wait: a marker judged
//! complete stays so after a later finish (`waits::Covered`, `Inner::drained`).
//!
//! Review h74: 84eb0b6 (`waits::Covered`: a `clFinish` covers every command numbered before it
//! but the logged ones whose enqueue call is still in progress; `finished` drains every failure
//! numbered up to `upto` but those, keeps the lowest drained one in `drained_failure`, and
//! raises `drained` to `max(drained, upto)`), attacked with sequences of safe public calls.
//! PoCL 3.1 on the CPU (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`), a 2-core
//! machine shared with other jobs, debug build
//! (`cargo test -p xpu-device --test ordered_markers_across_finishes`).
//!
//! Findings (fail now, 5 of 5 runs each; both fail at 48b982b, 84eb0b6's parent, too:
//! pre-existing since `drained_failure` came in, 8a11750; 84eb0b6's `min` keeps the same lowest
//! failure). Cause: `failure_before` applies `drained_failure` (the lowest failure any finish
//! drained) to every marker numbered up to `drained` (the highest `upto`), so a later finish
//! that raises `drained` makes it judge markers numbered after the finish that drained it:
//! - `a_marker_after_a_covering_finish_keeps_complete_after_a_later_finish`: 5 of 5 runs fail.
//! - `two_finishes_returning_in_either_order_leave_a_marker_between_them_complete`: 5 of 5.
//!
//! Fixed since: the log keeps each drained failure with the coverage of the earliest-begun
//! finish that covered it (`Inner::drained`), and judges a marker with it only when every such
//! finish covered the marker too.
//!
//! What held (5 of 5 runs): the other two tests (see each doc). `xpu_event` status/query/
//! synchronize and the allocators' free-marker status mask the finding through
//! `drained_by_finish` (the raising finish began after the marker); `Event::elapsed_time`
//! (`Recorded::failed_before`) does not: on an external stream, barrier on `g`, `g` fails,
//! synchronize; barrier on a complete user event; `a`, `b` recorded (timing), `b` synchronized:
//! `a.elapsed_time(&b)` = `Ok(0.02)`; one more such barrier and a synchronize: `Err(-5)`
//! (a scratch xpu-event test, not committed: xpu-event is outside this review's crates). The
//! allocators' `orders_waiters`/`follows_failed_wait` read it too (by reading).
//!
//! Order comes from user events; a thread blocked inside `clFinish` is seen through `/proc`
//! (as reviews h70/h71/h73); an enqueue call in progress through the reference count of the
//! last event of its wait list (`ClEvent::reference_count`). Every wait is bounded.

mod common;

use common::{blocked_in_futex, this_tid, true_within};

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use xpu_device::backend::{ClEvent, CommandQueue, EventStatus};

const BOUND: Duration = Duration::from_secs(60);

fn refcount(e: &ClEvent) -> u32 {
    e.reference_count().unwrap_or(0)
}

/// Starts `q.finish()` on a new thread and returns once that thread sleeps (in `clFinish`,
/// behind a gate).
fn finish_blocked(q: &CommandQueue) -> std::thread::JoinHandle<Result<(), xpu_device::ClError>> {
    let (tx, rx) = mpsc::channel();
    let q = q.clone();
    let t = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        q.finish()
    });
    let tid = rx.recv().unwrap();
    assert!(
        true_within(BOUND, || blocked_in_futex(&tid) && blocked_in_futex(&tid)),
        "the finishing thread never blocked"
    );
    t
}

/// FINDING. On a fresh queue `q`: `b1 = q.enqueue_barrier(&[&g])`; `g.set_failed(-5)`;
/// `q.finish()` → `Ok` (F1: covers `b1`, its failure drained). Then, with `ok` a user event
/// already complete: `b2 = q.enqueue_barrier(&[&ok])` (logged); `m = q.enqueue_ordered_marker()`,
/// its event waited for: `m.status()` = `Complete`, `m.follows_failed_wait()` = false (the only
/// failure was covered by F1, begun before `m`). Then `b3 = q.enqueue_barrier(&[&ok])` (keeps
/// the log watched) and `q.finish()` → `Ok` (F2, begun after `m`).
///
/// Expected (`OrderedMarker::status` docs: a failed wait is sticky "up to a finish that returned
/// with success (the markers enqueued after it are judged with the waits enqueued after it
/// only)"; `finished`: "the markers numbered up to it keep their answer"): `m` still reads
/// `Complete`, `follows_failed_wait()` false, `orders_waiters()` true. Observed: after F2,
/// `Error(-5)`, `true`, `false`, for ever (no later finish clears it): F2 raised `drained` above
/// `m`'s number, and `failure_before` then applies `drained_failure` (F1's `b1`, numbered below
/// `m`) to every marker numbered up to `drained`, whichever finish drained it. Seen through
/// `xpu_event`: `Event::elapsed_time` of events recorded after a clean synchronize fails with
/// the old -5 once another synchronize returned (`Recorded::failed_before` reads
/// `OrderedMarker::status`, not masked by `drained_by_finish`); the allocators' cross-stream
/// `orders_waiters` / `follows_failed_wait` read it too.
#[test]
fn a_marker_after_a_covering_finish_keeps_complete_after_a_later_finish() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    let g = dev.create_user_event().unwrap();
    let b1 = q.enqueue_barrier(&[&g]).unwrap();
    g.set_failed(-5).unwrap();
    q.finish().unwrap();
    let ok = dev.create_user_event().unwrap();
    ok.set_complete().unwrap();
    let b2 = q.enqueue_barrier(&[&ok]).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    m.event().wait().unwrap();
    let before = (
        m.status().unwrap(),
        m.follows_failed_wait(),
        m.orders_waiters(),
    );
    let b3 = q.enqueue_barrier(&[&ok]).unwrap();
    q.finish().unwrap();
    let after = (
        m.status().unwrap(),
        m.follows_failed_wait(),
        m.orders_waiters(),
    );
    q.finish().unwrap();
    let after_third = m.status().unwrap();
    drop((b1, b2, b3));
    assert_eq!(
        before,
        (EventStatus::Complete, false, true),
        "precondition: the marker after the covering finish reads complete"
    );
    assert_eq!(
        after,
        (EventStatus::Complete, false, true),
        "a marker that read Complete (its only earlier failure covered by a finish begun before \
         it) reads (status, follows_failed_wait, orders_waiters) = {after:?} after a later \
         successful finish; after a third: {after_third:?}"
    );
}

/// FINDING (same cause, two finishes racing). On a fresh queue `q`: `hb` = barrier on gate `h`;
/// `w1` = barrier on `g1`; thread A calls `q.finish()` and blocks behind `hb`; `g1` fails (-5);
/// `m1` = ordered marker (PoCL completes it at once: its driver status is `CL_COMPLETE`; a
/// marker enqueued before the failure reads the driver's -1 instead); `w2` = barrier on `g2`;
/// thread B calls `q.finish()` and blocks; `g2` fails (-5); `m2` = ordered marker; `h`
/// completes; A and B return `Ok` (in either order); both markers' events waited for.
///
/// Expected: `m2` (enqueued after both finishes began) `Complete`; `m1`, whose only earlier
/// failed wait `w1` was covered by A (begun before `m1` was enqueued, returned with success,
/// so `hb` ran), `Complete` as well. Observed: `m2` `Complete` (held), `m1` `Error(-5)` for
/// ever: B drained `w2`, raising `drained` to B's `upto` >= `m1`'s number, and
/// `drained_failure` = `w1` (the lowest drained) then judges `m1`.
#[test]
fn two_finishes_returning_in_either_order_leave_a_marker_between_them_complete() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let q = common::queue(dev);
    q.finish().unwrap();
    let h = dev.create_user_event().unwrap();
    let g1 = dev.create_user_event().unwrap();
    let g2 = dev.create_user_event().unwrap();
    let hb = q.enqueue_barrier(&[&h]).unwrap();
    let w1 = q.enqueue_barrier(&[&g1]).unwrap();
    let a = finish_blocked(&q);
    g1.set_failed(-5).unwrap();
    let m1 = q.enqueue_ordered_marker().unwrap();
    let w2 = q.enqueue_barrier(&[&g2]).unwrap();
    let b = finish_blocked(&q);
    g2.set_failed(-5).unwrap();
    let m2 = q.enqueue_ordered_marker().unwrap();
    h.set_complete().unwrap();
    let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
    assert!(
        ra.is_ok() && rb.is_ok(),
        "PoCL's clFinish succeeds: {ra:?} {rb:?}"
    );
    let waits = (m1.event().wait(), m2.event().wait());
    let drivers = (m1.event().status(), m2.event().status());
    let (s1, s2) = (m1.status().unwrap(), m2.status().unwrap());
    drop((hb, w1, w2));
    assert!(
        waits.0.is_ok() && waits.1.is_ok(),
        "precondition: the driver completes both markers: {waits:?} {drivers:?}"
    );
    assert_eq!(s2, EventStatus::Complete, "m2, after both finishes began");
    assert_eq!(
        s1,
        EventStatus::Complete,
        "m1: its only earlier failed wait was covered by finish A, begun before it"
    );
}

/// Held. A marker numbered between a left-out logged command (its enqueue call in progress
/// when the finish began) and the finish's `upto` never reads complete while that command's
/// wait stands failed; nor does a marker after the finish; a later finish covering it clears it
/// for new markers. On a fresh queue `q`: `hb` = barrier on gate `h`; thread X calls
/// `q.enqueue_barrier(&xs)` (20,000 pending user events: a long PoCL enqueue call); once X is
/// numbered, `m_mid` = ordered marker; thread B calls `q.finish()` and blocks behind `hb` while
/// X is still in its enqueue call (else the round is retried); `xs[0]` fails (-5), the others
/// complete, `h` completes; B returns `Ok`. Then: `m_mid` reads an error (PoCL's code, mostly
/// -5), a new marker `m_after` an error, `q.follows_failed_wait()`; after another `q.finish()`, a new
/// marker reads `Complete` and `follows_failed_wait()` is false.
#[test]
fn a_left_out_failed_command_judges_the_markers_after_it_until_a_finish_covers_it() {
    if !common::needs_pocl_failure_order() {
        return;
    }
    let Some(dev) = common::device0() else {
        return;
    };
    let k = 20_000;
    for round in 0..6 {
        let q = common::queue(dev);
        q.finish().unwrap();
        let h = dev.create_user_event().unwrap();
        let hb = q.enqueue_barrier(&[&h]).unwrap();
        let xs: Arc<Vec<ClEvent>> =
            Arc::new((0..k).map(|_| dev.create_user_event().unwrap()).collect());
        let last = &xs[k - 1];
        let base = refcount(last);
        let x_done = Arc::new(AtomicBool::new(false));
        let x = {
            let (q, xs, x_done) = (q.clone(), xs.clone(), x_done.clone());
            std::thread::spawn(move || {
                let list: Vec<&ClEvent> = xs.iter().collect();
                let e = q.enqueue_barrier(&list).unwrap();
                x_done.store(true, SeqCst);
                e
            })
        };
        assert!(
            true_within(BOUND, || refcount(last) > base || x_done.load(SeqCst)),
            "X's wait list never retained"
        );
        let m_mid = q.enqueue_ordered_marker().unwrap();
        let b = finish_blocked(&q);
        let valid = !x_done.load(SeqCst);
        xs[0].set_failed(-5).unwrap();
        for e in xs.iter().skip(1) {
            e.set_complete().unwrap();
        }
        h.set_complete().unwrap();
        let finished = b.join().unwrap();
        let xe = x.join().unwrap();
        assert!(finished.is_ok(), "PoCL's clFinish succeeds: {finished:?}");
        if !valid {
            let _ = q.finish();
            drop((hb, xe));
            eprintln!("round {round}: X returned before the finish began, retrying");
            continue;
        }
        let m_after = q.enqueue_ordered_marker().unwrap();
        m_after.event().wait().unwrap();
        let _ = m_mid.event().wait();
        let mid = m_mid.status().unwrap();
        let after = m_after.status().unwrap();
        let follows = q.follows_failed_wait();
        q.finish().unwrap();
        let m_new = q.enqueue_ordered_marker().unwrap();
        m_new.event().wait().unwrap();
        let new = m_new.status().unwrap();
        let follows_new = q.follows_failed_wait();
        drop((hb, xe));
        // X's events are retained (what the test sees) right before X is numbered: in a
        // rare round `m_mid` is numbered first, and then precedes X (it reads `Complete`,
        // rightly); once seen in a loaded run (2026-12-07). Either, never pending. The failure's
        // code is the driver's: PoCL gives X's barrier the user event's -5, and under load
        // (this file's tests beside each other in one process, `cargo test`) at times -1, 5 of
        // 40 runs on 2026-12-07 at 27b9bda; the runtime passes it on as it reads it.
        assert!(
            matches!(mid, EventStatus::Error(_) | EventStatus::Complete),
            "m_mid: {mid:?}"
        );
        assert!(matches!(after, EventStatus::Error(_)), "m_after: {after:?}");
        assert!(
            follows,
            "follows_failed_wait after the finish that left X out"
        );
        assert_eq!(
            new,
            EventStatus::Complete,
            "a marker after the covering finish"
        );
        assert!(
            !follows_new,
            "follows_failed_wait after the covering finish"
        );
        return;
    }
    panic!("no valid round: X's enqueue call always returned before the finish began");
}

/// Held. A marker never reads complete while a command enqueued before it is still queued,
/// around a finish that covers a failed wait: `hb` = barrier on gate `h`; `w` = barrier on
/// `g`; thread B calls `q.finish()` and blocks behind `hb`; `g` fails (-5); `m` = ordered
/// marker (PoCL completes it at once while `hb` is still queued): `m.status()` never reads
/// `Complete` while B is blocked (50 reads), nor does a second marker's; `h` completes; B
/// returns `Ok`; a marker enqueued after B returned reads `Complete`.
#[test]
fn a_marker_enqueued_during_a_covering_finish_is_not_complete_before_the_gate() {
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
    let b = finish_blocked(&q);
    g.set_failed(-5).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    let mut early = Vec::new();
    for _ in 0..50 {
        let s = m.status().unwrap();
        if s == EventStatus::Complete {
            early.push(s);
        }
        std::thread::yield_now();
    }
    let ch = q.enqueue_ordered_marker().unwrap();
    let ch_status = ch.status().unwrap();
    h.set_complete().unwrap();
    let r = b.join().unwrap();
    assert!(r.is_ok(), "PoCL's clFinish succeeds: {r:?}");
    let m2 = q.enqueue_ordered_marker().unwrap();
    m2.event().wait().unwrap();
    let s2 = m2.status().unwrap();
    drop((hb, w));
    assert!(early.is_empty(), "m read Complete while hb was queued");
    assert_ne!(
        ch_status,
        EventStatus::Complete,
        "a second marker while hb queued"
    );
    assert_eq!(
        s2,
        EventStatus::Complete,
        "a marker after the covering finish"
    );
}
