//! Forwards from commands that waited for a failed user event (`UnsetGuard::waited`,
//! `note_waited`): waits through raw wrappers, clones and unnoted targets still pass the failure to
//! the commands' forwards.
//!
//! Review h56 (device part): the forwards' commands' round after b8db1cf
//! (`UnsetGuard::waited`, `ClEvent::note_waited` / `maybe_waited`, `sweep_rounds`' `waited`)
//! and the focused sweep of `registered` after 608416e, attacked with sequences of safe public
//! calls (one test wraps a raw handle with `from_raw_retained`, whose safety contract it
//! meets). PoCL on the CPU (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with
//! other jobs, debug build (`cargo test -p xpu-device --test forward_waited_commands`).
//!
//! Each test records whether a forward's target (and an `on_complete` closure) of a command
//! that waited for a failed user event reads the failure right after the failing call returned
//! (`now`), or only once PoCL's callbacks settled (`common::settles`), and prints both.
//!
//! Findings (failed at 608416e, every run of 3; fixed since by taking b8db1cf's note back:
//! every failure passed on gives the forwards from commands a round; both passed with
//! `maybe_waited` answering `true`, i.e. before b8db1cf). The held tests' queue is kept alive
//! to the end (a clone finishes it), so their live counts compare with the baseline taken with
//! it:
//!
//! - `a_wait_through_a_raw_wrapper_of_a_forwards_target_gets_the_failure`: a command waiting
//!   for a forward's target through a wrapper of its raw handle (`from_raw_retained`, no unset
//!   guard, so `note_waited` notes nothing) fails, but its own forward's target stays unset
//!   (20 s): PoCL 3.1 makes no callback for it and no sweep gives the commands a round.
//! - `a_failure_from_a_command_through_an_unnoted_target_reaches_the_next_forward`: the same
//!   with the failure starting at a gated marker's forward.
//!
//! The order comes from user events, never from sleeps; hangs are bounded (`common::within`,
//! `common::settles`, child scenarios killed after 60 s).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::{live_objects, ClEvent, CommandQueue, EventStatus};
use xpu_device::Device;

const SETTLE: Duration = Duration::from_secs(20);

/// A marker on `q` waiting for `wait`, forwarded to a fresh user event and given an
/// `on_complete` reporter: (marker, target, closure's receiver).
fn watched_marker(
    dev: &Device,
    q: &CommandQueue,
    wait: &ClEvent,
) -> (ClEvent, ClEvent, mpsc::Receiver<i32>) {
    let c = q.enqueue_marker(&[wait]).unwrap();
    let t2 = dev.create_user_event().unwrap();
    c.forward_to(&t2).unwrap();
    let (f, rx) = common::reporter();
    c.on_complete(f).unwrap();
    q.flush().unwrap();
    (c, t2, rx)
}

/// What a failing call left: the target failed at once, and the closure ran at once.
fn observe_now(t2: &ClEvent, rx: &mpsc::Receiver<i32>) -> (bool, Option<i32>) {
    (common::failed(t2), rx.try_recv().ok())
}

/// Asserts that the command, its target and its closure all get the failure in the end, and
/// returns whether the target had it at once (`now`).
fn settle_all(
    what: &str,
    c: &ClEvent,
    t2: &ClEvent,
    rx: &mpsc::Receiver<i32>,
    now: (bool, Option<i32>),
) {
    println!(
        "{what}: right after the call: target failed {}, closure {:?}",
        now.0, now.1
    );
    assert!(
        common::settles(SETTLE, || common::failed(c)),
        "{what}: command {:?}",
        c.status()
    );
    assert!(
        common::settles(SETTLE, || common::failed(t2)),
        "{what}: the command's target never failed: {:?}",
        t2.status()
    );
    let got = now.1.map_or_else(|| rx.recv_timeout(SETTLE).ok(), Some);
    assert!(got.is_some_and(|s| s < 0), "{what}: closure {got:?}");
    // PoCL passes the failure on within the failing call (its callbacks run there); NVIDIA
    // calls back later on its own thread (an H100, 2026-12-06: unset right after the call,
    // failed once settled), so "at once" is asked of PoCL only.
    let at_once = xpu_device::device(0).is_ok_and(common::is_pocl);
    assert!(
        now.0 || !at_once,
        "{what}: the target was unset right after the failing call"
    );
}

/// FINDING. Child scenario. User events `u` -> forward -> `t`; `t` wrapped again from its raw
/// handle (`from_raw_retained(t.as_raw())`, a wrapper without the unset guard, so its wait
/// notes nothing on `t`'s guard); a marker waiting for that wrapper, forwarded to `t2` and
/// given an `on_complete` closure; `u.set_failed(-5)`. Expected: `t2` failed right after the
/// call. Observed: the marker fails, `t2` stays `Submitted` for 20 s (the closure runs).
#[test]
fn a_wait_through_a_raw_wrapper_of_a_forwards_target_gets_the_failure() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let u = dev.create_user_event().unwrap();
        let t = dev.create_user_event().unwrap();
        u.forward_to(&t).unwrap();
        // SAFETY: `t.as_raw()` is a valid event while `t` lives (it does, to the end).
        let t_raw = unsafe { ClEvent::from_raw_retained(t.as_raw()) }.unwrap();
        let (c, t2, rx) = watched_marker(dev, &q, &t_raw);
        u.set_failed(-5).unwrap();
        let now = observe_now(&t2, &rx);
        settle_all("raw wrapper", &c, &t2, &rx, now);
        drop((c, t_raw, t, u, t2));
        let q2 = q.clone();
        let done = common::within(SETTLE, move || common::finish_after_failure(&q2));
        assert!(done.is_some(), "finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// FINDING. Child scenario. The failure starts at a command (a marker `m` behind gate `g`, so no
/// `set_failed` of the forward's source itself): `m` -> forward -> user event `t`, never
/// listed by the runtime's wait lists except through a raw wrapper (`from_raw_retained`); a
/// marker waiting for the wrapper, forwarded to `t2` with an `on_complete` closure;
/// `g.set_failed(-5)`. Expected: `t2` fails. Observed: `t` and the marker fail, `t2` stays
/// `Submitted` for 20 s.
#[test]
fn a_failure_from_a_command_through_an_unnoted_target_reaches_the_next_forward() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let g = dev.create_user_event().unwrap();
        let m = q.enqueue_marker(&[&g]).unwrap();
        let t = dev.create_user_event().unwrap();
        m.forward_to(&t).unwrap();
        // SAFETY: `t.as_raw()` is a valid event while `t` lives (it does, to the end).
        let t_raw = unsafe { ClEvent::from_raw_retained(t.as_raw()) }.unwrap();
        let q2 = CommandQueue::new(dev.context().unwrap(), dev.id(), Default::default()).unwrap();
        let (c, t2, rx) = watched_marker(dev, &q2, &t_raw);
        g.set_failed(-5).unwrap();
        let now = observe_now(&t2, &rx);
        // PoCL may pass a failed marker's failure on from its own thread: only the end counts.
        println!(
            "from a command: right after: target {}, closure {:?}",
            now.0, now.1
        );
        assert!(
            common::settles(SETTLE, || common::failed(&t)),
            "t: {:?}",
            t.status()
        );
        assert!(
            common::settles(SETTLE, || common::failed(&t2)),
            "t2: {:?}",
            t2.status()
        );
        let got = now.1.map_or_else(|| rx.recv_timeout(SETTLE).ok(), Some);
        assert!(got.is_some_and(|s| s < 0), "closure {got:?}");
        assert!(common::failed(&c));
        drop((c, t_raw, t, m, g, t2));
        let fq = q.clone();
        let done = common::within(SETTLE, move || {
            common::finish_after_failure(&fq);
            common::finish_after_failure(&q2);
        });
        assert!(done.is_some(), "finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. Child scenario (608416e). User event `u` failed first; user event `t` listed by a
/// marker's wait list (noted), the marker forwarded to `t2` with an `on_complete` closure;
/// then `u.forward_to(&t)`: right after it returns, `t`, `t2` and the closure have the
/// failure.
#[test]
fn a_forward_from_a_failed_user_event_to_a_waited_target_passes_the_failure_on() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let u = dev.create_user_event().unwrap();
        u.set_failed(-5).unwrap();
        let t = dev.create_user_event().unwrap();
        let (c, t2, rx) = watched_marker(dev, &q, &t);
        u.forward_to(&t).unwrap();
        assert_eq!(t.status(), Ok(EventStatus::Error(-5)));
        let now = observe_now(&t2, &rx);
        settle_all("registered after the failure", &c, &t2, &rx, now);
        drop((c, t, u, t2));
        let fq = q.clone();
        let done = common::within(SETTLE, move || common::finish_after_failure(&fq));
        assert!(done.is_some(), "finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. Child scenario, two devices (contexts). `u` (device 0) -> forward -> `ta` (device 0)
/// -> forward -> `tb` (device 1); a marker on device 1 waiting for `tb`, forwarded to `t2`
/// with an `on_complete` closure; `u.set_failed(-5)`: the cross-context chain reaches the
/// marker's target and closure right after the call.
#[test]
fn a_cross_context_chain_reaches_a_waiting_commands_target() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let q1 = common::queue(d1);
        let u = d0.create_user_event().unwrap();
        let ta = d0.create_user_event().unwrap();
        let tb = d1.create_user_event().unwrap();
        u.forward_to(&ta).unwrap();
        ta.forward_to(&tb).unwrap();
        let (c, t2, rx) = watched_marker(d1, &q1, &tb);
        u.set_failed(-5).unwrap();
        let now = observe_now(&t2, &rx);
        settle_all("cross context", &c, &t2, &rx, now);
        drop((c, u, ta, tb, t2));
        let done = common::within(SETTLE, move || common::finish_after_failure(&q1));
        assert!(done.is_some(), "finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}

/// Held. Child scenario. A user event `t` waited for only by a clone made before any wait
/// (`t.clone()`, the clone listed): `u` -> forward -> `t`, a marker waiting for the clone,
/// forwarded to `t2` with a closure; the original `t` dropped; `u.set_failed(-5)`.
#[test]
fn a_wait_through_a_clone_is_noted_for_every_wrapper() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    {
        let u = dev.create_user_event().unwrap();
        let t = dev.create_user_event().unwrap();
        let t_clone = t.clone();
        u.forward_to(&t).unwrap();
        let (c, t2, rx) = watched_marker(dev, &q, &t_clone);
        drop(t);
        u.set_failed(-5).unwrap();
        let now = observe_now(&t2, &rx);
        settle_all("clone", &c, &t2, &rx, now);
        drop((c, t_clone, u, t2));
        let fq = q.clone();
        let done = common::within(SETTLE, move || common::finish_after_failure(&fq));
        assert!(done.is_some(), "finish hung");
    }
    common::assert_live_objects_back_to(base);
    println!("scenario-ok");
}
