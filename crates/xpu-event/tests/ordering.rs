//! Cross-stream ordering, made deterministic with gates, and concurrent use from 8 threads;
//! events adopted from foreign OpenCL events order work as recorded markers do.

mod common;

use std::sync::Arc;

use xpu_event::{Event, EventFlags, Gate, StreamExt};
use xpu_stream::{current_stream, get_stream_from_pool, ExternalStream, Stream};

use common::ever_true;

#[test]
fn wait_stream_orders_work() {
    if !common::devices(1) {
        return;
    }
    let (ea, eb, ec) = (
        common::fresh_stream(0),
        common::fresh_stream(0),
        common::fresh_stream(0),
    );
    let (a, b, control) = (ea.stream(), eb.stream(), ec.stream());
    let gate = Gate::new(0).unwrap();
    gate.block(&a).unwrap();
    b.wait_stream(&a).unwrap();
    let waiting = b.record_event().unwrap();
    // The same marker on a stream that did not wait completes: the gate alone does not hold b.
    let free = control.record_event().unwrap();
    free.synchronize().unwrap();
    common::assert_held_by(&gate, &waiting);
    assert!(waiting.query().unwrap());
}

/// On fresh streams `a` (device `da`, held by a gate) and `b` (device `db`): `b` waits for
/// an event recorded on `a`, then `between(a, b)` runs; asserts that what `b` records next is
/// held by the gate and that the event on `a` has completed once the gate opened. Returns
/// the streams.
fn wait_event_held_by_gate(
    da: usize,
    db: usize,
    between: impl FnOnce(&Stream, &Stream),
) -> (ExternalStream, ExternalStream) {
    let (ea, eb) = (common::fresh_stream(da), common::fresh_stream(db));
    let (a, b) = (ea.stream(), eb.stream());
    let gate = Gate::new(da).unwrap();
    gate.block(&a).unwrap();
    let on_a = a.record_event().unwrap();
    b.wait_event(&on_a).unwrap();
    between(&a, &b);
    let after = b.record_event().unwrap();
    common::assert_held_by(&gate, &after);
    assert!(on_a.query().unwrap());
    (ea, eb)
}

#[test]
fn wait_event_and_self_wait() {
    if !common::devices(1) {
        return;
    }
    // Between the two, `a` waits for itself: a no-op.
    drop(wait_event_held_by_gate(0, 0, |a, _| {
        a.wait_stream(a).unwrap()
    }));
}

#[test]
fn wait_event_across_devices() {
    if !common::devices(2) {
        return;
    }
    let (e0, e1) = wait_event_held_by_gate(0, 1, |_, _| {});
    let (s0, s1) = (e0.stream(), e1.stream());
    // A completed event of another device: nothing left to wait for.
    s1.wait_stream(&s0).unwrap();
    s1.record_event().unwrap().synchronize().unwrap();
}

#[test]
fn streams_and_events_from_8_threads() {
    if !common::devices(1) {
        return;
    }
    let shared = {
        let mut e = Event::timing();
        e.record(&get_stream_from_pool(0, 0).unwrap()).unwrap();
        Arc::new(e)
    };
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                assert!(current_stream(0).unwrap().is_default());
                let mine = get_stream_from_pool(t % 3 - 1, 0).unwrap();
                let next = get_stream_from_pool(0, 0).unwrap();
                let mut last = Event::timing();
                for i in 0..50 {
                    shared.wait(&mine).unwrap();
                    mine.wait_stream(&next).unwrap();
                    let _ = shared.query().unwrap();
                    last.record(&mine).unwrap();
                    if i % 10 == 0 {
                        last.synchronize().unwrap();
                        assert!(last.query().unwrap());
                    }
                }
                shared.synchronize().unwrap();
                mine.synchronize().unwrap();
                assert!(last.query().unwrap());
                assert!(shared.elapsed_time(&last).unwrap() >= 0.0);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    xpu_stream::synchronize(0).unwrap();
}

// Events adopted from foreign OpenCL events (`Event::from_cl_event`) order work as recorded
// markers do.

/// A user event adopted on stream `s` is no command of `s`'s queue: `s.wait_event` must
/// enqueue a real wait for it (the in-order shortcut for the event's own stream does not
/// apply), so what `s` runs next stays held until the user event is set.
#[test]
fn wait_event_on_its_own_stream_waits_for_an_adopted_user_event() {
    let Some([s]) = common::device_streams() else {
        return;
    };
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user.clone(), &s, EventFlags::default()).unwrap();
    assert!(!adopted.query().unwrap(), "a user event starts unset");
    s.wait_event(&adopted).unwrap();
    let after = s.record_event().unwrap();
    let completed_early = ever_true(2_000, || after.query().unwrap());
    user.set_complete().unwrap();
    after.synchronize().unwrap();
    assert!(
        !completed_early,
        "work enqueued on the stream after wait_event ran before the user event was set"
    );
    assert!(adopted.query().unwrap());
}

/// The same through `Event::wait` from another stream of the device (the ordinary path),
/// for comparison: held until the user event is set.
#[test]
fn wait_event_on_another_stream_waits_for_an_adopted_user_event() {
    let Some([a, b]) = common::device_streams() else {
        return;
    };
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user.clone(), &a, EventFlags::default()).unwrap();
    b.wait_event(&adopted).unwrap();
    let after = b.record_event().unwrap();
    let completed_early = ever_true(2_000, || after.query().unwrap());
    user.set_complete().unwrap();
    after.synchronize().unwrap();
    assert!(!completed_early);
}
