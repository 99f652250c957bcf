//! A child forked after the parent initialized the runtime gets BadFork from every call, and
//! never touches the driver (PoCL would hang there).
mod common;

#[test]
fn child_forked_after_init_is_a_bad_fork() {
    if !common::have_device("fork_after_init") {
        return;
    }
    xpu_lazy::init().unwrap();
    assert!(!xpu_lazy::is_in_bad_fork());
    let code = xpu_device::fork::run_in_forked_child(|| {
        if !xpu_lazy::is_in_bad_fork() {
            return 2;
        }
        if xpu_lazy::is_initialized() {
            return 3;
        }
        let msg = match xpu_lazy::lazy_init() {
            Err(e @ xpu_lazy::LazyError::BadFork) => e.to_string(),
            _ => return 4,
        };
        if !msg.contains("spawn") {
            return 5;
        }
        if !matches!(xpu_device::devices(), Err(xpu_device::DeviceError::BadFork)) {
            return 6;
        }
        0
    })
    .unwrap();
    assert_eq!(code, 0, "child exit code names the failed check");
    // The parent is unaffected.
    assert!(xpu_lazy::is_initialized());
    assert!(!xpu_lazy::is_in_bad_fork());
}
