//! Device checks shared by the tests of this crate: those of the workspace's test crate.
#![allow(dead_code)]

pub use xpu_testing::devices;

/// Synchronizes (`sync`) after a command failed through its wait list: NVIDIA's `clFinish`
/// returns the failure once (as `CommandQueue::finish` documents; seen on an H100), and once
/// more per batch of commands that failed since (queries polling on other threads enqueue
/// markers that fail with it: review h52's pollers saw a second -5 on an H100, 2026-12-06);
/// PoCL's succeeds. Within 20 tries one must succeed.
pub fn synchronize_after_failure(sync: impl Fn() -> Result<(), xpu_stream::StreamError>) {
    let mut last = sync();
    for _ in 0..20 {
        if last.is_ok() {
            return;
        }
        last = sync();
    }
    last.unwrap();
}
