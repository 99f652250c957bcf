//! A failed `xpu::init` (a bad `XPU_ALLOC_CONF`) returns the configuration error and leaves the
//! runtime uninitialized; each case runs in a fresh process.
//!
//! Review h22: the facade's `init`.
mod common;

use std::time::Duration;

const BAD_CONF_TEST: &str = "a_failed_init_leaves_the_runtime_uninitialized";

/// `xpu::init()` (as `torch.xpu.init()`) runs `xpu_lazy::init` first and only then checks the
/// allocator configuration: with a bad `XPU_ALLOC_CONF` it returns the configuration error,
/// yet `xpu::is_initialized()` is true afterwards. Torch's `init()` marks nothing
/// initialized when it raises ("Failures propagate; nothing is marked initialized"), so a
/// caller that checks `is_initialized()` after a failed `init()` is told the opposite of what
/// happened. Expected: `is_initialized()` false after the failed `init()`. Run in a fresh
/// process (the configuration is read once).
#[test]
fn a_failed_init_leaves_the_runtime_uninitialized() {
    if let Some(conf) = common::scenario() {
        std::env::set_var("XPU_ALLOC_CONF", conf);
        let err = xpu::init().unwrap_err();
        assert!(
            matches!(
                err,
                xpu::Error::Alloc(xpu::xpu_alloc::AllocError::Config(_))
            ),
            "{err}"
        );
        assert!(
            !xpu::is_initialized(),
            "init() failed, yet is_initialized() is true"
        );
        // Still failing, and still not initialized, on the next attempt.
        assert!(xpu::init().is_err());
        assert!(!xpu::is_initialized());
        println!("FAILED INIT OK");
        return;
    }
    if !common::have_device(BAD_CONF_TEST) {
        return;
    }
    let (code, out) = common::run_scenario(
        BAD_CONF_TEST,
        "max_split_size_mb:banana",
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("FAILED INIT OK"), "{out}");
}
