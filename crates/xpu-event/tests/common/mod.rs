//! Device checks shared by the tests of this crate (mostly the workspace's test crate).
#![allow(unused_imports)]

pub use xpu_testing::{devices, ever_true};

/// A stream on its own new queue (an external stream), so that gating it never holds back a
/// pool stream that another test running concurrently may use.
#[allow(dead_code)]
pub fn fresh_stream(device: usize) -> xpu_stream::ExternalStream {
    xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(device), device).unwrap()
}

/// `N` [`fresh_stream`]s of device 0, leaked (registered until the process exits); `None`
/// (the test is skipped) without a device ([`devices`]).
#[allow(dead_code)]
pub fn device_streams<const N: usize>() -> Option<[xpu_stream::Stream; N]> {
    devices(1).then(|| std::array::from_fn(|_| fresh_stream(0).leak()))
}

/// Asserts that `event` stays incomplete while `gate` is closed (2,000 queries), then opens
/// the gate and waits for the event.
#[allow(dead_code)]
pub fn assert_held_by(gate: &xpu_event::Gate, event: &xpu_event::Event) {
    assert!(!ever_true(2_000, || event.query().unwrap()));
    gate.open().unwrap();
    event.synchronize().unwrap();
}

/// Time a child scenario ([`in_child`]) gets before it is killed (it takes well under a
/// second).
#[allow(dead_code)]
pub const SCENARIO_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// What a child scenario prints once it ran to its end ([`in_child`]).
#[allow(dead_code)]
pub const SCENARIO_DONE: &str = "xpu-event scenario done";

/// Runs `body` as `scenario` in a child process (the calling test re-run) and asserts that
/// the child ran it to its end (exit 0, [`SCENARIO_DONE`] printed, within
/// [`SCENARIO_BOUND`]): an abort inside the driver, or a hang, fails the test instead of the
/// suite. Skipped (in the parent) without `devices` devices.
#[allow(dead_code)]
pub fn in_child(scenario: &str, devices: usize, body: fn()) {
    if xpu_testing::scenario().is_some() {
        body();
        println!("{SCENARIO_DONE}");
        return;
    }
    let test = xpu_testing::child::test_name();
    if xpu_testing::have_devices(devices, &test) {
        xpu_testing::assert_scenario_done(&test, scenario, SCENARIO_BOUND, SCENARIO_DONE);
    }
}

/// A fresh user event of device 0 adopted on a stream of its own: what a stream can be made
/// to wait on, then failed. Returns the adopted event and its user event.
#[allow(dead_code)]
pub fn failable() -> (xpu_event::Event, xpu_device::backend::ClEvent) {
    let other = fresh_stream(0).leak();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted =
        xpu_event::Event::from_cl_event(user.clone(), &other, xpu_event::EventFlags::default())
            .unwrap();
    (adopted, user)
}

/// Synchronizes `s` after a failed wait of it: PoCL's `clFinish` succeeds (`Ok`, required
/// there); NVIDIA's reports the failed commands once (an error), and the stream is drained
/// all the same (`CommandQueue::finish` called `clFinish` again): what the caller asserts
/// next holds on both.
#[allow(dead_code)]
pub fn synchronize_after_failure(s: &xpu_stream::Stream) {
    if let Err(e) = s.synchronize() {
        let dev = xpu_device::device(s.device()).unwrap();
        let platform = dev.platform().name().unwrap_or_default();
        assert!(
            !platform.contains("Portable Computing Language"),
            "PoCL's synchronize after a failed wait failed: {e}"
        );
        eprintln!("the synchronize reported the failed wait once ({platform}): {e}");
    }
}
