//! Events: user-event gates, markers, barriers, status and profiling timestamps.

mod common;

use xpu_device::backend::{EventStatus, ProfilingInfo, QueueOptions};

const CL_INVALID_OPERATION: i32 = -59;
const CL_INVALID_VALUE: i32 = -30;
const CL_PROFILING_INFO_NOT_AVAILABLE: i32 = -7;

#[test]
fn user_event_gates_a_marker() {
    let Some(dev) = common::device0("user_event_gates_a_marker") else {
        return;
    };
    let q = common::queue(dev);
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
    let Some(dev) = common::device0("barrier_holds_later_commands_of_the_queue") else {
        return;
    };
    let q = common::queue(dev);
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
    let Some(dev) = common::device0("failed_user_event_fails_its_waiters") else {
        return;
    };
    let q = common::queue(dev);
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
    let Some(dev) = common::device0("marker_profiling_timestamps_are_ordered") else {
        return;
    };
    let q = common::queue(dev);
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
    let Some(dev) =
        common::device0("user_event_refuses_a_non_negative_failure_status_and_stays_unset")
    else {
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
