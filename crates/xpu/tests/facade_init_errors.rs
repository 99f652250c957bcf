//! Lazy initialization through the facade, in fresh processes: `init` does not fail once the
//! runtime reports itself initialized, and an out-of-memory from a lazy call that ran at once is
//! out of memory.
//!
//! Review h84 (fresh eyes on lazy initialization, fork safety and the facade): findings of the
//! facade, each a test that failed on the code as reviewed (1c5de16; 5 of 5) and passes since.
//! PoCL on the CPU, `POCL_DEVICES="pthread pthread"`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. Each runs in a fresh process (a scenario), since initialization
//! happens once.
mod common;

use std::time::Duration;

const BAD_CONF: &str = "max_split_size_mb:banana";

/// torch's `init()` is `_lazy_init()`, whose first step (reference §6.3 step 1) is "Return
/// if initialized": once `torch.xpu.is_initialized()` is `True`, `torch.xpu.init()` cannot
/// fail. And in torch an invalid allocator configuration fails the initialization itself
/// (the allocator is built by the native init, §6.3 step 6), whichever call triggers it.
///
/// xpu with a bad `XPU_ALLOC_CONF`: `xpu::current_device()` (documented "Initializes the
/// runtime") succeeds and `is_initialized()` is true, then `xpu::init()` fails with the
/// configuration error — the runtime reports itself initialized and refuses to initialize,
/// both at once. Only `xpu::init` checks the configuration
/// (`crates/xpu/src/device.rs`, `init`: `xpu_alloc::current_config()?` before
/// `xpu_lazy::init`, run again on every call); every other initializing entry point goes
/// through `xpu_lazy::lazy_init`, which never reads it (`current_device`, `set_device`,
/// `synchronize`, `mem_get_info`, streams... all succeed). Expected either way: never
/// `is_initialized()` true together with a failing `init()`.
#[test]
fn init_does_not_fail_once_the_runtime_reports_itself_initialized() {
    const TEST: &str = "init_does_not_fail_once_the_runtime_reports_itself_initialized";
    if let Some(conf) = common::scenario() {
        std::env::set_var("XPU_ALLOC_CONF", conf);
        let current = xpu::current_device();
        println!("current_device = {current:?}");
        let initialized = xpu::is_initialized();
        let init = xpu::init();
        println!("is_initialized = {initialized}, init = {init:?}");
        assert!(
            !(initialized && init.is_err()),
            "is_initialized() was true (after current_device() = {current:?}), yet init() \
             failed: {init:?}"
        );
        println!("SCENARIO DONE");
        return;
    }
    if !common::have_device(TEST) {
        return;
    }
    let (code, out) = common::run_scenario(TEST, BAD_CONF, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("SCENARIO DONE"), "{out}");
}

/// torch's `_lazy_call(fn)` on an initialized runtime calls `fn()` directly (reference
/// §6.2), so a `torch.OutOfMemoryError` it raises reaches the caller as one: `except
/// torch.OutOfMemoryError` catches it. xpu maps that `except` to
/// [`xpu::Error::is_out_of_memory`] (crate docs' table). An out-of-memory error from a
/// `lazy_call` that ran at once (the runtime was initialized) comes back wrapped in
/// `LazyError::QueuedCallFailed` ("failed lazily at initialization"), and
/// `is_out_of_memory()` is false on it: `crates/xpu-lazy/src/state.rs`, `lazy_call`'s
/// `run_now` wraps the call's own error; `crates/xpu/src/error.rs`,
/// `Error::is_out_of_memory` answers false for every `Error::Lazy`.
#[test]
fn an_out_of_memory_from_a_lazy_call_that_ran_at_once_is_out_of_memory() {
    common::scenario_test(
        "an_out_of_memory_from_a_lazy_call_that_ran_at_once_is_out_of_memory",
        "oom",
        Duration::from_secs(60),
        "SCENARIO DONE",
        || {
            xpu::init().unwrap();
            // A fraction that allows 0 bytes: any new segment is out of memory (torch's
            // "memory fraction exceeded" is an OutOfMemoryError too).
            xpu::set_per_process_memory_fraction(1e-12, Some(0)).unwrap();
            let direct = xpu::allocate(1).unwrap_err();
            assert!(direct.is_out_of_memory(), "{direct}");
            let through_lazy_call: xpu::Error = xpu::lazy_call(|| {
                xpu::allocate(1)?;
                Ok(())
            })
            .unwrap_err()
            .into();
            assert!(
                through_lazy_call.is_out_of_memory(),
                "the same out-of-memory error, from a lazy_call that ran at once on an \
                 initialized runtime, is not out of memory: {through_lazy_call}"
            );
            println!("SCENARIO DONE");
        },
    );
}
