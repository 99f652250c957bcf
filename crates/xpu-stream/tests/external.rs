//! External streams: validation, registration, current stream, device synchronize.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xpu_device::backend::{CommandQueue, Context, QueueOptions};
use xpu_stream::{current_stream, set_stream, synchronize, ExternalStream, StreamError};

fn options() -> QueueOptions {
    QueueOptions {
        profiling: true,
        priority: None,
    }
}

/// A new profiling queue of the runtime's context for `device`.
fn runtime_queue(device: usize) -> CommandQueue {
    xpu_device::device(device)
        .unwrap()
        .create_queue(options())
        .unwrap()
}

/// Asserts that `e` is `want` and displays as `message`.
fn assert_error(e: &StreamError, want: StreamError, message: &str) {
    assert_eq!(*e, want);
    assert_eq!(e.to_string(), message);
}

/// A borrowed wrapper of `q` (the user keeps its own reference in `q`): a retaining clone is
/// exactly what `unsafe CommandQueue::from_raw_borrowed(q.as_raw())` gives, without `unsafe`
/// outside xpu-device (the raw constructors are tested in xpu-device's own tests).
fn borrow(q: &CommandQueue) -> CommandQueue {
    q.clone()
}

#[test]
fn accepts_a_queue_of_the_runtime_context() {
    if !common::devices(1) {
        return;
    }
    let theirs = runtime_queue(0);
    let ext = ExternalStream::with_priority(borrow(&theirs), 0, -4).unwrap();
    let s = ext.stream();
    assert!(s.is_external() && !s.is_default());
    assert_eq!(s.priority(), -1);
    assert_eq!(s.as_raw().unwrap(), theirs.as_raw());
    assert!(s.has_profiling().unwrap());
    // An external stream can be the current stream.
    set_stream(s);
    assert_eq!(current_stream(0).unwrap(), s);
    s.synchronize().unwrap();
    set_stream(xpu_stream::default_stream(0).unwrap());
    // Dropping unregisters; handles report it; the user's queue still works (not released).
    drop(ext);
    let e = s.queue().unwrap_err();
    assert_eq!(
        e,
        StreamError::ExternalReleased {
            id: s.id(),
            device: 0
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "external stream {:#x} on device 0 was dropped; its queue is no longer registered",
            s.id()
        )
    );
    theirs.enqueue_marker(&[]).unwrap().wait().unwrap();
    theirs.finish().unwrap();
}

#[test]
fn leaked_and_owned_registrations() {
    if !common::devices(1) {
        return;
    }
    let q = runtime_queue(0);
    let raw = q.as_raw();
    // Giving the runtime our only reference: the same as `from_raw_owned(raw)` after forgetting
    // `q`.
    let s = ExternalStream::new(q, 0).unwrap().leak();
    assert_eq!(s.as_raw().unwrap(), raw);
    s.synchronize().unwrap();
}

#[test]
fn rejects_an_out_of_order_queue() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let ooo = match CommandQueue::new_out_of_order(dev.context().unwrap(), dev.id()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("skipped: device has no out-of-order queues ({e})");
            return;
        }
    };
    let e = ExternalStream::new(ooo, 0).unwrap_err();
    assert_error(
        &e,
        StreamError::ExternalNotInOrder,
        "external queue must be in-order (it has CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)",
    );
}

#[test]
fn rejects_a_queue_of_another_context() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let ctx = Context::new(dev.id()).unwrap();
    let q = CommandQueue::new(&ctx, dev.id(), options()).unwrap();
    let e = ExternalStream::new(q, 0).unwrap_err();
    assert_error(
        &e,
        StreamError::ExternalContextMismatch { device: 0 },
        "external queue must be created with the same context as the runtime uses for device 0 \
         (see xpu_device::Device::context)",
    );
}

#[test]
fn rejects_a_queue_of_another_device() {
    if !common::devices(2) {
        return;
    }
    let q1 = runtime_queue(1);
    let e = ExternalStream::new(q1, 0).unwrap_err();
    assert_error(
        &e,
        StreamError::ExternalDeviceMismatch { device: 0 },
        "external queue doesn't match device 0: it was created for another device",
    );
}

#[test]
fn rejects_null_and_bad_indices() {
    if !common::devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    let q = runtime_queue(0);
    let e = ExternalStream::new(q, n).unwrap_err();
    assert!(matches!(e, StreamError::Device(_)), "{e:?}");
    assert_eq!(
        StreamError::ExternalNull.to_string(),
        "external queue must not be null"
    );
}

#[test]
fn device_synchronize_waits_for_external_streams() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let theirs = dev.create_queue(options()).unwrap();
    let ext = ExternalStream::new(borrow(&theirs), 0).unwrap();
    // Hold the external queue back with a user event that a helper thread completes later.
    let gate = dev.create_user_event().unwrap();
    theirs.enqueue_barrier(&[&gate]).unwrap();
    let marker = theirs.enqueue_marker(&[]).unwrap();
    theirs.flush().unwrap();
    let opened = Arc::new(AtomicBool::new(false));
    let opener = {
        let (gate, opened) = (gate.clone(), Arc::clone(&opened));
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            opened.store(true, Ordering::SeqCst);
            gate.set_complete().unwrap();
        })
    };
    synchronize(0).unwrap();
    // Had synchronize skipped the external queue, it would have returned before the gate
    // opened and the marker would still be pending.
    assert!(opened.load(Ordering::SeqCst));
    assert!(marker.is_complete().unwrap());
    opener.join().unwrap();
    drop(ext);
}
