//! `Event::wait` on an event whose earlier wait fails after the wait was enqueued (same device and
//! across devices), and normal use of a stream once its failed wait was handled by a synchronize.
//!
//! Review h68 of xpu-event, probes that found nothing (they pass on c61c9e7): `Event::record`'s
//! ordered marker (c61c9e7) when the wait before the record fails only after `Event::wait`
//! enqueued its barrier (same device and across devices: PoCL passes the failure on to the
//! marker, the waiting stream's later work reads failed, never complete with the gate closed),
//! and normal use after a failure was handled (`Stream::synchronize`, then new records, waits,
//! queries and `elapsed_time` on the same stream; a re-recorded event; an adopted event).
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as
//! event_behind_a_gate_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, Gate, StreamExt};

/// The bound on a call that should return (it takes milliseconds).
const LIMIT: Duration = Duration::from_secs(10);

/// A stream that waits (`Event::wait`) on an event does not run its later work while the
/// event's stream is held by a closed gate enqueued before the record, when a wait enqueued
/// between the gate and the record was still pending at `Event::wait` (which is then `Ok`:
/// nothing had failed) and fails after it. Suspected: wait.rs checks `follows_failed_wait`
/// only at the call, so the barrier on the marker might not order the streams. Observed on
/// PoCL: the waiting stream's later marker synchronizes with an error (the failure reaches the
/// marker and the waiting stream), never `Ok` with the gate closed; 6 of 6 runs.
#[test]
fn a_stream_waiting_on_an_event_whose_earlier_wait_fails_later_is_held_or_failed() {
    common::in_child("wait_then_fail", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        let mut after = Event::default();
        after.record(&s).unwrap();
        after.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        user.set_failed(-5).unwrap();
        let (_, (result, gate_was_open)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        let _ = s.synchronize();
        let _ = waiter.synchronize();
        assert!(
            gate_was_open || result.is_err(),
            "work after Event::wait completed ({result:?}) while the gate before the awaited \
             event was still closed"
        );
    });
}

/// As above, with the waiting stream on the other device (wait.rs's bridge: a user event of
/// device 1 set by `forward_to` from the marker's status): error, never `Ok` with the gate
/// closed; 6 of 6 runs.
#[test]
fn a_stream_of_another_device_waiting_on_an_event_whose_earlier_wait_fails_later_is_held() {
    common::in_child("wait_then_fail_cross_device", 2, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(1).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        let mut after = Event::default();
        after.record(&s).unwrap();
        after.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        user.set_failed(-5).unwrap();
        let (_, (result, gate_was_open)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        let _ = s.synchronize();
        let _ = waiter.synchronize();
        assert!(
            gate_was_open || result.is_err(),
            "work on device 1 after Event::wait completed ({result:?}) while the gate before \
             the awaited event (device 0) was still closed"
        );
    });
}

/// After a failed wait was handled (`Stream::synchronize`), the stream is usable as before:
/// an event recorded before the synchronize is waited on, queried and timed without the
/// failure; events recorded after it (a re-recorded one too) are held by a gate and complete
/// once it opens; an adopted event of the stream is unaffected.
#[test]
fn normal_use_after_a_failed_wait_was_handled_by_a_stream_synchronize() {
    common::in_child("after_handled", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut before = Event::timing();
        before.record(&s).unwrap();
        let q = before.query();
        assert!(!matches!(q, Ok(true)), "query after the failed wait: {q:?}");
        assert!(
            before.wait(&waiter).is_err(),
            "wait refuses before the synchronize"
        );
        // NVIDIA's `clFinish` reports the failure (once per batch failed since): retried.
        let mut synced = s.synchronize();
        for _ in 0..20 {
            if synced.is_ok() {
                break;
            }
            synced = s.synchronize();
        }
        synced.unwrap();
        assert!(before.query().unwrap());
        before.wait(&waiter).unwrap();
        before.synchronize().unwrap();
        // `before`'s marker was completed at the failure: no time from it (review h69).
        assert!(start.elapsed_time(&before).is_err());
        // New work: held by a gate, complete after it.
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut e = Event::timing();
        e.record(&s).unwrap();
        e.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        assert!(!xpu_testing::ever_true(2_000, || e.query().unwrap()));
        assert!(!on_waiter.query().unwrap());
        gate.open().unwrap();
        e.synchronize().unwrap();
        on_waiter.synchronize().unwrap();
        assert!(before.elapsed_time(&e).is_err());
        start.elapsed_time(&e).unwrap();
        // Re-recorded.
        e.record(&s).unwrap();
        e.synchronize().unwrap();
        assert!(e.query().unwrap());
        // An adopted command event of the stream.
        let marker = s.record_event().unwrap();
        marker.synchronize().unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || waiter.synchronize(), || ());
        assert!(returned && r.is_ok(), "{r:?}");
    });
}
