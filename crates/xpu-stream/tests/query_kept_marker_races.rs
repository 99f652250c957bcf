//! `Stream::query`'s kept marker under racing queries: work enqueued through the queue's wrappers,
//! other threads or an external stream over a clone of the queue keeps the query `false` while
//! gated, `true` once idle.
//!
//! Review h48 (of 25874a8: `Stream::query` keeps its marker and, on a native stream, answers
//! `true` on it once it completed when nothing was enqueued through the queue's wrappers after
//! it). What was checked and holds: queries of one stream racing on two threads over the kept
//! marker's slot while gated work is enqueued on a third through `Stream::queue` (a
//! `QueueRef`), `Stream::enqueue_queue`, another thread joined before the query, or an
//! external stream registered over a clone of the native stream's queue; every query that
//! began after such an enqueue (happens-before) answers `false` while the gate is closed, and
//! the stream's query turns `true` once it opened. The order comes from user events and
//! atomics, never from sleeps.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use xpu_device::backend::ClEvent;
use xpu_stream::{get_stream_from_pool, ExternalStream, Stream};

const BOUND: Duration = Duration::from_secs(60);

/// Waits (yielding) until `done()` or [`BOUND`] passed; whether `done()` became true.
fn until(done: impl FnMut() -> bool) -> bool {
    xpu_testing::true_within(BOUND, done)
}

/// A barrier behind `gate` on `s`'s queue, by the route numbered `route` (mod 4): through
/// `Stream::queue` (a `QueueRef`), through `Stream::enqueue_queue`, from a scoped thread joined
/// before returning, or through an external stream over a clone of the stream's queue.
fn gated(s: &Stream, ext: &ExternalStream, gate: &ClEvent, route: u64) {
    match route % 4 {
        0 => drop(s.queue().unwrap().enqueue_barrier(&[gate]).unwrap()),
        1 => drop(
            s.enqueue_queue("review h48")
                .unwrap()
                .enqueue_barrier(&[gate])
                .unwrap(),
        ),
        2 => std::thread::scope(|t| {
            t.spawn(|| drop(s.queue().unwrap().enqueue_barrier(&[gate]).unwrap()));
        }),
        _ => drop(
            ext.stream()
                .enqueue_queue("review h48")
                .unwrap()
                .enqueue_barrier(&[gate])
                .unwrap(),
        ),
    }
}

/// Two threads query one native stream without pause (racing over the kept marker) while the
/// main thread, round after round, makes the stream idle and then gates it again. A query whose
/// thread read the round's number before the call and again after it began after the gated
/// barrier was enqueued and returned before the gate opened (the main thread clears the number
/// before opening it): it must answer `false`. After the gate opens, the stream's query turns
/// `true`.
#[test]
fn concurrent_queries_never_answer_true_over_gated_work_and_turn_true_when_idle() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let ext = ExternalStream::new((*s.queue().unwrap()).clone(), 0).unwrap();
    let closed = AtomicU64::new(0);
    let checked = [AtomicU64::new(0), AtomicU64::new(0)];
    let trues = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for mine in &checked {
            let (closed, trues, stop) = (&closed, &trues, &stop);
            scope.spawn(move || {
                while !stop.load(SeqCst) {
                    let before = closed.load(SeqCst);
                    let idle = s.query().unwrap();
                    let after = closed.load(SeqCst);
                    if before != 0 && before == after {
                        assert!(
                            !idle,
                            "a query begun after round {before}'s gated barrier answered true \
                             before its gate opened"
                        );
                        mine.fetch_add(1, SeqCst);
                    }
                    if idle {
                        trues.fetch_add(1, SeqCst);
                    }
                    std::thread::yield_now();
                }
            });
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for round in 1..=40u64 {
                let gate = dev.create_user_event().unwrap();
                gated(&s, &ext, &gate, round);
                assert!(
                    !s.query().unwrap(),
                    "round {round}: the enqueuing thread's query"
                );
                let seen = checked.each_ref().map(|c| c.load(SeqCst));
                closed.store(round, SeqCst);
                assert!(
                    until(|| checked
                        .iter()
                        .zip(seen)
                        .all(|(c, n)| c.load(SeqCst) >= n + 3)),
                    "round {round}: both threads queried behind the gate (or one panicked)"
                );
                closed.store(0, SeqCst);
                let before = trues.load(SeqCst);
                gate.set_complete().unwrap();
                assert!(
                    until(|| trues.load(SeqCst) > before),
                    "round {round}: the idle stream's query turned true within 60 s"
                );
            }
        }));
        stop.store(true, SeqCst);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    assert!(until(|| s.query().unwrap()), "idle at the end");
    assert!(s.query().unwrap(), "and stays so");
    s.synchronize().unwrap();
}

/// An external stream over a clone of a native stream's queue: work enqueued through it is
/// noted on the clones' shared state, so the native stream's kept marker does not answer for
/// it; and the external stream's own queries (fresh markers, not noted as work) do not make
/// the native stream's kept marker read busy forever.
#[test]
fn work_through_an_external_stream_over_a_native_queue_clone_is_seen_by_the_native_query() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let ext = ExternalStream::new((*s.queue().unwrap()).clone(), 0).unwrap();
    s.synchronize().unwrap();
    assert!(until(|| s.query().unwrap()), "native: idle");
    assert!(until(|| ext.stream().query().unwrap()), "external: idle");
    assert!(
        s.query().unwrap(),
        "native: the external queries' markers are no work"
    );
    let gate = dev.create_user_event().unwrap();
    gated(&s, &ext, &gate, 3);
    assert!(
        !s.query().unwrap(),
        "native: behind the external stream's gate"
    );
    assert!(!ext.stream().query().unwrap(), "external: behind its gate");
    gate.set_complete().unwrap();
    assert!(until(|| s.query().unwrap()), "native: idle again");
    assert!(
        until(|| ext.stream().query().unwrap()),
        "external: idle again"
    );
    s.synchronize().unwrap();
}
