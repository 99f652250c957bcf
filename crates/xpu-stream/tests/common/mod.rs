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
