//! In a bad fork child every entry point of xpu-lazy returns `BadFork` at once, without
//! waiting for a lock that a thread of the parent held at the fork. Here the parent's state
//! is reproduced in a fresh process: another thread is inside `init` (holding the init lock,
//! running a queued call that never returns on its own) when the process becomes a bad fork
//! (`simulate_bad_fork`, the flag the `pthread_atfork` child handler sets: this crate may not
//! fork). A hang is caught by the bound.
mod common;

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

#[test]
fn bad_fork_refuses_without_waiting_for_init_lock() {
    common::scenario_test(
        "bad_fork_refuses_without_waiting_for_init_lock",
        "init-lock-held",
        Duration::from_secs(20),
        "SCENARIO DONE",
        run,
    );
}

fn run() {
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    xpu_lazy::lazy_call(move || {
        entered_tx.lock().unwrap().send(()).unwrap();
        let _ = release_rx.lock().unwrap().recv();
        Ok(())
    })
    .unwrap();
    let initializer = std::thread::spawn(xpu_lazy::init);
    entered_rx.recv().unwrap();
    // The other thread holds the init lock and the queue is non-empty.
    xpu_device::fork::simulate_bad_fork();
    let r = xpu_lazy::lazy_init();
    println!("lazy_init={r:?}");
    assert!(matches!(r, Err(xpu_lazy::LazyError::BadFork)));
    assert!(matches!(
        xpu_lazy::init(),
        Err(xpu_lazy::LazyError::BadFork)
    ));
    let r = xpu_lazy::lazy_call(|| Ok(()));
    println!("lazy_call={r:?}");
    assert!(matches!(r, Err(xpu_lazy::LazyError::BadFork)));
    assert!(matches!(
        xpu_lazy::device_lazy_init(xpu_lazy::OPENCL),
        Err(xpu_lazy::LazyError::BadFork)
    ));
    assert!(!xpu_lazy::is_initialized());
    assert!(!xpu_lazy::is_backend_initialized(xpu_lazy::OPENCL));
    assert_eq!(xpu_lazy::queued_calls(), 0, "no queue in a bad fork child");
    let msg = xpu_lazy::lazy_init().unwrap_err().to_string();
    assert!(msg.contains("spawn"), "{msg}");
    release_tx.send(()).unwrap();
    let _ = initializer.join();
    println!("SCENARIO DONE");
}
