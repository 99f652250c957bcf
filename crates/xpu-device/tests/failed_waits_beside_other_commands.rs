//! Failed waits beside other commands: buffers, queues, forwards and callbacks used on the same or
//! other queues after a command's wait failed return and finish (what held).
//!
//! Review h38: sequences expected to fail that held on commit 711725f (PoCL 3.1,
//! `POCL_DEVICES="pthread pthread"`), kept as evidence. Run as threads of one process (the
//! default), and each was also run alone in loops (counts in each test's comment).

mod common;

use std::time::Duration;

use xpu_device::backend::{wait_for_callbacks, Buffer, EventStatus, MemFlags};
use xpu_device::live_objects;

const HANG_LIMIT: Duration = Duration::from_secs(20);

/// A fill whose wait failed leaves its buffer's "last event" failed in PoCL; a fill of the
/// buffer on another queue with no wait list (an implicit dependency on that event) still
/// runs, and `finish` returns. Held 3 of 3.
#[test]
fn a_buffer_whose_last_command_failed_is_used_on_another_queue() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let q2 = common::queue(dev);
    let buf = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let u = dev.create_user_event().unwrap();
    let fill = q.fill(&buf, &[1u8], 0, 1024, &[&u]).unwrap();
    q.flush().unwrap();
    u.set_failed(-5).unwrap();
    // PoCL fails the fill at once; NVIDIA's driver reports the failure a little later (the
    // H100 run of 58f7c71 read it not yet failed): wait first.
    assert!(fill.wait().is_err(), "the fill failed");
    assert!(matches!(fill.status().unwrap(), EventStatus::Error(_)));
    let r = common::within(HANG_LIMIT, move || {
        let e = q2.fill(&buf, &[2u8], 0, 1024, &[]).unwrap();
        (q2.finish().is_ok(), e.status().unwrap())
    });
    assert_eq!(r, Some((true, EventStatus::Complete)));
}

/// Blocking read and write (no wait list) after a failed copy of the same buffers, on the
/// same and on another queue: they return. Held 3 of 3.
#[test]
fn blocking_transfers_after_a_failed_copy_return() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let q2 = common::queue(dev);
    let a = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let b = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let u = dev.create_user_event().unwrap();
    drop(q.copy(&a, 0, &b, 0, 1024, &[&u]).unwrap());
    q.flush().unwrap();
    u.set_failed(-5).unwrap();
    let r = common::within(HANG_LIMIT, move || {
        let mut out = vec![0u8; 1024];
        let read = q2.read(&b, 0, &mut out).is_ok();
        let write = q2.write(&a, 0, &out).is_ok();
        let same = q.read(&a, 0, &mut out).is_ok();
        (read, write, same, q2.finish().is_ok(), q.finish().is_ok())
    });
    assert!(r.is_some(), "a blocking transfer hung: {r:?}");
}

/// Dropping the last handle of a queue while a barrier on it is gated returns at once; the
/// barrier completes when the gate opens. Held 3 of 3.
#[test]
fn dropping_a_queue_with_a_gated_barrier_returns() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let u = dev.create_user_event().unwrap();
    let b = q.enqueue_barrier(&[&u]).unwrap();
    assert!(common::within(HANG_LIMIT, move || drop(q)).is_some());
    u.set_complete().unwrap();
    b.wait().unwrap();
}

/// The queue dropped first, then its gated commands (events dropped too) failed: no abort,
/// the held marker ends failed or complete. Held 3 of 3.
#[test]
fn failing_commands_of_a_dropped_queue() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let u = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&u]).unwrap());
    drop(q.enqueue_marker(&[]).unwrap());
    let m = q.enqueue_marker(&[]).unwrap();
    drop(q);
    u.set_failed(-5).unwrap();
    let _ = live_objects();
    assert!(common::within(HANG_LIMIT, move || m.wait().is_err() || m.status().is_ok()).is_some());
}

/// The *target* of a forward dropped unset by the application while its source (a gated
/// marker) is pending; the source then fails: the failure reaches the target (the sweep), and
/// another queue's barrier on it fails. Held 3 of 3.
#[test]
fn a_dropped_forward_target_still_gets_the_failure() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let gate = dev.create_user_event().unwrap();
    let m = q.enqueue_marker(&[&gate]).unwrap();
    let target = dev.create_user_event().unwrap();
    m.forward_to(&target).unwrap();
    let q2 = common::queue(dev);
    let b = q2.enqueue_barrier(&[&target]).unwrap();
    drop(target);
    gate.set_failed(-5).unwrap();
    assert!(common::within(HANG_LIMIT, move || q2.finish()).is_some());
    // Not driver-specific: the target must end failed. (The H100 run of 58f7c71 failed
    // here: NVIDIA calls the marker's CL_COMPLETE callback with 0 while it reads -5, and the
    // forward's callback passes the driver's 0 on; see the review h46 report.)
    let status = b.status().unwrap();
    assert!(
        matches!(status, EventStatus::Error(_)),
        "the barrier on the forward's target reads {status:?}"
    );
}

/// Two threads, each on its own queue and buffer, failing barriers with fills and markers
/// (empty wait lists) behind them: only the runtime's failure machinery is shared. Held 3 of
/// 3 (2,000 steps) and 5 of 5 (20,000 steps).
#[test]
fn independent_threads_failing_waits_on_their_own_queues() {
    let Some((dev, ctx, _)) = common::device0_queue() else {
        return;
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(move || {
                let q = common::queue(dev);
                let x = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
                for _ in 0..2_000 {
                    let u = dev.create_user_event().unwrap();
                    drop(q.enqueue_barrier(&[&u]).unwrap());
                    drop(q.fill(&x, &[1u8], 0, 1024, &[]).unwrap());
                    drop(q.enqueue_marker(&[]).unwrap());
                    u.set_failed(-5).unwrap();
                }
                common::finish_after_failure(&q);
            });
        }
    });
}

/// Thread A fails fills of buffer X on its queue; thread B fills X on another queue with an
/// empty wait list (PoCL's implicit dependency on the buffer's last command). Held 3 of 3
/// (2,000 steps) and 5 of 5 (20,000 steps).
#[test]
fn failing_fills_beside_unrelated_queue_fills_of_the_same_buffer() {
    let Some((dev, ctx, qa)) = common::device0_queue() else {
        return;
    };
    let qb = common::queue(dev);
    let x = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..2_000 {
                let u = dev.create_user_event().unwrap();
                drop(qa.fill(&x, &[1u8], 0, 1024, &[&u]).unwrap());
                u.set_failed(-5).unwrap();
            }
        });
        s.spawn(|| {
            for _ in 0..2_000 {
                drop(qb.fill(&x, &[2u8], 0, 1024, &[]).unwrap());
            }
        });
    });
    common::finish_after_failure(&qa);
    qb.finish().unwrap();
}

/// The counterpart of finding 2: thread B's markers get a non-empty wait list (a completed
/// user event), so they take the failure exclusion's read side: held 10 of 10 (20,000 steps)
/// where the empty wait list aborted 8 of 10. Later counts (2026-12-06): 2 of 40 runs aborted
/// at dd6ecda and 2 of 40 at 9ba48e0 (`pocl_update_event_running_unlocked: Assertion
/// 'event->status == CL_SUBMITTED'`, PoCL 3.1's own double-finish race, as reviews h38/h40's
/// ignored tests), one of them in a fresh clone's full run.
#[test]
#[ignore = "ends the whole test process (SIGABRT in PoCL 3.1's own race) in about 1 of 20 runs; run alone with --ignored"]
fn markers_with_a_wait_list_beside_failing_barriers_on_one_queue() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let done = dev.create_user_event().unwrap();
    done.set_complete().unwrap();
    let (mut failed, mut markers) = (Vec::new(), Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..5_000 {
                let u = dev.create_user_event().unwrap();
                let b = q.enqueue_barrier(&[&u]).unwrap();
                u.set_failed(-5).unwrap();
                failed.push((u, b));
            }
        });
        s.spawn(|| {
            for _ in 0..5_000 {
                markers.push(q.enqueue_marker(&[&done]).unwrap());
            }
        });
    });
    q.finish().unwrap();
    drop((failed, markers));
}

/// Leak check: 200 rounds of failures (a barrier failed by `set_failed` or by dropping its
/// user event unset, with an `on_complete` closure, a forward to a user event, a fill on
/// another queue waiting on the target and on a marker held by a second user event, later
/// failed or dropped): run alone in the probe binary, after finish and `wait_for_callbacks`
/// `live_objects()` equalled its value before (1 of 1). Here, beside the other tests (whose
/// objects move the counts), it only asserts that every closure ran with a failure status
/// and nothing hung.
#[test]
fn failure_rounds_with_callbacks_and_forwards_finish() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let q2 = common::queue(dev);
    let x = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    for r in 0..200 {
        let (u, p) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        let m = q.enqueue_marker(&[&p]).unwrap();
        let b = q.enqueue_barrier(&[&u]).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        b.on_complete(move |s| {
            let _ = tx.send(s);
        })
        .unwrap();
        let t = dev.create_user_event().unwrap();
        b.forward_to(&t).unwrap();
        drop(q2.fill(&x, &[1u8], 0, 1024, &[&t, &m]).unwrap());
        drop(q2.enqueue_marker(&[&b]).unwrap());
        drop((b, t));
        if r % 2 == 0 {
            u.set_failed(-5).unwrap();
        } else {
            drop(u);
        }
        drop(q.enqueue_marker(&[&m]).unwrap());
        if r % 3 == 0 {
            p.set_failed(-3).unwrap();
        } else {
            drop(p);
        }
        // B's closure is awaited once P is over: B is a barrier after M (which waits on P),
        // and NVIDIA keeps the queue's order, so B ends only after M (the H100 run of 58f7c71
        // timed out waiting for it before P was set). PoCL has run it already.
        assert!(rx.recv_timeout(HANG_LIMIT).unwrap() < 0);
    }
    common::finish_after_failure(&q);
    common::finish_after_failure(&q2);
    wait_for_callbacks();
}
