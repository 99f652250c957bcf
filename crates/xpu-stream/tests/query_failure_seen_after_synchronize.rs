//! A failed wait first seen by a query after the covering synchronize returned is cleared by it,
//! for every wrapper of the queue, also with other threads' enqueues racing the synchronize.
//!
//! Review h71: `Stream::query` after 769cad4 and 4fe4c8b (the kept failed query marker, cleared
//! by a `clFinish` begun after it, or by any successful `clFinish` returned after a query
//! first saw it failed: `QueryMarker::failure_stands`, `IdleProbe::successful_finishes`),
//! attacked with sequences of safe public calls. PoCL on the CPU
//! (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with other jobs, debug build
//! (`cargo test -p xpu-stream --test query_failure_seen_after_synchronize`).
//!
//! Findings (fail at 4fe4c8b; all three fixed since: a query's kept failed marker answers
//! while the queue's wait log holds a failure that no successful `clFinish` covered,
//! `CommandQueue::follows_failed_wait`, shared by every wrapper of the queue, instead of a note
//! per marker; and `WaitLog::before_finish` covers the commands numbered below the first
//! enqueue call still in progress instead of none):
//! - `a_failure_first_seen_after_the_synchronize_returned_is_cleared_by_it`: the note of the
//!   successful finishes is taken by the first query that *sees* the kept marker failed. When
//!   that query comes after the synchronize returned (the synchronize began before the kept
//!   marker and covered the failed wait), the note already counts that synchronize: the
//!   failure stands for ever, with no command queued, until another synchronize (the case of
//!   review h70 with the query that saw the failure before the return left out).
//! - `a_second_wrapper_keeps_the_failure_after_the_synchronize_cleared_it_for_the_first`: the
//!   same through a second stream over the same raw queue: the pool stream's query saw the
//!   failure before the return (cleared), the external stream's only after (stuck).
//!
//! - `a_synchronize_racing_another_threads_enqueues_clears_the_failure` (pre-existing: fails
//!   at 769cad4^ too): a synchronize begun while another thread's enqueue call with a wait
//!   list is in progress does not drain the wait log (`WaitLog::before_finish`: `None`), and
//!   the failure stands after it returned `Ok`, until another synchronize.
//!
//! The first two pass at 769cad4^ (2 of 2 runs): regressions of 769cad4/4fe4c8b. Docs: the
//! `Stream::query` text "until a synchronize of the queue returns with success (one begun
//! before the marker included)" holds only when a query saw the failure before that return.
//! At 769cad4^ the held tests `a_new_failure_after_a_cleared_one_is_reported_and_kept` and
//! `a_synchronize_that_began_before_the_failed_barrier_does_not_answer_true` fail on their
//! marker counts (one marker per query then), as expected.
//!
//! What held (passing tests): see each test's doc.
//!
//! The order comes from user events, never from sleeps; a thread blocked inside `clFinish` is
//! detected through `/proc` (as review h70). Hangs are bounded.

mod common;

use common::{blocked_synchronize, failed_pool_stream_of, polls_true, BOUND};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use xpu_device::backend::markers_enqueued_on_this_thread;
use xpu_stream::{get_stream_from_pool, ExternalStream, Stream};

/// Leaves `s` usable for the other tests: synchronize, then `true` within the bound.
fn clean(s: &Stream) -> bool {
    common::synchronize_after_failure(|| s.synchronize());
    xpu_testing::true_within(BOUND, || s.query().unwrap_or(false))
}

/// FINDING. On a pool stream `s` (`q = s.queue()`), synchronized: user events `h`, `gf`;
/// `q.enqueue_barrier(&[&h])`; `q.enqueue_barrier(&[&gf])`; thread B calls `s.synchronize()`
/// (blocked behind `h`, seen in `/proc`); `s.query()` answers `Ok(false)` (its marker, queued
/// behind `gf`, is kept); `gf.set_failed(-5)` (no query now); `h.set_complete()`; B's
/// `synchronize` returns `Ok`; then `s.query()` polled for 10 s.
///
/// Expected: `Ok(true)` (a synchronize returned after the failure, nothing enqueued since:
/// "every query reports it until a `synchronize` of the stream returned"; the docs: "until a
/// synchronize of the queue returns with success (one begun before the marker included)").
/// Observed: `Err(.. code: -1)` for every query, no marker enqueued, until another
/// synchronize. The kept marker (enqueued after B's `clFinish` began, so not drained by it)
/// reads `Error(-1)`; the first query that sees it failed comes after B returned, so
/// `failure_stands` notes a count that already includes B, and no later count is larger.
#[test]
fn a_failure_first_seen_after_the_synchronize_returned_is_cleared_by_it() {
    if !xpu_testing::needs_failures_ahead(
        "a_failure_first_seen_after_the_synchronize_returned_is_cleared_by_it",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let (h, gf) = (
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
    );
    drop(q.enqueue_barrier(&[&h]).unwrap());
    drop(q.enqueue_barrier(&[&gf]).unwrap());
    let b = blocked_synchronize(move || s.synchronize());
    let pending = s.query();
    assert!(
        matches!(pending, Ok(false)),
        "queued behind h and gf: {pending:?}"
    );
    gf.set_failed(-5).unwrap();
    assert!(!b.is_finished(), "B's synchronize waits for h");
    h.set_complete().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "PoCL's clFinish succeeds: {synced:?}");
    let (worked, last, markers) = polls_true(&s);
    let cleared = clean(&s);
    assert!(
        worked,
        "after a synchronize that returned Ok (begun before the query's marker, covering the \
         failed wait), queries answered {last} for 10 s ({markers} markers enqueued); a second \
         synchronize cleared it: {cleared}"
    );
}

/// FINDING (the same through a second wrapper of the raw queue). On a pool stream `s`
/// (`q = s.queue()`) and `es = ExternalStream::new(q.rewrapped()).stream()`: barriers behind
/// `h` and `gf`; B = `s.synchronize()` blocked behind `h`; `es.query()` and `s.query()` answer
/// `Ok(false)` (each keeps its marker); `gf.set_failed(-5)`; `s.query()` reports the failure
/// (polled); `h.set_complete()`; B returns `Ok`. Then `s.query()` answers `true` within the
/// bound (4fe4c8b's case: its query saw the failure before B returned), and `es.query()` is
/// polled for 10 s.
///
/// Expected: `Ok(true)` for `es` too (one queue, one synchronize returned after the failure).
/// Observed: `es` answers `Err(.. -1)` for ever (its kept marker first seen failed after B
/// returned), while `s` answers `true`.
#[test]
fn a_second_wrapper_keeps_the_failure_after_the_synchronize_cleared_it_for_the_first() {
    if !xpu_testing::needs_failures_ahead(
        "a_second_wrapper_keeps_the_failure_after_the_synchronize_cleared_it_for_the_first",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let ext = ExternalStream::new(q.rewrapped().unwrap(), 0).unwrap();
    let es = ext.stream();
    assert!(xpu_testing::true_within(BOUND, || es
        .query()
        .unwrap_or(false)));
    let (h, gf) = (
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
    );
    drop(q.enqueue_barrier(&[&h]).unwrap());
    drop(q.enqueue_barrier(&[&gf]).unwrap());
    let b = blocked_synchronize(move || s.synchronize());
    let (pe, ps) = (es.query(), s.query());
    assert!(
        matches!(pe, Ok(false)) && matches!(ps, Ok(false)),
        "{pe:?} {ps:?}"
    );
    gf.set_failed(-5).unwrap();
    assert!(
        xpu_testing::true_within(BOUND, || s.query().is_err()),
        "the pool stream reports the failure"
    );
    h.set_complete().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "{synced:?}");
    let (s_ok, s_last, _) = polls_true(&s);
    let (e_ok, e_last, e_markers) = polls_true(&es);
    let cleared = clean(&es) && clean(&s);
    assert!(s_ok, "the pool stream answered {s_last}");
    assert!(
        e_ok,
        "one queue, a synchronize returned Ok after the failure: the pool stream answers \
         true, the external stream over the same queue answered {e_last} for 10 s \
         ({e_markers} markers); a second synchronize cleared it: {cleared}"
    );
}

/// Held. A synchronize that began before the failed barrier was enqueued (B, blocked behind
/// `h`; it does not cover the failed wait in the runtime's log) and returned `Ok` after a
/// query saw the failure: the queries after it still report the failure (never `true`), and
/// ask with at most one new marker in all (200 queries); a synchronize begun after the
/// failure then clears it (`true` within the bound).
#[test]
fn a_synchronize_that_began_before_the_failed_barrier_does_not_answer_true() {
    if !xpu_testing::needs_failures_ahead(
        "a_synchronize_that_began_before_the_failed_barrier_does_not_answer_true",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let h = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&h]).unwrap());
    let b = blocked_synchronize(move || s.synchronize());
    let gf = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&gf]).unwrap());
    gf.set_failed(-5).unwrap();
    assert!(
        xpu_testing::true_within(BOUND, || s.query().is_err()),
        "the failure is reported"
    );
    h.set_complete().unwrap();
    let _ = b.join().unwrap();
    let m0 = markers_enqueued_on_this_thread();
    let mut trues = 0;
    for _ in 0..200 {
        if matches!(s.query(), Ok(true)) {
            trues += 1;
        }
    }
    let markers = markers_enqueued_on_this_thread() - m0;
    assert!(clean(&s), "a later synchronize clears the failure");
    assert_eq!(
        trues, 0,
        "true after a synchronize that did not cover the failed wait"
    );
    assert!(markers <= 1, "{markers} markers enqueued by 200 queries");
}

/// Held. A failure cleared by a synchronize, then a second failure: it is reported (a new
/// marker), kept with no marker per query (100 queries), and cleared by the next synchronize;
/// three rounds.
#[test]
fn a_new_failure_after_a_cleared_one_is_reported_and_kept() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = failed_pool_stream_of(0);
    let q = s.queue().unwrap();
    common::synchronize_after_failure(|| s.synchronize());
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
    for round in 0..3 {
        let g = dev.create_user_event().unwrap();
        drop(q.enqueue_barrier(&[&g]).unwrap());
        g.set_failed(-5).unwrap();
        assert!(
            xpu_testing::true_within(BOUND, || s.query().is_err()),
            "round {round}: the new failure is reported"
        );
        let m0 = markers_enqueued_on_this_thread();
        for i in 0..100 {
            assert!(s.query().is_err(), "round {round}: query {i}");
        }
        assert_eq!(markers_enqueued_on_this_thread() - m0, 0, "round {round}");
        common::synchronize_after_failure(|| s.synchronize());
        assert!(xpu_testing::true_within(BOUND, || s
            .query()
            .unwrap_or(false)));
    }
}

/// Held. Four pollers on a failed stream while the main thread runs 20 synchronizes in a row
/// with a gated barrier enqueued after the failure (`g2`, opened after the synchronize
/// thread blocked): no poller sees `true` from a query that returned before `g2` was set
/// (an `open` flag set before `g2` and read after each query), the markers of all pollers
/// together stay bounded (at most 4 per successful synchronize), and after `g2` opens every
/// poller sees `true`.
#[test]
fn pollers_and_synchronizes_on_a_failed_stream_with_gated_work() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = failed_pool_stream_of(0);
    let q = s.queue().unwrap();
    let g2 = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&g2]).unwrap());
    let open = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let (open, early, stop) = (open.clone(), early.clone(), stop.clone());
            std::thread::spawn(move || {
                let m0 = markers_enqueued_on_this_thread();
                let mut saw = false;
                while !stop.load(SeqCst) {
                    let r = s.query();
                    if matches!(r, Ok(true)) {
                        // Still unset after the query returned: `g2` never completed during it.
                        if !open.load(SeqCst) {
                            early.fetch_add(1, SeqCst);
                        }
                        saw = true;
                    }
                }
                (saw, markers_enqueued_on_this_thread() - m0)
            })
        })
        .collect();
    // A synchronize blocked behind g2, then g2 opens; then more synchronizes.
    let b = blocked_synchronize(move || s.synchronize());
    open.store(true, SeqCst);
    g2.set_complete().unwrap();
    let _ = b.join().unwrap();
    for _ in 0..19 {
        let _ = s.synchronize();
    }
    let all_saw = xpu_testing::true_within(BOUND, || s.query().unwrap_or(false));
    stop.store(true, SeqCst);
    let mut markers = 0;
    for p in pollers {
        let (_, m) = p.join().unwrap();
        markers += m;
    }
    assert!(clean(&s));
    assert!(all_saw);
    assert_eq!(early.load(SeqCst), 0, "true while g2 was unset");
    assert!(markers <= 4 * 20 + 4, "{markers} markers by the pollers");
}

/// Held (positive control of the second finding). Both wrappers of one raw queue see the
/// failure before the synchronize (begun before their markers) returns: both answer `true`
/// after it.
#[test]
fn both_wrappers_seeing_the_failure_before_the_return_are_cleared() {
    if !xpu_testing::needs_failures_ahead(
        "both_wrappers_seeing_the_failure_before_the_return_are_cleared",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let ext = ExternalStream::new(q.rewrapped().unwrap(), 0).unwrap();
    let es = ext.stream();
    let (h, gf) = (
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
    );
    drop(q.enqueue_barrier(&[&h]).unwrap());
    drop(q.enqueue_barrier(&[&gf]).unwrap());
    let b = blocked_synchronize(move || s.synchronize());
    let _ = (es.query(), s.query());
    gf.set_failed(-5).unwrap();
    assert!(xpu_testing::true_within(BOUND, || s.query().is_err()));
    assert!(xpu_testing::true_within(BOUND, || es.query().is_err()));
    h.set_complete().unwrap();
    assert!(b.join().unwrap().is_ok());
    let (s_ok, s_last, _) = polls_true(&s);
    let (e_ok, e_last, _) = polls_true(&es);
    let _ = clean(&es) && clean(&s);
    assert!(s_ok && e_ok, "{s_last} {e_last}");
}

/// Rounds of [`a_synchronize_racing_another_threads_enqueues_clears_the_failure`] (X's
/// barriers wait on a completed user event when `with_wait_list`, on nothing otherwise) whose
/// queries never answered `true` within 5 s after the synchronize returned `Ok`.
fn stuck_rounds_with_concurrent_enqueues(with_wait_list: bool, rounds: usize) -> Vec<usize> {
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    let done = dev.create_user_event().unwrap();
    done.set_complete().unwrap();
    let done = Arc::new(done);
    let mut stuck = Vec::new();
    for round in 0..rounds {
        s.synchronize().unwrap();
        let g = dev.create_user_event().unwrap();
        drop(q.enqueue_barrier(&[&g]).unwrap());
        g.set_failed(-5).unwrap();
        assert!(xpu_testing::true_within(BOUND, || s.query().is_err()));
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicUsize::new(0));
        let x = {
            let (stop, count, done, q) = (stop.clone(), count.clone(), done.clone(), q.clone());
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    if with_wait_list {
                        drop(q.enqueue_barrier(&[&*done]).unwrap());
                    } else {
                        drop(q.enqueue_barrier(&[]).unwrap());
                    }
                    count.fetch_add(1, SeqCst);
                }
            })
        };
        assert!(xpu_testing::true_within(BOUND, || count.load(SeqCst) >= 1));
        let synced = s.synchronize();
        stop.store(true, SeqCst);
        x.join().unwrap();
        assert!(synced.is_ok(), "{synced:?}");
        let ok = xpu_testing::true_within(Duration::from_secs(5), || matches!(s.query(), Ok(true)));
        if !ok {
            stuck.push(round);
        }
        assert!(clean(&s));
    }
    stuck
}

/// FINDING (pre-existing wait-log behaviour, not introduced by 769cad4/4fe4c8b; the test
/// fails at 769cad4^ too). Per round, on a pool stream `s` (`q = s.queue()`): a barrier on a
/// user event set failed (-5), reported by `s.query()`; thread X loops
/// `q.enqueue_barrier(&[&done])` (`done` a user event already complete); the main thread's
/// `s.synchronize()` returns `Ok`; X stops (joined); `s.query()` polled 5 s.
///
/// Expected: `Ok(true)` (a synchronize begun after the failure returned; X's barriers
/// completed). Observed: in most rounds `Err(.. -5)` for every query until another
/// synchronize: when the `clFinish` begins while X's enqueue call is in progress,
/// `WaitLog::before_finish` covers nothing (`in_flight > 0`), so the successful finish does
/// not drain the failed wait, and the new marker that 4fe4c8b's counter lets the query
/// enqueue reads it again and is kept. Control: the same with X's barriers on no wait list
/// never sticks ([`a_synchronize_racing_enqueues_without_wait_lists_clears_the_failure`]).
#[test]
fn a_synchronize_racing_another_threads_enqueues_clears_the_failure() {
    if !common::devices(1) {
        return;
    }
    let rounds = 10;
    let stuck = stuck_rounds_with_concurrent_enqueues(true, rounds);
    assert!(
        stuck.is_empty(),
        "rounds whose queries kept reporting the failure after a synchronize returned Ok: \
         {stuck:?} of {rounds}"
    );
}

/// Held (control of the finding above). The same rounds with X's barriers enqueued on no
/// wait list (not logged): the query answers `true` after every synchronize.
#[test]
fn a_synchronize_racing_enqueues_without_wait_lists_clears_the_failure() {
    if !common::devices(1) {
        return;
    }
    let rounds = 10;
    let stuck = stuck_rounds_with_concurrent_enqueues(false, rounds);
    assert!(stuck.is_empty(), "stuck rounds: {stuck:?} of {rounds}");
}

/// Held (a probe of a race in 4fe4c8b's ordering, not hit in 40 rounds): `CommandQueue::finish` raises the count of successful
/// finishes before it drains the wait log (`WaitLog::finished`). A query between the two reads
/// the raised count, asks with a new marker, reads the failure from the undrained log and
/// notes the raised count: the failure then stands until another synchronize. Per round (as
/// review h70's sequence): barriers behind `h`, `gf`; B's synchronize blocked behind `h`; a
/// query keeps a marker; `gf` fails; a query reports it; two pollers spin on `s.query()`
/// while `h` opens and B returns; then `s.query()` polled 5 s. Counts stuck rounds.
#[test]
fn pollers_racing_the_return_of_a_synchronize_that_covered_the_failure() {
    if !xpu_testing::needs_failures_ahead(
        "pollers_racing_the_return_of_a_synchronize_that_covered_the_failure",
    ) {
        return;
    }
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    let rounds = 40;
    let mut stuck = Vec::new();
    for round in 0..rounds {
        s.synchronize().unwrap();
        let (h, gf) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        drop(q.enqueue_barrier(&[&h]).unwrap());
        drop(q.enqueue_barrier(&[&gf]).unwrap());
        let b = blocked_synchronize(move || s.synchronize());
        let _ = s.query();
        gf.set_failed(-5).unwrap();
        assert!(xpu_testing::true_within(BOUND, || s.query().is_err()));
        let stop = Arc::new(AtomicBool::new(false));
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        let _ = s.query();
                    }
                })
            })
            .collect();
        h.set_complete().unwrap();
        let synced = b.join().unwrap();
        stop.store(true, SeqCst);
        for p in pollers {
            p.join().unwrap();
        }
        assert!(synced.is_ok(), "{synced:?}");
        let ok = xpu_testing::true_within(Duration::from_secs(5), || matches!(s.query(), Ok(true)));
        if !ok {
            stuck.push(round);
        }
        assert!(clean(&s));
    }
    assert!(
        stuck.is_empty(),
        "rounds stuck on the failure after the synchronize returned: {stuck:?} of {rounds}"
    );
}
