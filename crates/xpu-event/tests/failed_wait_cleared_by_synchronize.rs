//! Which synchronizes clear a failed wait for the events recorded after it (device-wide yes, one
//! begun before the record no), blocking events after a failed wait, and no driver objects leaked
//! over many rounds.
//!
//! Review h69 of xpu-event, probes that found nothing (they pass on 83065a7): `Event::record`'s
//! ordered marker after a failed wait of its stream (c61c9e7, 83065a7) cleared by a
//! device-wide `xpu_stream::synchronize` (the event then synchronizes `Ok`, `Event::wait`
//! works, and a stream waiting on it is held by a later gate as usual); a `blocking` event
//! recorded after a failed wait behind a closed gate (its `synchronize` returns the failure
//! without the gate, no hang, and `Ok` after the stream synchronize); the failure is not
//! cleared by a `Stream::synchronize` that returned before the record; driver objects over
//! many record / fail / refuse / synchronize rounds (same device and across devices) return
//! to the baseline.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as
//! event_behind_a_gate_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};

/// The bound on a call that should return (it takes milliseconds).
const LIMIT: Duration = Duration::from_secs(10);

/// A device-wide `xpu_stream::synchronize` (which finishes every registered external stream)
/// clears the failure as a `Stream::synchronize` does: `query` true, `synchronize` `Ok`,
/// `wait` `Ok`; a later gate holds the waiting stream as usual.
#[test]
fn device_wide_synchronize_clears_the_failure() {
    common::in_child("device_wide", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::default();
        e.record(&s).unwrap();
        assert!(e.synchronize().is_err());
        assert!(e.wait(&waiter).is_err());
        xpu_stream::synchronize(0).unwrap();
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        e.wait(&waiter).unwrap();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        e.record(&s).unwrap();
        e.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        common::assert_held_by(&gate, &on_waiter);
        e.synchronize().unwrap();
    });
}

/// A `blocking` event recorded after a failed wait and behind a closed gate: `synchronize`
/// returns the failure without the gate (no hang), `query` does not read true, and after the
/// gate opened and the stream synchronized it is `Ok`.
#[test]
fn blocking_event_after_a_failed_wait_behind_a_gate_does_not_hang() {
    common::in_child("blocking", 1, || {
        let s = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::new(EventFlags {
            enable_timing: false,
            blocking: true,
        });
        e.record(&s).unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || e.synchronize(), || ());
        assert!(returned && r.is_err(), "{r:?}");
        assert!(!matches!(e.query(), Ok(true)));
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        e.synchronize().unwrap();
    });
}

/// A `Stream::synchronize` that returned before the record does not clear the failure of a
/// wait enqueued after it: the event recorded after that wait still reports it.
#[test]
fn a_synchronize_before_the_record_does_not_clear_it() {
    common::in_child("before", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut early = Event::default();
        early.record(&s).unwrap();
        assert!(early.synchronize().is_err());
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        early.synchronize().unwrap();
        // A new failure after that synchronize, behind a new gate.
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::default();
        e.record(&s).unwrap();
        assert!(!matches!(e.query(), Ok(true)));
        assert!(e.synchronize().is_err());
        assert!(e.wait(&waiter).is_err());
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        e.synchronize().unwrap();
    });
}

/// Driver objects over 40 rounds of a failed wait, a record after it, a refused wait (same
/// device and across devices), a stream synchronize and a wait after it return to the
/// baseline.
#[test]
fn rounds_of_failures_leak_no_driver_objects() {
    common::in_child("leaks", 2, || {
        let s = common::fresh_stream(0).leak();
        let near = common::fresh_stream(0).leak();
        let far = common::fresh_stream(1).leak();
        // Warm-up round: lazily created state is not counted.
        let round = || {
            let (adopted, user) = common::failable();
            s.wait_event(&adopted).unwrap();
            user.set_failed(-5).unwrap();
            let mut e = Event::timing();
            e.record(&s).unwrap();
            assert!(e.wait(&near).is_err());
            assert!(e.wait(&far).is_err());
            assert!(e.synchronize().is_err());
            common::synchronize_after_failure(&s);
            e.wait(&near).unwrap();
            e.wait(&far).unwrap();
            e.synchronize().unwrap();
            near.synchronize().unwrap();
            far.synchronize().unwrap();
        };
        round();
        let baseline = xpu_device::backend::live_objects();
        for _ in 0..40 {
            round();
        }
        let after = xpu_device::backend::live_objects();
        assert!(
            after.events <= baseline.events,
            "{baseline:?} then {after:?}"
        );
    });
}
