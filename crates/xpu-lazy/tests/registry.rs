//! The backend registry: per-type init once, retry after failure, unknown types.

use std::sync::atomic::{AtomicUsize, Ordering};

static CALLS: AtomicUsize = AtomicUsize::new(0);
static FLAKY: AtomicUsize = AtomicUsize::new(0);

fn fake_init() -> Result<(), xpu_lazy::BoxError> {
    CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

fn flaky_init() -> Result<(), xpu_lazy::BoxError> {
    if FLAKY.fetch_add(1, Ordering::SeqCst) == 0 {
        Err("driver busy".into())
    } else {
        Ok(())
    }
}

#[test]
fn backends_initialize_once_and_retry_after_failure() {
    xpu_lazy::register_backend("fake", fake_init);
    xpu_lazy::register_backend("flaky", flaky_init);
    assert!(!xpu_lazy::is_backend_initialized("fake"));
    xpu_lazy::device_lazy_init("fake").unwrap();
    xpu_lazy::device_lazy_init("fake").unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    assert!(xpu_lazy::is_backend_initialized("fake"));
    assert!(!xpu_lazy::is_initialized(), "other backends are untouched");

    let err = xpu_lazy::device_lazy_init("flaky").unwrap_err();
    assert_eq!(
        err.to_string(),
        "xpu initialization of backend 'flaky' failed: driver busy"
    );
    assert!(!xpu_lazy::is_backend_initialized("flaky"));
    xpu_lazy::device_lazy_init("flaky").unwrap();
    assert_eq!(FLAKY.load(Ordering::SeqCst), 2);

    let err = xpu_lazy::device_lazy_init("tpu").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no backend registered for device type 'tpu'"
    );
}
