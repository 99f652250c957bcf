//! Queries of one stream on several threads share its kept marker: none enqueues a marker of
//! its own while the kept one is pending (found on an H100, 2026-12-06: two threads querying a
//! native stream without pause never saw `true` within 60 s once its gate opened, under the
//! suite's load). Before the fix a query took the kept marker out of its slot while it asked
//! the driver about it, and a query on another thread that found the slot empty enqueued a
//! fresh marker and kept it; NVIDIA reads a fresh marker pending for a while, so the slot kept
//! holding markers newer than the last one that had completed. PoCL completes them at once,
//! which hid it; the count of markers the querying threads enqueue shows it on any driver.
//! The order comes from a user event, never from sleeps.

mod common;

use std::time::Duration;

use xpu_device::backend::markers_enqueued_on_this_thread;
use xpu_stream::get_stream_from_pool;

/// Querying threads, and queries per thread.
const THREADS: usize = 4;
const QUERIES: usize = 2_000;

/// Runs `QUERIES` queries of `query` on each of `THREADS` threads at once; returns the
/// markers they enqueued, all threads together, and how many queries answered `true`.
fn on_threads(query: impl Fn() -> bool + Sync) -> (u64, usize) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    let before = markers_enqueued_on_this_thread();
                    let trues = (0..QUERIES).filter(|_| query()).count();
                    (markers_enqueued_on_this_thread() - before, trues)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |(m, t), (hm, ht)| (m + hm, t + ht))
    })
}

#[test]
fn queries_on_several_threads_enqueue_no_marker_while_the_kept_one_is_pending() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let gate = dev.create_user_event().unwrap();
    drop(s.queue().unwrap().enqueue_barrier(&[&gate]).unwrap());
    // The first query keeps a marker behind the gate.
    assert!(!s.query().unwrap());
    let (markers, trues) = on_threads(|| s.query().unwrap());
    assert_eq!(
        (markers, trues),
        (0, 0),
        "{THREADS} threads x {QUERIES} queries of a gated stream: markers enqueued, `true` \
         answers"
    );
    gate.set_complete().unwrap();
    assert!(
        xpu_testing::true_within(Duration::from_secs(60), || s.query().unwrap()),
        "the stream's query turns true once its gate opened"
    );
    // Idle now: every query answers `true` on the kept marker, and none enqueues another.
    let (markers, trues) = on_threads(|| s.query().unwrap());
    assert_eq!((markers, trues), (0, THREADS * QUERIES));
}
