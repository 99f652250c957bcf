//! A pending event recorded after a failed wait, probes that held: the covering synchronize clears
//! the failure, other streams' and re-recorded events read their own point, a retried `clFinish`
//! counts as a drain.
//!
//! Review h90 of 74df074: probes that found nothing (each passes on 74df074). Findings are
//! in pending_event_after_a_failed_wait.rs.
//!
//! PoCL 3.1's `clFinish` never fails after a failed wait, so the retry loop of
//! `CommandQueue::finish_outcome` is not reached here; these probe `Recorded::status`'s new
//! branch and the drain bookkeeping that a successful finish does on both paths.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as
//! drained_marker_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use common::{
    covered_by_a_synchronize_begun_before_the_record, fail_next_finish, with_failing_finish_layer,
};
use xpu_event::{Event, Gate, StreamExt};

/// The control of pending_event_after_a_failed_wait.rs's finding 1: the same scenario without the
/// query while
/// pending: after the synchronize begun before the record returned `Ok`, the event reads
/// `Ok(true)` and synchronizes `Ok`.
#[test]
fn without_a_query_while_pending_the_covering_synchronize_clears_the_failure() {
    common::in_child("control_not_queried", 1, || {
        if !common::pocl_only("the marker behind the failed wait completes (NVIDIA fails it)") {
            return;
        }
        let (q, sync, _) = covered_by_a_synchronize_begun_before_the_record(false);
        assert!(matches!(q, Ok(true)) && sync.is_ok(), "{q:?} {sync:?}");
    });
}

/// An event on another stream `t` (gated) is not judged by `s`'s failed wait: `Ok(false)`
/// while its gate is closed, `Ok(true)` after.
#[test]
fn a_pending_event_of_another_stream_reads_false_not_the_failure() {
    common::in_child("other_stream_pending", 1, || {
        let s = common::fresh_stream(0).leak();
        let t = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let on_s = s.record_event().unwrap();
        assert!(on_s.synchronize().is_err());
        assert!(on_s.query().is_err());
        let gate = Gate::new(0).unwrap();
        gate.block(&t).unwrap();
        let e = t.record_event().unwrap();
        common::assert_held_by(&gate, &e);
        assert!(e.query().unwrap());
        common::synchronize_after_failure(&s);
    });
}

/// A pending event recorded after a synchronize that drained the failed wait (begun and
/// returned before the record) reads `Ok(false)`, then `Ok(true)`: the new branch does not
/// report a drained failure.
#[test]
fn a_pending_event_after_a_drained_failure_reads_false() {
    common::in_child("pending_after_drained", 1, || {
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        common::synchronize_after_failure(&s);
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let e = s.record_event().unwrap();
        common::assert_held_by(&gate, &e);
        assert!(e.query().unwrap());
    });
}

/// A pending event after a failed wait, drained by a `finish` of another wrapper of the same
/// queue (`s.queue()`, a `CommandQueue` clone: no watermark of the stream): before the drain
/// `Err`, after it `Ok(true)` and `synchronize` `Ok` (`drained_by_finish`, shared state).
#[test]
fn a_finish_through_another_wrapper_clears_a_queried_pending_event() {
    common::in_child("other_wrapper_finish", 1, || {
        let s = common::fresh_stream(0).leak();
        let (gate, e) = common::gated_event_after_a_failed_wait(&s);
        // The synchronize judges the waits before the marker; the query reports what is known.
        assert!(e.synchronize().is_err());
        assert!(e.query().is_err());
        gate.open().unwrap();
        let q = s.queue().unwrap();
        let outcome = q.finish_outcome();
        assert!(outcome.drained && outcome.result.is_ok(), "{outcome:?}");
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
    });
}

/// A re-recorded event after a failed wait and its handling reads by its new point: pending
/// behind a gate `Ok(false)`, then `Ok(true)`; the old point's failure does not follow it.
#[test]
fn a_rerecorded_event_after_a_handled_failure_reads_its_new_point() {
    common::in_child("rerecorded_pending", 1, || {
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let mut e = Event::default();
        e.record(&s).unwrap();
        assert!(e.synchronize().is_err());
        assert!(e.query().is_err());
        common::synchronize_after_failure(&s);
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        e.record(&s).unwrap();
        common::assert_held_by(&gate, &e);
    });
}

/// `Event::query`, `Event::synchronize` and `Event::wait` agree on a pending event after a
/// failed wait once the failure is known (`synchronize` judges the waits before the marker;
/// a pending `query` reports a failure already judged, never judging itself: the cost of
/// review h90's finding 3), and all clear after the stream synchronize.
#[test]
fn query_synchronize_and_wait_agree_on_a_pending_event_after_a_failed_wait() {
    common::in_child("agree_pending", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let (gate, e) = common::gated_event_after_a_failed_wait(&s);
        let (sy, q, w) = (e.synchronize(), e.query(), e.wait(&waiter));
        assert!(
            q.is_err() && sy.is_err() && w.is_err(),
            "{q:?} {sy:?} {w:?}"
        );
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        e.wait(&waiter).unwrap();
    });
}

/// On PoCL a finish after a failed wait drains at the first `clFinish`: `finish_outcome` is
/// `drained` and `Ok`, and the device-wide synchronize after it is `Ok`.
#[test]
fn finish_outcome_after_a_failed_wait_is_drained_and_ok_on_pocl() {
    common::in_child("finish_outcome_pocl", 1, || {
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let e = s.record_event().unwrap();
        assert!(e.synchronize().is_err());
        assert!(e.query().is_err());
        let outcome = s.queue().unwrap().finish_outcome();
        assert!(outcome.drained && outcome.result.is_ok(), "{outcome:?}");
        xpu_stream::synchronize(0).unwrap();
        assert!(s.query().unwrap());
    });
}

/// The retry's intended path, under the layer of pending_event_after_a_failed_wait.rs (one
/// `clFinish` returns -5 at
/// once, the driver's next one succeeds): after a failed wait of `s`, `e1` recorded; the
/// synchronize returns the layer's -5 (the first error), and the retry's drain counts: `e1`
/// reads `Ok(true)` with no driver call (watermark), an event recorded after it on a gated
/// `s` reads `Ok(false)` (not the drained failure), then `Ok(true)`; the next synchronize is
/// `Ok` and `Stream::query` `true`.
#[test]
fn a_retry_that_succeeds_counts_as_a_drain() {
    with_failing_finish_layer();
    common::in_child("retry_drains", 1, || {
        if !common::pocl_only("the loader layer models a driver over PoCL") {
            return;
        }
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let e1 = s.record_event().unwrap();
        assert!(e1.synchronize().is_err());
        assert!(e1.query().is_err());
        let flag = fail_next_finish();
        let r = s.synchronize();
        assert!(!flag.exists(), "the layer is not loaded");
        assert!(r.is_err(), "the first error is returned: {r:?}");
        assert!(e1.query().unwrap());
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let e2 = s.record_event().unwrap();
        common::assert_held_by(&gate, &e2);
        assert!(e2.query().unwrap());
        s.synchronize().unwrap();
        assert!(s.query().unwrap());
    });
}
