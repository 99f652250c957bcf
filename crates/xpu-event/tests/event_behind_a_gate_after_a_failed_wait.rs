//! An event recorded after a failed wait, behind a still-closed gate: `synchronize`, `query`,
//! `wait` and `elapsed_time` never read it complete before the gate opens.
//!
//! Review h67 of xpu-event (events: record, query, synchronize, wait, `elapsed_time`; read
//! at 466cacc). Found: an event recorded on a stream after a wait that failed, behind a
//! still-closed gate, reads complete: `Event::synchronize` returns `Ok` and `Event::query`
//! `true` while the gate's barrier, which precedes the event on the in-order stream, is still
//! closed, and a stream waiting on the event (`Event::wait`) runs its later work before it.
//! PoCL completes a marker after a failed wait while earlier commands of the queue stay
//! queued (docs/architecture.md, "One allocation", step 6); the allocator's free markers and
//! `Stream::query`'s idle probe are judged with the queue's log of waits for that reason
//! (`OrderedMarker`, `IdleProbe::is_complete`), but `Event::record` takes a plain marker
//! (`event.rs` `record`: `queue.enqueue_marker(&[])`) and `Recorded::poll` /
//! `Event::synchronize` / `wait::stream_waits_for` trust the driver's status of it
//! (`recorded.rs` `driver_says_complete`).
//!
//! Fixed since: `Event::record` takes an ordered marker (judged with the waits enqueued
//! before it: `query`, `synchronize` and `elapsed_time` report the failed wait's error), and
//! `Event::wait` reports the failure instead of enqueuing a barrier that orders nothing. All
//! three tests pass.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as `failed_events.rs` does, so
//! that a driver abort beside a failing wait is a failed assertion, not a killed suite.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};
use xpu_stream::Stream;

/// `s` held by a closed gate, then made to wait (`wait_event`: a barrier) on a fresh user
/// event adopted on another stream, which is then failed; returns the gate and an event
/// recorded on `s` after that (the failed wait is before it in the stream's order, the closed
/// gate's barrier before that), plus what must outlive the scenario.
fn gated_then_failed_wait(s: &Stream) -> (Gate, Event, Event) {
    let other = common::fresh_stream(0).leak();
    let gate = Gate::new(0).unwrap();
    gate.block(s).unwrap();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user.clone(), &other, EventFlags::default()).unwrap();
    s.wait_event(&adopted).unwrap();
    user.set_failed(-5).unwrap();
    let mut after = Event::timing();
    after.record(s).unwrap();
    (gate, after, adopted)
}

/// What it shows: `Event::synchronize` of an event whose stream is still held by a closed
/// gate (the gate's barrier was enqueued before it) returns `Ok(())`, and `query` then reads
/// `true`, because a wait enqueued between the gate and the event had failed: "blocks the host
/// until the captured work completes" does not hold. Expected: `synchronize` blocks until
/// the gate opens (or returns the failure), never `Ok` before.
/// Observed on PoCL (2 pthread devices): `Ok(())` returned at once, the gate closed, then
/// `query() == Ok(true)`; 13 of 13 runs (a plain `query` before it read `true` already in 1
/// of 3 exploratory runs).
#[test]
fn synchronize_of_an_event_behind_a_closed_gate_and_a_failed_wait_returns_before_the_gate_opens() {
    common::in_child("synchronize", 1, || {
        let s = common::fresh_stream(0).leak();
        let (gate, after, _adopted) = gated_then_failed_wait(&s);
        let (_, (result, gate_was_open, query)) = xpu_testing::returns_within(
            Duration::from_secs(10),
            || {
                let r = after.synchronize();
                let open = gate.is_open();
                (r, open, after.query())
            },
            || gate.open().unwrap(),
        );
        assert!(
            gate_was_open || result.is_err(),
            "Event::synchronize returned {result:?} while the gate before the event was \
             still closed (query then: {query:?})"
        );
        let _ = s.synchronize();
    });
}

/// What it shows: a stream that waits (`Event::wait`) on that event runs its later work while
/// the gate on the event's stream is still closed: the cross-stream order "future work on
/// `stream` waits for the captured work" is broken (a block freed after that work could be
/// reused while the first stream's earlier commands have not run).
/// Observed on PoCL: an event recorded on the waiting stream after the wait synchronized
/// `Ok(())` with the gate closed, 13 of 13 runs.
#[test]
fn a_stream_waiting_on_an_event_behind_a_closed_gate_and_a_failed_wait_runs_before_the_gate_opens()
{
    common::in_child("wait", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        let (gate, after, _adopted) = gated_then_failed_wait(&s);
        // Reporting the failure at the wait is the other accepted outcome (since the fix).
        if let Err(e) = after.wait(&waiter) {
            assert!(e.to_string().contains("command execution"), "{e}");
            gate.open().unwrap();
            let _ = s.synchronize();
            return;
        }
        let on_waiter = waiter.record_event().unwrap();
        let (_, (result, gate_was_open)) = xpu_testing::returns_within(
            Duration::from_secs(10),
            || {
                let r = on_waiter.synchronize();
                (r, gate.is_open())
            },
            || gate.open().unwrap(),
        );
        assert!(
            gate_was_open || result.is_err(),
            "work after Event::wait completed ({result:?}) while the gate before the awaited \
             event was still closed"
        );
        let _ = s.synchronize();
        let _ = waiter.synchronize();
    });
}

/// What it shows: `elapsed_time` to such an event answers a number (the event read complete
/// though its stream's earlier work never ran), where torch raises (the event is neither
/// completed nor successful). `start` is recorded and completed before the gate.
/// Observed on PoCL: `Ok(0.15..6.6)` ms, 13 of 13 runs.
#[test]
fn elapsed_time_to_an_event_behind_a_closed_gate_and_a_failed_wait_answers_a_number() {
    common::in_child("elapsed", 1, || {
        let s = common::fresh_stream(0).leak();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        start.synchronize().unwrap();
        let (gate, after, _adopted) = gated_then_failed_wait(&s);
        // Asked only once `after` reads complete or failed by itself (no wait for the gate).
        let mut elapsed = None;
        for _ in 0..100_000 {
            match after.query() {
                Ok(false) => std::thread::yield_now(),
                Ok(true) | Err(_) => {
                    elapsed = Some(start.elapsed_time(&after));
                    break;
                }
            }
        }
        let open = gate.is_open();
        gate.open().unwrap();
        let _ = s.synchronize();
        if let Some(elapsed) = elapsed {
            assert!(
                open || elapsed.is_err(),
                "elapsed_time answered {elapsed:?} while the work before the end event had \
                 not run (gate closed)"
            );
        }
    });
}
