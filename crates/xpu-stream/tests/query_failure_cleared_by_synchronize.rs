//! A stream's kept failed query marker is cleared by a synchronize that returned after the failure
//! (also one begun before the query, device-wide, or through an external stream), and by nothing
//! else.
//!
//! Review h70: `Stream::query` keeping the marker that read a failed wait and answering every
//! later query with it, with no new command, until a `clFinish` begun after the marker
//! returned with success (769cad4: `IdleProbe::drained_by_finish`), attacked with sequences of
//! safe public calls. PoCL on the CPU (`POCL_DEVICES="pthread pthread"`), a 2-core machine
//! shared with other jobs, debug build (`cargo test -p xpu-stream --test query_failure_cleared_by_synchronize`).
//!
//! Finding (fails at 769cad4, fixed since: the kept marker notes the queue's count of
//! successful finishes when a query first sees it failed, and once a finish returned with
//! success since, whenever it began, a query asks again with a new marker;
//! `QueryMarker::failure_stands`, `IdleProbe::successful_finishes`):
//! `a_synchronize_that_returned_after_the_failure_clears_it_even_if_it_began_before_the_query`.
//! A `synchronize` that began before the query's marker was enqueued (blocked behind a gate)
//! and returned with success after the failure was read does not count: the kept failed
//! marker answers every later query with the failure, with no command queued on the stream,
//! until another `synchronize`. The contract (`Stream::query`: "every query reports it until a
//! `synchronize` of the stream returned") promises queries work again once one returned.
//! Before 769cad4 the query after such a failure asked with a new marker, judged with the
//! waits since the last successful `clFinish`, and answered `true` (the test passes at
//! 769cad4^, 3 of 3 runs; fails at 769cad4, 5 of 5). The docs promise what the old code did
//! ("The marker that read the failure is kept and answers every query with it until then",
//! i.e. until a `synchronize` returned); the code waits for a `clFinish` numbered after the
//! marker's enqueue. (Also in the docs: `QueryMarker::is_complete`'s "# Errors ... unless
//! such a `clFinish` returned: the failure then still stands" reads inverted.)
//!
//! What held (passing tests): see each test's doc.
//!
//! The order comes from user events, never from sleeps. One test must know that a thread is
//! blocked inside `synchronize` (`clFinish`) before the main thread goes on: it reads the
//! thread's state in `/proc` (sleeping in a `futex` wait), bounded; nothing there waits for
//! time to pass. Hangs are bounded (`xpu_testing::true_within`, joins after the gates open).

mod common;

use common::{blocked_synchronize, failed_pool_stream_of, BOUND};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use xpu_device::backend::{markers_enqueued_on_this_thread, QueueOptions};
use xpu_stream::{get_stream_from_pool, ExternalStream, Stream, StreamError};

/// [`failed_pool_stream_of`] device 0 (device 1 is left to the device-wide synchronize's
/// test, which would otherwise clear the failures of the tests running beside it).
fn failed_pool_stream() -> Stream {
    failed_pool_stream_of(0)
}

/// FINDING. On one pool stream `s` (`q = s.queue()`), synchronized: `h`, `gf` user events;
/// `q.enqueue_barrier(&[&h])`; `q.enqueue_barrier(&[&gf])`; thread B calls `s.synchronize()`
/// (blocks behind `h`; the main thread goes on once B sleeps in `clFinish`); `s.query()`
/// (its marker, enqueued after B's `clFinish` began, is queued behind `gf`: `Ok(false)`,
/// kept); `gf.set_failed(-5)` (PoCL fails the commands queued behind the failed barrier: the
/// kept marker reads `Error(-1)`), and a query reports it; `h.set_complete()`; B's
/// `synchronize` returns `Ok` (PoCL); then `s.query()`, polled for 10 s.
///
/// Expected: `Ok(true)` within the bound (a synchronize of the stream returned after the
/// failure, and nothing was enqueued since: "every query reports it until a `synchronize`
/// of the stream returned"; a new marker after it reads complete at once, as before
/// 769cad4, which dropped the failed marker and asked again).
/// Observed at 769cad4: `Err(OpenCl(ClError { function: "command execution", code: -1 }))`
/// for every query, with no marker enqueued, until another `synchronize` (5 of 5 runs). The
/// kept marker counts only a `clFinish` numbered after its enqueue
/// (`IdleProbe::drained_by_finish`), B's began before it, and its own driver status is
/// `Error(-1)` for ever.
#[test]
fn a_synchronize_that_returned_after_the_failure_clears_it_even_if_it_began_before_the_query() {
    if !xpu_testing::needs_failures_ahead(
        "a_synchronize_that_returned_after_the_failure_clears_it_even_if_it_began_before_the_query",
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
    assert!(
        xpu_testing::true_within(BOUND, || s.query().is_err()),
        "the failure is reported"
    );
    assert!(!b.is_finished(), "B's synchronize waits for h");
    h.set_complete().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "PoCL's clFinish succeeds: {synced:?}");
    // B's synchronize returned with success, after the failure: queries work again.
    let before = markers_enqueued_on_this_thread();
    let mut last = None;
    let worked = xpu_testing::true_within(Duration::from_secs(10), || {
        let r = s.query();
        let ok = matches!(r, Ok(true));
        last = Some(r);
        ok
    });
    let markers = markers_enqueued_on_this_thread() - before;
    // Leave the stream usable for others: a second synchronize clears the kept marker.
    common::synchronize_after_failure(|| s.synchronize());
    let cleared = xpu_testing::true_within(BOUND, || s.query().unwrap_or(false));
    assert!(
        worked,
        "after a synchronize that returned Ok after the failure, queries kept answering \
         {last:?} for 10 s ({markers} markers enqueued by them); a second synchronize \
         cleared it: {cleared}"
    );
}

/// Held. After a failure and a query that reported it, 100 queries report it with no marker;
/// the device-wide `xpu_stream::synchronize(1)` (each pool queue's `clFinish`; device 1, so
/// that it does not clear the failures of the tests running beside it) clears it: the
/// stream answers `true` within the bound, and once it did, 100 more queries answer `true`
/// with no marker enqueued (the idle stream's answer on the kept marker).
#[test]
fn a_device_wide_synchronize_clears_a_kept_failure() {
    if !common::devices(2) {
        return;
    }
    let s = failed_pool_stream_of(1);
    let m0 = markers_enqueued_on_this_thread();
    for i in 0..100 {
        assert!(s.query().is_err(), "query {i} while the failure stands");
    }
    assert_eq!(markers_enqueued_on_this_thread() - m0, 0);
    common::synchronize_after_failure(|| xpu_stream::synchronize(1));
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
    let m1 = markers_enqueued_on_this_thread();
    for i in 0..100 {
        assert!(s.query().unwrap(), "query {i} of the idle stream");
    }
    assert_eq!(
        markers_enqueued_on_this_thread() - m1,
        0,
        "markers enqueued by an idle stream's queries after the failure cleared"
    );
}

/// Held. A failure kept by a pool stream's query; an external stream over a wrapper of the
/// stream's raw queue (`rewrapped`, as other code wrapping `Stream::as_raw` makes one)
/// reports it too; its `synchronize` clears it for both: the pool stream answers `true`
/// with its kept marker (no new one), and so does the external stream.
#[test]
fn a_synchronize_through_an_external_stream_over_the_raw_queue_clears_the_pool_streams_failure() {
    if !common::devices(1) {
        return;
    }
    let s = failed_pool_stream();
    let q = s.queue().unwrap();
    let ext = ExternalStream::new(q.rewrapped().unwrap(), 0).unwrap();
    let es = ext.stream();
    assert!(
        xpu_testing::true_within(BOUND, || es.query().is_err()),
        "the external stream sees the shared failure"
    );
    for _ in 0..20 {
        assert!(s.query().is_err());
    }
    common::synchronize_after_failure(|| es.synchronize());
    let m0 = markers_enqueued_on_this_thread();
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
    assert_eq!(
        markers_enqueued_on_this_thread() - m0,
        0,
        "the pool stream's kept marker answers after the external synchronize"
    );
    assert!(xpu_testing::true_within(BOUND, || es
        .query()
        .unwrap_or(false)));
}

/// Held. An `Event`-level wait (`ClEvent::wait` on a marker enqueued after the failure) is
/// not a stream synchronize: the queries keep reporting the failure (the contract names
/// `Stream::synchronize` only), with no marker; the stream's `synchronize` then clears it.
#[test]
fn an_event_wait_is_not_a_synchronize_and_a_stream_synchronize_then_clears() {
    if !common::devices(1) {
        return;
    }
    let s = failed_pool_stream();
    let q = s.queue().unwrap();
    let m = q.enqueue_marker(&[]).unwrap();
    let _ = m.wait();
    let m0 = markers_enqueued_on_this_thread();
    for i in 0..50 {
        assert!(s.query().is_err(), "query {i} after an event wait");
    }
    assert_eq!(markers_enqueued_on_this_thread() - m0, 0);
    common::synchronize_after_failure(|| s.synchronize());
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
}

/// Held. An external stream over a queue held by "other code" (`foreign_reference`) reports a
/// failed wait and keeps it; the external stream is dropped with the last wrapper (the
/// queue's state is kept: its wait log holds the failure); a new external stream over the
/// raw handle reports the failure (no synchronize returned), and its `synchronize` clears
/// it: `true` within the bound, then no marker per query.
#[test]
fn dropping_every_wrapper_neither_clears_nor_pins_the_failure() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let q = dev.create_queue(QueueOptions::default()).unwrap();
    let foreign = q.foreign_reference().unwrap();
    let ext = ExternalStream::new(q, 0).unwrap();
    let es = ext.stream();
    es.synchronize().unwrap();
    let g = dev.create_user_event().unwrap();
    drop(es.queue().unwrap().enqueue_barrier(&[&g]).unwrap());
    g.set_failed(-5).unwrap();
    assert!(xpu_testing::true_within(BOUND, || es.query().is_err()));
    drop(ext);
    assert!(matches!(
        es.query(),
        Err(StreamError::ExternalReleased { .. })
    ));
    let ext2 = ExternalStream::new(foreign.wrap().unwrap(), 0).unwrap();
    let es2 = ext2.stream();
    assert!(
        xpu_testing::true_within(BOUND, || es2.query().is_err()),
        "the failure still stands for a new wrapper"
    );
    let m0 = markers_enqueued_on_this_thread();
    for _ in 0..20 {
        assert!(es2.query().is_err());
    }
    assert_eq!(markers_enqueued_on_this_thread() - m0, 0);
    common::synchronize_after_failure(|| es2.synchronize());
    assert!(xpu_testing::true_within(BOUND, || es2
        .query()
        .unwrap_or(false)));
    let m1 = markers_enqueued_on_this_thread();
    for _ in 0..20 {
        assert!(es2.query().unwrap());
    }
    assert_eq!(markers_enqueued_on_this_thread() - m1, 0);
}

/// Held. A kept failed marker, then a barrier behind `h2` enqueued after it; thread B's
/// `synchronize` begins (blocked behind `h2`); a barrier behind `h3` is enqueued after B's
/// `clFinish` began; `h2` opens. While `h3` is unset no query answers `true` (whether or
/// not B returned: PoCL's `clFinish` waits for `h3` too); `h3` opens, B returns, and the
/// stream answers `true` within the bound.
#[test]
fn a_kept_failed_marker_and_a_synchronize_racing_new_work_never_answer_true_early() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = failed_pool_stream();
    let q = s.queue().unwrap();
    let (h2, h3) = (
        dev.create_user_event().unwrap(),
        dev.create_user_event().unwrap(),
    );
    drop(q.enqueue_barrier(&[&h2]).unwrap());
    let b = blocked_synchronize(move || s.synchronize());
    drop(q.enqueue_barrier(&[&h3]).unwrap());
    h2.set_complete().unwrap();
    for i in 0..200 {
        assert!(
            !matches!(s.query(), Ok(true)),
            "query {i}: true while h3 is unset"
        );
    }
    h3.set_complete().unwrap();
    let _ = b.join().unwrap();
    common::synchronize_after_failure(|| s.synchronize());
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
}

/// Held. Four pollers on a stream whose failure a query kept: each reports the failure with
/// no marker; the main thread synchronizes (once or more, bounded) while they poll; every
/// poller then sees `true` within the bound, none before the synchronize returned, and
/// none enqueued a marker (the kept marker answers after the synchronize: nothing was
/// enqueued after it). Three rounds.
#[test]
fn pollers_racing_synchronizes_on_a_kept_failure() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    for round in 0..3 {
        s.synchronize().unwrap();
        let g = dev.create_user_event().unwrap();
        drop(q.enqueue_barrier(&[&g]).unwrap());
        g.set_failed(-5).unwrap();
        assert!(xpu_testing::true_within(BOUND, || s.query().is_err()));
        let synced = Arc::new(AtomicBool::new(false));
        let early = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let pollers: Vec<_> = (0..4)
            .map(|_| {
                let (synced, early, started) = (synced.clone(), early.clone(), started.clone());
                std::thread::spawn(move || {
                    let m0 = markers_enqueued_on_this_thread();
                    let mut first = true;
                    let saw = xpu_testing::true_within(BOUND, || {
                        let was_synced = synced.load(SeqCst);
                        let r = s.query();
                        if first {
                            first = false;
                            started.fetch_add(1, SeqCst);
                        }
                        if matches!(r, Ok(true)) && !was_synced && !synced.load(SeqCst) {
                            early.fetch_add(1, SeqCst);
                        }
                        matches!(r, Ok(true)) && was_synced
                    });
                    (saw, markers_enqueued_on_this_thread() - m0)
                })
            })
            .collect();
        assert!(xpu_testing::true_within(BOUND, || started.load(SeqCst) == 4));
        // Set before the synchronize begins: a `true` read back while it is unset answered
        // before any synchronize began.
        synced.store(true, SeqCst);
        common::synchronize_after_failure(|| s.synchronize());
        for p in pollers {
            let (saw, markers) = p.join().unwrap();
            assert!(saw, "round {round}: a poller never saw true");
            assert_eq!(markers, 0, "round {round}: markers enqueued by a poller");
        }
        assert_eq!(
            early.load(SeqCst),
            0,
            "round {round}: true before the synchronize"
        );
    }
}

/// Held. An idle external stream over a queue the runtime made, after a failure and a
/// synchronize: its polling loop ends `true` and 100 polls enqueue no marker; work after it
/// is asked about with a new marker, and a failure after that is reported again and kept
/// (no marker per query) until the next synchronize.
#[test]
fn an_idle_external_streams_polling_loop_after_a_cleared_failure() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let q = dev.create_queue(QueueOptions::default()).unwrap();
    let ext = ExternalStream::new(q, 0).unwrap();
    let s = ext.stream();
    let queue = s.queue().unwrap();
    for round in 0..2 {
        let g = dev.create_user_event().unwrap();
        drop(queue.enqueue_barrier(&[&g]).unwrap());
        g.set_failed(-5).unwrap();
        assert!(
            xpu_testing::true_within(BOUND, || s.query().is_err()),
            "round {round}: the failure is reported"
        );
        let m0 = markers_enqueued_on_this_thread();
        for _ in 0..50 {
            assert!(s.query().is_err());
        }
        assert_eq!(markers_enqueued_on_this_thread() - m0, 0);
        common::synchronize_after_failure(|| s.synchronize());
        assert!(xpu_testing::true_within(BOUND, || s
            .query()
            .unwrap_or(false)));
        let m1 = markers_enqueued_on_this_thread();
        for _ in 0..100 {
            assert!(
                s.query().unwrap(),
                "round {round}: an idle stream answered false"
            );
        }
        assert_eq!(markers_enqueued_on_this_thread() - m1, 0);
        // Work after it: asked about with a new marker, answered once complete.
        let gate = dev.create_user_event().unwrap();
        drop(queue.enqueue_marker(&[&gate]).unwrap());
        assert!(
            !s.query().unwrap(),
            "round {round}: pending behind the gate"
        );
        gate.set_complete().unwrap();
        assert!(xpu_testing::true_within(BOUND, || s
            .query()
            .unwrap_or(false)));
    }
}
