//! Failed waits on adopted user events, probes that held: the same-device wait on a user event
//! dropped unset drains, and repeated cross-device waits on failed events never hang.
//!
//! Review h38: event and stream sequences expected to fail that held on commit 711725f
//! (PoCL 3.1, `POCL_DEVICES="pthread pthread"`), kept as evidence.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};

/// How long a call that should return at once may take before it is called hung.
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// The same-device counterpart of finding 1: a user event adopted on one stream, waited for
/// by another stream of the same device (a plain barrier, no forward), then dropped unset:
/// the runtime fails it and the waiting stream drains. Held 3 of 3.
#[test]
fn same_device_wait_on_an_adopted_user_event_dropped_unset_drains() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s0 = common::fresh_stream(0).leak();
    let s1 = common::fresh_stream(0).leak();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted = Event::from_cl_event(user, &s0, EventFlags::default()).unwrap();
    s1.wait_event(&adopted).unwrap();
    drop(adopted);
    assert!(xpu_testing::within(HANG_LIMIT, move || s1.synchronize()).is_some());
}

/// 200 rounds: a device-0 stream blocked by a gate, an event recorded behind it, waited for
/// by a device-1 stream (a forward to a bridge), a marker recorded on device 1, then the
/// gate's event failed: the failure crosses to device 1 every round and nothing hangs. Alone
/// (the probe binary) `live_objects()` also came back to its value before, 1 of 1.
#[test]
fn cross_device_waits_on_failed_events_repeated() {
    if !xpu_testing::devices(2) {
        return;
    }
    let s0 = common::fresh_stream(0).leak();
    let s1 = common::fresh_stream(1).leak();
    let done = xpu_testing::within(HANG_LIMIT, move || {
        for _ in 0..200 {
            let gate = Gate::new(0).unwrap();
            gate.block(&s0).unwrap();
            let e = s0.record_event().unwrap();
            // After the first round, `s0`'s failed gate wait is sticky until `s0` is
            // synchronized: the wait reports it (review h67's fix), which is no hang either.
            if s1.wait_event(&e).is_err() {
                gate.open().unwrap();
                let _ = s0.synchronize();
                continue;
            }
            let after = s1.record_event().unwrap();
            gate.as_cl_event().set_failed(-5).unwrap();
            let _ = after.synchronize();
        }
        let _ = s0.synchronize();
        let _ = s1.synchronize();
        xpu_device::backend::wait_for_callbacks();
    });
    assert!(done.is_some());
}
