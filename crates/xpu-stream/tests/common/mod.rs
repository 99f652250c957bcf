//! Device checks shared by the tests of this crate: those of the workspace's test crate.
#![allow(dead_code)]

pub use xpu_testing::devices;

/// Synchronizes (`sync`) after a command failed through its wait list: NVIDIA's first
/// `clFinish` then returns the failure once (as `CommandQueue::finish` documents; seen on an
/// H100), PoCL's succeeds; a second must succeed.
pub fn synchronize_after_failure(sync: impl Fn() -> Result<(), xpu_stream::StreamError>) {
    if sync().is_err() {
        sync().unwrap();
    }
}
