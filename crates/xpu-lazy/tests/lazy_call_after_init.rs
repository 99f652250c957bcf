//! `lazy_call` on an initialized runtime runs the call at once and reports its own failure, not a
//! deferred initialization failure.
//!
//! Review h84 (fresh eyes on lazy initialization, fork safety and the facade): findings of
//! xpu-lazy, each a test that failed on the code as reviewed (1c5de16; 5 of 5) and passes since.
//! PoCL on the CPU, `POCL_DEVICES="pthread pthread"`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.
mod common;

/// torch's `_lazy_call(fn)` (reference §6.2): "If initialized: call now" — Python calls
/// `callable()` directly, so its exception reaches the caller as raised. Only a call that
/// `_lazy_init` runs from the queue is wrapped, with "XPU call failed lazily at
/// initialization with error: {e} ... XPU call was originally invoked at" (§6.3 step 7).
///
/// xpu's `lazy_call` on an initialized runtime runs `f` at once (no queue, no
/// initialization), yet wraps its error in `LazyError::QueuedCallFailed`, whose message says
/// the call "failed lazily at initialization" and "was originally queued at" its own call
/// site: neither happened, and a user reading it looks for an initialization problem that
/// does not exist. At fault: `crates/xpu-lazy/src/state.rs`, `lazy_call`'s `run_now`
/// closure (it builds `QueuedCallFailed` for a call that was never queued).
#[test]
fn lazy_call_on_an_initialized_runtime_does_not_report_a_deferred_init_failure() {
    if !common::have_device("lazy_call_after_init") {
        return;
    }
    xpu_lazy::init().unwrap();
    assert!(xpu_lazy::is_initialized());
    let err = xpu_lazy::lazy_call(|| Err("seed table full".into())).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("seed table full"), "{msg}");
    assert!(
        !msg.contains("at initialization") && !msg.contains("queued"),
        "the call ran at once on an initialized runtime, yet its error claims it was queued \
         and failed at initialization: {msg:?} ({err:?})"
    );
}
