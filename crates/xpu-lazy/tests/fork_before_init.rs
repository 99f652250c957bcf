//! A child forked before the parent touched the driver initializes normally.

#[test]
fn child_forked_before_init_initializes() {
    assert!(
        !xpu_device::fork::driver_touched(),
        "this test binary must not touch the driver first"
    );
    let code = xpu_device::fork::run_in_forked_child(|| {
        if xpu_lazy::is_in_bad_fork() {
            return 2;
        }
        match xpu_lazy::init() {
            Ok(()) if xpu_lazy::is_initialized() && xpu_device::device_count() > 0 => 0,
            Ok(()) => 3,
            Err(_) => 4,
        }
    })
    .unwrap();
    if code == 4 && !xpu_device::require_device() {
        eprintln!("fork_before_init: skipped, no OpenCL device");
        return;
    }
    assert_eq!(code, 0, "child exit code names the failed check");
    assert!(
        !xpu_lazy::is_initialized(),
        "the parent stays uninitialized"
    );
}
