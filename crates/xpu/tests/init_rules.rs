//! Which calls initialize the runtime and which do not (one process: one test).
mod common;

#[test]
fn counting_initializes_the_driver_but_runs_no_queued_call() {
    assert!(!xpu::is_initialized());
    // Statistics before anything else touch nothing.
    assert_eq!(xpu::memory_reserved(None).unwrap(), 0);
    assert!(!xpu::is_initialized());
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = std::sync::Arc::clone(&ran);
    xpu::lazy_call(move || {
        r.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    if !common::have_device("init_rules") {
        return;
    }
    assert!(xpu::is_available());
    assert!(xpu::device_count() >= 1);
    assert!(
        xpu::is_initialized(),
        "counting initialized the OpenCL driver: a fork now is a bad fork, the flag says so"
    );
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "is_available/device_count run no queued call"
    );
    assert_eq!(xpu::current_device().unwrap(), 0);
    assert!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        "current_device runs lazy_init"
    );
    assert!(xpu::is_initialized());
    assert!(!xpu::is_in_bad_fork());
}
