//! Review h82 (of 1c9e15f, `Stream::query` answering `true` with no driver call on a queue
//! "known idle": nothing noted as enqueued through its wrappers since a successful
//! `clFinish`). Its findings, tests that failed 8 of 8 runs on the reviewed code (the first
//! a regression of 1c9e15f, the second older) and pass since the call is a raw-enqueue scope
//! (`CommandQueue::raw_enqueue_scope`: no query takes the queue for idle while it runs).
//!
//! The review's library enqueued a gated barrier on the raw queue through raw OpenCL (looked
//! up with `dlsym`), and the query answered `true` over it. Only xpu-device may hold FFI
//! (`cargo xtask check-layers`), so the tests here show the same defect without a raw
//! command: a query on another thread during a foreign call must ask the driver (enqueue a
//! marker after whatever the library enqueued so far), not answer from what the runtime
//! noted: before the fix it enqueued none and answered from the idle knowledge or the kept
//! marker, as it did over the review's gated barrier. The runtime noted the library's
//! commands (`CommandQueue::note_raw_enqueue`) only once the library's function returned.
//!
//! Order comes from a user event (a gate) and channels, never from sleeps.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

use std::sync::mpsc;

use xpu_device::backend::markers_enqueued_on_this_thread;
use xpu_kernel::{ForeignExt, ForeignQueue};
use xpu_stream::ExternalStream;

/// The scenario of both tests: `s` (an external stream over a fresh queue) synchronized,
/// then, when `poll_first`, polled until its query answered `true` (keeping the query's
/// marker); a foreign call on thread A that, before returning, waits for the main thread,
/// which asks `Stream::query` then. Returns how many markers that query enqueued (0: it
/// answered from what the runtime noted, without asking the driver).
fn markers_of_a_query_during_a_foreign_call(poll_first: bool) -> u64 {
    let ext = ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
    let s = ext.stream();
    s.synchronize().unwrap();
    if poll_first {
        assert!(
            xpu_testing::true_within(std::time::Duration::from_secs(10), || s.query().unwrap()),
            "the synchronized stream's query turns true"
        );
    }
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let library = std::thread::spawn(move || {
        let f = move |_q: &ForeignQueue<'_>| {
            // The library's commands would be enqueued here, on the raw queue.
            entered_tx.send(()).unwrap();
            // More of the library's host work: it returns once the main thread asked.
            go_rx.recv().unwrap();
            Ok(None)
        };
        // SAFETY: `f` enqueues nothing, uses no region and keeps no handle.
        let event = unsafe { s.foreign().call(f) }.unwrap();
        drop(event);
    });
    entered_rx.recv().unwrap();
    let before = markers_enqueued_on_this_thread();
    let answer = s.query();
    let asked = markers_enqueued_on_this_thread() - before;
    go_tx.send(()).unwrap();
    library.join().unwrap();
    assert!(answer.is_ok(), "{answer:?}");
    s.synchronize().unwrap();
    asked
}

/// FINDING (1c9e15f). A stream synchronized (so "known idle"; no query asked yet), then a
/// foreign library call (`ForeignCall::call`) on thread A, still running; meanwhile the main
/// thread asks `Stream::query`.
///
/// Expected: the query asks the driver (one marker, after whatever the library enqueued so
/// far): the library may have enqueued commands on the raw queue that the runtime has not
/// noted yet. The review's version enqueued a gated barrier there and the query answered
/// `true` over it (8 of 8), from `q.idle_since_finish()` (crates/xpu-stream/src/stream.rs),
/// since `ForeignCall::call` noted the library's commands only after its function returned.
/// Rule: a query never answers `true` while a command enqueued before it began may be queued.
#[test]
fn a_query_during_a_foreign_call_does_not_answer_true_over_the_calls_queued_barrier() {
    if !xpu_testing::devices(1) {
        return;
    }
    assert_eq!(
        markers_of_a_query_during_a_foreign_call(false),
        1,
        "Stream::query during a foreign call answered from the runtime's idle knowledge \
         without asking the driver"
    );
}

/// FINDING (the same window, older than 1c9e15f). As above, but the stream's query was polled
/// to `true` before the foreign call (a kept marker, complete). Expected: the query asks the
/// driver with a new marker; it answered `true` from the kept marker, since nothing was noted
/// after it (`CommandQueue::enqueued_since`) while the library call was still running.
#[test]
fn a_query_with_a_kept_marker_during_a_foreign_call_does_not_answer_true() {
    if !xpu_testing::devices(1) {
        return;
    }
    assert_eq!(
        markers_of_a_query_during_a_foreign_call(true),
        1,
        "Stream::query during a foreign call answered from its kept marker without asking \
         the driver"
    );
}
