//! Shared helpers for xpu-lazy tests: those of the workspace's test crate.
#![allow(unused_imports)]

pub use xpu_testing::{have_device, run_scenario, scenario, scenario_test};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Queues a call (`xpu_lazy::lazy_call`) that only counts its runs; returns the count.
#[allow(dead_code)]
pub fn queue_counting_call() -> Arc<AtomicUsize> {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    xpu_lazy::lazy_call(move || {
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    runs
}
