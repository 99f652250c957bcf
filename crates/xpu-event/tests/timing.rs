//! elapsed_time: its four preconditions, in order, and real timings around a kernel.

mod common;

use xpu_device::backend::{Buffer, MemFlags};
use xpu_event::Gate;
use xpu_event::{Event, EventError, StreamExt};
use xpu_stream::get_stream_from_pool;

/// Device work that takes measurable time: fills of a 64 MiB buffer. (Kernel launches are
/// `unsafe`, which no crate but xpu-device may contain, tests included.)
#[test]
fn elapsed_time_is_positive_and_ordered_around_device_work() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let ctx = dev.context().unwrap();
    let n = 64usize << 20;
    let out = Buffer::new(ctx, n, MemFlags::default()).unwrap();

    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    let mut ev = [Event::timing(), Event::timing(), Event::timing()];
    ev[0].record(&s).unwrap();
    q.fill(&out, &0x11u32.to_ne_bytes(), 0, n, &[]).unwrap();
    ev[1].record(&s).unwrap();
    q.fill(&out, &0x2233_4455u32.to_ne_bytes(), 0, n, &[])
        .unwrap();
    ev[2].record(&s).unwrap();
    ev[2].synchronize().unwrap();

    let first = ev[0].elapsed_time(&ev[1]).unwrap();
    let second = ev[1].elapsed_time(&ev[2]).unwrap();
    let both = ev[0].elapsed_time(&ev[2]).unwrap();
    assert!(first > 0.0 && second > 0.0, "{first} {second}");
    assert!(
        (both - (first + second)).abs() < 1e-6,
        "{both} vs {first} + {second}"
    );
    assert!(ev[2].elapsed_time(&ev[0]).unwrap() < 0.0);

    let mut host = vec![0u8; 16];
    for at in [0usize, n / 2, n - 16] {
        q.read(&out, at, &mut host).unwrap();
        for c in host.chunks_exact(4) {
            assert_eq!(
                u32::from_ne_bytes(c.try_into().unwrap()),
                0x2233_4455,
                "at {at}"
            );
        }
    }
}

#[test]
fn elapsed_time_preconditions_in_cuda_order() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    // 1. timing, checked first: even unrecorded events report it.
    let (plain, timing) = (Event::default(), Event::timing());
    for (a, b) in [(&plain, &timing), (&timing, &plain)] {
        let e = a.elapsed_time(b).unwrap_err();
        assert_eq!(e, EventError::TimingNotEnabled);
        assert_eq!(
            e.to_string(),
            "both events must be created with enable_timing = true"
        );
    }
    // 2. recorded.
    let mut start = Event::timing();
    let e = start.elapsed_time(&Event::timing()).unwrap_err();
    assert_eq!(e, EventError::NotRecorded);
    assert_eq!(
        e.to_string(),
        "both events must be recorded before calculating elapsed time"
    );
    start.record(&s).unwrap();
    assert_eq!(
        start.elapsed_time(&Event::timing()).unwrap_err(),
        EventError::NotRecorded
    );
    // 4. completed: hold the end back with a gate.
    let ext = common::fresh_stream(0);
    let gated = ext.stream();
    let mut end = Event::timing();
    let gate = Gate::new(0).unwrap();
    gate.block(&gated).unwrap();
    end.record(&gated).unwrap();
    start.synchronize().unwrap();
    let e = start.elapsed_time(&end).unwrap_err();
    assert_eq!(e, EventError::NotCompleted);
    assert_eq!(
        e.to_string(),
        "both events must be completed before calculating elapsed time"
    );
    gate.open().unwrap();
    end.synchronize().unwrap();
    assert!(start.elapsed_time(&end).unwrap().is_finite());
}

#[test]
fn elapsed_time_across_devices_is_an_error() {
    if !common::devices(2) {
        return;
    }
    let a = get_stream_from_pool(0, 0).unwrap();
    let b = get_stream_from_pool(0, 1).unwrap();
    let (mut x, mut y) = (Event::timing(), Event::timing());
    x.record(&a).unwrap();
    y.record(&b).unwrap();
    x.synchronize().unwrap();
    y.synchronize().unwrap();
    let e = x.elapsed_time(&y).unwrap_err();
    assert_eq!(e, EventError::DifferentDevices { start: 0, end: 1 });
    assert_eq!(
        e.to_string(),
        "both events must be on the same device to calculate elapsed time (start on device 0, end on device 1)"
    );
    let _ = a.record_event();
}

/// A user event has no profiling information (OpenCL 3.0 §5.14: `clGetEventProfilingInfo`
/// of a user event is `CL_PROFILING_INFO_NOT_AVAILABLE`), so adopting one with
/// `enable_timing` is refused at once with a typed error that says why, rather than accepted
/// and failing later in `elapsed_time` with the driver's raw code. Without timing it is
/// adopted as before.
#[test]
fn a_user_event_adopted_with_enable_timing_is_refused_with_a_typed_error() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let timing = xpu_event::EventFlags {
        enable_timing: true,
        blocking: false,
    };
    let err = Event::from_cl_event(user.clone(), &s, timing).unwrap_err();
    assert_eq!(
        err,
        EventError::UserEventTiming { device: s.device() },
        "{err}"
    );
    let adopted = Event::from_cl_event(user.clone(), &s, xpu_event::EventFlags::default())
        .expect("without timing");
    user.set_complete().unwrap();
    adopted.synchronize().unwrap();
    assert!(adopted.query().unwrap());
}
