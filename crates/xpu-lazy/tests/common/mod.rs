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

/// An initialization held inside a queued call ([`hold_init`]).
#[allow(dead_code)]
pub struct HeldInit {
    /// How often the holding call has finished (0 while it holds, 1 after [`HeldInit::release`]).
    pub finished: Arc<AtomicUsize>,
    release: std::sync::mpsc::Sender<()>,
    initializer: std::thread::JoinHandle<()>,
}

/// Queues a call that, when initialization runs it, says so and then blocks until the test
/// releases it (or 30 s pass: the call fails); starts `xpu_lazy::init` on another thread and
/// returns once the call holds it. The hook makes "inside the first initialization"
/// deterministic for the test, without sleeps.
#[allow(dead_code)]
pub fn hold_init() -> HeldInit {
    use std::sync::{mpsc, Mutex};
    use std::time::Duration;
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let finished = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&finished);
    xpu_lazy::lazy_call(move || {
        entered_tx.lock().unwrap().send(()).unwrap();
        release_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30))
            .map_err(|e| format!("the test never released the queued call: {e}"))?;
        f.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    let initializer = std::thread::spawn(|| xpu_lazy::init().unwrap());
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("init ran the queued call");
    HeldInit {
        finished,
        release: release_tx,
        initializer,
    }
}

#[allow(dead_code)]
impl HeldInit {
    /// Lets the holding call return and waits for the initialization to finish (it must
    /// succeed).
    pub fn release(self) {
        self.release.send(()).unwrap();
        self.initializer.join().unwrap();
    }
}
