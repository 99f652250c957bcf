//! The cost of a queue's wait log: enqueuing waits behind pending ones costs an amortized constant
//! number of status queries (counted on the thread, not timed).
//!
//! Review h29: the wait log of the ordered markers (commit 0b10242) seen by a newcomer.

mod common;

use xpu_device::backend::status_queries_on_this_thread;

/// Each command with a wait list is logged, and once the log held 16 entries every new one
/// judged all the others (a status query each) while they were pending: n waits behind a
/// closed gate cost about n * n / 2 status queries (on PoCL in a debug build, 4000 barriers
/// took about 1 s, against 11 ms before the log). The log now judges itself when it holds
/// twice what its last judging left, so the queries stay linear: at most 4 per wait here
/// (the quadratic count for 2000 waits is about 2,000,000). Counted on this thread, not timed.
#[test]
fn enqueuing_waits_behind_pending_ones_costs_amortized_constant_status_queries() {
    let Some(dev) = common::device0() else {
        return;
    };
    const N: u64 = 2000;
    let q = common::queue(dev);
    let mut gate = common::Gate::new(dev);
    let before = status_queries_on_this_thread();
    for _ in 0..N {
        q.enqueue_barrier(&[gate.event()]).unwrap();
    }
    let queries = status_queries_on_this_thread() - before;
    gate.open();
    q.finish().unwrap();
    assert!(
        queries <= 4 * N,
        "{N} waits behind a closed gate made {queries} status queries"
    );
}
