//! Failed waits on adopted user events (`Event::from_cl_event`): an unset user event dropped while
//! a stream of another device waits on it, and failing waits beside `record_event` /
//! `Stream::query` on other threads (ignored: PoCL ends the process in some runs).
//!
//! Review h38: failure paths of events and stream waits, as sequences of safe calls. Each
//! test here failed (or aborted the process) on commit 711725f with PoCL 3.1
//! (`POCL_DEVICES="pthread pthread"`). A hang is detected with a helper thread and a limit
//! (the verdict "it never returned"); the ordering itself uses user events only.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, StreamExt};

/// How long a call that should return at once may take before it is called hung.
const HANG_LIMIT: Duration = Duration::from_secs(10);

/// Finding 1 through xpu-event: a user event adopted as an `Event` of a device-0 stream
/// (`Event::from_cl_event`, which takes the only handle), waited for by a device-1 stream
/// (`wait_event`: a bridge user event set by `forward_to`), then dropped unset. Dropping the
/// last wrapper of an unset user event is documented to fail it (so the waiters terminate),
/// but the forward keeps a clone of the source with its unset guard: the event is never set,
/// and device 1's stream never drains.
///
/// Sequence: `user = device(0).create_user_event()`, `adopted = Event::from_cl_event(user,
/// &s0, default)`, `s1.wait_event(&adopted)` (s1 on device 1), `drop(adopted)`,
/// `s1.synchronize()`.
///
/// Observed (3 of 3 runs): `s1.synchronize()` never returns. The same on one device (a plain
/// barrier, no forward) returns at once (`failing_waits_on_adopted_user_events_probes.rs`).
// Fixed: a forward keeps an unguarded clone of its source (`ClEvent::clone_unguarded`), so
// the application's last wrapper still fails the unset user event on drop (2026-12-06).
#[test]
fn synchronize_returns_after_an_adopted_user_event_waited_on_by_another_device_is_dropped() {
    if !xpu_testing::devices(2) {
        return;
    }
    let s0 = common::fresh_stream(0).leak();
    let s1 = common::fresh_stream(1).leak();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user, &s0, EventFlags::default()).unwrap();
    s1.wait_event(&adopted).unwrap();
    // The last handle of the unset user event the application had.
    drop(adopted);
    let synchronized = xpu_testing::within(HANG_LIMIT, move || s1.synchronize());
    assert!(
        synchronized.is_some(),
        "device 1's stream never drained: the dropped unset user event was never failed"
    );
}

/// Finding 2 through xpu-event: one stream, two threads. Thread A: a user event adopted on
/// another stream, `s.wait_event(&adopted)` (a barrier with a wait list), then
/// `user.set_failed(-5)`; thread B: `s.record_event()` (a marker with an empty wait list,
/// outside the failure exclusion) and drops it. 5,000 steps each.
///
/// Observed (run alone, `--ignored`): 5 of 5 runs ended the process in the probe (3 SIGABRT,
/// `pocl_util.c:2222: pocl_update_event_finished: Assertion 'cq->command_count > 0'
/// failed`; 2 SIGSEGV); this test, 7 of 10 (6 SIGSEGV, 1 SIGABRT with `PTHREAD ERROR in
/// pocl_lock_events_inorder():399: Invalid argument (22)`).
#[test]
// Lowered, not closed: with every enqueue of a PoCL-before-4.0 queue under the read side of
// the failure exclusion (`held`, 2026-12-06) 10 of 10 runs passed here, but review h40 saw
// 1 of 30 still end the process on a loaded machine: PoCL's worker thread completing a command
// while a failure is passed on to its successor (pocl/pocl pull request 2216), which no lock
// of the runtime orders.
#[ignore = "ends the whole test process (PoCL) in a few runs; run alone with --ignored"]
fn record_event_beside_a_failing_wait_on_one_stream_does_not_end_the_process() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = common::fresh_stream(0).leak();
    let other = common::fresh_stream(0).leak();
    const STEPS: usize = 5_000;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..STEPS {
                let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
                let adopted =
                    Event::from_cl_event(user.clone(), &other, EventFlags::default()).unwrap();
                s.wait_event(&adopted).unwrap();
                user.set_failed(-5).unwrap();
            }
        });
        scope.spawn(|| {
            for _ in 0..STEPS {
                drop(s.record_event().unwrap());
            }
        });
    });
    let _ = s.synchronize();
}

/// Finding 2 with `Stream::query` (a marker with an empty wait list, flushed) beside waits
/// whose user event is dropped unset (failed on drop by the runtime).
///
/// Observed (run alone, `--ignored`, 5,000 steps): 1 of 5 probe runs ended with SIGSEGV;
/// this test 2 of 10 with SIGABRT (`pocl_update_event_finished: Assertion
/// 'cq->command_count > 0' failed`, `pocl_lock_events_inorder: Assertion
/// '(ev2)->pocl_refcount > 0' failed`).
#[test]
// Lowered, not closed: with every enqueue of a PoCL-before-4.0 queue under the read side of
// the failure exclusion (`held`, 2026-12-06) 10 of 10 runs passed here, but review h40 saw
// 1 of 30 still end the process on a loaded machine: PoCL's worker thread completing a command
// while a failure is passed on to its successor (pocl/pocl pull request 2216), which no lock
// of the runtime orders.
#[ignore = "ends the whole test process (PoCL) in a few runs; run alone with --ignored"]
fn stream_query_beside_waits_on_dropped_user_events_does_not_end_the_process() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = common::fresh_stream(0).leak();
    let other = common::fresh_stream(0).leak();
    const STEPS: usize = 5_000;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..STEPS {
                let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
                let adopted = Event::from_cl_event(user, &other, EventFlags::default()).unwrap();
                s.wait_event(&adopted).unwrap();
                // The last handle of the unset user event: the runtime fails it.
                drop(adopted);
            }
        });
        scope.spawn(|| {
            for _ in 0..STEPS {
                let _ = s.query();
            }
        });
    });
    let _ = s.synchronize();
}
