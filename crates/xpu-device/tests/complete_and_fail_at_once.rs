//! Consecutive commands completed and failed at the same moment (PoCL 3.1's own race in
//! `pocl_lock_events_inorder`): the process does not abort.
//!
//! Review h44 (found while probing 64701b3; not caused by it: the queue is never dropped
//! before its work is over). On PoCL 3.1 (`POCL_DEVICES="pthread pthread"
//! XPU_REQUIRE_DEVICE=1`); the scenario runs in a child process (`common::in_child_scenario`),
//! since it aborts the process.
mod common;

use xpu_device::backend::ClEvent;

/// Two consecutive markers of one in-order queue, each behind its own user event; one thread
/// sets the first's event complete while another fails the second's (`set_failed(-5)`), 200
/// rounds on fresh queues, every wrapper kept until the round's end. PoCL 3.1 aborts:
/// `PTHREAD ERROR in pocl_lock_events_inorder():399: Invalid argument (22)`. Observed: this
/// test's child aborted (SIGABRT) in 3 of 6 runs; an earlier form of it (a completion callback
/// on the first marker) aborted in 4 of 6 with every wrapper kept, 1 of 6 and 2 of 3 with the
/// queue dropped in that callback. Best guess: a
/// success status (`set_complete`) is passed on outside `held::EXCLUSION` (only error
/// statuses take its write side), so PoCL's completion of the first marker notifies the
/// second while the failure of the second is being passed on (held.rs `set_user_status`).
#[test]
#[ignore = "open: PoCL 3.1 aborts (pocl_lock_events_inorder) in 3 of 6 runs, the race of its own that pocl/pocl pull request 2216 fixed upstream (see user_event_failure_paths.rs / failing_waits_beside_other_threads.rs); run alone with --ignored"]
fn completing_and_failing_consecutive_commands_at_once_does_not_abort() {
    let Some((dev, ctx, _)) = common::device0_queue_in_child() else {
        return;
    };
    for _ in 0..200 {
        let q = common::queue(dev);
        let gate = ClEvent::user(ctx).unwrap();
        let cancel = ClEvent::user(ctx).unwrap();
        let m = q.enqueue_marker(&[&gate]).unwrap();
        let c = q.enqueue_marker(&[&cancel]).unwrap();
        q.flush().unwrap();
        let t = std::thread::spawn(move || cancel.set_failed(-5).unwrap());
        gate.set_complete().unwrap();
        t.join().unwrap();
        m.wait().unwrap();
        let _ = c.wait();
        q.finish().unwrap();
    }
    println!("scenario-ok");
}
