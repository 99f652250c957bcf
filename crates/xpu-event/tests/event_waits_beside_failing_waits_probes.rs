//! Failing waits on one stream beside other calls, probes that held: `Stream::synchronize` beside
//! failing waits, and an adopted user event the application still holds is not failed by a
//! cross-device forward.
//!
//! Review h40: sequences expected to fail that held on commit 14b0fa5 (PoCL 3.1,
//! `POCL_DEVICES="pthread pthread"`), kept as evidence; counts of separate runs in each
//! test's comment.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, StreamExt};

const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Runs `f` on a helper thread; `None` when it did not return within [`HANG_LIMIT`].
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG_LIMIT).ok()
}

const STEPS: usize = 5_000;

/// `STEPS` times: a user event adopted on `other`, waited for by `s`, then failed.
fn failing_waits(s: &xpu_stream::Stream, other: &xpu_stream::Stream) {
    for _ in 0..STEPS {
        let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
        let adopted = Event::from_cl_event(user.clone(), other, EventFlags::default()).unwrap();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
    }
}

/// Host waits (no enqueue) beside failing waits on one stream: `s.synchronize()` on thread
/// B, 5,000 steps each. 0 of 20 runs ended the process (alone, each in its own process).
#[test]
fn stream_synchronize_beside_failing_waits_on_one_stream() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = common::fresh_stream(0).leak();
    let other = common::fresh_stream(0).leak();
    std::thread::scope(|scope| {
        scope.spawn(|| failing_waits(&s, &other));
        scope.spawn(|| {
            for _ in 0..STEPS {
                let _ = s.synchronize();
            }
        });
    });
    let _ = s.synchronize();
}

/// Change 2 through xpu-event: the application keeps the user event it adopted; the adopted
/// `Event` (waited for by a device-1 stream through a forward) is dropped. The forward's clone
/// is unguarded, the application's is not: the event stays unset, device 1's stream stays
/// held, and setting the event complete releases it. Held 3 of 3.
#[test]
fn an_adopted_user_event_the_application_still_holds_is_not_failed_by_the_forward() {
    if !xpu_testing::devices(2) {
        return;
    }
    let s0 = common::fresh_stream(0).leak();
    let s1 = common::fresh_stream(1).leak();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user.clone(), &s0, EventFlags::default()).unwrap();
    s1.wait_event(&adopted).unwrap();
    drop(adopted);
    let _ = xpu_device::live_objects();
    let marker = s1.record_event().unwrap();
    assert_eq!(
        user.status().unwrap(),
        xpu_device::backend::EventStatus::Submitted
    );
    assert!(!marker.query().unwrap(), "device 1's stream was let go");
    user.set_complete().unwrap();
    let r = within(move || s1.synchronize().is_ok());
    assert_eq!(r, Some(true));
    assert!(marker.query().unwrap());
}
