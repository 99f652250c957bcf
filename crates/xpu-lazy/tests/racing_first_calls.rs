//! Racing first calls: sixteen threads calling `lazy_init` and `device_lazy_init` at once while
//! queuing calls initialize once and run every queued call exactly once, in order.
//!
//! Review h67 of xpu-lazy (read at 466cacc): probes that found nothing (they pass). One test
//! (the state is process-wide): sixteen threads released at once on a barrier, half calling
//! `lazy_init`, half `device_lazy_init` of a registered backend, while each also queues a
//! call with `lazy_call`, and a queued call queues another from inside the queue: every
//! routine and every call runs exactly once, queued calls in order, and a thread returning
//! from `lazy_init` sees its own queued call done. (`have_device` enumerates first, so
//! `is_initialized` is not asked inside the queue: it is documented to be true after an
//! enumeration outside `lazy_init`.) The fork rules (a child forked after init is a bad fork;
//! the entry points refuse there without a lock) are pinned by `fork_after_init.rs` and
//! `bad_fork_entry_points.rs`; nothing new was probed there.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

static BACKEND_RUNS: AtomicUsize = AtomicUsize::new(0);

fn counting_backend() -> Result<(), xpu_lazy::BoxError> {
    BACKEND_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn sixteen_racing_threads_initialize_once_and_run_every_queued_call_once() {
    if !common::have_device("racing_first_calls") {
        return;
    }
    xpu_lazy::register_backend("h67", counting_backend);
    let order = Arc::new(Mutex::new(Vec::<usize>::new()));
    {
        let order = Arc::clone(&order);
        xpu_lazy::lazy_call(move || {
            order.lock().unwrap().push(1000);
            let inner = Arc::clone(&order);
            // Queued from inside the queue: runs in the same initialization, after.
            xpu_lazy::lazy_call(move || {
                inner.lock().unwrap().push(1001);
                Ok(())
            })?;
            Ok(())
        })
        .unwrap();
    }
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|t| {
            let (barrier, order) = (Arc::clone(&barrier), Arc::clone(&order));
            std::thread::spawn(move || {
                let mine = Arc::clone(&order);
                xpu_lazy::lazy_call(move || {
                    mine.lock().unwrap().push(t);
                    Ok(())
                })
                .unwrap();
                barrier.wait();
                if t % 2 == 0 {
                    xpu_lazy::lazy_init().unwrap();
                    assert!(order.lock().unwrap().contains(&t), "thread {t}'s call ran");
                } else {
                    xpu_lazy::device_lazy_init("h67").unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    xpu_lazy::lazy_init().unwrap();
    assert!(xpu_lazy::is_initialized());
    assert_eq!(BACKEND_RUNS.load(Ordering::SeqCst), 1);
    let mut ran = order.lock().unwrap().clone();
    assert_eq!(ran.len(), 18, "{ran:?}");
    let p1000 = ran.iter().position(|&x| x == 1000).unwrap();
    let p1001 = ran.iter().position(|&x| x == 1001).unwrap();
    assert!(p1000 < p1001, "{ran:?}");
    ran.sort_unstable();
    ran.dedup();
    assert_eq!(ran.len(), 18, "each call once");
    assert_eq!(xpu_lazy::queued_calls(), 0);
}
