//! Ordered markers (`CommandQueue::enqueue_ordered_marker`): a marker's completion judged
//! with the waits enqueued before it on its queue (review h26: after a barrier whose wait
//! failed, PoCL completes a later marker while the commands before the barrier stay queued).

mod common;

use xpu_device::backend::EventStatus;

/// Held work (a marker behind gate A), then a barrier on user event B, which fails, then an
/// ordered marker M. Whatever the driver does with M (PoCL completes it once waited for, with
/// A's work still queued), M never reads complete: it reads failed with B's status once the
/// driver reports it complete, and so does every later ordered marker of the queue (the
/// failure is sticky), even after all the work ran, up to a `finish` of the queue that
/// returned: the markers enqueued after it read complete again (review h29).
#[test]
fn an_ordered_marker_after_a_failed_wait_never_reads_complete() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let mut a = common::Gate::new(dev);
    let held = q.enqueue_marker(&[a.event()]).unwrap();
    let b = dev.create_user_event().unwrap();
    let _barrier = q.enqueue_barrier(&[&b]).unwrap();
    b.set_failed(-5).unwrap();
    let m = q.enqueue_ordered_marker().unwrap();
    q.flush().unwrap();
    // A wait for M: PoCL returns at once (and then reads M complete), a driver that keeps
    // the order (NVIDIA) waits until A opens, so the wait runs on another thread and is given
    // a few seconds before the checks go on either way.
    let waiting = m.event().clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = waiting.wait();
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(std::time::Duration::from_secs(3));
    assert!(!held.is_complete().unwrap(), "A holds the earlier work");
    let driver = m.event().status().unwrap();
    let ordered = m.status().unwrap();
    assert_ne!(ordered, EventStatus::Complete, "driver said {driver:?}");
    if driver == EventStatus::Complete {
        assert_eq!(ordered, EventStatus::Error(-5));
    }
    let later = q.enqueue_ordered_marker().unwrap();
    a.open();
    waiter.join().unwrap();
    q.finish().unwrap();
    assert!(held.is_complete().unwrap(), "finish waited for A's work");
    assert!(
        matches!(later.status().unwrap(), EventStatus::Error(_)),
        "a later marker of the queue: {:?}",
        later.status()
    );
    assert_eq!(m.status().unwrap(), EventStatus::Error(-5));
    let drained = q.enqueue_ordered_marker().unwrap();
    q.finish().unwrap();
    assert_eq!(
        drained.status().unwrap(),
        EventStatus::Complete,
        "a marker after a finish that returned"
    );
    // A plain marker is the driver's word alone: complete after a finish, whatever the driver
    // made of M (PoCL completes it, NVIDIA fails it with B's status).
    let plain = q.enqueue_marker(&[]).unwrap();
    let _ = q.finish();
    assert_eq!(plain.status().unwrap(), EventStatus::Complete);
}

/// An ordered marker waits for the waits enqueued before it, not for those after it: one
/// recorded before any wait, one behind a pending gate G (not complete while G is closed,
/// complete once it opened and the queue drained), and both stay complete when a later
/// barrier's wait fails. Clones of the queue wrapper share the log.
#[test]
fn an_ordered_marker_is_judged_by_the_waits_before_it_only() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let first = q.enqueue_ordered_marker().unwrap();
    let mut g = common::Gate::new(dev);
    let clone = q.clone();
    let _ = clone.enqueue_barrier(&[g.event()]).unwrap();
    let behind = q.enqueue_ordered_marker().unwrap();
    q.flush().unwrap();
    assert_ne!(behind.status().unwrap(), EventStatus::Complete);
    g.open();
    q.finish().unwrap();
    assert_eq!(first.status().unwrap(), EventStatus::Complete);
    assert_eq!(behind.status().unwrap(), EventStatus::Complete);
    let f = dev.create_user_event().unwrap();
    let _ = q.enqueue_barrier(&[&f]).unwrap();
    f.set_failed(-7).unwrap();
    let after = q.enqueue_ordered_marker().unwrap();
    let _ = q.finish();
    assert_eq!(
        (first.status().unwrap(), behind.status().unwrap()),
        (EventStatus::Complete, EventStatus::Complete),
        "a failure after a marker says nothing about it"
    );
    assert!(matches!(after.status().unwrap(), EventStatus::Error(_)));
}

/// What the caching allocator reads of a queue before it hands out a block on its stream
/// again (review h35): `follows_failed_wait` is false while the logged waits are pending or
/// complete, true once one failed (for the wrapper's clones too), and false again after a
/// `finish` that returned with success. `order_flag`, given only where the driver reorders
/// after a failed wait (PoCL before 4.0), reads false on a fresh queue, true while a wait is
/// logged unresolved or failed, and false once a finish drained the queue.
#[test]
fn a_queue_tells_a_failed_wait_until_a_finish_that_returned() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let flag = q.order_flag();
    assert_eq!(flag.is_some(), q.reorders_after_failed_wait());
    let read = || {
        flag.as_ref()
            .map(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    };
    let expect = |v: bool| flag.as_ref().map(|_| v);
    assert!(!q.follows_failed_wait());
    assert_eq!(read(), expect(false), "a fresh queue");
    let mut a = common::Gate::new(dev);
    let held = q.enqueue_marker(&[a.event()]).unwrap();
    assert!(!q.follows_failed_wait(), "a pending wait has not failed");
    assert_eq!(read(), expect(true), "a pending wait");
    let b = dev.create_user_event().unwrap();
    let _barrier = q.enqueue_barrier(&[&b]).unwrap();
    b.set_failed(-5).unwrap();
    assert!(q.follows_failed_wait(), "B failed");
    assert!(q.clone().follows_failed_wait(), "clones share the log");
    assert_eq!(read(), expect(true));
    a.open();
    // NVIDIA's first finish after the failure returns its status; the next one succeeds.
    let first = q.finish();
    q.finish().unwrap();
    // Kept strict: the runtime trusts a finish that succeeded as a drain (the failed-wait log
    // is cleared below). The H100 run of 58f7c71 read A's marker not complete here; whether
    // NVIDIA reports the status late or its finish returned early is told by the wait below
    // (see the review h46 report).
    let after_finish = held.status().unwrap();
    let after_wait = (after_finish != EventStatus::Complete).then(|| {
        let h = held.clone();
        common::within(std::time::Duration::from_secs(10), move || {
            (h.wait(), h.status())
        })
    });
    // NVIDIA's status lags: the H100 read `Submitted` here, 1 run of 2 on 2026-12-07, and the
    // wait then returned with the marker complete (the runtime's own answers go by the
    // finish, not by this status). Strict on PoCL.
    let lagged = matches!(&after_wait, Some(Some((Ok(()), Ok(EventStatus::Complete)))))
        && !common::is_pocl(dev);
    assert!(
        after_finish == EventStatus::Complete || lagged,
        "A's marker after finishes {first:?}, Ok: {after_finish:?}; then a wait for it gave \
         {after_wait:?}"
    );
    assert!(!q.follows_failed_wait(), "after a finish that returned");
    assert_eq!(read(), expect(false), "drained");
}

/// A probe, not a check (run by hand with `--ignored` on a driver under study): the statuses
/// of a marker held behind gate A when a later barrier's user event B fails, at each step of
/// `a_queue_tells_a_failed_wait_until_a_finish_that_returned`, printed on stderr; and the same
/// without B (a control).
#[test]
#[ignore = "a probe of a driver's ways, run by hand"]
fn probe_a_held_marker_when_a_later_wait_fails() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    for fail in [true, false] {
        let mut a = common::Gate::new(dev);
        let held = q.enqueue_marker(&[a.event()]).unwrap();
        let b = dev.create_user_event().unwrap();
        let barrier = q.enqueue_barrier(&[&b]).unwrap();
        let show = |step: &str| {
            eprintln!(
                "probe fail={fail} {step}: held {:?}, barrier {:?}",
                held.status(),
                barrier.status()
            );
        };
        show("enqueued");
        if fail {
            b.set_failed(-5).unwrap();
        } else {
            b.set_complete().unwrap();
        }
        show("B set");
        a.open();
        show("A opened");
        let first = q.finish();
        show(&format!("first finish {first:?}"));
        let second = q.finish();
        show(&format!("second finish {second:?}"));
        let waited = held.wait();
        show(&format!("held waited {waited:?}"));
    }
}
