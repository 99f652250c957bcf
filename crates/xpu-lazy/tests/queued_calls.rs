//! Queued calls run in order at initialization; re-entrant calls do not deadlock.
mod common;

use std::sync::{Arc, Mutex};

#[test]
fn queued_calls_run_in_order_once_at_init() {
    if !common::have_device("queued_calls") {
        return;
    }
    // Counting devices initialized the driver (a fork would be a bad fork now), but no
    // queued call has run yet.
    assert!(xpu_lazy::is_initialized());
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 1..=3 {
        let log = Arc::clone(&log);
        xpu_lazy::lazy_call(move || {
            // Re-entrant: initializing from inside a queued call returns at once.
            xpu_lazy::lazy_init()?;
            log.lock().unwrap().push(i);
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(xpu_lazy::queued_calls(), 3);
    assert!(log.lock().unwrap().is_empty(), "nothing runs before init");
    xpu_lazy::init().unwrap();
    assert!(xpu_lazy::is_initialized());
    assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
    assert_eq!(xpu_lazy::queued_calls(), 0);
    // After init, a lazy call runs immediately.
    let l2 = Arc::clone(&log);
    xpu_lazy::lazy_call(move || {
        l2.lock().unwrap().push(4);
        Ok(())
    })
    .unwrap();
    assert_eq!(*log.lock().unwrap(), vec![1, 2, 3, 4]);
    // A second init is a no-op: nothing re-runs.
    xpu_lazy::init().unwrap();
    assert_eq!(log.lock().unwrap().len(), 4);
}
