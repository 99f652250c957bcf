//! A chain of forwards' deferred sets (`DEFERRED_FORWARDS`): no nesting also from a thread-local
//! destructor, a failure along a chain at linear cost, trees across contexts, closures completing
//! chains.
//!
//! Review h52 (device part): the forwards' callback that no longer nests (1c0926c, part A:
//! `forward_status` defers the next forward's set to the thread's `DEFERRED_FORWARDS` while
//! `SETTING_FORWARD` is set, and the outermost callback sets them in a loop) and the forwards
//! found by key (e4300b8, `Forwards::position`), attacked with sequences of safe calls. PoCL
//! on the CPU (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with other jobs,
//! debug build (`cargo test -p xpu-device --test forward_chain_deferred_sets`).
//!
//! Findings (tests that failed at 8a28cd0, both fixed since: the deferred list lives in the
//! outermost callback's frame, reached through a thread-local pointer without a destructor;
//! a sweep's later rounds ask only about the forwards the failures it passed on can reach):
//!
//! - `a_chain_completed_in_a_thread_local_destructor_does_not_nest`: the deferral needs the
//!   thread-local list, and a callback that cannot reach it (`try_with` fails once it was
//!   destroyed) sets the next target at once, nesting as before 1c0926c. Thread-local
//!   destructors run in reverse order of first use, so a thread that held a value with a
//!   thread-local destructor before its first forward's callback (which first uses the
//!   list) destroys the list first: completing a chain of forwards from that value's drop
//!   (a user event kept per thread and set, or dropped unset into a `complete_when_over`,
//!   when the thread ends) nests one callback per link again and overflows the stack.
//! - `failing_a_chain_of_forwards_costs_linear_status_queries`: a failure passes along a
//!   chain of forwards one link per `sweep` round (PoCL makes no callback for the failed
//!   user event), and each round asks the status of every forward still kept: failing the
//!   head of a chain of `n` costs about `n²/2` status queries on the failing thread.
//!
//! What held (passing tests): see each test's doc.
//!
//! The order comes from user events, never from sleeps; hangs are bounded (`common::within`,
//! `common::settles`, child scenarios killed after 60 s).

mod common;

use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use xpu_device::backend::{
    forward_index_steps_on_this_thread, live_objects, status_queries_on_this_thread, ClEvent,
    EventStatus,
};
use xpu_device::Device;

const SETTLE: Duration = Duration::from_secs(30);

/// Sets its event complete when dropped (held in a thread-local: dropped when the thread ends).
struct CompleteOnDrop(Option<ClEvent>);

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        if let Some(e) = self.0.take() {
            let _ = e.set_complete();
        }
    }
}

thread_local! {
    static AT_THREAD_END: RefCell<CompleteOnDrop> = const { RefCell::new(CompleteOnDrop(None)) };
}

const LINKS: usize = 10_000;

/// FINDING (nesting in a thread-local destructor). Child scenario. A chain of 10,000
/// forwards; a thread with a 2 MiB stack (as review h51's test) first stores the chain's head
/// in its thread-local `AT_THREAD_END` (whose drop sets it complete), then completes a short
/// chain `x -> y -> z` of its own (its first forward callback: the runtime's
/// `DEFERRED_FORWARDS` is first used, so destroyed before `AT_THREAD_END`), and ends.
///
/// Expected: the chain completes as review h51's (10,000 links completed on a 2 MiB stack
/// since 1c0926c). Observed: the child dies of a stack overflow (SIGSEGV / "has overflowed
/// its stack") while the thread's destructors run: `forward_status` finds the list destroyed
/// and sets each next target at once, one nested `clSetUserEventStatus` per link. Every run.
#[test]
fn a_chain_completed_in_a_thread_local_destructor_does_not_nest() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let c = common::forward_chain(dev, LINKS);
    let head = c[0].clone();
    let small = common::forward_chain(dev, 3);
    let x = small[0].clone();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            AT_THREAD_END.with(|h| h.borrow_mut().0 = Some(head));
            x.set_complete().unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(common::settles(SETTLE, || small[2].status() == Ok(EventStatus::Complete)));
    assert!(
        common::settles(SETTLE, || c[LINKS - 1].status()
            == Ok(EventStatus::Complete)),
        "the chain forwards"
    );
    println!("scenario-ok");
}

/// Held (the control of the finding above): the same thread without the short chain (the
/// list is first used within the thread-local destructor, then registered after it) completes
/// the 10,000 links from `AT_THREAD_END`'s drop; and with the short chain, a chain of 50
/// completes from it (the nesting is per link: only a long chain overflows).
#[test]
fn a_chain_completed_in_a_thread_local_destructor_controls() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    for (links, first) in [(LINKS, false), (50, true)] {
        let c = common::forward_chain(dev, links);
        let head = c[0].clone();
        let small = common::forward_chain(dev, 3);
        let x = small[0].clone();
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                AT_THREAD_END.with(|h| h.borrow_mut().0 = Some(head));
                if first {
                    x.set_complete().unwrap();
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(
            common::settles(SETTLE, || c[links - 1].status()
                == Ok(EventStatus::Complete)),
            "the chain of {links} forwards"
        );
        small[0].set_complete().ok();
    }
    println!("scenario-ok");
}

/// The status queries made on this thread by failing the head of a fresh chain of `n`.
fn cost_of_failing_a_chain(dev: &Device, n: usize) -> u64 {
    let c = common::forward_chain(dev, n);
    let before = status_queries_on_this_thread();
    c[0].set_failed(-5).unwrap();
    let cost = status_queries_on_this_thread() - before;
    assert!(common::settles(SETTLE, || matches!(
        c[n - 1].status(),
        Ok(EventStatus::Error(-5))
    )));
    drop(c);
    let _ = live_objects();
    cost
}

/// FINDING (quadratic cost of a failure passed along a chain). Child scenario. Sequence: a chain of `n`
/// forwards (`forward_to`) between pending user events; `set_failed(-5)` of its head; the
/// status queries counted on the failing thread (`status_queries_on_this_thread`), for
/// `n` = 500 and 1,000.
///
/// Expected: linear in the forwards (at most 8 queries per link, for each `n`). Observed: `n(n-1)/2`: 124,751 for 500, 499,501 for 1,000 (x4 per
/// doubling); each `sweep` round passes the failure on one link and asks every kept forward's
/// source again. Every run. Child scenario: in the test process the other tests' sweeps take
/// some rounds (65,000 to 377,000 were counted for 1,000 then).
#[test]
fn failing_a_chain_of_forwards_costs_linear_status_queries() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let small = cost_of_failing_a_chain(dev, 500);
    let large = cost_of_failing_a_chain(dev, 1000);
    println!("status queries: 500 links {small}, 1000 links {large}");
    // Linear bounds per link (quadratic gave n(n-1)/2: 124,751 and 499,501). A ratio of the
    // two (`large <= 3 * small`) failed on an H100 (569 and 1,998), its driver's callback
    // threads taking part of the small chain's sweeps.
    assert!(
        small <= 8 * 500 && large <= 8 * 1000,
        "failing a chain: 500 links {small} status queries, 1000 links {large}"
    );
    println!("scenario-ok");
}

/// Held. A tree mixing `forward_to` and `complete_when_over` across both devices' contexts:
/// `r -> a` (fwd, ctx0 -> ctx1), `a -> b` (cwo), `a -> c` (fwd), `b -> d` (fwd, ctx1 ->
/// ctx0), `c -> e` (cwo), `c -> f` (fwd), then `r.set_failed(-7)` (child scenario: live counts are global): `a`, `c`, `f` read -7;
/// `b`, `d`, `e` complete; live objects back to their count. Same tree with `r` completed:
/// all complete.
#[test]
fn a_tree_of_mixed_forwards_across_contexts_settles_each_target() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let base = live_objects();
    for fail in [true, false] {
        let r = d0.create_user_event().unwrap();
        let a = d1.create_user_event().unwrap();
        let b = d1.create_user_event().unwrap();
        let c = d1.create_user_event().unwrap();
        let d = d0.create_user_event().unwrap();
        let e = d0.create_user_event().unwrap();
        let f = d1.create_user_event().unwrap();
        r.forward_to(&a).unwrap();
        a.complete_when_over(&b).unwrap();
        a.forward_to(&c).unwrap();
        b.forward_to(&d).unwrap();
        c.complete_when_over(&e).unwrap();
        c.forward_to(&f).unwrap();
        if fail {
            r.set_failed(-7).unwrap();
        } else {
            r.set_complete().unwrap();
        }
        let bad = if fail {
            EventStatus::Error(-7)
        } else {
            EventStatus::Complete
        };
        for (name, ev, want) in [
            ("a", &a, bad),
            ("b", &b, EventStatus::Complete),
            ("c", &c, bad),
            ("d", &d, EventStatus::Complete),
            ("e", &e, EventStatus::Complete),
            ("f", &f, bad),
        ] {
            assert!(
                common::settles(SETTLE, || ev.status() == Ok(want)),
                "{name} (fail {fail}): {:?}, expected {want:?}",
                ev.status()
            );
        }
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. An `on_complete` closure of `g` (on the callback thread) completes the head of a
/// chain of 2,000 forwards and waits for its tail, and a second closure, registered on the
/// chain's middle link, sets another user event `z` (forwarded to `w`): `g.set_complete()`
/// on the test thread; within 60 s the first closure saw the tail complete, `w` completes,
/// and no closure deadlocked on a set deferred in another thread's list.
#[test]
fn an_on_complete_closure_completes_a_chain_and_waits_for_its_tail() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    let g = dev.create_user_event().unwrap();
    let c = Arc::new(common::forward_chain(dev, 2000));
    let z = dev.create_user_event().unwrap();
    let w = dev.create_user_event().unwrap();
    z.forward_to(&w).unwrap();
    let (tx, rx) = mpsc::channel();
    let c2 = Arc::clone(&c);
    g.on_complete(move |status| {
        assert_eq!(status, 0);
        c2[0].set_complete().unwrap();
        let r = c2[1999].wait();
        let _ = tx.send(r.map_err(|e| e.code));
    })
    .unwrap();
    let z2 = z.clone();
    c[1000]
        .on_complete(move |_| {
            let _ = z2.set_complete();
        })
        .unwrap();
    g.set_complete().unwrap();
    let got = rx.recv_timeout(Duration::from_secs(60));
    assert_eq!(got, Ok(Ok(())), "the closure's wait for the tail");
    assert!(common::settles(SETTLE, || w.status() == Ok(EventStatus::Complete)));
}

/// Held. A user event is set from inside an `on_complete` closure while the test thread
/// completes a chain whose targets have closures of their own, 200 rounds: every target
/// completes, the closures all run (counted), nothing hangs (bounded by `within`).
#[test]
fn closures_setting_user_events_while_chains_complete() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    let done = common::within(Duration::from_secs(120), move || {
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for _ in 0..200 {
            let c = common::forward_chain(dev, 8);
            let side = common::forward_chain(dev, 4);
            for e in &c[1..] {
                let ran = Arc::clone(&ran);
                let s0 = side[0].clone();
                e.on_complete(move |_| {
                    ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = s0.set_complete();
                })
                .unwrap();
            }
            c[0].set_complete().unwrap();
            assert!(common::settles(SETTLE, || c[7].status() == Ok(EventStatus::Complete)));
            assert!(common::settles(SETTLE, || side[3].status() == Ok(EventStatus::Complete)));
        }
        xpu_device::backend::wait_for_callbacks();
        ran.load(std::sync::atomic::Ordering::SeqCst)
    });
    assert_eq!(done, Some(200 * 7));
}

/// Held (e4300b8; child scenario: live counts are global). Four threads churn forwards (made, completed, failed, dropped unset, in
/// mixed orders: every `take` moves the list's last forward into the hole), then on the test
/// thread a chain of 200 pending forwards is closed: refused, in at most 4 index steps per
/// link (each path step finds its forward by key: a stale `position` would name another
/// forward, or none, and the check would be wrong or scan); then the chain completes and live
/// objects come back.
#[test]
fn forwards_found_by_key_after_racing_churn() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    let keep = common::forward_chain(dev, 50);
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..300 {
                    let c = common::forward_chain(dev, 4);
                    match (i + t) % 4 {
                        0 => c[0].set_complete().unwrap(),
                        1 => c[0].set_failed(-5).unwrap(),
                        2 => {
                            c[1].set_failed(-6).unwrap();
                            c[0].set_complete().unwrap();
                        }
                        _ => drop(c[0].clone()),
                    }
                    if i % 7 == 0 {
                        let _ = live_objects();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let n = 200;
    let c = common::forward_chain(dev, n);
    let steps = forward_index_steps_on_this_thread();
    assert!(
        common::refused_as_cycle(&c[n - 1].forward_to(&c[0])),
        "closes the chain"
    );
    assert!(
        common::refused_as_cycle(&keep[49].forward_to(&keep[0])),
        "closes the kept chain"
    );
    let used = forward_index_steps_on_this_thread() - steps;
    assert!(
        used <= 4 * (n as u64 + 50),
        "{used} index steps for two refusals"
    );
    c[0].set_complete().unwrap();
    keep[0].set_complete().unwrap();
    assert!(common::settles(SETTLE, || c[n - 1].status() == Ok(EventStatus::Complete)));
    assert!(common::settles(SETTLE, || keep[49].status() == Ok(EventStatus::Complete)));
    drop((c, keep));
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}
