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
