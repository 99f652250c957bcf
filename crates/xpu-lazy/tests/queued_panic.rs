//! A queued call that panics (user code) leaves the initializing thread as it was: its next
//! `init` initializes for real (re-running the queue), as torch's `_lazy_init` clears its
//! `is_initializing` flag in a `finally`.
mod common;

use std::sync::atomic::Ordering;

#[test]
fn init_after_a_panicking_queued_call_runs_the_queue_again() {
    if !common::have_device("queued_panic") {
        return;
    }
    let attempts = common::queue_call_with_counter(|attempts| {
        assert!(
            attempts.fetch_add(1, Ordering::SeqCst) > 0,
            "first attempt panics (expected in this test)"
        );
    });
    let panicked = std::panic::catch_unwind(xpu_lazy::init);
    assert!(panicked.is_err(), "the queued call's panic propagates");
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    assert_eq!(xpu_lazy::queued_calls(), 1, "the queue is kept");

    xpu_lazy::init().unwrap();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the second init re-ran the queued call"
    );
    assert_eq!(xpu_lazy::queued_calls(), 0, "the queue ran");
    // A call queued now runs at once (initialized).
    let runs = common::queue_counting_call();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
