//! Event semantics: lazy creation, record, query, synchronize, errors.

mod common;

use xpu_event::Gate;
use xpu_event::{Event, EventError, EventFlags, StreamExt};
use xpu_stream::{get_stream_from_pool, ExternalStream, StreamGuard};

#[test]
fn event_is_send_sync_and_unrecorded_semantics() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Event>();
    let e = Event::default();
    assert_eq!(e.flags(), EventFlags::default());
    assert!(!e.is_recorded());
    assert_eq!(e.device(), None);
    assert_eq!(e.as_raw(), None);
    assert_eq!(xpu_device::HasDevice::device_index(&e), None);
    assert!(e.query().unwrap(), "never recorded: query() is true");
    e.synchronize().unwrap();
    assert!(format!("{e:?}").contains("uninitialized"));
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    e.wait(&s).unwrap(); // no-op
}

#[test]
fn record_query_synchronize_and_rerecord() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let mut e = Event::new(EventFlags {
        enable_timing: false,
        blocking: true,
    });
    e.record(&s).unwrap();
    assert_eq!(e.device(), Some(0));
    assert_eq!(e.stream(), Some(s));
    let first = e.as_raw().unwrap();
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
    e.record(&s).unwrap();
    assert_ne!(
        e.as_raw().unwrap(),
        first,
        "re-recording captures a new marker"
    );
    // A pure query loop terminates: query flushes the queue when polled again.
    assert!(common::ever_true(1_000_000, || e.query().unwrap()));
    let dbg = format!("{e:?}");
    assert!(
        dbg.contains("device: 0") && dbg.contains("cl_event"),
        "{dbg}"
    );
}

#[test]
fn record_current_uses_the_current_stream() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(-1, 0).unwrap();
    let _g = StreamGuard::new(s).unwrap();
    let mut e = Event::default();
    e.record_current().unwrap();
    assert_eq!(e.stream(), Some(s));
    e.synchronize().unwrap();
}

#[test]
fn rerecord_on_another_device_is_an_error() {
    if !common::devices(2) {
        return;
    }
    let mut e = Event::default();
    e.record(&get_stream_from_pool(0, 0).unwrap()).unwrap();
    let err = e.record(&get_stream_from_pool(0, 1).unwrap()).unwrap_err();
    assert_eq!(
        err,
        EventError::DeviceMismatch {
            event: 0,
            stream: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "event device 0 does not match recording stream's device 1"
    );
    assert_eq!(e.device(), Some(0), "the failed record changed nothing");
}

#[test]
fn timing_on_a_queue_without_profiling_is_an_error() {
    if !common::devices(1) {
        return;
    }
    let q = xpu_device::device(0)
        .unwrap()
        .create_queue(xpu_device::backend::QueueOptions::default())
        .unwrap();
    let ext = ExternalStream::new(q, 0).unwrap();
    let s = ext.stream();
    let err = Event::timing().record(&s).unwrap_err();
    assert_eq!(
        err,
        EventError::TimingUnavailable {
            stream: s.id(),
            device: 0
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "event has enable_timing but the queue of stream {:#x} on device 0 was created \
             without CL_QUEUE_PROFILING_ENABLE",
            s.id()
        )
    );
    // Without timing, the same stream records fine.
    s.record_event().unwrap().synchronize().unwrap();
}

#[test]
fn gate_holds_a_stream_back_until_opened() {
    if !common::devices(1) {
        return;
    }
    let ext = common::fresh_stream(0);
    let s = ext.stream();
    let gate = Gate::new(0).unwrap();
    assert_eq!(gate.device(), 0);
    gate.block(&s).unwrap();
    let e = s.record_event().unwrap();
    assert!(!common::ever_true(2_000, || e.query().unwrap()));
    assert!(!gate.is_open());
    gate.open().unwrap();
    gate.open().unwrap(); // idempotent
    assert!(gate.is_open());
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
}

#[test]
fn gate_of_another_device_is_an_error() {
    if !common::devices(2) {
        return;
    }
    let gate = Gate::new(0).unwrap();
    let err = gate
        .block(&get_stream_from_pool(0, 1).unwrap())
        .unwrap_err();
    assert_eq!(err, EventError::GateDevice { gate: 0, stream: 1 });
    assert_eq!(
        err.to_string(),
        "gate of device 0 cannot block a stream of device 1"
    );
}
