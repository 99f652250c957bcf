//! Concurrent first calls: one thread initializes, the others wait for it.
mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[test]
fn eight_threads_initialize_once() {
    if !common::have_device("threads") {
        return;
    }
    let runs = common::queue_call_with_counter(|runs| {
        std::thread::sleep(Duration::from_millis(100));
        runs.fetch_add(1, Ordering::SeqCst);
    });
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let b = Arc::clone(&barrier);
            let r = Arc::clone(&runs);
            std::thread::spawn(move || {
                b.wait();
                xpu_lazy::lazy_init().unwrap();
                // Whoever returns must see the queued call done.
                r.load(Ordering::SeqCst)
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 1);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(xpu_lazy::is_initialized());
}
