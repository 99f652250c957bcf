//! A call queued while initialization runs the queue is not lost: every queued call runs
//! exactly once, also one queued by another thread during init.
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

#[test]
fn call_queued_by_another_thread_during_init_runs_exactly_once() {
    if !common::have_device("queued_during_init") {
        return;
    }
    // The first queued call tells the test it is running, then blocks until the test has
    // queued a second call from another thread (this one) while init is in progress.
    let held = common::hold_init();
    let first_runs = Arc::clone(&held.finished);
    let late_runs = common::queue_counting_call();
    assert_eq!(
        late_runs.load(Ordering::SeqCst),
        0,
        "queued (init in progress), not run on this thread"
    );
    held.release();
    assert_eq!(first_runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        late_runs.load(Ordering::SeqCst),
        1,
        "the call queued during init ran exactly once"
    );
    assert_eq!(xpu_lazy::queued_calls(), 0);
    // Afterwards a lazy call runs at once, and nothing re-runs.
    let l = Arc::clone(&late_runs);
    xpu_lazy::lazy_call(move || {
        l.fetch_add(10, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    xpu_lazy::init().unwrap();
    assert_eq!(late_runs.load(Ordering::SeqCst), 11);
    assert_eq!(first_runs.load(Ordering::SeqCst), 1);
}
