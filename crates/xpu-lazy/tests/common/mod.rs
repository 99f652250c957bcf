//! Shared helpers for xpu-lazy tests: those of the workspace's test crate.
#![allow(unused_imports)]

pub use xpu_testing::{have_device, run_scenario, scenario, scenario_test};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Queues a call (`xpu_lazy::lazy_call`) that only counts its runs; returns the count.
#[allow(dead_code)]
pub fn queue_counting_call() -> Arc<AtomicUsize> {
    queue_call_with_counter(|runs| {
        runs.fetch_add(1, Ordering::SeqCst);
    })
}

/// Queues a call (`xpu_lazy::lazy_call`) that runs `call` with a counter of its own (which
/// `call` bumps as it sees fit) and succeeds; returns the counter.
#[allow(dead_code)]
pub fn queue_call_with_counter(
    call: impl Fn(&AtomicUsize) + Send + Sync + 'static,
) -> Arc<AtomicUsize> {
    let counter = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&counter);
    xpu_lazy::lazy_call(move || {
        call(&c);
        Ok(())
    })
    .unwrap();
    counter
}
