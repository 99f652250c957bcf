//! Events adopted from foreign OpenCL events (`Event::from_cl_event`) order work as recorded
//! markers do.

mod common;

use common::ever_true;
use xpu_event::{Event, EventFlags, StreamExt};

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
