//! Stream handles: identity, queries, synchronization and errors.

mod common;

use std::collections::HashSet;

use xpu_stream::{
    current_stream, default_stream, get_stream_from_pool, synchronize, StreamError, MAX_DEVICES,
    PRIORITY_HIGH,
};

/// Polls `s.query()` until it answers `true`, for up to 60 s.
fn query_until_true(s: &xpu_stream::Stream) -> bool {
    xpu_testing::true_within(std::time::Duration::from_secs(60), || s.query().unwrap())
}

/// A user event of device 0 and a barrier behind it on `s`: the stream stays busy until the
/// gate is set.
fn gate_on(s: &xpu_stream::Stream) -> xpu_device::backend::ClEvent {
    let gate = xpu_device::device(0).unwrap().create_user_event().unwrap();
    s.enqueue_queue("test gate")
        .unwrap()
        .enqueue_barrier(&[&gate])
        .unwrap();
    gate
}

#[test]
fn identity_debug_and_queue() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(PRIORITY_HIGH, 0).unwrap();
    let copy = s;
    assert_eq!(s, copy);
    let set: HashSet<_> = [s, copy, default_stream(0).unwrap()].into_iter().collect();
    assert_eq!(set.len(), 2);
    assert_eq!(s.priority(), -1);
    assert!(!s.is_default() && !s.is_external());
    assert_eq!(s.as_raw().unwrap(), s.queue().unwrap().as_raw());
    let q = s.queue().unwrap();
    assert!(q.is_in_order().unwrap() && q.has_profiling().unwrap());
    let dbg = format!("{s:?}");
    assert!(dbg.contains("device: 0"), "{dbg}");
    assert!(
        dbg.contains(&format!("queue: {:?}", s.as_raw().unwrap())),
        "{dbg}"
    );
    assert!(dbg.contains("priority: -1"), "{dbg}");
    assert_eq!(xpu_device::HasDevice::device_index(&s), Some(0));
}

#[test]
fn query_and_synchronize() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    s.synchronize().unwrap();
    // Idle after synchronize: a query loop must answer true.
    assert!(
        query_until_true(&s),
        "an idle stream reports query() == true within 60 s"
    );
    synchronize(0).unwrap();
    current_stream(0).unwrap().synchronize().unwrap();
}

/// An idle stream's query answers `true` on the marker an earlier query kept, once it
/// completed and nothing was enqueued on the stream after it: no new marker. A query that
/// enqueued a new marker whenever the kept one completed answered `true` only when that new
/// marker read complete at once, which a driver's status rarely does: on an H100 under
/// load, idle streams' query loops gave up after 100,000 and 1,000,000 polls (2026-12-06),
/// and on PoCL one took 6 ms on average against 19 us for the marker alone (the
/// `query_probe` probe).
#[test]
fn an_idle_stream_answers_true_on_the_marker_its_query_kept() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let gate = gate_on(&s);
    assert!(!s.query().unwrap(), "behind a closed gate");
    let markers = xpu_device::backend::markers_enqueued_on_this_thread;
    let before = markers();
    gate.set_complete().unwrap();
    assert!(
        query_until_true(&s),
        "the idle stream's query answers true within 60 s"
    );
    assert_eq!(
        markers() - before,
        0,
        "markers enqueued after the kept one, with nothing enqueued on the stream"
    );
    // Idle and nothing enqueued since: later queries answer `true` too, without a marker.
    assert!(s.query().unwrap());
    assert_eq!(markers() - before, 0);
    // Work enqueued after the kept marker is not covered by it: the next query asks again.
    let second = gate_on(&s);
    assert!(!s.query().unwrap(), "behind the second gate");
    assert_eq!(markers() - before, 1);
    second.set_complete().unwrap();
    s.synchronize().unwrap();
}

/// A query loop on a stream that is still busy keeps one marker in flight: a query that finds
/// its previous marker pending answers `false` without adding another. Adding one per query
/// (the earlier design) let a polling loop outrun NVIDIA's driver: the markers queued up faster
/// than they completed, so an idle stream's query loop never saw `true`.
#[test]
fn a_query_loop_on_a_busy_stream_keeps_one_marker_in_flight() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let gate = gate_on(&s);
    let markers = xpu_device::backend::markers_enqueued_on_this_thread;
    let before = markers();
    for i in 0..100 {
        assert!(!s.query().unwrap(), "query {i} behind a closed gate");
    }
    assert_eq!(markers() - before, 1, "markers enqueued by 100 queries");

    gate.set_complete().unwrap();
    assert!(
        query_until_true(&s),
        "the stream's query turns true once the gate opened"
    );

    // Work enqueued after the kept marker completed is not covered by it: the next query
    // asks with a new marker and sees the new gate closed.
    let second = gate_on(&s);
    assert!(!s.query().unwrap(), "a query after new gated work");
    second.set_complete().unwrap();
    s.synchronize().unwrap();
}

#[test]
fn invalid_devices_are_typed_errors() {
    if !common::devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    for r in [
        get_stream_from_pool(0, n).map(|_| ()),
        default_stream(n).map(|_| ()),
        current_stream(n).map(|_| ()),
        synchronize(n),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, StreamError::Device(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("device {n} is out of range: {n} device(s) available")
        );
    }
    let e = StreamError::TooManyDevices {
        index: MAX_DEVICES,
        max: MAX_DEVICES,
    };
    assert_eq!(
        e.to_string(),
        "device 128 is beyond the 128 devices the stream layer supports"
    );
}

/// A capture begun on a thread that holds a direct-enqueue permit (a live `DirectQueue`,
/// which a capture's beginning waits for) is refused with `PermitHeld` instead of waiting
/// for itself forever; once the permit is dropped the capture begins, and a direct enqueue
/// is then refused with `Capturing`.
#[test]
fn a_capture_begun_while_the_thread_holds_a_direct_queue_is_refused_not_a_hang() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(PRIORITY_HIGH, 0).unwrap();
    let held = s.enqueue_queue("test").unwrap();
    let e = xpu_stream::CaptureGuard::begin(&s).unwrap_err();
    assert_eq!(
        e,
        StreamError::PermitHeld {
            device: 0,
            id: s.id()
        }
    );
    assert!(!s.is_capturing(), "nothing was marked");
    drop(held);
    let guard = xpu_stream::CaptureGuard::begin(&s).unwrap();
    assert!(s.is_capturing());
    assert!(matches!(
        s.enqueue_queue("test"),
        Err(StreamError::Capturing { device: 0, .. })
    ));
    drop(guard);
    assert!(!s.is_capturing());
    drop(s.enqueue_queue("test").unwrap());
}

/// What a queue numbered (`QueueRef::submission`, taken after an enqueue returned) is known
/// complete, without a driver call, exactly after a synchronize or a `true` query of the
/// stream that began after it: never before, and never for what was numbered after.
#[test]
fn submissions_are_known_complete_after_a_synchronize_or_query_that_began_after_them() {
    if !common::devices(1) {
        return;
    }
    // A stream of its own: no other test synchronizes it meanwhile.
    let ext = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
    let s = ext.stream();
    let q = s.queue().unwrap();
    let mark = || {
        drop(q.enqueue_marker(&[]).unwrap());
        q.submission()
    };
    let first = mark();
    assert!(!q.is_known_complete(first), "nothing synchronized yet");
    s.synchronize().unwrap();
    assert!(q.is_known_complete(first), "after Stream::synchronize");
    let second = mark();
    assert!(second > first);
    assert!(
        !q.is_known_complete(second),
        "numbered after the synchronize"
    );
    assert!(query_until_true(&s), "the stream never went idle");
    assert!(
        q.is_known_complete(second),
        "after Stream::query returned true"
    );
    let third = mark();
    assert!(!q.is_known_complete(third));
    synchronize(0).unwrap();
    assert!(q.is_known_complete(third), "after the device synchronize");
    // Another handle of the same stream sees the same progress.
    assert!(s.queue().unwrap().is_known_complete(third));
}
