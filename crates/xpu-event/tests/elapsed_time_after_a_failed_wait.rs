//! `elapsed_time` of events recorded in order around a failed wait, after the failure was handled:
//! never a negative time.
//!
//! Review h69 of xpu-event (fresh eyes on c61c9e7 and 83065a7: `Event::record` takes an
//! `OrderedMarker`; after a failed wait of the stream `query`, `synchronize` and
//! `elapsed_time` report the failure and `wait` refuses, until a `Stream::synchronize` of the
//! stream begun after the record; then the marker's own driver status answers again). Each
//! test here fails on 83065a7; the comment above it says what it shows, what was observed
//! and in how many runs. Probes that found nothing are in failed_wait_cleared_by_synchronize.rs.
//!
//! Found: once the failure is cleared by a `Stream::synchronize`, `elapsed_time` reads the
//! markers' own profiling `END` timestamps (event.rs `elapsed_time`), but PoCL completed the
//! marker recorded after the failed wait *at the failure*, while the work before it was still
//! queued: an event recorded after another on the same stream reads as having ended before
//! it (a negative `elapsed_time`, which the docs reserve for `end` captured first).
//!
//! Fixed since: `elapsed_time` refuses a marker recorded after a failed wait of its stream
//! (a "command execution" error with the wait's status), also after the failure was cleared
//! for its completion; the test passes.
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

/// What it shows: `elapsed_time` between two events recorded in order on one stream, once
/// the stream's failed wait was handled by `Stream::synchronize`, is negative: `end` reads as
/// having completed before `start`, though `start` was recorded first and the stream's work
/// before `end` (a gate) ran after `end`'s marker completed.
/// `s` is blocked by a closed gate, `start` is recorded, `s` waits on a user event that is
/// failed, `end` is recorded; `end.synchronize()` returns the failure (the gate still closed);
/// the gate is opened, `s` synchronized (`Ok`), then `start.elapsed_time(&end)`.
/// Expected: `>= 0` (or an error: the time of `end` is not known), as `torch`'s
/// `elapsed_time` of two events recorded in order on one stream.
/// Cause: event.rs:354-362 (`elapsed_time`: the `profiling(End)` reads after `poll`) trusts the
/// marker's own `END` timestamp once `drained_by_finish` (recorded.rs:134) cleared the
/// failure, but PoCL completed that marker at the failure, ahead of the queued gate.
/// Observed on PoCL (2 pthread devices): `Ok(-0.108)` to `Ok(-8.21)` ms, 9 of 9 runs.
#[test]
fn elapsed_time_after_a_handled_failed_wait_is_negative_for_events_recorded_in_order() {
    common::in_child("elapsed_negative", 1, || {
        let s = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut end = Event::timing();
        end.record(&s).unwrap();
        // Returns the failure once the driver is done with `end`'s marker (its
        // `clWaitForEvents` returned), the gate still closed.
        let (returned, r) = xpu_testing::returns_within(LIMIT, || end.synchronize(), || ());
        assert!(returned && r.is_err(), "{r:?}");
        assert!(!gate.is_open());
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        start.synchronize().unwrap();
        end.synchronize().unwrap();
        let ms = start.elapsed_time(&end);
        assert!(
            !matches!(ms, Ok(t) if t < 0.0),
            "elapsed_time from `start` to `end`, recorded in that order on one stream, is \
             {ms:?}: `end` completed before the work before it ran"
        );
    });
}
