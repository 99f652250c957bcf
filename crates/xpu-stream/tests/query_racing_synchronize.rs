//! `Stream::query` racing a `synchronize` (stream or device-wide): a query's kept marker is never
//! answered `true` early nor marked by a synchronize that began before it.
//!
//! Review h53 (stream part): `Stream::query` after 6726340 (a query's kept marker read by
//! `TrackedQueue::finish` before its `clFinish` is known complete once it returned,
//! `QueryMarker::finished`; a kept marker that reads a failure is asked about again with a
//! new marker), attacked with sequences of safe public calls. PoCL on the CPU
//! (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with other jobs, debug build
//! (`cargo test -p xpu-stream --test query_racing_synchronize`).
//!
//! No finding: the marker is read from the slot before the `clFinish` begins, and a query
//! stores a marker only after its enqueue returned, so a marker marked `finished` was always
//! enqueued before the `clFinish` that covers it; a failed `clFinish` returns before marking.
//! What held (passing tests): see each test's doc.
//!
//! The order comes from user events, never from sleeps; hangs are bounded
//! (`xpu_testing::true_within`, `recv_timeout`).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::QueueOptions;
use xpu_stream::{get_stream_from_pool, synchronize, ExternalStream, Stream, StreamError};

const BOUND: Duration = Duration::from_secs(60);

/// `query`, with every error required to be typed as an OpenCL one.
fn query(s: &Stream) -> Result<bool, StreamError> {
    let r = s.query();
    if let Err(e) = &r {
        assert!(matches!(e, StreamError::OpenCl(_)), "untyped error {e:?}");
    }
    r
}

/// The sequence of [`a_query_racing_a_synchronize_never_answers_true_early`] and
/// [`a_failure_then_a_device_synchronize_leaves_queries_clean`] on `s`.
fn race_then_failure(s: Stream, device_wide: bool) {
    let dev = xpu_device::device(0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();

    // A gate; a recorded point behind it; the query keeps a marker behind it.
    let g = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&g]).unwrap());
    drop(q.enqueue_marker(&[]).unwrap());
    let sub = q.submission();
    assert!(!query(&s).unwrap(), "pending behind the gate");
    // Another thread synchronizes (blocked on the gate) while this one polls.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = if device_wide {
            synchronize(0)
        } else {
            s.synchronize()
        };
        let _ = tx.send(r);
    });
    for i in 0..200 {
        assert!(
            !query(&s).unwrap(),
            "poll {i}: true while the gate is closed"
        );
        assert!(!q.is_known_complete(sub), "poll {i}: known complete");
    }
    g.set_complete().unwrap();
    let synced = rx.recv_timeout(BOUND).expect("the synchronize returned");
    assert!(synced.is_ok(), "{synced:?}");
    assert!(q.is_known_complete(sub), "after the synchronize");
    assert!(xpu_testing::true_within(BOUND, || query(&s).unwrap()));

    // A failure, then a (device-wide) synchronize: the next queries answer without error.
    let gf = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&gf]).unwrap());
    drop(q.enqueue_marker(&[]).unwrap());
    let sub = q.submission();
    assert!(!query(&s).unwrap(), "pending behind the failing gate");
    gf.set_failed(-5).unwrap();
    if device_wide {
        common::synchronize_after_failure(|| synchronize(0));
    } else {
        common::synchronize_after_failure(|| s.synchronize());
    }
    assert!(q.is_known_complete(sub));
    let first = query(&s);
    assert!(
        first.is_ok(),
        "the first query after the synchronize: {first:?}"
    );
    assert!(xpu_testing::true_within(BOUND, || query(&s).unwrap()));
}

/// Held. On a pool stream `s`: a barrier behind a closed gate `g`, a marker recorded
/// (`submission`), `s.query()` (`false`, its marker kept); another thread calls
/// `s.synchronize()` (blocked on `g`) while this one polls 200 times: every poll answers
/// `false` and the recorded point is not known complete. `g` opens: the synchronize returns
/// `Ok`, the point is known complete, a query answers `true` within the bound. Then a barrier
/// behind `gf`, a recorded point, a query (`false`), `gf.set_failed(-5)`, `s.synchronize()`:
/// the point is known complete and the next query answers without error (`true` within the
/// bound); every error met is a typed `OpenCl` one.
#[test]
fn a_query_racing_a_synchronize_never_answers_true_early() {
    if !common::devices(1) {
        return;
    }
    race_then_failure(get_stream_from_pool(0, 0).unwrap(), false);
}

/// Held. As [`a_query_racing_a_synchronize_never_answers_true_early`] with the device-wide
/// `xpu_stream::synchronize(0)` in place of the stream's, on an external stream (its own
/// queue: the device-wide synchronize finishes registered external streams too, and its
/// queries ask with a new marker once the kept one completed).
#[test]
fn a_failure_then_a_device_synchronize_leaves_queries_clean() {
    if !common::devices(1) {
        return;
    }
    let queue = xpu_device::device(0)
        .unwrap()
        .create_queue(QueueOptions::default())
        .unwrap();
    let ext = ExternalStream::new(queue, 0).unwrap();
    race_then_failure(ext.stream(), true);
    drop(ext);
}

/// Held. A kept marker is not marked by a synchronize that began before it: on a pool stream,
/// a barrier behind `g1`; another thread's `s.synchronize()` (blocked on `g1`); then a barrier
/// behind `g2` and a recorded point, and polls: `false` while `g2` is closed, also after `g1`
/// opened and the synchronize returned `Ok` (its `clFinish` was called before the marker, or
/// waited for it: neither marks it known complete while `g2` is closed).
#[test]
fn a_synchronize_that_began_before_a_query_does_not_mark_its_marker() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    s.synchronize().unwrap();
    let g1 = dev.create_user_event().unwrap();
    let g2 = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&g1]).unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.synchronize());
    });
    drop(q.enqueue_barrier(&[&g2]).unwrap());
    drop(q.enqueue_marker(&[]).unwrap());
    let sub = q.submission();
    assert!(!query(&s).unwrap());
    g1.set_complete().unwrap();
    // The synchronize may cover g2's barrier (its clFinish began after it): then it returns
    // only once g2 opens, below.
    let early = rx.recv_timeout(Duration::from_millis(0)).ok();
    for i in 0..100 {
        assert!(!query(&s).unwrap(), "poll {i}: true while g2 is closed");
    }
    assert!(!q.is_known_complete(sub));
    g2.set_complete().unwrap();
    let synced = match early {
        Some(r) => r,
        None => rx.recv_timeout(BOUND).expect("the synchronize returned"),
    };
    assert!(synced.is_ok(), "{synced:?}");
    assert!(xpu_testing::true_within(BOUND, || query(&s).unwrap()));
    assert!(q.is_known_complete(sub));
}
