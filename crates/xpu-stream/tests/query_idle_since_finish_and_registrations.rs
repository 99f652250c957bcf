//! `Stream::query` answering `true` with no driver call on a queue idle since a successful finish
//! (but not over work enqueued meanwhile or through a second wrapper), and counted registrations of
//! one external queue.
//!
//! Review h82: passing probes of what held in 1c9e15f (`Stream::query` answering `true` with
//! no driver call on a queue known idle since a successful finish) and 940c249 (one external
//! stream per registered queue, counted registrations).
//!
//! Order comes from user events (gates) and a thread seen blocked in its `clFinish`, never
//! from sleeps.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu_device::backend::ClEvent;
use xpu_stream::{ExternalStream, Stream, StreamError};

/// A closed user event of `s`'s device and a barrier behind it on `s`.
fn gate_on(s: &Stream) -> ClEvent {
    let gate = xpu_device::device(s.device())
        .unwrap()
        .create_user_event()
        .unwrap();
    drop(
        s.enqueue_queue("review h82 gate")
            .unwrap()
            .enqueue_barrier(&[&gate])
            .unwrap(),
    );
    gate
}

/// HOLDS (1c9e15f, the finish generation). A synchronize blocked in its `clFinish` behind a
/// closed gate; while it is blocked, a second gated barrier is enqueued on the stream (its
/// note reads the finish's generation). Once the first gate opens, the synchronize may
/// return (its `clFinish` may or may not have covered the second barrier), but the query
/// must not answer `true` while the second gate is closed: it did not (`noted_probe` equals
/// the finish's generation, so `idle_since_finish` reads false). Also the device-wide
/// synchronize and a new stream: `true` with no work, `false` after a gated barrier.
#[test]
fn a_command_enqueued_while_a_synchronize_is_blocked_keeps_the_query_false() {
    if !common::devices(1) {
        return;
    }
    let ext = ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
    let s = ext.stream();
    s.synchronize().unwrap();
    assert!(s.query().unwrap(), "idle after a synchronize");
    let first = gate_on(&s);
    let sync = common::blocked_synchronize(move || s.synchronize());
    let second = gate_on(&s);
    first.set_complete().unwrap();
    // The synchronize either returns (if its clFinish began before the second barrier was
    // in the queue) or stays blocked on the second gate: poll the query either way.
    let early = xpu_testing::ever_true(2_000, || matches!(s.query(), Ok(true)));
    second.set_complete().unwrap();
    sync.join().unwrap().unwrap();
    assert!(
        !early,
        "query answered true while a barrier enqueued during a blocked synchronize was gated"
    );
    s.synchronize().unwrap();
    assert!(s.query().unwrap());

    // The device-wide synchronize, then new gated work.
    xpu_stream::synchronize(0).unwrap();
    assert!(s.query().unwrap(), "idle after a device synchronize");
    let third = gate_on(&s);
    assert!(!xpu_testing::ever_true(2_000, || s.query().unwrap()));
    third.set_complete().unwrap();
    s.synchronize().unwrap();
}

/// HOLDS (1c9e15f, a second wrapper). Work enqueued through a second wrapper of a stream's
/// queue (made from its raw handle, as interop code would) is seen by the first wrapper's
/// stream: the two share the queue's state, so the query stays `false` behind its gate.
#[test]
fn work_through_a_second_wrapper_of_the_queue_keeps_the_query_false() {
    if !common::devices(1) {
        return;
    }
    let ext = ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
    let s = ext.stream();
    s.synchronize().unwrap();
    let other = s.queue().unwrap().rewrapped().unwrap();
    let gate = xpu_device::device(0).unwrap().create_user_event().unwrap();
    drop(other.enqueue_barrier(&[&gate]).unwrap());
    assert!(!xpu_testing::ever_true(2_000, || s.query().unwrap()));
    gate.set_complete().unwrap();
    other.finish().unwrap();
    assert!(
        s.query().unwrap(),
        "a finish through the other wrapper drains it"
    );
}

/// HOLDS (940c249). Two registrations of one queue are one stream: dropping the first while
/// the second is in use leaves it registered and usable (enqueue, query, synchronize); a
/// third registration on another thread gets the same id; the stream is released only when
/// the last registration drops. A registration failing validation (wrong device) changes
/// nothing.
#[test]
fn dropping_one_of_two_registrations_keeps_the_stream_usable() {
    if !common::devices(2) {
        return;
    }
    let queue = xpu_testing::fresh_queue(0);
    let first = ExternalStream::new(queue.rewrapped().unwrap(), 0).unwrap();
    let second = ExternalStream::new(queue.rewrapped().unwrap(), 0).unwrap();
    let s = second.stream();
    assert_eq!(first.stream(), s);
    assert!(matches!(
        ExternalStream::new(queue.rewrapped().unwrap(), 1),
        Err(StreamError::ExternalDeviceMismatch { .. })
    ));
    let gate = gate_on(&s);
    drop(first);
    assert!(!s.query().unwrap(), "still registered, gated");
    let third = {
        let q = queue.rewrapped().unwrap();
        std::thread::spawn(move || ExternalStream::new(q, 0).unwrap())
            .join()
            .unwrap()
    };
    assert_eq!(third.stream(), s);
    gate.set_complete().unwrap();
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
    drop(second);
    s.synchronize().unwrap();
    drop(third);
    assert!(matches!(
        s.synchronize(),
        Err(StreamError::ExternalReleased { .. })
    ));
}
