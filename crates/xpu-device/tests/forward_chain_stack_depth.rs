//! Long chains of forwards complete without nesting callbacks (no stack overflow), and forwards
//! between events at reused addresses see no stale index entry.
//!
//! Review h51 (device part): forwards between user events and their cycle check
//! (`forwards::closes_cycle`, its index `from_user`, `sweep`, `keep` / `registered` /
//! `unkeep`) as of 968f51d, 91fa769, 9ef3aeb and b56c16c, attacked with sequences of safe
//! calls where reviews h49 and h50 did not go. PoCL on the CPU (`POCL_DEVICES="pthread
//! pthread"`), a 2-core machine shared with other jobs, debug build (`cargo test -p xpu-device
//! --test forward_chain_stack_depth`).
//!
//! Finding (a test that failed at b56c16c, fixed in 1c0926c: within a forward's set, the next
//! forward's set waits in the thread's list and the outermost callback sets them in a loop):
//! `a_long_chain_of_forwards_completes_without_overflowing_the_stack`.
//! PoCL runs a user event's `CL_COMPLETE` callbacks inside `clSetUserEventStatus`, on the
//! setting thread; a forward's callback (`forward_status`) sets its target with
//! `clSetUserEventStatus`, which runs the target's forward's callback, and so on: completing
//! the head of a chain of `n` forwards nests `n` callbacks (`forward_status` ->
//! `held::set_user_status` -> `clSetUserEventStatus` -> PoCL -> `forward_status`, seen in gdb)
//! and a chain of a few thousand overflows a 2 MiB thread's stack: the process aborts. (A
//! failure does not recurse: PoCL makes no callback for it and `sweep` loops.)
//!
//! What held (passing tests): a forward between events whose raw handles reuse the addresses
//! of released events that were forwarded the other way is made (no stale index entry: a
//! kept forward retains both its ends, and the index entry goes with the list entry).
//!
//! Observed by the probe (`probe_refusal_cost`, ignored), asserted since as a count of index
//! steps in `forward_index.rs` and fixed in e4300b8 (forwards found by key): a refused
//! forward closing a chain of `n` pending forwards asks `n` statuses and makes `n` index steps,
//! but the path's verification scans the kept list once per step (`forwards.list.iter().find`)
//! under the global lock: 1,000 -> 3.7 ms, 2,000 -> 11 ms, 4,000 -> 35 to 40 ms (debug,
//! PoCL), about x3.5 per doubling.

mod common;

use std::time::{Duration, Instant};

use xpu_device::backend::{
    forward_index_steps_on_this_thread, live_objects, status_queries_on_this_thread, EventStatus,
};

const SETTLE: Duration = Duration::from_secs(30);

/// A forward closing a chain of `n` pending forwards, for `n` up to 4,000 (prints its cost).
#[test]
#[ignore = "a hand-run probe of a refusal's cost (prints, asserts nothing)"]
fn probe_refusal_cost() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    for n in [1000usize, 2000, 4000] {
        let c = common::forward_chain(dev, n);
        let (s, q, i) = (
            Instant::now(),
            status_queries_on_this_thread(),
            forward_index_steps_on_this_thread(),
        );
        let r = c[n - 1].forward_to(&c[0]);
        println!(
            "n {n}: refused {} in {:?}, {} status queries, {} index steps",
            common::refused_as_cycle(&r),
            s.elapsed(),
            status_queries_on_this_thread() - q,
            forward_index_steps_on_this_thread() - i
        );
        c[0].set_complete().unwrap();
        assert!(common::settles(SETTLE, || c[n - 1].status() == Ok(EventStatus::Complete)));
        drop(c);
        let _ = live_objects();
    }
    println!("scenario-ok");
}

/// Links in the chain of the stack test.
const LINKS: usize = 10_000;

/// FINDING (process abort). Sequence: `e_0 = create_user_event()`; for i in 1..10,000:
/// `e_i = create_user_event(); e_{i-1}.forward_to(&e_i)` (each made); then, on a thread with
/// a 2 MiB stack (Rust's default for spawned threads), `e_0.set_complete()`.
///
/// Expected: `set_complete` returns and every `e_i` reads complete. Observed: "thread has
/// overflowed its stack, fatal runtime error: stack overflow, aborting" (the child process
/// dies with SIGABRT), 3 of 3 runs; a probe on the test harness's thread aborted from 3,000
/// links (2,000 passed). Run in a child process.
#[test]
fn a_long_chain_of_forwards_completes_without_overflowing_the_stack() {
    let Some((dev, _, _)) = common::device0_queue_in_child() else {
        return;
    };
    let c = common::forward_chain(dev, LINKS);
    let head = c[0].clone();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || head.set_complete().unwrap())
        .unwrap()
        .join()
        .unwrap();
    assert!(
        common::settles(SETTLE, || c[LINKS - 1].status()
            == Ok(EventStatus::Complete)),
        "the chain forwards"
    );
    println!("scenario-ok");
}

/// Held. 200 rounds: forward `a -> b`, complete `a`, let the forward be swept
/// (`live_objects`) and drop both; then fresh `p, q` (PoCL hands released handles' addresses
/// out again: about 790 reuses counted over the rounds) with `q -> p` made and `p -> q`
/// refused: no stale entry from an earlier round's events refuses or allows anything.
#[test]
fn forwards_between_events_at_reused_addresses_see_no_stale_index_entry() {
    let Some((dev, _, _)) = common::device0_queue() else {
        return;
    };
    let mut seen = std::collections::HashSet::new();
    let mut reused = 0;
    for _ in 0..200 {
        let (a, b) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        reused += usize::from(!seen.insert(a.as_raw() as usize));
        reused += usize::from(!seen.insert(b.as_raw() as usize));
        a.forward_to(&b).unwrap();
        // An address may come back as the other end now: the stale `a -> b` would refuse it.
        let (x, y) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        a.set_complete().unwrap();
        assert!(common::settles(SETTLE, || b.status() == Ok(EventStatus::Complete)));
        drop((a, b));
        let _ = live_objects();
        let (p, q) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        reused += usize::from(!seen.insert(p.as_raw() as usize));
        reused += usize::from(!seen.insert(q.as_raw() as usize));
        q.forward_to(&p).unwrap();
        assert!(
            common::refused_as_cycle(&p.forward_to(&q)),
            "the reverse closes p -> q -> p"
        );
        y.forward_to(&x).unwrap();
        p.set_complete().unwrap();
        x.set_complete().unwrap();
    }
    println!("{reused} handle addresses reused");
}
