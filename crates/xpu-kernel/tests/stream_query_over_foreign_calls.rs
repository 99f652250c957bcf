//! `Stream::query` around foreign calls (a library's commands enqueued on a stream's raw
//! queue through `ForeignCall::call`, CLBlast's SGEMM among them): a query made during or
//! right after such a call asks the driver instead of answering `true` from what the runtime
//! noted (its idle knowledge or a kept marker) while the library's commands may still be
//! queued or running.
//!
//! Merged from two reviews' files (review h48: a query after a CLBlast SGEMM; review h82: a
//! query during a foreign call), each section below as it was in its file.
//!
//! ## From `review_h48.rs`
//!
//! Review h48 (of 25874a8: `Stream::query` answers `true` on the marker an earlier query kept
//! once it completed, when nothing was noted as enqueued through the queue's wrappers after
//! it): the commands a foreign library enqueues through the safe [`clblast_sgemm`] (on the
//! native stream's raw queue, its event adopted by `ForeignCall::call`) are never noted, so a
//! query of an idle native stream right after the call answers `true` on the old marker while
//! the SGEMM is still queued or running. Skipped without a device or CLBlast.
//!
//! ## From `review_h82.rs`
//!
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
use xpu_device::foreign::clblast::Clblast;
use xpu_kernel::{
    clblast_sgemm, ClRegion, ForeignExt, ForeignQueue, RowMajorSgemm, StreamMemoryExt, TempBuffer,
};
use xpu_stream::ExternalStream;

// ---- Formerly review_h48.rs ----

/// Polls `s.query()` until it answers `true`, for up to 60 s.
fn query_until_true(s: &xpu_stream::Stream) -> bool {
    xpu_testing::true_within(std::time::Duration::from_secs(60), || s.query().unwrap())
}

/// `Stream::query() == true` means every command submitted to the stream before the call
/// completed: the SGEMM's adopted event, read after such a `true`, must read complete too.
/// The SGEMM (1024^3, seconds on a CPU device) is long enough that it is still pending when
/// the query runs; the assertion itself needs no timing: an event that reads pending after the
/// query returned was pending during the whole query.
#[test]
fn a_query_after_a_clblast_sgemm_on_an_idle_native_stream_does_not_answer_true_early() {
    if !xpu_testing::devices(1) || Clblast::get().is_err() {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let n = 1024;
    let a = s.htod_copy(&vec![1.0f32; n * n]).unwrap();
    let b = s.htod_copy(&vec![0.5f32; n * n]).unwrap();
    let mut c = s.htod_copy(&vec![0.0f32; n * n]).unwrap();
    let (ra, rb) = (ClRegion::new(&a).unwrap(), ClRegion::new(&b).unwrap());
    let rc = ClRegion::new_mut(&mut c).unwrap();
    let g = RowMajorSgemm::new((n, n, n), &ra, &rb, &rc);

    // A first SGEMM, waited for (CLBlast builds its kernels on first use).
    clblast_sgemm(&s, &g, TempBuffer::AsNeeded)
        .unwrap()
        .event
        .synchronize()
        .unwrap();
    s.synchronize().unwrap();
    // The stream is idle: its query turns true (and keeps its marker).
    assert!(query_until_true(&s), "the idle stream's query turns true");

    let done = clblast_sgemm(&s, &g, TempBuffer::AsNeeded).unwrap();
    let stream_idle = s.query().unwrap();
    let sgemm_complete = done.event.query().unwrap();
    assert!(
        !stream_idle || sgemm_complete,
        "Stream::query() answered true while the SGEMM enqueued on the stream before the query \
         (clblast_sgemm, workspace {} bytes) was still pending",
        done.workspace_bytes
    );
    done.event.synchronize().unwrap();
    s.synchronize().unwrap();
    let got = c.to_vec(&s).unwrap();
    assert!(got.iter().all(|&x| x == 0.5 * n as f32), "C = A . B");
}

// ---- Formerly review_h82.rs ----

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
