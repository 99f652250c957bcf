//! Command queue options and raw-handle interop.

mod common;

use xpu_device::backend::{CommandQueue, QueueOptions, QueuePriority};

const CL_INVALID_COMMAND_QUEUE: i32 = -36;

#[test]
fn queues_are_in_order_with_the_asked_profiling() {
    let Some(dev) = common::device0() else {
        return;
    };
    let profiled = common::queue(dev);
    assert!(profiled.is_in_order().unwrap());
    assert!(profiled.has_profiling().unwrap());
    let plain = dev.create_queue(QueueOptions::default()).unwrap();
    assert!(plain.is_in_order().unwrap());
    assert!(!plain.has_profiling().unwrap());
    assert_ne!(plain, profiled);
    assert_eq!(plain.clone(), plain);
    if dev.properties().has_priority_hints {
        let high = dev
            .create_queue(QueueOptions {
                profiling: false,
                priority: Some(QueuePriority::High),
            })
            .unwrap();
        high.finish().unwrap();
    }
    plain.finish().unwrap();
}

#[test]
fn a_borrowed_raw_queue_stays_valid_after_the_wrapper_drops() {
    let Some(dev) = common::device0() else {
        return;
    };
    let owner = common::queue(dev);
    // SAFETY: `owner` keeps the queue alive for the whole call; the wrapper retains its own
    // reference.
    let borrowed = unsafe { CommandQueue::from_raw_borrowed(owner.as_raw()) }.unwrap();
    assert_eq!(borrowed, owner);
    borrowed.enqueue_marker(&[]).unwrap().wait().unwrap();
    drop(borrowed);
    // The owner's reference is untouched: the queue still works.
    owner.enqueue_marker(&[]).unwrap().wait().unwrap();
    owner.finish().unwrap();

    // SAFETY: null is documented to be rejected with an error.
    let err = unsafe { CommandQueue::from_raw_borrowed(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err.code, CL_INVALID_COMMAND_QUEUE);
}

/// The exit drain (`backend::at_exit::drain`) waits for every live queue's commands, but no
/// longer than its limit: a queue held by a user event nobody sets cannot hang an exit.
#[test]
fn the_exit_drain_waits_for_live_queues_within_its_limit() {
    use std::time::{Duration, Instant};
    use xpu_device::backend::{at_exit, ClEvent};

    let Some((_, ctx, q)) = common::device0_queue() else {
        return;
    };
    let gate = ClEvent::user(ctx).unwrap();
    // A marker behind the gate: the queue's commands cannot be over until it is set.
    let held = q.enqueue_marker(&[&gate]).unwrap();
    q.flush().unwrap();
    let start = Instant::now();
    assert!(
        !at_exit::drain(Duration::from_millis(50)),
        "drained a gated queue"
    );
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(!held.is_complete().unwrap());

    gate.set_complete().unwrap();
    assert!(
        at_exit::drain(Duration::from_secs(10)),
        "gate set, queue still busy"
    );
    assert!(held.is_complete().unwrap());
    q.finish().unwrap();
}
