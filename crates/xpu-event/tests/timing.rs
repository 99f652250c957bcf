//! elapsed_time: its four preconditions, in order, and real timings around a kernel.

mod common;

use xpu_device::backend::{Buffer, Kernel, MemFlags, Program};
use xpu_event::test_support::Gate;
use xpu_event::{Event, EventError, StreamExt};
use xpu_stream::get_stream_from_pool;

const SOURCE: &str = r#"
__kernel void lcg(__global uint *out, uint rounds) {
    uint x = get_global_id(0);
    for (uint k = 0; k < rounds; ++k) { x = x * 1664525u + 1013904223u; }
    out[get_global_id(0)] = x;
}
"#;

fn lcg(i: u32, rounds: u32) -> u32 {
    (0..rounds).fold(i, |x, _| x.wrapping_mul(1664525).wrapping_add(1013904223))
}

#[test]
fn elapsed_time_is_positive_and_ordered_around_a_kernel() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let ctx = dev.context().unwrap();
    let program = Program::build(ctx, dev.id(), SOURCE).unwrap();
    let mut kernel = Kernel::new(&program, "lcg").unwrap();
    let n = 4096usize;
    let rounds = 20_000u32;
    let out = Buffer::new(ctx, n * 4, MemFlags::default()).unwrap();
    kernel.set_arg_buffer(0, &out).unwrap();
    kernel.set_arg(1, rounds).unwrap();

    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    let mut ev = [Event::timing(), Event::timing(), Event::timing()];
    ev[0].record(&s).unwrap();
    q.enqueue_kernel(&kernel, &[n], None, &[]).unwrap();
    ev[1].record(&s).unwrap();
    q.enqueue_kernel(&kernel, &[n], None, &[]).unwrap();
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

    let mut host = vec![0u8; n * 4];
    q.read(&out, 0, &mut host).unwrap();
    for i in [0usize, 1, 777, n - 1] {
        let got = u32::from_ne_bytes(host[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(got, lcg(i as u32, rounds), "work-item {i}");
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
