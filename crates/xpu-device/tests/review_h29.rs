//! Review h29: the wait log of the ordered markers (commit 0b10242) seen by a newcomer.

mod common;

use std::time::{Duration, Instant};

/// The time `n` barriers waiting for one closed gate take to enqueue on a fresh queue (the
/// best of `tries`).
fn enqueue_waits(dev: &xpu_device::Device, n: usize, tries: usize) -> Duration {
    (0..tries)
        .map(|_| {
            let q = common::queue(dev);
            let mut gate = common::Gate::new(dev);
            let start = Instant::now();
            for _ in 0..n {
                q.enqueue_barrier(&[gate.event()]).unwrap();
            }
            let took = start.elapsed();
            gate.open();
            q.finish().unwrap();
            took
        })
        .min()
        .unwrap()
}

/// Each command with a wait list is logged, and once the log held 16 entries every new one
/// judged all the others (a status query each) while they were pending: enqueuing a wait
/// cost time linear in the number of waits pending on the queue, n waits quadratic (on PoCL
/// in a debug build, 4000 barriers behind a closed gate took about 1 s, against 11 ms before
/// the log). Amortized, 16 times the waits take about 16 times as long (quadratic: up to
/// 256); this allows 64.
#[test]
fn enqueuing_waits_behind_pending_ones_costs_amortized_constant_time() {
    let Some(dev) = common::device0() else {
        return;
    };
    let small = enqueue_waits(dev, 500, 3);
    let large = enqueue_waits(dev, 8000, 3);
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-9);
    assert!(
        ratio < 64.0,
        "8000 pending waits took {large:?}, 500 took {small:?}: {ratio:.0} times as long"
    );
}
