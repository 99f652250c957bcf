//! A stream's queries after a failed wait ask the driver with no new command while the failure
//! stands. Found on an NVIDIA H200 (2026-12-06, 22:51 UTC): threads polling `Stream::query`
//! after a failure each enqueued a new query marker, each of which failed behind the failed
//! barrier, and NVIDIA's `clFinish` reports a failure once per batch of commands failed since
//! the last finish, so `Stream::synchronize` returned -5 21 times in a row (review h52's
//! pollers). The failure is reported until a synchronize of the stream returned with success
//! (`Stream::query`'s contract), so the failed marker answers every query until then: PoCL
//! shows the count of markers, which NVIDIA's `clFinish` turns into failures.
//!
//! The order comes from user events, never from sleeps.

mod common;

use common::BOUND;

use std::sync::Arc;

use xpu_device::backend::markers_enqueued_on_this_thread;

/// A pool stream whose queue holds a barrier on a user event set failed (-5), and a query
/// that reported that failure.
fn failed_stream() -> xpu_stream::Stream {
    common::failed_pool_stream_of(0)
}

/// After a query reported a failed wait, 200 more queries on this thread report it too and
/// enqueue no marker; once a synchronize returned, the stream answers `true` again.
/// Before the fix each of the 200 enqueued one (200 markers).
#[test]
fn queries_after_a_failure_enqueue_nothing() {
    if !common::devices(1) {
        return;
    }
    let s = failed_stream();
    let before = markers_enqueued_on_this_thread();
    for i in 0..200 {
        assert!(s.query().is_err(), "query {i} after the failure reports it");
    }
    assert_eq!(
        markers_enqueued_on_this_thread() - before,
        0,
        "markers enqueued by 200 queries while the failure stood"
    );
    common::synchronize_after_failure(|| s.synchronize());
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
    // Work after the synchronize is asked about again (with a new marker), and completes.
    let before = markers_enqueued_on_this_thread();
    let q = s.queue().unwrap();
    drop(q.enqueue_marker(&[]).unwrap());
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
    assert!(markers_enqueued_on_this_thread() - before >= 2);
}

/// Four threads poll the failed stream 500 times each: none enqueues a marker, and the
/// main thread's synchronize then returns within one retry (NVIDIA's one report of the
/// failure), then the stream answers `true`.
#[test]
fn pollers_after_a_failure_enqueue_nothing() {
    if !common::devices(1) {
        return;
    }
    let s = Arc::new(failed_stream());
    let pollers: Vec<_> = (0..4)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let before = markers_enqueued_on_this_thread();
                let mut errors = 0;
                for _ in 0..500 {
                    if s.query().is_err() {
                        errors += 1;
                    }
                }
                (errors, markers_enqueued_on_this_thread() - before)
            })
        })
        .collect();
    for p in pollers {
        let (errors, markers) = p.join().unwrap();
        assert_eq!(errors, 500, "every poll reports the standing failure");
        assert_eq!(markers, 0, "markers enqueued by one poller's 500 queries");
    }
    let first = s.synchronize();
    if first.is_err() {
        s.synchronize().unwrap();
    }
    assert!(xpu_testing::true_within(BOUND, || s
        .query()
        .unwrap_or(false)));
}
