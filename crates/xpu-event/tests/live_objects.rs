//! Cross-stream waits leak no OpenCL object: after 10,000 waits within a device and 10,000
//! across devices (each with a bridge user event), every live object count of the backend is
//! back to its baseline once the streams are synchronized. One test in this binary, so no
//! other test's objects move the counts.

mod common;

use xpu_device::backend::wait_for_callbacks;
use xpu_device::live_objects;
use xpu_event::Gate;
use xpu_event::StreamExt;

const WAITS: usize = 10_000;

#[test]
fn ten_thousand_cross_stream_waits_leave_no_live_object_behind() {
    if !common::devices(1) {
        return;
    }
    let (a, b) = (common::fresh_stream(0), common::fresh_stream(0));
    let (a, b) = (a.stream(), b.stream());
    let other = (xpu_device::device_count() >= 2).then(|| common::fresh_stream(1));
    let c = other.as_ref().map(|s| s.stream());
    // Warm up whatever is created once per stream or device.
    b.wait_stream(&a).unwrap();
    if let Some(c) = &c {
        c.wait_stream(&a).unwrap();
        c.synchronize().unwrap();
    }
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    wait_for_callbacks();
    let baseline = live_objects();

    // Within a device: a marker on `a`, a barrier on `b`, per wait.
    for _ in 0..WAITS {
        b.wait_stream(&a).unwrap();
    }
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    assert_eq!(
        live_objects(),
        baseline,
        "after {WAITS} waits within device 0"
    );

    // Across devices: `a` is held back by a gate, so every wait needs a bridge user event
    // on device 1, set by the driver's callback when `a`'s marker completes.
    if let Some(c) = &c {
        let gate = Gate::new(0).unwrap();
        gate.block(&a).unwrap();
        for _ in 0..WAITS {
            c.wait_stream(&a).unwrap();
        }
        assert!(
            live_objects().events > baseline.events,
            "bridges are pending"
        );
        gate.open().unwrap();
        drop(gate);
        c.synchronize().unwrap();
        a.synchronize().unwrap();
        wait_for_callbacks();
        assert_eq!(
            live_objects(),
            baseline,
            "after {WAITS} waits across devices"
        );
    }
}
