//! Which calls initialize the runtime and which do not (one process: one test).
mod common;

#[test]
fn counting_does_not_initialize_but_current_device_does() {
    assert!(!xpu::is_initialized());
    if !common::have_device("init_rules") {
        return;
    }
    assert!(xpu::is_available());
    assert!(xpu::device_count() >= 1);
    assert!(
        !xpu::is_initialized(),
        "is_available/device_count must not initialize"
    );
    assert_eq!(xpu::current_device().unwrap(), 0);
    assert!(xpu::is_initialized(), "current_device initializes");
    assert!(!xpu::is_in_bad_fork());
}
