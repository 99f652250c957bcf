//! Adopted commands (`Event::from_cl_event` of the stream's own queue) and blocking events after a
//! failed wait: `query`, `synchronize` and `wait` never let work run ahead of a closed gate, and
//! agree once the failure was handled.
//!
//! Review h83 of xpu-event at c75fc20 (read at 153f9d6): a marker failed by a failed wait
//! before it reads complete once drained by a synchronize of its stream
//! (`Recorded::status`); `Event::wait` enqueues nothing on work known over; `Event::synchronize`
//! reports a failed wait before the record at once. Each test here failed at 153f9d6 (5 of 5)
//! and passes since the fixes of the commit that brought it (a drained marker's
//! `synchronize` judged by its status; adopted commands judged in order,
//! `CommandQueue::adopt_in_order`); the comment above each says what it shows, what was
//! expected and why. Probes that held are in
//! drained_marker_after_a_failed_wait.rs.
//!
//! Found:
//! 1. (c75fc20's fix incomplete) A *blocking* event whose marker PoCL failed with the wait before it, after
//!    the failure was handled by a stream synchronize: `query` is `true` (recorded.rs:147-150
//!    reads `Complete`), `synchronize` returns `clWaitForEvents` -14: event.rs:294
//!    (`r.event().wait()?`) asks the driver, which still reports the marker failed; the
//!    non-blocking path polls `Recorded::status` and agrees (drained_marker_after_a_failed_wait.rs;
//!    that probe
//!    fails at c75fc20^ with `command execution` -1, so c75fc20 fixed it for non-blocking
//!    events only). This test fails at c75fc20^ too (`query` is `true` there from
//!    `is_known_complete`, with no driver call).
//! 2. (older than c75fc20, not touched by it; all four fail at c75fc20^ too) An adopted command of the stream's queue
//!    (`Event::from_cl_event` of a foreign enqueue's event) recorded after a failed wait
//!    behind a closed gate: its status is the driver's, not judged in order
//!    (recorded.rs:153, `Point::Adopted(e) => e.status()`), and PoCL completes it at the
//!    failure while the gate's barrier before it is still queued: `query` true,
//!    `synchronize` `Ok`, and `wait` (wait.rs:33-50: no `follows_failed_wait` check for an
//!    adopted point) lets a stream of the same or of another device run ahead of the gate:
//!    review h67's finding, for adopted events.
//!
//! Each of the five tests failed 5 of 5 runs at 153f9d6 on PoCL 3.1 (2 pthread devices).
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

/// FINDING 1 (c75fc20's "synchronize agrees with query", not for blocking events). What: a blocking event (`EventFlags { blocking: true }`) recorded on
/// `s` behind a closed gate while a wait of `s` is pending; the wait's user event fails (PoCL
/// fails the marker with it: its own driver status -14); the gate opens, `s.synchronize()`
/// returns `Ok` (the marker is `drained_by_finish`). Then `query()` is `Ok(true)` and
/// `synchronize()` must agree (`Ok`, as the commit message says: "so synchronize agrees with
/// query", and as the same event without `blocking` does).
/// Observed on PoCL: `query` `Ok(true)`, `synchronize`
/// `Err(clWaitForEvents, -14)`. Why: event.rs:294 `r.event().wait()?` (`clWaitForEvents` on
/// the marker) runs for a blocking event before the in-order status loop, and the driver
/// reports the failed marker's error there; recorded.rs:147-150 made only `status` read
/// `Complete`. Also: `elapsed_time` refuses, `wait` is `Ok`.
#[test]
fn a_blocking_event_failed_with_the_wait_synchronizes_with_an_error_after_query_read_true() {
    common::in_child("blocking_failed_marker", 1, || {
        let s = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        let mut e = Event::new(EventFlags {
            enable_timing: false,
            blocking: true,
        });
        e.record(&s).unwrap();
        user.set_failed(-5).unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || e.synchronize(), || ());
        assert!(returned && r.is_err(), "before the handling: {r:?}");
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        let q = e.query();
        let sync = e.synchronize();
        assert!(
            matches!(q, Ok(true)) == sync.is_ok(),
            "after the stream synchronize handled the failure, query is {q:?} but \
             synchronize is {sync:?}"
        );
    });
}

/// `s` held by a closed gate, then made to wait (a barrier) on a user event that is failed at
/// once; returns the gate and what must outlive the scenario.
fn gated_then_failed(s: &Stream) -> (Gate, Event) {
    let gate = Gate::new(0).unwrap();
    gate.block(s).unwrap();
    let (adopted, user) = common::failable();
    s.wait_event(&adopted).unwrap();
    user.set_failed(-5).unwrap();
    (gate, adopted)
}

/// A command of `s`'s own queue (a foreign enqueue's event: a marker of the queue, which
/// captures every command before it) adopted as an event.
fn adopted_command(s: &Stream, flags: EventFlags) -> Event {
    let foreign = s.queue().unwrap().enqueue_marker(&[]).unwrap();
    Event::from_cl_event(foreign, s, flags).unwrap()
}

/// FINDING 2a. What: `synchronize` of an adopted command of `s` enqueued after the failed
/// wait (the closed gate's barrier before it) returns `Ok(())` with the gate still closed, and
/// `query` then reads `true`. Expected: blocks until the gate opens, or the failure (as for
/// a recorded marker since review h67). Why: recorded.rs:153 (`Point::Adopted(e) =>
/// e.status()`) trusts the driver, which completed the command at the failure (PoCL).
#[test]
fn synchronize_of_an_adopted_command_after_a_failed_wait_returns_before_the_gate_opens() {
    common::in_child("adopted_sync", 1, || {
        let s = common::fresh_stream(0).leak();
        let (gate, _a) = gated_then_failed(&s);
        let ev = adopted_command(&s, EventFlags::default());
        let (_, (r, open, q)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = ev.synchronize();
                (r, gate.is_open(), ev.query())
            },
            || gate.open().unwrap(),
        );
        let _ = s.synchronize();
        assert!(
            open || r.is_err(),
            "sync {r:?} with gate closed, query {q:?}"
        );
    });
}

/// FINDING 2b. What: a stream of the same device that waits on that adopted command
/// (`Event::wait`: `Ok`, a barrier on the adopted event) runs its later work with the gate
/// closed (an event recorded on it synchronizes `Ok`). Expected: held by the gate, or `wait`
/// refuses (as for a recorded marker). Why: wait.rs:33-38 checks `follows_failed_wait` only
/// for a marker; the barrier is on an event PoCL completed at the failure.
#[test]
fn a_stream_waiting_on_an_adopted_command_after_a_failed_wait_runs_before_the_gate_opens() {
    common::in_child("adopted_wait", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let (gate, _a) = gated_then_failed(&s);
        let ev = adopted_command(&s, EventFlags::default());
        if let Err(e) = ev.wait(&waiter) {
            gate.open().unwrap();
            let _ = s.synchronize();
            assert!(e.to_string().contains("command execution"), "{e}");
            return;
        }
        let on_waiter = waiter.record_event().unwrap();
        let (_, (r, open)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        let _ = s.synchronize();
        let _ = waiter.synchronize();
        assert!(open || r.is_err(), "waiter ran ahead: {r:?}");
    });
}

/// FINDING 2c. As 2b, the waiting stream on device 1 (wait.rs:51-59: the adopted event reads
/// complete, so no bridge and no barrier at all).
#[test]
fn a_stream_of_another_device_waiting_on_an_adopted_command_after_a_failed_wait_runs_ahead() {
    common::in_child("adopted_wait_x", 2, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(1).leak();
        let (gate, _a) = gated_then_failed(&s);
        let ev = adopted_command(&s, EventFlags::default());
        if let Err(e) = ev.wait(&waiter) {
            gate.open().unwrap();
            let _ = s.synchronize();
            assert!(e.to_string().contains("command execution"), "{e}");
            return;
        }
        let on_waiter = waiter.record_event().unwrap();
        let (_, (r, open)) = xpu_testing::returns_within(
            LIMIT,
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        let _ = s.synchronize();
        let _ = waiter.synchronize();
        assert!(open || r.is_err(), "waiter ran ahead: {r:?}");
    });
}

/// FINDING 2d. What: `query` of that adopted command reads `true` with the gate closed.
/// Expected: `false` or the failure. Why: as 2a.
#[test]
fn query_of_an_adopted_command_after_a_failed_wait_reads_true_before_the_gate_opens() {
    common::in_child("adopted_query", 1, || {
        let s = common::fresh_stream(0).leak();
        let (gate, _a) = gated_then_failed(&s);
        let ev = adopted_command(&s, EventFlags::default());
        let seen = xpu_testing::ever_true(100_000, || matches!(ev.query(), Ok(true)));
        let open = gate.is_open();
        gate.open().unwrap();
        let _ = s.synchronize();
        assert!(open || !seen, "query true with gate closed");
    });
}
