//! Device checks shared by the tests of this crate (mostly the workspace's test crate).
#![allow(unused_imports)]

pub use xpu_testing::{devices, ever_true};

/// A stream on its own new queue (an external stream), so that gating it never holds back a
/// pool stream that another test running concurrently may use.
#[allow(dead_code)]
pub fn fresh_stream(device: usize) -> xpu_stream::ExternalStream {
    xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(device), device).unwrap()
}
