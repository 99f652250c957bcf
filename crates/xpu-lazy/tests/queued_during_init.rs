//! A call queued while initialization runs the queue is not lost: every queued call runs
//! exactly once, also one queued by another thread during init.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn call_queued_by_another_thread_during_init_runs_exactly_once() {
    if !common::have_device("queued_during_init") {
        return;
    }
    // The first queued call tells the test it is running, then blocks until the test has
    // queued a second call from another thread (this one) while init is in progress.
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (queued_tx, queued_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let queued_rx = Mutex::new(queued_rx);
    let first_runs = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&first_runs);
    xpu_lazy::lazy_call(move || {
        f.fetch_add(1, Ordering::SeqCst);
        entered_tx.lock().unwrap().send(()).unwrap();
        queued_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20))
            .map_err(|e| format!("the test never queued its call: {e}"))?;
        Ok(())
    })
    .unwrap();
    let initializer = std::thread::spawn(xpu_lazy::init);
    entered_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("init ran the first queued call");
    let late_runs = common::queue_counting_call();
    assert_eq!(
        late_runs.load(Ordering::SeqCst),
        0,
        "queued (init in progress), not run on this thread"
    );
    queued_tx.send(()).unwrap();
    initializer.join().unwrap().unwrap();
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
