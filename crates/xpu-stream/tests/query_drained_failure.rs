//! `Stream::query` after a failed wait drained by a finish: a kept failed marker answers once a
//! synchronize begun after it returned, and a drained failure never returns across synchronizes.
//!
//! Review h74: `Stream::query` after 84eb0b6 (a pending kept marker answers `false` with one
//! driver call; a kept failed marker, once no failure stands, answers `true` when a finish begun
//! after it returned (`drained_by_finish`) and nothing was enqueued since; `waits::Covered`),
//! attacked with sequences of safe public calls. PoCL 3.1 on the CPU
//! (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`), a 2-core machine shared with other
//! jobs, debug build (`cargo test -p xpu-stream --test query_drained_failure`).
//!
//! No finding here: the device-level one
//! (`crates/xpu-device/tests/ordered_markers_across_finishes.rs`: a marker that read complete reads the failure of a wait covered by a finish begun before it, once a
//! later finish returned) does not reach `Stream::query`, whose kept marker is answered by
//! `drained_by_finish` once such a finish returned. What held: both tests, 5 of 5 runs.
//! Order comes from user events; a thread blocked in `clFinish` is seen through `/proc`.

mod common;

use common::{own_stream, polls_true, BOUND, POLL};

use xpu_testing::thread_state::{blocked_in_futex, this_tid};

use std::sync::mpsc;

/// Held. The query's `Err` branch around a synchronize begun before the kept marker: on an
/// external stream `s` (queue `q`), synchronized: `q.enqueue_barrier(&[&h])` (gate);
/// `q.enqueue_barrier(&[&g])`; thread B calls `s.synchronize()` and blocks behind the gate;
/// `g.set_failed(-5)`; `s.query()` polled until it reports the failure (the kept marker, which
/// PoCL completes at once while the gate is queued): never `Ok(true)` meanwhile, and
/// every further query (20) reports it while the gate is unset; `h` completes; B returns `Ok`;
/// `s.query()` then answers `Ok(true)` within 10 s (no failure stands; the kept marker, enqueued
/// after B began, is judged with the waits after B's `upto`, none), and again after one more
/// barrier on a complete user event and a second synchronize (the first sync's drained failure
/// does not come back).
#[test]
fn a_kept_failed_marker_after_a_synchronize_began_answers_once_it_returned() {
    if !xpu_testing::needs_failures_ahead(
        "a_kept_failed_marker_after_a_synchronize_began_answers_once_it_returned",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let (ext, s) = own_stream();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let h = dev.create_user_event().unwrap();
    let g = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&h]).unwrap());
    drop(q.enqueue_barrier(&[&g]).unwrap());
    let (tx, rx) = mpsc::channel();
    let b = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        s.synchronize()
    });
    let tid = rx.recv().unwrap();
    assert!(
        xpu_testing::true_within(BOUND, || blocked_in_futex(&tid) && blocked_in_futex(&tid)),
        "B never blocked"
    );
    g.set_failed(-5).unwrap();
    let mut early_true = 0;
    let reported = xpu_testing::true_within(POLL, || match s.query() {
        Ok(true) => {
            early_true += 1;
            false
        }
        Ok(false) => false,
        Err(_) => true,
    });
    let later: Vec<String> = (0..20).map(|_| format!("{:?}", s.query())).collect();
    h.set_complete().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "PoCL's clFinish succeeds: {synced:?}");
    let (first_ok, first_last, first_markers) = polls_true(&s);
    let ok = dev.create_user_event().unwrap();
    ok.set_complete().unwrap();
    drop(q.enqueue_barrier(&[&ok]).unwrap());
    let (mid_ok, mid_last, _) = polls_true(&s);
    drop(q.enqueue_barrier(&[&ok]).unwrap());
    s.synchronize().unwrap();
    let (second_ok, second_last, _) = polls_true(&s);
    drop(ext);
    assert_eq!(
        early_true, 0,
        "query answered true while the gate was queued"
    );
    assert!(
        reported,
        "the failed wait was never reported while the gate was queued"
    );
    assert!(
        later.iter().all(|r| r.starts_with("Err")),
        "queries while the gate was queued: {later:?}"
    );
    assert!(
        first_ok,
        "after the synchronize: last {first_last} ({first_markers} markers)"
    );
    assert!(
        mid_ok,
        "after a barrier on a complete event: last {mid_last}"
    );
    assert!(second_ok, "after a second synchronize: last {second_last}");
}

/// Held. A stream synchronized after a failed wait answers `true` for good across later
/// synchronizes: `q.enqueue_barrier(&[&g])`; `g.set_failed(-5)`; `s.synchronize()` (`Ok` on
/// PoCL); 30 rounds of: a barrier on a complete user event (logged), `s.query()` polled to
/// `Ok(true)`, another logged barrier, `s.synchronize()`, `s.query()` polled to `Ok(true)`
/// (never an `Err`: the first synchronize's drained failure never judges a later kept marker).
#[test]
fn a_drained_failure_never_returns_to_the_query_across_synchronizes() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let (ext, s) = own_stream();
    let q = s.queue().unwrap();
    let g = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&g]).unwrap());
    g.set_failed(-5).unwrap();
    common::synchronize_after_failure(|| s.synchronize());
    let ok = dev.create_user_event().unwrap();
    ok.set_complete().unwrap();
    let mut errs = Vec::new();
    for round in 0..30 {
        drop(q.enqueue_barrier(&[&ok]).unwrap());
        let (a, last_a, _) = polls_true(&s);
        drop(q.enqueue_barrier(&[&ok]).unwrap());
        s.synchronize().unwrap();
        let (b, last_b, _) = polls_true(&s);
        if !a || !b {
            errs.push((round, last_a, last_b));
        }
    }
    drop(ext);
    assert!(errs.is_empty(), "queries did not read true: {errs:?}");
}
