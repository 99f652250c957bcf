//! Forwards from events that already failed: their registration costs linear status queries, every
//! kind of command failed through its wait list reaches its target and closure, a closure
//! registered after the failure runs.
//!
//! Review h55 (device part): the forwards' sweep after 24bd4f8 (`forwards::sweep_rounds`,
//! `sweep_after_failure`, `registered`; `event::forward_status` with its deferred sets;
//! `callbacks::sweep_failed`), attacked with sequences of safe public calls. PoCL on the CPU
//! (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with other jobs, debug build
//! (`cargo test -p xpu-device --test forwards_from_failed_events`).
//!
//! Finding (failed at 24bd4f8; partly fixed since, the test ignored while the rest is open):
//!
//! - `forwards_from_a_failed_event_cost_linear_status_queries`: every `forward_to` from an
//!   event that has already failed asks about every kept forward, about three times: PoCL calls
//!   the new forward's callback at once inside `clSetEventCallback` (on the registering thread),
//!   whose `ForwardSet::apply` fails the target and runs `sweep_after_failure` (a commands'
//!   round over all `from_commands`), and then `registered` sees the failed source and runs a
//!   full `sweep()` (a full round, and a commands' round again after passing the failure on).
//!   With `c` pending forwards from commands kept, `n` such registrations ask about 3 n c
//!   statuses: 60,300 for n = 100 and 120,600 for n = 200 beside c = 200. Every run.
//!
//! What held (passing tests): see each test's doc. Observed besides (no count-asserted test: the
//! work runs on PoCL's callback thread, which `status_queries_on_this_thread` cannot see): an
//! alternating chain (user event -> marker -> forward -> user event -> ...) is passed along by
//! PoCL's callbacks of the failed markers on its own thread, each link's
//! `sweep_after_failure` giving the forwards from commands a round of their own, so `k` links
//! beside `c` kept command forwards cost about k c queries there (the failing thread saw 621 and
//! 641 for k = 20 and 40 beside c = 300: one full and one commands' round).
//!
//! The order comes from user events, never from sleeps; hangs are bounded (`common::within`,
//! `common::settles`, child scenarios killed after 60 s).

mod common;

use std::time::Duration;

use xpu_device::backend::{
    live_objects, status_queries_on_this_thread, Buffer, ClEvent, CommandQueue, EventStatus,
    MemFlags,
};
use xpu_device::Device;

const SETTLE: Duration = Duration::from_secs(20);

/// `c` markers on `q` behind the closed gate `gate`, each forwarded to a fresh user event (kept
/// forwards from commands that stay pending).
fn pending_command_forwards(
    dev: &Device,
    q: &CommandQueue,
    gate: &common::Gate,
    c: usize,
) -> Vec<(ClEvent, ClEvent)> {
    let kept = (0..c)
        .map(|_| {
            let m = q.enqueue_marker(&[gate.event()]).unwrap();
            let t = dev.create_user_event().unwrap();
            m.forward_to(&t).unwrap();
            (m, t)
        })
        .collect();
    q.flush().unwrap();
    kept
}

/// FINDING. Child scenario. Sequence: 200 markers behind a closed gate, each forwarded to a
/// fresh user event (200 pending forwards from commands kept); user event `u`,
/// `u.set_failed(-5)`; then `u.forward_to(t_i)` for `n` fresh user events `t_i` (n = 100, then
/// 200), status queries counted on this thread around the registrations.
///
/// Expected: every `t_i` reads -5 (it does), at O(1) amortized queries per registration (the
/// failure of `u` was passed on when it was set; the kept forwards have nothing new to learn),
/// so at most 8 (n + c). Observed: 60,300 queries for n = 100 and 120,600 for n = 200 (603 per
/// registration, 3 per kept forward: `forward_status`, called by PoCL inside
/// `clSetEventCallback` on this thread, fails the target and runs `sweep_after_failure`, whose
/// commands' round asks about all 200; `registered` then sweeps everything again, a full round
/// and a commands' round). Every run.
///
/// Partly fixed since: `registered` sweeps no more when the driver's callback took the target
/// already (and only the source's forwards otherwise), and a sweep passes on only the
/// failures it newly set: 20,200 queries for n = 100 (c per registration, from 3 c). Open:
/// each failure a forward's callback passes on still gives the forwards from commands a
/// round (`sweep_after_failure`); a per-wrapper note of which user events commands waited
/// for (b8db1cf) let failures be missed (review h56) and was taken back. Ignored until that
/// round is paid for otherwise.
#[test]
fn forwards_from_a_failed_event_cost_linear_status_queries() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let c = 200;
        let gq = common::queue(dev);
        let mut gate = common::Gate::new(dev);
        let kept = pending_command_forwards(dev, &gq, &gate, c);
        let u = dev.create_user_event().unwrap();
        u.set_failed(-5).unwrap();
        let mut costs = Vec::new();
        for n in [100usize, 200] {
            let s0 = status_queries_on_this_thread();
            let ts: Vec<ClEvent> = (0..n)
                .map(|_| {
                    let t = dev.create_user_event().unwrap();
                    u.forward_to(&t).unwrap();
                    t
                })
                .collect();
            costs.push((n, status_queries_on_this_thread() - s0));
            for (i, t) in ts.iter().enumerate() {
                assert_eq!(t.status(), Ok(EventStatus::Error(-5)), "t{i}");
            }
        }
        println!("status queries (n, queries) beside {c} kept: {costs:?}");
        gate.open();
        let done = common::within(SETTLE, move || gq.finish().unwrap());
        assert!(done.is_some(), "the gated queue's finish hung");
        drop(kept);
        for (n, q) in costs {
            assert!(
                q <= 8 * (n + c) as u64,
                "{n} forwards from a failed user event beside {c} pending forwards from \
                 commands: {q} status queries (at most {} expected)",
                8 * (n + c)
            );
        }
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. Child scenario. On an out-of-order queue, a marker, a barrier, a copy, a fill and a
/// fill of 0 bytes, each waiting on user event `u`, each forwarded to a fresh user event and
/// given an `on_complete` closure; `u.set_failed(-5)`: every command and every target reads a
/// failure right after the call, and every closure runs with one (PoCL 3.1 here calls back for
/// each command failed through its wait list, with -1); live objects balance.
#[test]
fn every_kind_of_command_failed_through_its_wait_list_reaches_its_target_and_closure() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let ctx = dev.context().unwrap();
        let a = Buffer::new(ctx, 256, MemFlags::default()).unwrap();
        let b = Buffer::new(ctx, 256, MemFlags::default()).unwrap();
        let q = CommandQueue::new_out_of_order(ctx, dev.id()).unwrap();
        let u = dev.create_user_event().unwrap();
        let cmds = [
            ("marker", q.enqueue_marker(&[&u]).unwrap()),
            ("barrier", q.enqueue_barrier(&[&u]).unwrap()),
            ("copy", q.copy(&a, 0, &b, 0, 64, &[&u]).unwrap()),
            ("fill", q.fill(&b, &[1, 2, 3, 4], 0, 64, &[&u]).unwrap()),
            ("fill0", q.fill(&b, &[1, 2, 3, 4], 0, 0, &[&u]).unwrap()),
        ];
        let (mut ts, mut rxs) = (Vec::new(), Vec::new());
        for (_, c) in &cmds {
            let t = dev.create_user_event().unwrap();
            c.forward_to(&t).unwrap();
            let (f, rx) = common::reporter();
            c.on_complete(f).unwrap();
            ts.push(t);
            rxs.push(rx);
        }
        q.flush().unwrap();
        u.set_failed(-5).unwrap();
        for ((name, c), t) in cmds.iter().zip(&ts) {
            assert!(
                common::settles(SETTLE, || common::failed(c)),
                "{name}: {:?}",
                c.status()
            );
            assert!(
                common::settles(SETTLE, || common::failed(t)),
                "{name}'s target: {:?}",
                t.status()
            );
        }
        for ((name, _), rx) in cmds.iter().zip(&rxs) {
            let got = rx.recv_timeout(SETTLE);
            assert!(got.is_ok_and(|s| s < 0), "{name}'s closure: {got:?}");
        }
        drop(cmds);
        let done = common::within(SETTLE, move || common::finish_after_failure(&q));
        assert!(done.is_some(), "the queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. Child scenario. `on_complete` registered after the failure, with no sweep after it:
/// on a user event failed by `set_failed`, on the target of a forward failed through it, and on
/// a marker failed through its wait list. Each closure runs with the failure (PoCL calls a
/// callback registered on a failed event at once).
#[test]
fn a_closure_registered_after_the_failure_runs() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let u = dev.create_user_event().unwrap();
        u.set_failed(-5).unwrap();
        let c = common::forward_chain(dev, 2);
        c[0].set_failed(-5).unwrap();
        let q = common::queue(dev);
        let g = dev.create_user_event().unwrap();
        let m = q.enqueue_marker(&[&g]).unwrap();
        q.flush().unwrap();
        g.set_failed(-5).unwrap();
        let mut rxs = Vec::new();
        for e in [&u, &c[1], &m] {
            let (f, rx) = common::reporter();
            e.on_complete(f).unwrap();
            rxs.push(rx);
        }
        for (name, rx) in ["u", "c1", "m"].iter().zip(&rxs) {
            let got = rx.recv_timeout(SETTLE);
            assert!(got.is_ok_and(|s| s < 0), "{name}'s closure: {got:?}");
        }
        let done = common::within(SETTLE, move || common::finish_after_failure(&q));
        assert!(done.is_some(), "the queue's finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}
