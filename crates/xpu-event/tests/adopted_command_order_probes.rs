//! Adopted commands judged in order, probes that held: elapsed time after a handled failure, a
//! blocking adopted command behind a gate, a cross-device wait on a gated adopted command.
//!
//! Review h85 of xpu-event at 1d56b4a (commit 27bfb0a): probes of adopted commands
//! (`Event::from_cl_event`, judged in order by `CommandQueue::adopt_in_order`) and of a
//! drained marker's `synchronize` that held (pass on 1d56b4a). Findings are in
//! adopted_command_order.rs. Each scenario runs in a child process, as
//! adopted_command_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};
use xpu_stream::Stream;

/// The bound on a call that should return.
const LIMIT: Duration = Duration::from_secs(10);

const TIMING: EventFlags = EventFlags {
    enable_timing: true,
    blocking: false,
};

/// A command of `s`'s own queue, waited for through the driver.
fn completed_command(s: &Stream) -> xpu_device::backend::ClEvent {
    let c = s.queue().unwrap().enqueue_marker(&[]).unwrap();
    c.wait().unwrap();
    c
}

/// Held: two commands complete before an unrelated failed wait of `s`, adopted after a
/// `s.synchronize()` handled that failure: both query `true` and `elapsed_time` gives a time
/// (the handling finish cleared the log, so `adopt_in_order` sees no failed wait).
#[test]
fn elapsed_time_of_commands_adopted_after_a_handled_failure_is_given() {
    common::in_child("adopted_elapsed_after_handled", 1, || {
        let s = common::fresh_stream(0).leak();
        let a = completed_command(&s);
        let b = completed_command(&s);
        let (other, user) = common::failable();
        s.wait_event(&other).unwrap();
        user.set_failed(-5).unwrap();
        let _ = s.synchronize();
        let ea = Event::from_cl_event(a, &s, TIMING).unwrap();
        let eb = Event::from_cl_event(b, &s, TIMING).unwrap();
        assert!(matches!(ea.query(), Ok(true)));
        let t = ea.elapsed_time(&eb);
        assert!(t.is_ok(), "{t:?}");
    });
}

/// Held: a blocking adopted command enqueued behind a closed gate (no failure): `query`
/// false while closed (2,000 queries), and `synchronize` returns `Ok` once the gate opened,
/// after which `query` agrees.
#[test]
fn a_blocking_adopted_command_behind_a_gate_synchronizes_after_it() {
    common::in_child("adopted_blocking_gate", 1, || {
        let s = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let c = s.queue().unwrap().enqueue_marker(&[]).unwrap();
        let e = Event::from_cl_event(
            c,
            &s,
            EventFlags {
                enable_timing: false,
                blocking: true,
            },
        )
        .unwrap();
        assert!(!common::ever_true(2_000, || e.query().unwrap()));
        gate.open().unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || e.synchronize(), || ());
        assert!(returned && r.is_ok(), "{r:?}");
        assert!(matches!(e.query(), Ok(true)));
    });
}

/// Held: an adopted command behind a closed gate, waited on by a stream of the other device:
/// a marker recorded there after the wait stays incomplete until the gate opens.
#[test]
fn a_cross_device_wait_on_an_adopted_gated_command_holds() {
    common::in_child("adopted_cross_device", 2, || {
        let s = common::fresh_stream(0).leak();
        let t = common::fresh_stream(1).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let c = s.queue().unwrap().enqueue_marker(&[]).unwrap();
        let e = Event::from_cl_event(c, &s, EventFlags::default()).unwrap();
        e.wait(&t).unwrap();
        let mut after = Event::new(EventFlags::default());
        after.record(&t).unwrap();
        common::assert_held_by(&gate, &after);
    });
}
