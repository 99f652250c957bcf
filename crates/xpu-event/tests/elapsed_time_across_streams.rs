//! `elapsed_time` between timing events of two streams of one device, and records / re-records /
//! elapsed-time queries leaving no live OpenCL object behind.
//!
//! Review h67 of xpu-event: probes that found nothing (they pass). `elapsed_time` between
//! timing events recorded on two streams of one device, ordered by a gate (positive, and
//! `NotCompleted` while the end is held); its checks on an unrecorded event and on a
//! timing-less one after recording; re-recording and elapsed-time queries leave no driver
//! object behind (`live_objects` back to its baseline).
//! One binary of its own so that no other test moves the live-object counts; the tests
//! here take a lock so that they do not run beside each other.

mod common;

use std::sync::Mutex;

use xpu_device::backend::wait_for_callbacks;
use xpu_device::live_objects;
use xpu_event::{Event, EventError, EventFlags, Gate};

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn elapsed_time_across_two_streams_of_one_device_follows_their_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some([a, b]) = common::device_streams::<2>() else {
        return;
    };
    let mut start = Event::timing();
    start.record(&a).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&b).unwrap();
    start.wait(&b).unwrap();
    let mut end = Event::timing();
    end.record(&b).unwrap();
    start.synchronize().unwrap();
    assert!(matches!(
        start.elapsed_time(&end),
        Err(EventError::NotCompleted)
    ));
    gate.open().unwrap();
    end.synchronize().unwrap();
    let ms = start.elapsed_time(&end).unwrap();
    assert!(ms >= 0.0, "{ms}");
    assert!(end.elapsed_time(&start).unwrap() <= 0.0);
    // Checks in CUDA's order, also with one side recorded.
    let unrecorded = Event::timing();
    assert!(matches!(
        start.elapsed_time(&unrecorded),
        Err(EventError::NotRecorded)
    ));
    let mut plain = Event::new(EventFlags::default());
    plain.record(&a).unwrap();
    plain.synchronize().unwrap();
    assert!(matches!(
        start.elapsed_time(&plain),
        Err(EventError::TimingNotEnabled)
    ));
}

#[test]
fn records_rerecords_and_elapsed_times_leave_no_live_object_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some([a, b]) = common::device_streams::<2>() else {
        return;
    };
    let mut e = Event::timing();
    e.record(&a).unwrap();
    e.synchronize().unwrap();
    a.synchronize().unwrap();
    wait_for_callbacks();
    let baseline = live_objects();
    for i in 0..2_000 {
        let s = if i % 2 == 0 { &a } else { &b };
        let mut f = Event::timing();
        f.record(s).unwrap();
        e.record(s).unwrap();
        e.wait(if i % 2 == 0 { &b } else { &a }).unwrap();
        f.synchronize().unwrap();
        e.synchronize().unwrap();
        let _ = f.elapsed_time(&e).unwrap();
    }
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    wait_for_callbacks();
    assert_eq!(live_objects(), baseline, "the one recorded event");
}
