//! Markers drained after a failed wait, probes that held: re-recorded events are waited for, a
//! synchronize through another wrapper of the queue drains only after the gate, blocking and
//! non-blocking markers agree after the handling.
//!
//! Review h83 of c75fc20 (xpu-event: a marker failed by a failed wait before it reads
//! complete once drained by a synchronize of its stream; `Event::wait` enqueues nothing on
//! work known over; `Event::synchronize` reports a failed wait before the record at once),
//! probes that found nothing: each passes on c75fc20 (153f9d6). Findings are in
//! adopted_command_after_a_failed_wait.rs.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as
//! event_behind_a_gate_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};
use xpu_stream::Stream;

/// The bound on a call that should return (it takes milliseconds).
const LIMIT: Duration = Duration::from_secs(10);

/// `event` recorded on `s`, synchronized (`Ok`: known complete, `is_known_done`), then
/// re-recorded behind a closed gate, then waited on by `waiter`: the waiting stream's later
/// work is held by the gate (the skip of c75fc20's wait.rs reads the new recording, not the
/// old one's completion).
fn rerecorded_is_waited_for(s: &Stream, waiter: &Stream) {
    let mut e = Event::default();
    e.record(s).unwrap();
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
    let gate = Gate::new(0).unwrap();
    gate.block(s).unwrap();
    e.record(s).unwrap();
    e.wait(waiter).unwrap();
    let on_waiter = waiter.record_event().unwrap();
    common::assert_held_by(&gate, &on_waiter);
    e.synchronize().unwrap();
}

/// Re-recorded after a successful `Event::synchronize`, waited on by a stream of the same
/// device: held by the gate. 5 of 5 runs.
#[test]
fn a_rerecorded_event_is_waited_for_on_the_same_device() {
    common::in_child("rerecorded_same", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        rerecorded_is_waited_for(&s, &waiter);
    });
}

/// As above, the waiting stream on device 1 (the bridge). 5 of 5 runs.
#[test]
fn a_rerecorded_event_is_waited_for_on_another_device() {
    common::in_child("rerecorded_other", 2, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(1).leak();
        rerecorded_is_waited_for(&s, &waiter);
    });
}

/// As above after a failed wait of `s` handled by a `Stream::synchronize` (the first record
/// is then known complete through the stream and `drained_by_finish`), and after the
/// device-wide `xpu_stream::synchronize`: the re-recording behind a new gate is waited for.
/// 5 of 5 runs.
#[test]
fn a_rerecorded_event_after_a_handled_failure_is_waited_for() {
    common::in_child("rerecorded_after_failure", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::default();
        e.record(&s).unwrap();
        assert!(e.wait(&waiter).is_err(), "refused before the synchronize");
        common::synchronize_after_failure(&s);
        e.wait(&waiter).unwrap();
        xpu_stream::synchronize(0).unwrap();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        e.record(&s).unwrap();
        e.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        common::assert_held_by(&gate, &on_waiter);
    });
}

/// Two external streams over one queue (two wrappers sharing its state): a failed wait of
/// the first, a record on it behind a closed gate, then a synchronize through the second
/// wrapper (on another thread). `drained_by_finish` becomes true only once that `clFinish`
/// returned, i.e. after the gate opened (the gate is opened 200 ms after the synchronize
/// began; it must not have returned before). After it: `query` true, `synchronize` `Ok`, `wait` a
/// no-op, `elapsed_time` refused (review h69), all without a hang. 5 of 5 runs.
#[test]
fn a_synchronize_through_another_wrapper_of_the_queue_drains_only_after_the_gate() {
    common::in_child("other_wrapper", 1, || {
        let q = xpu_testing::fresh_queue(0);
        let s1 = xpu_stream::ExternalStream::new(q.clone(), 0)
            .unwrap()
            .leak();
        let s2 = xpu_stream::ExternalStream::new(q, 0).unwrap().leak();
        let waiter = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s1).unwrap();
        let mut start = Event::timing();
        start.record(&s1).unwrap();
        let (adopted, user) = common::failable();
        s1.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::timing();
        e.record(&s1).unwrap();
        // The bound only decides when the gate opens; `open` tells whether the finish
        // returned before it did.
        let (_, (r, open)) = xpu_testing::returns_within(
            Duration::from_millis(200),
            || {
                let r = s2.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        assert!(open, "s2.synchronize returned {r:?} with the gate closed");
        common::reported_at_most_once(r);
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        e.wait(&waiter).unwrap();
        assert!(start.elapsed_time(&e).is_err());
        waiter.synchronize().unwrap();
    });
}

/// A blocking event recorded after a failed wait behind a closed gate: `synchronize`
/// returns the failure at once (c75fc20's early return; no hang), `wait` refuses, `query`
/// reports the failure; once the gate opened and the stream synchronized, the four agree
/// (`query` true, `synchronize` `Ok`, `wait` `Ok`, `elapsed_time` an error). 5 of 5 runs.
#[test]
fn a_blocking_event_after_a_failed_wait_agrees_before_and_after_the_handling() {
    common::in_child("blocking", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut e = Event::new(EventFlags {
            enable_timing: true,
            blocking: true,
        });
        e.record(&s).unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || e.synchronize(), || ());
        assert!(returned && r.is_err(), "{r:?}");
        assert!(e.wait(&waiter).is_err());
        assert!(e.query().is_err());
        assert!(!gate.is_open());
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        e.wait(&waiter).unwrap();
        assert!(start.elapsed_time(&e).is_err());
    });
}

/// The non-blocking side of adopted_command_after_a_failed_wait.rs's finding: a marker recorded
/// while the wait
/// before it is pending, which PoCL then fails with the wait (its own driver status an
/// error: the case c75fc20's recorded.rs change reads `Complete` once drained). Before the
/// handling: `synchronize` and `query` report the failure, a stream waiting on it (barrier
/// enqueued before the failure) is failed or held, never run with the gate closed. After the
/// gate opened and the stream synchronized: `query` true, `synchronize` `Ok` (polled status,
/// no `clWaitForEvents`), `wait` `Ok`, `elapsed_time` an error. 5 of 5 runs.
#[test]
fn a_non_blocking_marker_failed_with_the_wait_agrees_after_the_handling() {
    common::in_child("failed_marker", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        let mut e = Event::timing();
        e.record(&s).unwrap();
        e.wait(&waiter).unwrap();
        let on_waiter = waiter.record_event().unwrap();
        user.set_failed(-5).unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || e.synchronize(), || ());
        assert!(returned && r.is_err(), "{r:?}");
        assert!(e.query().is_err());
        let (_, (w, open)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        assert!(open || w.is_err(), "waiter ran ahead: {w:?}");
        if !gate.is_open() {
            gate.open().unwrap();
        }
        common::synchronize_after_failure(&s);
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        e.wait(&waiter).unwrap();
        assert!(start.elapsed_time(&e).is_err());
        let _ = waiter.synchronize();
    });
}
