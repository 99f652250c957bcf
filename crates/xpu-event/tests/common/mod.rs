//! Device checks shared by the tests of this crate.

/// True when at least `n` devices exist. Otherwise prints why the test is skipped, or panics
/// when no device at all is found and `XPU_REQUIRE_DEVICE=1`.
pub fn devices(n: usize) -> bool {
    let count = xpu_device::device_count();
    if count >= n {
        return true;
    }
    if count == 0 && xpu_device::require_device() {
        panic!("XPU_REQUIRE_DEVICE=1 but no OpenCL device was found");
    }
    eprintln!(
        "skipped: needs {n} device(s), found {count} (two PoCL devices: POCL_DEVICES=\"pthread pthread\")"
    );
    false
}

/// A stream on its own new queue (an external stream), so that gating it never holds back a
/// pool stream that another test running concurrently may use.
#[allow(dead_code)]
pub fn fresh_stream(device: usize) -> xpu_stream::ExternalStream {
    let q = xpu_device::device(device)
        .unwrap()
        .create_queue(xpu_device::backend::QueueOptions {
            profiling: true,
            priority: None,
        })
        .unwrap();
    xpu_stream::ExternalStream::new(q, device).unwrap()
}

/// Polls `query` `n` times (yielding between polls) and returns true if it ever answered true.
#[allow(dead_code)]
pub fn ever_true(n: usize, mut query: impl FnMut() -> bool) -> bool {
    (0..n).any(|_| {
        let r = query();
        std::thread::yield_now();
        r
    })
}
