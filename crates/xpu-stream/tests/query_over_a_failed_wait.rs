//! `Stream::query` over work queued before a failed wait never answers `true`; an external stream
//! dropped while another thread polls it; a pool stream handed out again shares its kept marker.
//!
//! Review h51: `Stream::query` as of f45bdfb and 71610c3 (queries on several threads share the
//! stream's kept marker through an `Arc`, replaced by compare-and-swap only once stale; a
//! native stream answers `true` on a completed kept marker when nothing was enqueued after it;
//! an external stream asks with a fresh marker), attacked with sequences of safe public calls.
//! PoCL on the CPU (`POCL_DEVICES="pthread pthread"`), a 2-core machine shared with other jobs,
//! debug build (`cargo test -p xpu-stream --test query_over_a_failed_wait`).
//!
//! Finding (a test that failed at b56c16c, fixed in 1c0926c: the query's marker is judged with
//! the waits enqueued before it, `IdleProbe::is_complete`, and the failure is reported):
//! `a_query_never_answers_true_over_work_queued_before_a_failed_wait`.
//! The query's marker is a plain marker (`CommandQueue::enqueue_idle_probe`), trusted as soon
//! as the driver reads it complete; PoCL completes a marker enqueued after a barrier whose wait
//! failed while the commands before that barrier stay queued (the `waits` module of
//! xpu-device documents it, and its ordered markers guard against it; the query's probe does
//! not). So the query answers `true` over pending work, raises the queue's watermark over it
//! (`QueueRef::is_known_complete` of an event recorded before reads `true`: `Event::query`
//! answers `true` without a driver call for a marker the driver reads `CL_QUEUED`), and keeps
//! answering `true` on its kept marker (nothing enqueued after it). It never reports the
//! failed barrier either (the documented "abnormal status of a command on the stream").
//!
//! What held (passing tests): an external stream dropped while another thread polls it (typed
//! `ExternalReleased`, no panic, live events and queues back to their counts); a pool stream
//! handed out again (the 33rd handle of a level) shares its kept marker with a query on
//! another thread (no marker enqueued while it is pending, `true` once idle).
//!
//! The order comes from user events, never from sleeps; hangs are bounded
//! (`xpu_testing::true_within`, `scenario_test`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use xpu_device::backend::{live_objects, markers_enqueued_on_this_thread, QueueOptions};
use xpu_stream::{get_stream_from_pool, ExternalStream, StreamError, PRIORITY_LOW};

const BOUND: Duration = Duration::from_secs(60);

/// FINDING (a query answers `true` over pending work). Sequence, per round, on one pool
/// stream `s` (`q = s.queue()`): `g1, g2 = create_user_event()`; `q.enqueue_barrier(&[&g1])`
/// (pending work); `m = q.enqueue_marker(&[])` and `sub = q.submission()` (what
/// `xpu_event::Event::record` does); `q.enqueue_barrier(&[&g2])`; `g2.set_failed(-5)`; then
/// up to 200 polls of `s.query()`, all before `g1` opens.
///
/// Expected: every poll answers `false` (the barrier behind `g1` and `m` are queued), or a
/// typed error for the failed barrier; `q.is_known_complete(sub)` stays false.
/// Observed (PoCL 3, debug): `Ok(true)` within the first polls in every round, with `m`
/// reading `Queued` and `is_known_complete(sub)` reading `true`; 20 of 20 rounds, in every
/// run (3 of 3).
#[test]
fn a_query_never_answers_true_over_work_queued_before_a_failed_wait() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    let rounds = 20;
    let (mut true_rounds, mut known_rounds, mut errors) = (0, 0, 0);
    let mut first = String::new();
    for round in 0..rounds {
        s.synchronize().unwrap();
        let (g1, g2) = (
            dev.create_user_event().unwrap(),
            dev.create_user_event().unwrap(),
        );
        drop(q.enqueue_barrier(&[&g1]).unwrap());
        let m = q.enqueue_marker(&[]).unwrap();
        let sub = q.submission();
        drop(q.enqueue_barrier(&[&g2]).unwrap());
        g2.set_failed(-5).unwrap();
        let (mut saw_true, mut known) = (false, false);
        for _ in 0..200 {
            match s.query() {
                Ok(true) => saw_true = true,
                Ok(false) => {}
                Err(_) => errors += 1,
            }
            known |= q.is_known_complete(sub);
            if saw_true {
                break;
            }
            std::thread::yield_now();
        }
        if saw_true && first.is_empty() {
            first = format!(
                "round {round}: query true while m reads {:?}, is_known_complete(sub) {}",
                m.status(),
                q.is_known_complete(sub)
            );
        }
        true_rounds += usize::from(saw_true);
        known_rounds += usize::from(known);
        g1.set_complete().unwrap();
        common::synchronize_after_failure(|| s.synchronize());
    }
    assert!(
        xpu_testing::true_within(BOUND, || s.query().unwrap()),
        "idle at the end"
    );
    assert_eq!(
        (true_rounds, known_rounds),
        (0, 0),
        "of {rounds} rounds (work behind an unset gate, then a barrier whose gate failed), \
         the query answered true before the gate opened in {true_rounds}, and the watermark \
         covered an event recorded behind the gate in {known_rounds} ({errors} typed errors); \
         first: {first}"
    );
}

/// Held. An external stream polled without pause on another thread (a gated barrier keeps its
/// query's marker pending in the slot) is dropped: the poller's next query reports
/// `ExternalReleased`, nothing panics, and once the gate opened and the queue drained, the
/// live events and queues are back to their counts. Run in a child process (live counts are
/// global).
#[test]
fn an_external_stream_dropped_while_another_thread_polls_it() {
    xpu_testing::scenario_test(
        "an_external_stream_dropped_while_another_thread_polls_it",
        "external-drop",
        BOUND,
        "scenario-ok",
        || {
            let dev = xpu_device::device(0).unwrap();
            let theirs = dev
                .create_queue(QueueOptions {
                    profiling: true,
                    priority: None,
                })
                .unwrap();
            theirs.finish().unwrap();
            let before = live_objects();
            for round in 0..20 {
                let ext = ExternalStream::new(theirs.clone(), 0).unwrap();
                let s = ext.stream();
                let g = dev.create_user_event().unwrap();
                drop(s.queue().unwrap().enqueue_barrier(&[&g]).unwrap());
                let polls = AtomicU64::new(0);
                let released = AtomicBool::new(false);
                std::thread::scope(|scope| {
                    let h = scope.spawn(|| loop {
                        match s.query() {
                            Ok(idle) => assert!(!idle, "round {round}: true behind the gate"),
                            Err(StreamError::ExternalReleased { .. }) => {
                                released.store(true, SeqCst);
                                return;
                            }
                            Err(e) => panic!("round {round}: {e:?}"),
                        }
                        polls.fetch_add(1, SeqCst);
                    });
                    assert!(xpu_testing::true_within(BOUND, || polls.load(SeqCst) > 3
                        || h.is_finished()));
                    drop(ext);
                    h.join().unwrap();
                });
                assert!(released.load(SeqCst));
                g.set_complete().unwrap();
                theirs.finish().unwrap();
            }
            xpu_device::backend::wait_for_callbacks();
            let after = live_objects();
            assert_eq!(
                (after.events, after.queues),
                (before.events, before.queues),
                "{before:?} -> {after:?}"
            );
            println!("scenario-ok");
        },
    );
}

/// Held. The 33rd stream of a level is the 1st again (round robin of 32): a query of it on
/// another thread shares the marker a query of the first handle kept behind a gate (no marker
/// enqueued, `false`), and answers `true` once the gate opened.
#[test]
fn a_pool_stream_handed_out_again_shares_its_kept_marker_across_threads() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let first = get_stream_from_pool(PRIORITY_LOW, 0).unwrap();
    let mut again = first;
    for _ in 0..32 {
        again = get_stream_from_pool(PRIORITY_LOW, 0).unwrap();
    }
    assert_eq!(first, again);
    let gate = dev.create_user_event().unwrap();
    drop(first.queue().unwrap().enqueue_barrier(&[&gate]).unwrap());
    assert!(!first.query().unwrap());
    let (markers, trues) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let before = markers_enqueued_on_this_thread();
                let trues = (0..500).filter(|_| again.query().unwrap()).count();
                (markers_enqueued_on_this_thread() - before, trues)
            })
            .join()
            .unwrap()
    });
    assert_eq!((markers, trues), (0, 0));
    gate.set_complete().unwrap();
    let idle = std::thread::scope(|scope| {
        scope
            .spawn(|| xpu_testing::true_within(BOUND, || again.query().unwrap()))
            .join()
            .unwrap()
    });
    assert!(idle);
    assert!(first.query().unwrap(), "idle on the kept marker");
}
