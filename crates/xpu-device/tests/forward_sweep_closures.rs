//! The forwards' sweep and `on_complete` closures: closures on the targets of a failing chain run,
//! alternating chains across contexts reach every target, failing chains and trees at linear cost.
//!
//! Review h54 (device part): 9460331, `forwards::sweep_rounds` passing a failure along the
//! forwards between user events first (rounds focused on the targets just failed, through
//! `from_user`), then giving the forwards from commands (`from_commands`) one round, with
//! `callbacks::sweep_failed` (the `on_complete` closures of failed events, which PoCL never
//! hands over) run only in the first round and in the commands' rounds. Attacked with
//! sequences of safe public calls. PoCL on the CPU (`POCL_DEVICES="pthread pthread"`), a 2-core
//! machine shared with other jobs, debug build (`cargo test -p xpu-device --test forward_sweep_closures`).
//!
//! Findings (tests that failed at 9460331 and passed at its parent 861ecba; fixed since: a sweep
//! whose list empties still gives the closures their owed round):
//!
//! - `a_closure_on_the_target_of_the_last_forward_runs_after_its_failure` and
//!   `closures_along_a_failing_chain_run`: a round of `sweep_rounds` returns at once when no
//!   forward is kept (`if forwards.list.is_empty() { return; }`), and `sweep_failed` now runs
//!   only at the start of the first round and of a commands' round. When the forwards that
//!   pass a failure along were the last ones kept, the list empties in the round that takes
//!   them, the next round returns before any commands' round, and `sweep_failed` never sees
//!   the targets failed after the first round: `on_complete` closures on those user events
//!   (PoCL makes no callback for a user event set to an error status), and on commands
//!   behind them whose failure PoCL does not call back, do not run until an unrelated later
//!   sweep (another failure, a `live_objects()` read, a registration that doubles the
//!   waiting closures). A thread waiting for such a closure waits for ever. Before 9460331
//!   every round started with `sweep_failed`, so the next round delivered them. Every run.
//!
//! What held (passing tests): see each test's doc.
//!
//! The order comes from user events, never from sleeps; hangs are bounded (`common::within`,
//! `common::settles`, child scenarios killed after 60 s).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::{
    forward_index_steps_on_this_thread, live_objects, status_queries_on_this_thread, ClEvent,
    CommandQueue, EventStatus,
};
use xpu_device::Device;

const SETTLE: Duration = Duration::from_secs(20);

/// The statuses the closures behind `rxs` got within `SETTLE` of the call, on a thread of its
/// own (another thread waiting for the closures); `None` for one that did not run by then.
/// No runtime call that sweeps is made meanwhile.
fn waited_for(rxs: Vec<mpsc::Receiver<i32>>) -> std::thread::JoinHandle<Vec<Option<i32>>> {
    std::thread::spawn(move || {
        let end = std::time::Instant::now() + SETTLE;
        rxs.iter()
            .map(|r| {
                r.recv_timeout(end.saturating_duration_since(std::time::Instant::now()))
                    .ok()
            })
            .collect()
    })
}

/// FINDING. Child scenario (the forwards' list holds only this test's forwards). Sequence:
/// pending user events `c0`, `c1`; `c0.forward_to(c1)` (the only forward kept);
/// `c1.on_complete(closure)`; another thread waits (bounded) for the closure;
/// `c0.set_failed(-5)`.
///
/// Expected: `c1` reads -5 and the closure runs with -5 right after the failure (the docs of
/// `on_complete`: handed over "right after a failure that starts in the runtime"; PoCL makes
/// no callback for a user event set to an error status). Observed: `c1` reads -5 at once, the
/// closure does not run within 20 s (a later sweep, e.g. `live_objects()`, is left to hand it
/// over). The first
/// round's `sweep_failed` ran before `c1` failed; the round after `c1` failed is a focused one
/// (no `sweep_failed` since 9460331) and returns at once because the list is empty
/// (`if forwards.list.is_empty() { return; }`), so no commands' round follows. Every run.
#[test]
fn a_closure_on_the_target_of_the_last_forward_runs_after_its_failure() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let c = common::forward_chain(dev, 2);
        let (f, rx) = common::reporter();
        c[1].on_complete(f).unwrap();
        let waiter = waited_for(vec![rx]);
        c[0].set_failed(-5).unwrap();
        assert_eq!(c[1].status(), Ok(EventStatus::Error(-5)), "c1");
        let got = waiter.join().unwrap();
        let _ = live_objects();
        assert!(
            got[0] == Some(-5),
            "the closure on c1 (failed by the forward from c0): {:?} within {SETTLE:?} of \
             the failure (None: not run)",
            got[0]
        );
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// FINDING (the same gap, longer). Child scenario. Sequence: a chain `c0 -> c1 -> c2` of
/// forwards between pending user events (the only forwards kept); `c1.on_complete` (a user
/// event in the middle of the chain), `c2.on_complete`; marker `m` on a queue waiting on `c2`,
/// `m.on_complete`; another thread waits (bounded) for the three closures;
/// `c0.set_failed(-5)`.
///
/// Expected: the three closures run with an error status. Observed: none of them runs within
/// 20 s (`[None, None, None]`): the rounds after `c1` and `c2` failed are focused rounds with
/// no `sweep_failed`, and the last one returns on the empty list. Every run. (With one more
/// forward kept the commands' round runs and they do: the next test.)
#[test]
fn closures_along_a_failing_chain_run() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let q = common::queue(dev);
        let c = common::forward_chain(dev, 3);
        let m = q.enqueue_marker(&[&c[2]]).unwrap();
        q.flush().unwrap();
        let (f1, r1) = common::reporter();
        let (f2, r2) = common::reporter();
        let (fm, rm) = common::reporter();
        c[1].on_complete(f1).unwrap();
        c[2].on_complete(f2).unwrap();
        m.on_complete(fm).unwrap();
        let waiter = waited_for(vec![r1, r2, rm]);
        c[0].set_failed(-5).unwrap();
        assert_eq!(c[2].status(), Ok(EventStatus::Error(-5)), "c2");
        let got = waiter.join().unwrap();
        let _ = live_objects();
        assert!(
            got.iter().all(|s| s.is_some_and(|s| s < 0)),
            "closures on c1, c2, the marker behind c2: {got:?} (None: not run within \
             {SETTLE:?} of the failure)"
        );
        let done = common::within(SETTLE, move || common::finish_after_failure(&q));
        assert!(done.is_some(), "the queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. The control of the findings: the same chain and closures with one more forward kept
/// (from a marker behind a closed gate, so the list never empties): the commands' round after
/// the user events' rounds runs `sweep_failed` after `c2` failed, and the three closures run
/// with -5 (another thread waiting for them).
#[test]
fn closures_along_a_failing_chain_run_while_other_forwards_are_kept() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let q = common::queue(dev);
        let mut gate = common::Gate::new(dev);
        let gm = q.enqueue_marker(&[gate.event()]).unwrap();
        let gt = dev.create_user_event().unwrap();
        gm.forward_to(&gt).unwrap();
        let q2 = common::queue(dev);
        let c = common::forward_chain(dev, 3);
        let m = q2.enqueue_marker(&[&c[2]]).unwrap();
        q.flush().unwrap();
        q2.flush().unwrap();
        let (f1, r1) = common::reporter();
        let (f2, r2) = common::reporter();
        let (fm, rm) = common::reporter();
        c[1].on_complete(f1).unwrap();
        c[2].on_complete(f2).unwrap();
        m.on_complete(fm).unwrap();
        let waiter = waited_for(vec![r1, r2, rm]);
        c[0].set_failed(-5).unwrap();
        let got = waiter.join().unwrap();
        assert!(
            got.iter().all(|s| s.is_some_and(|s| s < 0)),
            "closures on c1, c2, m: {got:?}"
        );
        gate.open();
        assert!(common::settles(SETTLE, || gt.status() == Ok(EventStatus::Complete)));
        let done = common::within(SETTLE, move || {
            q.finish().unwrap();
            common::finish_after_failure(&q2);
        });
        assert!(done.is_some(), "a queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. A closure on a marker waiting for the target of the last forward kept: user event
/// `u`; marker `m` waiting on `u`, `m.forward_to(t)`; marker `m2` waiting on `t`,
/// `m2.on_complete`; `u.set_failed(-5)`: `t` reads a failure at once, `m2`'s closure runs with
/// one (PoCL 3.1 here hands the failed markers' callbacks over itself), live objects balance.
#[test]
fn a_closure_on_a_marker_behind_a_failed_target_runs() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let q = common::queue(dev);
        let u = dev.create_user_event().unwrap();
        let t = dev.create_user_event().unwrap();
        let m = q.enqueue_marker(&[&u]).unwrap();
        m.forward_to(&t).unwrap();
        let m2 = q.enqueue_marker(&[&t]).unwrap();
        let (f, rx) = common::reporter();
        m2.on_complete(f).unwrap();
        q.flush().unwrap();
        let waiter = waited_for(vec![rx]);
        u.set_failed(-5).unwrap();
        assert!(
            common::settles(SETTLE, || common::failed(&t)),
            "t: {:?}",
            t.status()
        );
        let got = waiter.join().unwrap();
        assert!(got[0].is_some_and(|s| s < 0), "closure on m2: {got:?}");
        let done = common::within(SETTLE, move || common::finish_after_failure(&q));
        assert!(done.is_some(), "the queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Builds an alternating chain across `qs` (round robin): `head` (user event) ->
/// marker waiting on it, forwarded to a user event of the next queue's device -> marker ...,
/// `k` markers; returns (head, markers, targets).
fn alternating_chain(
    devs: &[&Device],
    qs: &[CommandQueue],
    k: usize,
) -> (ClEvent, Vec<ClEvent>, Vec<ClEvent>) {
    let head = devs[0].create_user_event().unwrap();
    let (mut markers, mut targets) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for i in 0..k {
        let q = &qs[i % qs.len()];
        let from = targets.last().unwrap_or(&head);
        let m = q.enqueue_marker(&[from]).unwrap();
        let t = devs[(i + 1) % devs.len()].create_user_event().unwrap();
        m.forward_to(&t).unwrap();
        markers.push(m);
        targets.push(t);
    }
    for q in qs {
        q.flush().unwrap();
    }
    (head, markers, targets)
}

/// Held. A chain alternating user events and commands across both devices' contexts, with a
/// forward between user events and a `complete_when_over` in the middle: `h` -> marker `m0`
/// (ctx0, waits `h`) -> `v0` (ctx1) -> marker `m1` (ctx1) -> `v1` (ctx0) -> ... 6 markers;
/// `v2.forward_to(x)` (user -> user, ctx1 -> ctx0), `x.complete_when_over(y)`, `y.forward_to(z)`,
/// marker on `x` forwarded to `w`. `h.set_failed(-5)`: every `v_i`, `x`, `w` read a failure; `y`, `z`
/// complete; both queues finish; live objects balance.
#[test]
fn an_alternating_chain_across_two_contexts_reaches_every_target() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let qs = [common::queue(d0), common::queue(d1)];
        let (h, markers, vs) = alternating_chain(&[d0, d1], &qs, 6);
        let x = d0.create_user_event().unwrap();
        let y = d0.create_user_event().unwrap();
        let z = d1.create_user_event().unwrap();
        let w = d1.create_user_event().unwrap();
        vs[2].forward_to(&x).unwrap();
        x.complete_when_over(&y).unwrap();
        y.forward_to(&z).unwrap();
        let mx = qs[0].enqueue_marker(&[&x]).unwrap();
        mx.forward_to(&w).unwrap();
        qs[0].flush().unwrap();
        h.set_failed(-5).unwrap();
        for (i, v) in vs.iter().enumerate() {
            assert!(common::failed(v), "v{i}: {:?}", v.status());
        }
        assert!(common::failed(&x), "x: {:?}", x.status());
        assert!(common::failed(&w), "w: {:?}", w.status());
        assert!(common::settles(SETTLE, || y.status()
            == Ok(EventStatus::Complete)
            && z.status() == Ok(EventStatus::Complete)));
        drop((markers, mx));
        let done = common::within(SETTLE, move || {
            for q in &qs {
                common::finish_after_failure(q);
            }
        });
        assert!(done.is_some(), "a queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Status queries and index steps on this thread made by failing the head of a fresh
/// alternating chain of `k` markers on one queue; everything settled after.
fn alternating_cost(dev: &Device, k: usize) -> (u64, u64) {
    let qs = [common::queue(dev)];
    let (h, markers, targets) = alternating_chain(&[dev], &qs, k);
    let (s0, i0) = (
        status_queries_on_this_thread(),
        forward_index_steps_on_this_thread(),
    );
    h.set_failed(-5).unwrap();
    let cost = (
        status_queries_on_this_thread() - s0,
        forward_index_steps_on_this_thread() - i0,
    );
    assert!(
        common::settles(SETTLE, || common::failed(&targets[k - 1])),
        "the tail: {:?}",
        targets[k - 1].status()
    );
    let [q] = qs;
    let done = common::within(SETTLE, move || common::finish_after_failure(&q));
    assert!(done.is_some(), "the queue's finish hung");
    drop((markers, targets));
    let _ = live_objects();
    cost
}

/// Held (on the failing thread). Child scenario. Sequence: user event `h`; `k` markers on one
/// queue, marker `i` waiting on the user event that marker `i - 1` forwards to (`h` for the
/// first), each forwarded (`forward_to`) to a fresh user event; `h.set_failed(-5)`; status
/// queries counted on the failing thread. `k` = 150, then 300.
///
/// Linear in the forwards kept (at most 8 per forward; doubling `k` at most about doubles it):
/// measured 151 and 301 queries, no index step. (PoCL 3.1 here calls the failed markers'
/// callbacks itself, so the links after the first may be passed on by `forward_status` on
/// PoCL's thread, whose queries this thread's count does not see.)
#[test]
fn failing_an_alternating_chain_costs_linear_status_queries() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    let (small, small_steps) = alternating_cost(dev, 150);
    let (large, large_steps) = alternating_cost(dev, 300);
    println!(
        "status queries: 150 links {small}, 300 links {large}; index steps {small_steps}, \
         {large_steps}"
    );
    common::assert_live_objects_back_to(base);
    assert!(
        large_steps <= 8 * 300 && large_steps <= 3 * small_steps.max(1),
        "index steps: {small_steps} then {large_steps}"
    );
    assert!(
        large <= 8 * 300 && large <= 3 * small,
        "failing an alternating user/command chain: 150 links {small} status queries, \
         300 links {large}"
    );
    println!("scenario-ok");
}

/// Held. A tree of forwards between user events (a complete binary tree of 1,023 pending user
/// events, each forwarding to its two children) failed from its root: every leaf reads -5 right
/// after `set_failed`; status queries and index steps stay within 8 per forward.
#[test]
fn failing_a_tree_of_forwards_costs_linear_work() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let n = 1023;
        let nodes: Vec<ClEvent> = (0..n).map(|_| dev.create_user_event().unwrap()).collect();
        for i in 0..n / 2 {
            nodes[i].forward_to(&nodes[2 * i + 1]).unwrap();
            nodes[i].forward_to(&nodes[2 * i + 2]).unwrap();
        }
        let (s0, i0) = (
            status_queries_on_this_thread(),
            forward_index_steps_on_this_thread(),
        );
        nodes[0].set_failed(-5).unwrap();
        let (s, i) = (
            status_queries_on_this_thread() - s0,
            forward_index_steps_on_this_thread() - i0,
        );
        println!("tree of {n}: {s} status queries, {i} index steps");
        for leaf in &nodes[n / 2..] {
            assert_eq!(leaf.status(), Ok(EventStatus::Error(-5)));
        }
        assert!(
            s <= 8 * n as u64 && i <= 8 * n as u64,
            "{s} queries, {i} steps"
        );
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. `set_failed` racing with another thread's registrations from the same user event:
/// thread A registers `u.forward_to(t_i)` for 200 fresh targets while the main thread, after
/// A's 100th registration (a channel, not a sleep), fails `u`. Every target reads -5 once A
/// is done, before any `live_objects()` read; ten rounds; live objects balance.
#[test]
fn set_failed_racing_registrations_reaches_every_target() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    for _ in 0..10 {
        let u = dev.create_user_event().unwrap();
        let u2 = u.clone();
        let (tx, rx) = mpsc::channel();
        let a = std::thread::spawn(move || {
            let mut targets = Vec::new();
            for i in 0..200 {
                let t = dev.create_user_event().unwrap();
                u2.forward_to(&t).unwrap();
                targets.push(t);
                if i == 100 {
                    tx.send(()).unwrap();
                }
            }
            targets
        });
        rx.recv().unwrap();
        u.set_failed(-5).unwrap();
        let targets = a.join().unwrap();
        for (i, t) in targets.iter().enumerate() {
            assert_eq!(t.status(), Ok(EventStatus::Error(-5)), "target {i}");
        }
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}
