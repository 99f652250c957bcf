//! A failing queued call reports where it was queued and leaves the runtime uninitialized;
//! the next init re-runs every queued call.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn failed_queued_call_keeps_queue_and_retries() {
    if !common::have_device("queued_failure") {
        return;
    }
    let first_runs = common::queue_counting_call();
    let attempts = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&attempts);
    let queued_line = line!() + 1;
    xpu_lazy::lazy_call(move || {
        if a.fetch_add(1, Ordering::SeqCst) == 0 {
            Err("seed table not ready".into())
        } else {
            Ok(())
        }
    })
    .unwrap();

    let err = xpu_lazy::init().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, xpu_lazy::LazyError::QueuedCallFailed { .. }));
    assert!(
        msg.contains("xpu call failed lazily at initialization with error: seed table not ready"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("queued_failure.rs:{queued_line}")),
        "{msg}"
    );
    // The driver is initialized (a fork would be a bad fork), but the queue is kept.
    assert!(xpu_lazy::is_initialized());
    assert_eq!(xpu_lazy::queued_calls(), 2, "queue is kept after a failure");

    xpu_lazy::init().unwrap();
    assert!(xpu_lazy::is_initialized());
    assert_eq!(
        first_runs.load(Ordering::SeqCst),
        2,
        "every queued call re-runs"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(xpu_lazy::queued_calls(), 0);
}
