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
