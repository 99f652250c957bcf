//! A queued call (user code run by the initialization) that reaches the runtime from a helper
//! thread it joins does not deadlock the initialization.
//!
//! Review h10: user code run by the initialization (a queued call) that reaches the runtime
//! from a helper thread.
mod common;

use std::sync::mpsc;
use std::time::Duration;

/// `lazy_init` is documented re-entrant ("a queued call that calls back into the runtime does
/// not deadlock"), but only on the initializing thread: a queued call that does its work on a
/// helper thread it joins (scoped threads, a thread pool: e.g. facade calls made in parallel)
/// deadlocks, the helper waiting for INIT_LOCK, held by the initializer, which waits for the
/// helper. A hang through safe calls (`lazy_call`, `lazy_init`).
#[test]
fn a_queued_call_that_reaches_the_runtime_from_a_joined_thread_does_not_hang() {
    if !common::have_device("queued_call_joining_a_thread") {
        return;
    }
    xpu_lazy::lazy_call(|| {
        std::thread::scope(|s| s.spawn(xpu_lazy::lazy_init).join())
            .map_err(|_| "the helper thread panicked")??;
        Ok(())
    })
    .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(xpu_lazy::lazy_init().map_err(|e| e.to_string()));
    });
    let outcome = rx.recv_timeout(Duration::from_secs(20)).expect(
        "lazy_init with a queued call that reaches the runtime from a joined thread: no answer \
         after 20 s (deadlock)",
    );
    // Fixed: the helper's lazy_init fails after QUEUED_CALLS_WAIT_LIMIT, so the queued call
    // fails with that error and the initialization reports it.
    let message = outcome.expect_err("the queued call failed");
    assert!(
        message.contains("did not finish within 10000 ms"),
        "{message}"
    );
}
