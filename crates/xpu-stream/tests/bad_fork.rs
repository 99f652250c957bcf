//! In a bad fork child (see `xpu_device::fork`) the capture state of streams takes no lock:
//! a thread of the parent may have held it at the fork (while beginning or ending a graph
//! capture). The parent's state (a stream being captured) is reproduced in a fresh process
//! that then becomes a bad fork (`simulate_bad_fork`), so a call that took the lock would
//! see the capture and is caught as a wrong result.

use xpu_device::backend::QueueOptions;
use xpu_stream::{
    device_is_capturing, get_stream_from_pool, CaptureGuard, ExternalStream, PRIORITY_NORMAL,
};
use xpu_testing::bad_fork::{assert_bad_fork, bad_fork_test, done};

/// A stream captured by the parent, in the child: beginning a capture refuses with
/// `BadFork`, an enqueue refuses with `BadFork` (not `Capturing`), the capture queries
/// answer `false` (`check_not_capturing` `Ok`), and dropping the parent's capture guard
/// leaks its mark; none of them takes the capture registry's lock.
#[test]
fn capture_state_takes_no_lock_in_a_bad_fork_child() {
    if xpu_testing::devices(1) {
        bad_fork_test("stream-capture-bad-fork", capture_run);
    }
}

fn capture_run() {
    let free = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let captured = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    assert_ne!(free.id(), captured.id());
    let guard = CaptureGuard::begin(&captured).expect("capture");
    assert!(captured.is_capturing() && device_is_capturing(0));

    xpu_device::fork::simulate_bad_fork();

    assert_bad_fork("CaptureGuard::begin", CaptureGuard::begin(&free));
    // No lock, so no capture seen: the neutral answer; the enqueue itself refuses.
    let check = captured.check_not_capturing("test");
    println!("Stream::check_not_capturing = {check:?}");
    assert!(check.is_ok(), "Stream::check_not_capturing: {check:?}");
    assert_bad_fork(
        "Stream::enqueue_queue",
        captured.enqueue_queue("test").map(drop),
    );
    println!(
        "is_capturing = {}, device_is_capturing = {}",
        captured.is_capturing(),
        device_is_capturing(0)
    );
    assert!(!captured.is_capturing(), "Stream::is_capturing");
    assert!(!device_is_capturing(0), "device_is_capturing");
    drop(guard);

    // The guard's drop left the parent's mark (read as an ordinary process).
    xpu_device::fork::end_simulated_bad_fork();
    assert!(captured.is_capturing(), "the guard's drop cleared the mark");
    done();
}

/// A resolved queue of an external stream that the parent dropped (the `QueueRef` holds the
/// last reference to the queue), dropped in the child: the queue is leaked, not released
/// (`clReleaseCommandQueue` is a driver call).
#[test]
fn dropping_a_parents_queue_ref_in_a_bad_fork_child_leaks_it() {
    if xpu_testing::devices(1) {
        bad_fork_test("stream-queue-ref-bad-fork", queue_ref_run);
    }
}

fn queue_ref_run() {
    let queue = xpu_device::device(0)
        .expect("device")
        .create_queue(QueueOptions::default())
        .expect("queue");
    let external = ExternalStream::new(queue, 0).expect("external stream");
    let held = external.stream().queue().expect("queue");
    drop(external);
    let queues = xpu_device::live_objects().queues;

    xpu_device::fork::simulate_bad_fork();

    drop(held);
    println!(
        "live queues: {queues} before the drop, {} after",
        xpu_device::live_objects().queues
    );
    assert_eq!(
        xpu_device::live_objects().queues,
        queues,
        "the queue was released in the child"
    );
    done();
}
