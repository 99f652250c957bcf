//! Completion callbacks (`on_complete`) of commands that fail through their wait list: the closure
//! runs once with the negative status, and what it holds (a pinned buffer, a forward's events) is
//! released.
//!
//! Review h21: completion callbacks of commands that fail through their wait list.
//!
//! PoCL (3.1) never calls a `CL_COMPLETE` callback for a command that terminated abnormally
//! because an event of its wait list failed. `ClEvent::on_complete` promises to run its
//! closure "once when the command completes or terminates abnormally", with the negative
//! status; and a pinned buffer's copy keeps the buffer alive through such a closure, so a
//! failed copy leaked the whole pinned buffer (its mapping, its `cl_mem` and a queue
//! reference). Each scenario runs in a child process: it reads the process-wide live counts.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::{
    wait_for_callbacks, Buffer, EventStatus, MemFlags, PinnedBuffer, PinnedBytes,
};
use xpu_device::live_objects;

/// A marker that fails through its wait list (a user event set to an error status) runs its
/// `on_complete` closure once, with a negative status, and the closure is no longer counted.
#[test]
fn on_complete_runs_for_a_command_failed_through_its_wait_list() {
    let Some((dev, _ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let base = live_objects();
    let user = dev.create_user_event().unwrap();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    let (tx, rx) = mpsc::channel();
    marker
        .on_complete(move |status| tx.send(status).unwrap())
        .unwrap();
    assert_eq!(live_objects().callbacks, base.callbacks + 1);
    user.set_failed(-5).unwrap();
    let _ = q.finish();
    // On PoCL, `set_failed` returned, so the sweep has handed the closure over; NVIDIA's
    // driver calls back asynchronously (§5.11.4), a little later.
    let first = rx.recv_timeout(Duration::from_secs(30));
    wait_for_callbacks();
    let got: Vec<i32> = first.into_iter().chain(rx.try_iter()).collect();
    assert_eq!(got.len(), 1, "the closure ran once: {got:?}");
    // With the command's final status: PoCL fails the marker (a negative status), NVIDIA
    // completes it (OpenCL 3.0 §5.11 leaves a command waiting on a failed event to the
    // implementation).
    let status = match marker.status().unwrap() {
        EventStatus::Complete => 0,
        EventStatus::Error(code) => code,
        other => panic!("the marker is not over after the finish: {other:?}"),
    };
    assert_eq!(got[0], status, "with the command's final status: {got:?}");
    drop((marker, user));
    assert!(
        common::settles(Duration::from_secs(30), || live_objects().callbacks
            == base.callbacks),
        "no closure left pending"
    );
    println!("scenario-ok");
}

/// A pinned-to-device copy that fails through its wait list (and a device-to-pinned one)
/// does not keep the pinned buffer alive: once its handle is dropped, its buffer and queue
/// reference are released.
#[test]
fn a_pinned_buffer_is_released_after_its_copy_failed() {
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let dev_buf = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let base = live_objects();
    for into in [false, true] {
        let mut pinned = PinnedBuffer::new(ctx, &q, 1024).unwrap();
        let user = dev.create_user_event().unwrap();
        let end = if into {
            PinnedBytes::Into(&mut pinned)
        } else {
            PinnedBytes::From(&pinned)
        };
        let copy = q.copy_pinned(&dev_buf, 0, end, 0, 1024, &[&user]).unwrap();
        user.set_failed(-5).unwrap();
        // PoCL fails it at once; NVIDIA's driver reports the failure a little later.
        assert!(copy.wait().is_err(), "the copy failed");
        assert!(copy.is_complete().is_err(), "the copy failed");
        // The host may use the bytes again: the copy is over.
        pinned.as_mut_slice()[0] = 1;
        drop((copy, user, pinned));
    }
    let _ = q.finish();
    let counts = |l: xpu_device::backend::LiveObjects| (l.buffers, l.queues, l.events, l.callbacks);
    common::settles(Duration::from_secs(30), || {
        counts(live_objects()) == counts(base)
    });
    let after = live_objects();
    assert_eq!(
        (after.buffers, after.queues, after.events, after.callbacks),
        (base.buffers, base.queues, base.events, base.callbacks),
        "pinned buffers, their queue references, events or closures left: {base:?} -> {after:?}"
    );
    println!("scenario-ok");
}

/// A forward ([`ClEvent::forward_to`], a cross-device wait) whose source fails through its
/// wait list passes the failure on to its target (the forwards' sweep), and, once every handle
/// is dropped, leaves no event reference behind: PoCL never calls the source's callback, which
/// owned a clone of the target (review h21's note: one event leaked per failed forward).
#[test]
fn a_forward_whose_source_failed_leaks_no_event() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let q0 = common::queue(d0);
    let _ = d1.context().unwrap();
    let base = live_objects();
    for _ in 0..3 {
        let user = d0.create_user_event().unwrap();
        let source = q0.enqueue_marker(&[&user]).unwrap();
        let target = d1.create_user_event().unwrap();
        source.forward_to(&target).unwrap();
        user.set_failed(-5).unwrap();
        assert!(target.is_complete().is_err(), "the failure was passed on");
        drop((source, target, user));
    }
    let _ = q0.finish();
    wait_for_callbacks();
    let after = live_objects();
    assert_eq!(
        (after.events, after.callbacks),
        (base.events, base.callbacks),
        "events or callbacks left: {base:?} -> {after:?}"
    );
    println!("scenario-ok");
}
