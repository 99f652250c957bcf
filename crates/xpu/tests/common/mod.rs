//! Shared helpers for facade tests.

/// True when a device exists; otherwise prints a skip message, or panics under
/// `XPU_REQUIRE_DEVICE=1`.
pub fn have_device(test: &str) -> bool {
    if xpu::device_count() > 0 {
        return true;
    }
    assert!(
        !xpu::xpu_device::require_device(),
        "{test}: no OpenCL device found and XPU_REQUIRE_DEVICE=1"
    );
    eprintln!("{test}: skipped, no OpenCL device");
    false
}
