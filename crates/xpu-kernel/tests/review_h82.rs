//! Review h82 (of 1c9e15f, `Stream::query` answering `true` with no driver call on a queue
//! "known idle": nothing noted as enqueued through its wrappers since a successful
//! `clFinish`). Its findings, tests that failed 8 of 8 runs on the reviewed code (the first
//! a regression of 1c9e15f, the second older) and pass since the call is a raw-enqueue scope
//! (`CommandQueue::raw_enqueue_scope`: no query takes the queue for idle while it runs).
//!
//! The foreign library here is raw OpenCL as a C library calls it: `clEnqueueBarrierWithWaitList`
//! looked up with `dlsym` in the ICD loader (`libOpenCL.so.1`), on the raw queue that
//! `ForeignCall::call` hands it, with no wrapper of the runtime in between (a wrapper made
//! with `CommandQueue::from_raw_borrowed` shares the queue's state and notes its commands at
//! once, which a real library such as CLBlast never does). The runtime notes the library's
//! commands (`CommandQueue::note_raw_enqueue`) only once the library's function returned.
//!
//! Order comes from a user event (a gate) and channels, never from sleeps.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::mpsc;

use xpu_device::backend::raw;
use xpu_kernel::{ForeignExt, ForeignQueue};
use xpu_stream::ExternalStream;

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `clEnqueueBarrierWithWaitList`'s C signature.
type BarrierFn = unsafe extern "C" fn(
    raw::cl_command_queue,
    u32,
    *const raw::cl_event,
    *mut raw::cl_event,
) -> i32;

/// `clReleaseEvent`'s C signature.
type ReleaseFn = unsafe extern "C" fn(raw::cl_event) -> i32;

/// An OpenCL entry point of the ICD loader, as a C library reaches it.
fn entry(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: dlopen/dlsym with NUL-terminated names; RTLD_NOW (2). The loader is already
    // loaded by the runtime, so this takes another reference to the same library.
    let f = unsafe {
        let handle = dlopen(c"libOpenCL.so.1".as_ptr(), 2);
        assert!(!handle.is_null(), "dlopen libOpenCL.so.1");
        dlsym(handle, name.as_ptr())
    };
    assert!(!f.is_null(), "dlsym {name:?}");
    f
}

/// A barrier on `queue` after `wait`, enqueued as foreign C code does (not through the
/// runtime's wrappers); its event (the caller releases it with [`release_event`]).
fn raw_barrier(queue: raw::cl_command_queue, wait: raw::cl_event) -> raw::cl_event {
    // SAFETY: the symbol is clEnqueueBarrierWithWaitList of the ICD loader, whose C
    // signature is `BarrierFn`.
    let f = unsafe {
        std::mem::transmute::<*mut c_void, BarrierFn>(entry(c"clEnqueueBarrierWithWaitList"))
    };
    let mut event: raw::cl_event = std::ptr::null_mut();
    // SAFETY: `queue` is the live queue handed to the foreign call and `wait` a live event of
    // its context, both valid for the call; `event` receives the command's event.
    let status = unsafe { f(queue, 1, &wait, &mut event) };
    assert_eq!(status, 0, "clEnqueueBarrierWithWaitList");
    event
}

/// Releases an event [`raw_barrier`] returned.
fn release_event(event: usize) {
    // SAFETY: the symbol is clReleaseEvent of the ICD loader (`ReleaseFn`).
    let f = unsafe { std::mem::transmute::<*mut c_void, ReleaseFn>(entry(c"clReleaseEvent")) };
    // SAFETY: `event` is the one reference `raw_barrier` received, released once.
    assert_eq!(unsafe { f(event as raw::cl_event) }, 0, "clReleaseEvent");
}

/// The scenario of both tests: `s` (an external stream over a fresh queue) synchronized,
/// then, when `poll_first`, polled until its query answered `true` (keeping the query's
/// marker); a foreign call on thread A enqueues a barrier behind a closed gate on the raw
/// queue and, before returning, waits for the main thread, which asks `Stream::query` then.
/// Returns that answer (the gate is opened and the stream drained before it returns).
fn query_during_foreign_call(poll_first: bool) -> Result<bool, xpu_stream::StreamError> {
    let ext = ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
    let s = ext.stream();
    s.synchronize().unwrap();
    if poll_first {
        assert!(
            xpu_testing::true_within(std::time::Duration::from_secs(10), || s.query().unwrap()),
            "the synchronized stream's query turns true"
        );
    }
    let gate = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let gate_raw = gate.as_raw() as usize;
    let (enqueued_tx, enqueued_rx) = mpsc::channel::<usize>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let library = std::thread::spawn(move || {
        let f = move |q: &ForeignQueue<'_>| {
            let event = raw_barrier(q.queue(), gate_raw as raw::cl_event);
            enqueued_tx.send(event as usize).unwrap();
            // More of the library's host work: it returns once the main thread asked.
            go_rx.recv().unwrap();
            Ok(None)
        };
        // SAFETY: `f` enqueues one barrier on the stream's live queue after a live user event
        // of its context, uses no region, and keeps no handle beyond the call (its event is
        // handed out and released by the test).
        let event = unsafe { s.foreign().call(f) }.unwrap();
        drop(event);
    });
    let barrier = enqueued_rx.recv().unwrap();
    let answer = s.query();
    go_tx.send(()).unwrap();
    library.join().unwrap();
    gate.set_complete().unwrap();
    s.synchronize().unwrap();
    release_event(barrier);
    answer
}

/// FINDING (1c9e15f). What: a stream synchronized (so "known idle"; no query asked yet), then
/// a foreign library call (`ForeignCall::call`) on thread A whose function enqueues a barrier
/// behind a closed gate on the raw queue and then does more host work (here: waits for the
/// main thread); meanwhile the main thread asks `Stream::query`.
///
/// Expected: `false` (or an error): the barrier was enqueued on the stream before the query
/// began and is queued behind the closed gate. Before 1c9e15f this very query had no kept
/// marker and enqueued one after the barrier (pending: `false`; checked on 1c9e15f^: the
/// test passes there); torch.cuda's `Stream.query` is `False` while any work submitted to the
/// stream is unfinished, whatever thread submitted it.
///
/// Why it fails: `Stream::query` (crates/xpu-stream/src/stream.rs:244, the new
/// `q.idle_since_finish()` early return) answers `true` from the runtime's notes alone, and
/// `ForeignCall::call` (crates/xpu-kernel/src/interop.rs:569, `queue.note_raw_enqueue()`
/// after `f(&foreign)` returns) notes the library's commands only after the whole library
/// call returned: for the rest of that call the queue reads idle to every other thread after
/// any synchronize, with the library's commands queued. Rule broken: a query never answers
/// `true` while a command enqueued before it began may still be queued.
#[test]
fn a_query_during_a_foreign_call_does_not_answer_true_over_the_calls_queued_barrier() {
    if !xpu_testing::devices(1) {
        return;
    }
    let answer = query_during_foreign_call(false);
    assert!(
        !matches!(answer, Ok(true)),
        "Stream::query answered true while a barrier the foreign library enqueued on the \
         stream before the query began was queued behind a closed gate ({answer:?})"
    );
}

/// FINDING (the same window, older than 1c9e15f). As above, but the stream's query was polled
/// to `true` before the foreign call (a kept marker, complete). Expected `false`; the query
/// answers `true` from the kept marker, since nothing was noted after it
/// (`CommandQueue::enqueued_since`, crates/xpu-device/src/backend/queue.rs:959) while the
/// library call is still running: the same late note (crates/xpu-kernel/src/interop.rs:569).
/// This variant fails on 1c9e15f^ as well: 1c9e15f did not open it, it only made the
/// synchronize alone enough (the test above). Rule broken: as above.
#[test]
fn a_query_with_a_kept_marker_during_a_foreign_call_does_not_answer_true() {
    if !xpu_testing::devices(1) {
        return;
    }
    let answer = query_during_foreign_call(true);
    assert!(
        !matches!(answer, Ok(true)),
        "Stream::query answered true (kept marker) while a barrier the foreign library \
         enqueued on the stream before the query began was queued behind a closed gate \
         ({answer:?})"
    );
}
