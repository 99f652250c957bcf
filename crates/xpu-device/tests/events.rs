//! Events: user-event gates, markers, barriers, status and profiling timestamps; wrapped raw
//! events, user events dropped unset, and `wait_for_callbacks` in a bad fork child.

mod common;

use std::time::Duration;

use opencl3::error_codes::{
    CL_INVALID_EVENT, CL_INVALID_OPERATION, CL_INVALID_VALUE, CL_PROFILING_INFO_NOT_AVAILABLE,
};
use xpu_device::backend::{wait_for_callbacks, ClEvent, EventStatus, ProfilingInfo, QueueOptions};
use xpu_device::fork;
use xpu_device::fork::ChildExit;

#[test]
fn user_event_gates_a_marker() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let mut gate = common::Gate::new(dev);
    assert_eq!(gate.event().status().unwrap(), EventStatus::Submitted);
    let marker = q.enqueue_marker(&[gate.event()]).unwrap();
    q.flush().unwrap();
    assert!(!marker.is_complete().unwrap());
    assert_ne!(marker.status().unwrap(), EventStatus::Complete);
    gate.open();
    marker.wait().unwrap();
    assert!(marker.is_complete().unwrap());
    assert_eq!(gate.event().status().unwrap(), EventStatus::Complete);
    // A user event is set once.
    let err = gate.event().set_complete().unwrap_err();
    assert_eq!(err.code, CL_INVALID_OPERATION);
    assert_eq!(err.function, "clSetUserEventStatus");
}

#[test]
fn barrier_holds_later_commands_of_the_queue() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let mut gate = common::Gate::new(dev);
    let barrier = q.enqueue_barrier(&[gate.event()]).unwrap();
    // An empty wait list: completes after everything before it, i.e. after the barrier.
    let after = q.enqueue_marker(&[]).unwrap();
    q.flush().unwrap();
    assert!(!barrier.is_complete().unwrap());
    assert!(!after.is_complete().unwrap());
    gate.open();
    q.finish().unwrap();
    assert!(barrier.is_complete().unwrap());
    assert!(after.is_complete().unwrap());
}

#[test]
fn failed_user_event_fails_its_waiters() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    user.set_failed(-1234).unwrap();
    assert_eq!(user.status().unwrap(), EventStatus::Error(-1234));
    assert!(user.is_complete().is_err());
    assert!(marker.wait().is_err(), "a marker after a failed event");
    assert!(matches!(marker.status().unwrap(), EventStatus::Error(_)));
}

#[test]
fn marker_profiling_timestamps_are_ordered() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    assert!(q.has_profiling().unwrap());
    let marker = q.enqueue_marker(&[]).unwrap();
    marker.wait().unwrap();
    let queued = marker.profiling(ProfilingInfo::Queued).unwrap();
    let submit = marker.profiling(ProfilingInfo::Submit).unwrap();
    let start = marker.profiling(ProfilingInfo::Start).unwrap();
    let end = marker.profiling(ProfilingInfo::End).unwrap();
    assert!(start > 0);
    assert!(queued <= submit && submit <= start && start <= end);

    // Without profiling the driver says so, with a typed error.
    let plain = dev.create_queue(QueueOptions::default()).unwrap();
    let m = plain.enqueue_marker(&[]).unwrap();
    m.wait().unwrap();
    let err = m.profiling(ProfilingInfo::End).unwrap_err();
    assert_eq!(err.code, CL_PROFILING_INFO_NOT_AVAILABLE);
}

#[test]
fn user_event_refuses_a_non_negative_failure_status_and_stays_unset() {
    let Some(dev) = common::device0() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    for code in [0, 1, 42] {
        let err = user.set_failed(code).unwrap_err();
        assert_eq!(err.code, CL_INVALID_VALUE, "set_failed({code})");
        assert_eq!(err.function, "clSetUserEventStatus");
        assert_eq!(user.status().unwrap(), EventStatus::Submitted);
    }
    // Untouched: it can still be failed with a negative status.
    user.set_failed(-5).unwrap();
    assert_eq!(user.status().unwrap(), EventStatus::Error(-5));
}

#[test]
fn a_completion_callback_runs_on_the_runtime_thread_and_may_finish_the_queue() {
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let (mut gate, ev) = common::gated_marker(dev, &q);
    // More work after the marker, which a finish() inside the callback waits for.
    let buf =
        xpu_device::backend::Buffer::new(ctx, 1 << 20, xpu_device::backend::MemFlags::default())
            .unwrap();
    q.fill(&buf, &[7u8], 0, 1 << 20, &[]).unwrap();
    let after = q.enqueue_marker(&[]).unwrap();
    let q2 = q.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    ev.on_complete(move |status| {
        let finished = q2.finish();
        let thread = std::thread::current().name().map(String::from);
        let _ = tx.send((status, finished, thread));
    })
    .unwrap();
    q.flush().unwrap();
    gate.open();
    let (status, finished, thread) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the callback calling finish() did not complete within 20 s");
    assert_eq!(status, 0);
    assert_eq!(finished, Ok(()));
    assert!(after.is_complete().unwrap());
    assert_eq!(thread.as_deref(), Some("xpu-callbacks"));
    println!("scenario-ok");
}

/// A panic payload whose own `Drop` panics.
struct PanickingPayload(std::sync::mpsc::Sender<()>);

impl Drop for PanickingPayload {
    fn drop(&mut self) {
        let _ = self.0.send(());
        panic!("the payload's drop panics too");
    }
}

#[test]
fn a_panicking_callback_with_a_panicking_payload_does_not_abort() {
    let Some((dev, _, q)) = common::device0_queue_in_child() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    user.on_complete(move |_| std::panic::panic_any(PanickingPayload(tx)))
        .unwrap();
    user.set_complete().unwrap();
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("the payload was dropped");
    // The payload's drop panicked on the callback thread; once the thread is past it, the
    // process is still alive.
    xpu_device::backend::wait_for_callbacks();
    assert_eq!(xpu_device::backend::live_objects().callbacks, 0);
    // And callbacks keep running afterwards.
    let (tx3, rx3) = std::sync::mpsc::channel();
    q.enqueue_marker(&[])
        .unwrap()
        .on_complete(move |s| {
            let _ = tx3.send(s);
        })
        .unwrap();
    q.flush().unwrap();
    assert_eq!(rx3.recv_timeout(std::time::Duration::from_secs(20)), Ok(0));
    println!("scenario-ok");
}

#[test]
fn forward_to_gives_a_user_event_of_another_context_the_final_status() {
    if !common::have_devices(2) {
        return;
    }
    let (d0, d1) = (
        xpu_device::device(0).unwrap(),
        xpu_device::device(1).unwrap(),
    );
    let (q0, q1) = (common::queue(d0), common::queue(d1));
    // Success only: PoCL 3.1 never calls CL_COMPLETE callbacks of an event that terminated
    // abnormally (a marker after a failed user event stays without callback), so the failure
    // forwarding cannot be observed there.
    for fail in [false] {
        let gate = d0.create_user_event().unwrap();
        let source = q0.enqueue_marker(&[&gate]).unwrap();
        q0.flush().unwrap();
        let bridge = d1.create_user_event().unwrap();
        source.forward_to(&bridge).unwrap();
        let after = q1.enqueue_marker(&[&bridge]).unwrap();
        q1.flush().unwrap();
        assert_eq!(bridge.status().unwrap(), EventStatus::Submitted);
        if fail {
            gate.set_failed(-7).unwrap();
        } else {
            gate.set_complete().unwrap();
        }
        // The forwarding is asynchronous (the driver's callback): wait for a final status.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            match bridge.status().unwrap() {
                EventStatus::Submitted if std::time::Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                s => break s,
            }
        };
        let source_status = source.status().unwrap();
        assert_eq!(status, source_status);
        if fail {
            assert!(matches!(status, EventStatus::Error(_)), "{status:?}");
            assert!(after.wait().is_err());
        } else {
            assert_eq!(status, EventStatus::Complete);
            after.wait().unwrap();
        }
    }
}

/// `complete_when_over`: the target completes when the source completes and also when it
/// fails (an ordering edge that passes no failure on), on another context: a marker behind
/// it runs either way.
#[test]
fn complete_when_over_completes_the_target_whether_the_source_completed_or_failed() {
    if !common::have_devices(2) {
        return;
    }
    let (d0, d1) = (
        xpu_device::device(0).unwrap(),
        xpu_device::device(1).unwrap(),
    );
    let (q0, q1) = (common::queue(d0), common::queue(d1));
    for fail in [false, true] {
        let gate = d0.create_user_event().unwrap();
        let source = q0.enqueue_marker(&[&gate]).unwrap();
        q0.flush().unwrap();
        let bridge = d1.create_user_event().unwrap();
        source.complete_when_over(&bridge).unwrap();
        let after = q1.enqueue_marker(&[&bridge]).unwrap();
        q1.flush().unwrap();
        assert_eq!(bridge.status().unwrap(), EventStatus::Submitted);
        if fail {
            // The runtime passes the failure on itself where the driver makes no callback.
            gate.set_failed(-7).unwrap();
        } else {
            gate.set_complete().unwrap();
        }
        after.wait().unwrap();
        assert_eq!(
            bridge.status().unwrap(),
            EventStatus::Complete,
            "fail: {fail}"
        );
        assert_eq!(
            after.status().unwrap(),
            EventStatus::Complete,
            "fail: {fail}"
        );
        if fail {
            assert!(matches!(source.status().unwrap(), EventStatus::Error(_)));
        }
    }
    // A source that failed before the forward was made completes the target at once.
    let gate = d0.create_user_event().unwrap();
    let source = q0.enqueue_marker(&[&gate]).unwrap();
    gate.set_failed(-7).unwrap();
    q0.finish().ok();
    let bridge = d1.create_user_event().unwrap();
    source.complete_when_over(&bridge).unwrap();
    assert_eq!(bridge.status().unwrap(), EventStatus::Complete);
}

#[test]
fn setting_the_status_of_a_command_event_is_refused() {
    let Some((dev, _, q)) = common::device0_queue_in_child() else {
        return;
    };
    let (mut gate, marker) = common::gated_marker(dev, &q);
    q.flush().unwrap();
    let r = marker.set_complete();
    println!("set_complete on a marker: {r:?}");
    assert_eq!(r.unwrap_err().code, CL_INVALID_EVENT);
    assert_eq!(marker.set_failed(-3).unwrap_err().code, CL_INVALID_EVENT);
    // forward_to a command event: the forwarding is refused too, the marker keeps its course.
    let source = dev.create_user_event().unwrap();
    let r = source.forward_to(&marker);
    println!("forward_to a marker: {r:?}");
    assert_eq!(r.unwrap_err().code, CL_INVALID_EVENT);
    source.set_complete().unwrap();
    gate.open();
    marker.wait().unwrap();
    println!("scenario-ok");
}

#[test]
fn an_event_handed_out_raw_and_taken_back_owned_keeps_one_reference() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let (mut gate, marker) = common::gated_marker(dev, &q);
    let watcher = marker.clone();
    let raw = marker.into_raw();
    assert_eq!(raw, watcher.as_raw());
    // SAFETY: `raw` is a live event whose one reference `into_raw` handed over.
    let back = unsafe { xpu_device::backend::ClEvent::from_raw_owned(raw) };
    q.flush().unwrap();
    assert!(!back.is_complete().unwrap());
    gate.open();
    back.wait().unwrap();
    drop(back);
    // The watcher's reference is still valid: the round trip did not release an extra one.
    assert!(watcher.is_complete().unwrap());
    assert_eq!(watcher.status().unwrap(), EventStatus::Complete);
}

// Wrapped raw events, the callback thread in a bad fork child and user events dropped unset.

/// `CL_INVALID_EVENT`.
const INVALID_EVENT: i32 = -58;

/// A raw user event wrapped with `from_raw_retained` / `from_raw_owned` can be set, as the
/// docs say (`CL_EVENT_COMMAND_TYPE` is `CL_COMMAND_USER`); a wrapped command event cannot.
/// Before: the wrappers queried `CL_EVENT_REFERENCE_COUNT` (0x11D2) instead of
/// `CL_EVENT_COMMAND_TYPE` (0x11D1), so every wrapped user event was refused.
#[test]
fn a_wrapped_raw_user_event_can_be_set_and_a_wrapped_command_event_cannot() {
    let Some((dev, _ctx, q)) = common::device0_queue() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    // SAFETY: a live event, retained by the wrapper.
    let wrapped = unsafe { ClEvent::from_raw_retained(user.as_raw()) }.unwrap();
    wrapped
        .set_complete()
        .expect("a wrapped user event can be set");
    assert_eq!(user.status().unwrap(), EventStatus::Complete);

    let user2 = dev.create_user_event().unwrap();
    // SAFETY: `into_raw` hands over one reference, which the wrapper takes.
    let owned = unsafe { ClEvent::from_raw_owned(user2.clone().into_raw()) };
    owned
        .set_failed(-5)
        .expect("an owned wrapped user event can fail");
    assert_eq!(user2.status().unwrap(), EventStatus::Error(-5));

    let marker = q.enqueue_marker(&[]).unwrap();
    // SAFETY: a live event, retained by the wrapper.
    let wrapped_marker = unsafe { ClEvent::from_raw_retained(marker.as_raw()) }.unwrap();
    let e = wrapped_marker.set_complete().unwrap_err();
    assert_eq!(e.code, INVALID_EVENT, "{e}");
    q.finish().unwrap();
}

/// `wait_for_callbacks` in a bad-fork child returns at once, like every entry point there.
/// Before: the child had the parent's channel but no callback thread, so the wait never
/// returned (the child was killed at the bound).
#[test]
fn wait_for_callbacks_returns_at_once_in_a_bad_fork_child() {
    let Some((dev, _ctx, _q)) = common::device0_queue() else {
        return;
    };
    // Start the callback thread in the parent.
    let user = dev.create_user_event().unwrap();
    user.on_complete(|_| {}).unwrap();
    user.set_complete().unwrap();
    wait_for_callbacks();
    // SAFETY: in the bad-fork child, `is_in_bad_fork` and `wait_for_callbacks` must only make
    // an atomic load before returning (what this test checks); a hang is bounded.
    let exit = unsafe {
        fork::run_in_forked_child(
            || {
                if !fork::is_in_bad_fork() {
                    return 2;
                }
                wait_for_callbacks();
                0
            },
            Duration::from_secs(20),
        )
    }
    .unwrap();
    assert_eq!(exit, ChildExit::Exited(0));
}

/// A user event whose every wrapper dropped unset can never be set (OpenCL 3.0 §5.11.2, on
/// `clReleaseEvent`): the commands waiting on it, and every later `finish` of their queue,
/// would wait forever. The last wrapper's drop fails it instead; a clone still alive keeps
/// it unset, and `into_raw` hands the duty to the raw handle's owner. Runs in a child
/// process: the bug hangs it.
/// Before: `marker.wait()` never returned (the child was killed at its bound).
#[test]
fn a_user_event_dropped_unset_fails_so_its_waiters_do_not_hang() {
    use xpu_device::backend::DROPPED_UNSET_STATUS;
    let Some((dev, _, q)) = common::device0_queue_in_child() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    let kept = user.clone();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    drop(user);
    assert_eq!(
        kept.status().unwrap(),
        EventStatus::Submitted,
        "a clone still lives: unset"
    );
    drop(kept);
    assert!(marker.wait().is_err(), "the waiting marker terminated");
    q.finish().unwrap();
    assert!(matches!(marker.status().unwrap(), EventStatus::Error(_)));

    // Handed out raw: its owner sets it later.
    let user = dev.create_user_event().unwrap();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    let raw = user.clone().into_raw();
    drop(user);
    // SAFETY: `into_raw` gave one reference, taken over here.
    let rewrapped = unsafe { ClEvent::from_raw_owned(raw) };
    assert_eq!(rewrapped.status().unwrap(), EventStatus::Submitted);
    rewrapped.set_complete().unwrap();
    marker.wait().unwrap();

    // Set, then dropped: the status stays.
    let user = dev.create_user_event().unwrap();
    user.set_complete().unwrap();
    let done = q.enqueue_marker(&[&user]).unwrap();
    drop(user);
    done.wait().unwrap();
    assert_eq!(DROPPED_UNSET_STATUS, -14);
    println!("scenario-ok");
}
