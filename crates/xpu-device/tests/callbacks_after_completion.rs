//! `wait_for_callbacks` runs the completion callbacks of every event that has completed or
//! failed by the time it is called, whether or not the driver has handed them over yet: the
//! driver calls a `CL_COMPLETE` callback asynchronously (OpenCL 3.0 §5.11.4), after `clFinish`
//! or an event wait may already have returned. Found as review h43's held test
//! (`bridges_leave_no_live_objects_and_order_completed_and_failed_downloads`) failing 4 of 20
//! runs on PoCL with two busy loops beside it: a callback's captured event was still live
//! after `clFinish` and `wait_for_callbacks`. Failed again in a fresh clone's run (2026-12-08,
//! 1 round of 2,000), then 5 of 120 runs with two busy loops beside it: the driver's callback
//! had taken the registration out and not yet posted it when `wait_for_callbacks` posted its
//! marker; 0 of 120 once it waits for the registrations being posted (`DELIVERING`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// Per round on one queue: a marker behind a user event gets a callback counting its runs;
/// the gate opens, the marker is waited for, `wait_for_callbacks` is called, and the callback
/// must have run (once). 2,000 rounds; the count is checked once the rounds are done too.
#[test]
fn a_completed_events_callback_has_run_once_wait_for_callbacks_returned() {
    if !common::have_devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let q = common::queue(dev);
    let ran = Arc::new(AtomicUsize::new(0));
    let mut late = 0;
    let rounds = 2000;
    for round in 0..rounds {
        let gate = dev.create_user_event().unwrap();
        let marker = q.enqueue_marker(&[&gate]).unwrap();
        let r = Arc::clone(&ran);
        marker
            .on_complete(move |_| {
                r.fetch_add(1, SeqCst);
            })
            .unwrap();
        q.flush().unwrap();
        gate.set_complete().unwrap();
        marker.wait().unwrap();
        xpu_device::backend::wait_for_callbacks();
        if ran.load(SeqCst) != round + 1 {
            late += 1;
        }
    }
    q.finish().unwrap();
    assert_eq!(late, 0, "rounds whose callback had not run");
    xpu_device::backend::wait_for_callbacks();
    assert_eq!(ran.load(SeqCst), rounds, "callbacks run in all");
}
