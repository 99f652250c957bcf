//! Ordinary event semantics as torch.cuda / torch.xpu have them: a never-recorded event,
//! `elapsed_time`'s errors in CUDA's order, re-recording, cross-device `wait`, `wait_stream`, exact
//! `query` after synchronizes.
//!
//! Review h81: passing probes of ordinary event semantics that match torch.cuda / torch.xpu
//! (reference `shared/reference/pytorch-runtime.md` §3, §2.6). Ordering by gates only.

mod common;

use xpu_device::backend::{live_objects, wait_for_callbacks};
use xpu_event::{Event, EventError, EventFlags, Gate, StreamExt};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};

fn pool(device: usize) -> Stream {
    get_stream_from_pool(PRIORITY_NORMAL, device).unwrap()
}

/// §3: a never-recorded event: `query` true, `synchronize` and `wait` no-ops, no device, no
/// handle; Debug says uninitialized.
#[test]
fn a_never_recorded_event() {
    if !common::devices(1) {
        return;
    }
    let e = Event::default();
    assert!(e.query().unwrap());
    e.synchronize().unwrap();
    e.wait(&pool(0)).unwrap();
    assert_eq!((e.device(), e.as_raw(), e.stream()), (None, None, None));
    assert!(!e.is_recorded());
    assert!(format!("{e:?}").contains("uninitialized"));
    assert_eq!(e.flags(), EventFlags::default());
}

/// §3 `elapsed_time`, CUDA's order: timing first, then recorded, then completed.
#[test]
fn elapsed_time_errors_in_cuda_order() {
    if !common::devices(2) {
        return;
    }
    let s = pool(0);
    let plain_unrecorded = Event::default();
    let timing_unrecorded = Event::timing();
    assert_eq!(
        timing_unrecorded.elapsed_time(&plain_unrecorded),
        Err(EventError::TimingNotEnabled)
    );
    assert_eq!(
        timing_unrecorded.elapsed_time(&timing_unrecorded),
        Err(EventError::NotRecorded)
    );
    let mut plain = Event::default();
    plain.record(&s).unwrap();
    plain.synchronize().unwrap();
    assert_eq!(
        plain.elapsed_time(&plain),
        Err(EventError::TimingNotEnabled)
    );

    let gate = Gate::new(0).unwrap();
    let mut start = Event::timing();
    start.record(&s).unwrap();
    gate.block(&s).unwrap();
    let mut end = Event::timing();
    end.record(&s).unwrap();
    assert_eq!(
        start.elapsed_time(&timing_unrecorded),
        Err(EventError::NotRecorded)
    );
    assert_eq!(start.elapsed_time(&end), Err(EventError::NotCompleted));
    gate.open().unwrap();
    end.synchronize().unwrap();
    let ms = start.elapsed_time(&end).unwrap();
    assert!(ms >= 0.0, "{ms}");
    assert!(end.elapsed_time(&start).unwrap() <= 0.0);
    assert_eq!(end.elapsed_time(&end).unwrap(), 0.0);
    let mut other = Event::timing();
    other.record(&pool(1)).unwrap();
    other.synchronize().unwrap();
    assert_eq!(
        start.elapsed_time(&other),
        Err(EventError::DifferentDevices { start: 0, end: 1 })
    );
}

/// §3: re-recording replaces the captured point (a gated first record no longer matters);
/// recording on another device's stream later is an error and keeps the event as it was.
#[test]
fn an_event_recorded_twice() {
    if !common::devices(2) {
        return;
    }
    let gated = pool(0);
    let free = pool(0);
    let gate = Gate::new(0).unwrap();
    gate.block(&gated).unwrap();
    let mut e = Event::default();
    e.record(&gated).unwrap();
    let first = e.as_raw();
    assert!(!e.query().unwrap());
    e.record(&free).unwrap();
    assert_ne!(e.as_raw(), first);
    assert_eq!(e.stream(), Some(free));
    e.synchronize().unwrap();
    assert!(
        e.query().unwrap(),
        "the second point completed; the first is gated"
    );
    let kept = e.as_raw();
    assert_eq!(
        e.record(&pool(1)),
        Err(EventError::DeviceMismatch {
            event: 0,
            stream: 1
        })
    );
    assert_eq!((e.as_raw(), e.device()), (kept, Some(0)));
    gate.open().unwrap();
    gated.synchronize().unwrap();
}

/// §3 `wait`: any device's stream may wait; the host never blocks; the waiting stream's
/// later work is held until the event's work ran. Live OpenCL objects are back at their
/// baseline once the callbacks ran (the bridge user event and its forward are released).
#[test]
fn wait_on_a_stream_of_another_device_orders_and_leaks_nothing() {
    if !common::devices(2) {
        return;
    }
    let (s0, s1) = (pool(0), pool(1));
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    wait_for_callbacks();
    let base = live_objects();
    {
        let gate = Gate::new(0).unwrap();
        gate.block(&s0).unwrap();
        let e = s0.record_event().unwrap();
        e.wait(&s1).unwrap(); // returns: the host is not blocked
        let after = s1.record_event().unwrap();
        common::assert_held_by(&gate, &after);
        assert!(e.query().unwrap());
        // wait_stream both ways across devices, and on itself (a no-op).
        s1.wait_stream(&s0).unwrap();
        s0.wait_stream(&s1).unwrap();
        s0.wait_stream(&s0).unwrap();
        s0.synchronize().unwrap();
        s1.synchronize().unwrap();
    }
    wait_for_callbacks();
    assert_eq!(live_objects(), base);
}

/// §2.6: `wait_stream` orders the waiting stream after the other's work so far (same device),
/// without blocking the host; `record_event` makes a timing-disabled event.
#[test]
fn wait_stream_on_one_device() {
    if !common::devices(1) {
        return;
    }
    let (a, b) = (pool(0), pool(0));
    let gate = Gate::new(0).unwrap();
    gate.block(&a).unwrap();
    b.wait_stream(&a).unwrap();
    let on_b = b.record_event().unwrap();
    assert!(!on_b.flags().enable_timing);
    common::assert_held_by(&gate, &on_b);
}

/// `blocking` events synchronize; an event's `query` is exact after a synchronize of its
/// stream, of the device, and after its own synchronize (§3, architecture.md's table).
#[test]
fn query_is_exact_after_synchronizes() {
    if !common::devices(1) {
        return;
    }
    let s = pool(0);
    for round in 0..3 {
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut e = Event::new(EventFlags {
            enable_timing: true,
            blocking: true,
        });
        e.record(&s).unwrap();
        assert!(!e.query().unwrap());
        gate.open().unwrap();
        match round {
            0 => e.synchronize().unwrap(),
            1 => s.synchronize().unwrap(),
            _ => xpu_stream::synchronize(0).unwrap(),
        }
        assert!(e.query().unwrap(), "round {round}");
    }
}
