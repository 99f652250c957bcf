//! Probes of the event machinery that found nothing: the set-once claim against clones and
//! forwards, a dropped target between forwards, a chain through commands failed from a closure, a
//! failed wait known to every wrapper of a queue.
//!
//! Review h64 probes (fresh eyes on xpu-device's event machinery at HEAD 2043737): scenarios
//! that found nothing wrong. Reviewed: the set-once claim of `held::set_user_status`
//! (2043737) against sets from driver callbacks (forwards), from `on_complete` closures, from
//! clones on many threads and from a dropped unset user event's guard; the `WAITED` registry of
//! `forwards` (whether a command waiting for a failed user event gets its forwards swept);
//! the per-raw-queue `SHARED` state of `queue` across clones, `rewrapped` wrappers and drops on
//! other threads. PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`: every probe
//! passed 5 of 5 runs. Child scenarios (a hang or an abort would otherwise take the test binary
//! down); hangs are bounded with `common::within` / `common::settles`, ordering by gates and
//! barriers. The one finding is in `user_status_claim.rs`.
//!
//! Read without a test: `at_exit`'s `end_now` flushes C stdio (`fflush(NULL)`), and Rust's
//! stdout is flushed by `std`'s own cleanup before `exit` runs (return from `main`,
//! `process::exit`), so no output of the program's own was seen lost; the handlers registered
//! before the runtime's are skipped, as documented. A queue's kept state (`Shared::Kept`)
//! holds its log's retained events (not counted in `live_objects`) also for a queue the
//! runtime created and that is destroyed, until `KEPT_STATES` (4,096) newer states push it
//! out: bounded, and not observable through safe calls, so not claimed as a leak.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use xpu_device::backend::{live_objects, Buffer, EventStatus, MemFlags};

const SETTLE: Duration = Duration::from_secs(20);

/// Clones of one user event set from four threads (set_complete / set_failed mixed) while a
/// forward from a marker behind a gate, opened at the same moment, sets it too: exactly one
/// setter wins (an app setter's `Ok`, or else the forward), the final status is the winner's,
/// and a marker waiting for the event ends. 300 rounds.
#[test]
fn clones_set_from_many_threads_beside_a_forward_have_one_winner() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let q2 = common::queue(dev);
    let base = live_objects();
    for round in 0..300 {
        let t = dev.create_user_event().unwrap();
        let mut g = common::Gate::new(dev);
        let m = q.enqueue_marker(&[g.event()]).unwrap();
        m.forward_to(&t).unwrap();
        let waiter = q2.enqueue_marker(&[&t]).unwrap();
        q.flush().unwrap();
        q2.flush().unwrap();
        let barrier = Arc::new(Barrier::new(5));
        let setters: Vec<_> = (0..4)
            .map(|i| {
                let (t, barrier) = (t.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let r = if i % 2 == 0 {
                        t.set_complete()
                    } else {
                        t.set_failed(-5 - i)
                    };
                    r.is_ok().then_some(if i % 2 == 0 { 0 } else { -5 - i })
                })
            })
            .collect();
        barrier.wait();
        g.open();
        let wins: Vec<i32> = setters
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert!(
            wins.len() <= 1,
            "round {round}: several setters won: {wins:?}"
        );
        assert!(
            common::settles(SETTLE, || common::terminal(t.status().unwrap())),
            "round {round}: target {:?}",
            t.status()
        );
        let status = t.status().unwrap();
        match wins.first() {
            Some(0) => assert_eq!(status, EventStatus::Complete, "round {round}"),
            Some(&code) => assert_eq!(status, EventStatus::Error(code), "round {round}"),
            // The forward won: the marker completed.
            None => assert_eq!(status, EventStatus::Complete, "round {round}"),
        }
        assert!(
            common::settles(SETTLE, || common::terminal(waiter.status().unwrap())),
            "round {round}: waiter {:?}",
            waiter.status()
        );
        drop((m, waiter, t, g));
    }
    let (fq, fq2) = (q.clone(), q2.clone());
    let done = common::within(SETTLE, move || {
        common::finish_after_failure(&fq);
        common::finish_after_failure(&fq2);
    });
    assert!(done.is_some(), "finish hung");
    common::assert_live_objects_back_to(base);
    drop((q2, q));
    println!("scenario-ok");
}

/// A forward's target dropped unset by the application (its unset guard lives on in the
/// forward) while another thread fails the forward's source: the target fails once, and a
/// command waiting for it through another queue, forwarded on to `t2`, passes the failure on
/// (the commands' sweep round is given: the target is noted as waited). 300 rounds.
#[test]
fn a_target_dropped_unset_while_its_source_fails_elsewhere_reaches_the_next_forward() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    for round in 0..300 {
        let u = dev.create_user_event().unwrap();
        let t = dev.create_user_event().unwrap();
        u.forward_to(&t).unwrap();
        let c = q.enqueue_marker(&[&t]).unwrap();
        let t2 = dev.create_user_event().unwrap();
        c.forward_to(&t2).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let failer = {
            let (u, barrier) = (u.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                u.set_failed(-7)
            })
        };
        barrier.wait();
        drop(t);
        failer.join().unwrap().unwrap();
        assert!(
            common::settles(SETTLE, || common::failed(&t2)),
            "round {round}: t2 {:?}, c {:?}",
            t2.status(),
            c.status()
        );
        drop((u, c, t2));
    }
    let fq = q.clone();
    let done = common::within(SETTLE, move || common::finish_after_failure(&fq));
    assert!(done.is_some(), "finish hung");
    common::assert_live_objects_back_to(base);
    drop(q);
    println!("scenario-ok");
}

/// Nested sets: a chain user event -> user event -> marker (waiting for the second) -> user
/// event -> marker on another queue -> user event, failed at its head from an `on_complete`
/// closure of another event (the callback thread) while the test thread completes the
/// chain's last target: every command of the chain ends and the last target is set once.
#[test]
fn a_chain_through_commands_failed_from_a_closure_ends_every_command() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let q2 = common::queue(dev);
    let base = live_objects();
    for round in 0..100 {
        let u0 = dev.create_user_event().unwrap();
        let u1 = dev.create_user_event().unwrap();
        u0.forward_to(&u1).unwrap();
        let m1 = q.enqueue_marker(&[&u1]).unwrap();
        let u2 = dev.create_user_event().unwrap();
        m1.forward_to(&u2).unwrap();
        let m2 = q2.enqueue_marker(&[&u2]).unwrap();
        let u3 = dev.create_user_event().unwrap();
        m2.forward_to(&u3).unwrap();
        let trigger = dev.create_user_event().unwrap();
        let head = u0.clone();
        trigger
            .on_complete(move |_| {
                let _ = head.set_failed(-9);
            })
            .unwrap();
        trigger.set_complete().unwrap();
        let _ = u3.set_complete();
        for (name, e) in [("m1", &m1), ("m2", &m2), ("u3", &u3), ("u2", &u2)] {
            assert!(
                common::settles(SETTLE, || common::terminal(e.status().unwrap())),
                "round {round}: {name} {:?}",
                e.status()
            );
        }
        drop((u0, u1, m1, u2, m2, u3, trigger));
    }
    let (fq, fq2) = (q.clone(), q2.clone());
    let done = common::within(SETTLE, move || {
        common::finish_after_failure(&fq);
        common::finish_after_failure(&fq2);
    });
    assert!(done.is_some(), "finish hung");
    common::assert_live_objects_back_to(base);
    drop((q2, q));
    println!("scenario-ok");
}

/// A queue's shared state across wrappers: a failed wait enqueued through a clone, the
/// original wrapper dropped on another thread, then a wrapper made again from the raw handle
/// (`rewrapped`) of the clone: its ordered marker still reads the failure, and reads complete
/// once a finish through it returned. The state is not kept for a queue whose log is clean.
#[test]
fn a_failed_wait_is_known_to_every_wrapper_after_drops_on_other_threads() {
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let buf = Buffer::new(ctx, 4096, MemFlags::default()).unwrap();
    for round in 0..50 {
        let w = q.rewrapped().unwrap();
        let c = w.clone();
        let f = dev.create_user_event().unwrap();
        drop(c.enqueue_barrier(&[&f]).unwrap());
        f.set_failed(-5).unwrap();
        std::thread::spawn(move || drop(w)).join().unwrap();
        let again = c.rewrapped().unwrap();
        drop(c);
        let m = again.enqueue_ordered_marker().unwrap();
        again.flush().unwrap();
        assert!(common::settles(SETTLE, || common::terminal(
            m.event().status().unwrap()
        )));
        assert!(
            matches!(m.status(), Ok(EventStatus::Error(_)) | Err(_)),
            "round {round}: ordered marker {:?}",
            m.status()
        );
        common::finish_after_failure(&again);
        again.fill(&buf, &[1], 0, 64, &[]).unwrap();
        let m2 = again.enqueue_ordered_marker().unwrap();
        again.finish().unwrap();
        assert_eq!(m2.status().unwrap(), EventStatus::Complete, "round {round}");
    }
    common::finish_after_failure(&q);
    println!("scenario-ok");
}
