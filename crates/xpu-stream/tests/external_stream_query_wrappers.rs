//! An external stream's query sees work enqueued through every runtime wrapper of its queue (the
//! wrapper it was made from, a second external stream, a native stream's queue).
//!
//! Review h59 (fresh eyes on today's `Stream::query` change, 916a204): an external stream's
//! kept marker now answers `true` once complete "with nothing noted after it". What is noted
//! is per *wrapper* (`CommandQueue`'s `QueueShared`: the wrapper and its clones,
//! crates/xpu-device/src/backend/queue.rs:66-68 "a queue wrapped twice from its raw handle
//! does not" share), while an external stream is by construction a second wrapper of a queue
//! that other runtime wrappers also enqueue on (`ExternalStream`'s own doc example keeps
//! `theirs`, a runtime `CommandQueue`, and wraps its raw handle again). ExternalStream's doc
//! (crates/xpu-stream/src/external.rs:72-74) promises: "Commands enqueued through the runtime
//! (its wrappers of the queue, clones included) are noted on the queue". They are not.
//!
//! PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`. Ordering by user events
//! (gates), no sleeps. Each test fails on the reviewed commit (df956e1), 5 of 5 runs; with
//! stream.rs as of 916a204^ (an external stream's query asked with a new marker each time)
//! all three pass: a regression of 916a204.
//!
//! Fixed in 99f3f47 (every wrapper of one raw queue shares its state): these pass now.

mod common;

use std::time::Duration;

use xpu_device::backend::QueueOptions;
use xpu_stream::{get_stream_from_pool, ExternalStream, PRIORITY_NORMAL};

/// Polls `s.query()` until it answers `true` (at most 20 s): the kept marker is complete.
fn settle(s: xpu_stream::Stream) {
    s.synchronize().unwrap();
    assert!(
        xpu_testing::true_within(Duration::from_secs(20), || s.query().unwrap()),
        "an idle stream never answered true"
    );
}

/// Finding 2a: the pattern of `ExternalStream`'s own doc example. Other code's queue is a
/// runtime `CommandQueue` (`theirs`, made by `Device::create_queue`); its raw handle is
/// registered as an external stream (`from_raw_borrowed`, whose one safety condition, a live
/// queue, holds: `theirs` keeps it). After the stream went idle (query `true`), a command
/// enqueued through `theirs` (a safe call on a runtime wrapper of the same queue) behind a
/// closed user event is pending, yet `query` answers `true` from the old kept marker.
///
/// Observed: `query` answered `true` with the gate closed, 5 of 5 runs (then the gate is
/// opened and the queue drained).
#[test]
fn external_query_sees_work_enqueued_through_the_runtime_wrapper_it_was_made_from() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let theirs = dev.create_queue(QueueOptions::default()).unwrap();
    // A second wrapper from the raw handle (`rewrapped`: `from_raw_borrowed` of `as_raw`).
    let queue = theirs.rewrapped().unwrap();
    let ext = ExternalStream::new(queue, 0).unwrap();
    let s = ext.stream();
    settle(s);

    let gate = dev.create_user_event().unwrap();
    let pending = theirs.enqueue_marker(&[&gate]).unwrap();
    let answered = s.query().unwrap();
    let still_pending = !gate.is_complete().unwrap();
    gate.set_complete().unwrap();
    theirs.finish().unwrap();
    drop(pending);
    assert!(
        !answered,
        "Stream::query answered true while a command enqueued through a runtime wrapper of \
         its queue waited on a closed gate (gate still closed: {still_pending})"
    );
}

/// Finding 2b: two external streams over one queue (each `ExternalStream::new` of a wrapper
/// of the same raw handle; `torch.cuda.ExternalStream` of one `cudaStream_t` twice is
/// ordinary). Work recorded through stream `a` (a marker behind a closed gate, enqueued via
/// `a.queue()`) is pending; stream `b`, idle before, answers `true`, though `b` *is* the same
/// in-order queue and `b.synchronize()` would block.
///
/// Observed: `b.query()` true with the gate closed, 5 of 5 runs.
#[test]
fn two_external_streams_of_one_queue_query_each_others_work() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let theirs = dev.create_queue(QueueOptions::default()).unwrap();
    // Two more wrappers from the raw handle (`rewrapped`: `from_raw_borrowed` of `as_raw`).
    let (qa, qb) = (theirs.rewrapped().unwrap(), theirs.rewrapped().unwrap());
    let ea = ExternalStream::new(qa, 0).unwrap();
    let eb = ExternalStream::new(qb, 0).unwrap();
    let (a, b) = (ea.stream(), eb.stream());
    assert_eq!(a.as_raw().unwrap(), b.as_raw().unwrap());
    settle(b);

    let gate = dev.create_user_event().unwrap();
    let pending = a.queue().unwrap().enqueue_marker(&[&gate]).unwrap();
    let answered = b.query().unwrap();
    let a_answered = a.query().unwrap();
    gate.set_complete().unwrap();
    a.synchronize().unwrap();
    drop(pending);
    assert!(
        !answered,
        "stream b answered query() == true while work enqueued through stream a, on the same \
         in-order queue, waited on a closed gate (a.query(): {a_answered})"
    );
}

/// Finding 2c: an external stream over a native pool stream's queue (`Stream::as_raw`,
/// wrapped with `from_raw_borrowed`): work enqueued on the native stream (through the
/// runtime's own wrapper) is not noted on the external stream's wrapper, and its query
/// answers `true` while that work is pending.
///
/// Observed: `true` with the gate closed, 5 of 5 runs.
#[test]
fn external_stream_over_a_native_streams_queue_sees_the_native_streams_work() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let native = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    // A wrapper from the pool stream's raw handle (`rewrapped`).
    let queue = native.queue().unwrap().rewrapped().unwrap();
    let ext = ExternalStream::new(queue, 0).unwrap();
    let s = ext.stream();
    settle(s);

    let gate = dev.create_user_event().unwrap();
    let pending = native.queue().unwrap().enqueue_marker(&[&gate]).unwrap();
    let answered = s.query().unwrap();
    gate.set_complete().unwrap();
    native.synchronize().unwrap();
    drop(pending);
    assert!(
        !answered,
        "the external stream answered true while the native stream of the same queue held \
         work behind a closed gate"
    );
}
