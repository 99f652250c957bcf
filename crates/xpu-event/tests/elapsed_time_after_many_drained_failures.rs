//! `elapsed_time` stays refused for a marker recorded after a failed wait even after 256 more
//! failed waits were drained (the wait log's cap).
//!
//! Review h75 of 42cc841 through xpu-event: `Event::elapsed_time` refuses a marker recorded
//! after a failed wait of its stream "also after a synchronize of the stream cleared the
//! failure" (review h69) by reading `OrderedMarker::follows_failed_wait`
//! (`Recorded::failed_before`). The wait log keeps at most 256 drained failures
//! (`waits::DRAINED_FAILURES`); past that, the marker's failure is forgotten and
//! `elapsed_time` gives review h69's negative time again.
//!
//! Finding (failed at 42cc841, 5 of 5 runs, `Ok(-0.07)` to `Ok(-0.24)` ms; fixed since: a
//! marker's first answer other than `Pending` stays, `EarlierWaits::status`): the test below.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, Gate, StreamExt};

const LIMIT: Duration = Duration::from_secs(10);

/// FINDING. Review h69's scenario, then 256 more failed waits each cleared by a synchronize.
/// `s` blocked by a closed gate; `start` recorded (timing); `s` waits on a user event that
/// fails (-5); `end` recorded; `end.synchronize()` returns the failure (gate still closed);
/// the gate opens, `s.synchronize()`; `start.elapsed_time(&end)` = `Err(-5)` (held). Then 256
/// cycles of: `s` waits on a fresh user event (adopted on another stream), it fails,
/// `s.synchronize()`. Then `start.elapsed_time(&end)` again.
///
/// Expected: an error (as before the cycles: `end`'s marker was completed by PoCL at the
/// failure, its time tells nothing). Observed: `Ok(t)` with `t < 0`: `end` reads as having
/// ended before `start`.
#[test]
fn elapsed_time_stays_refused_after_256_more_drained_failures() {
    common::in_child("elapsed_cap", 1, || {
        let s = common::fresh_stream(0).leak();
        let other = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut end = Event::timing();
        end.record(&s).unwrap();
        let (returned, r) = xpu_testing::returns_within(LIMIT, || end.synchronize(), || ());
        assert!(returned && r.is_err(), "{r:?}");
        assert!(!gate.is_open());
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        start.synchronize().unwrap();
        end.synchronize().unwrap();
        let before = start.elapsed_time(&end);
        assert!(
            before.is_err(),
            "precondition (review h69's fix): {before:?}"
        );
        let dev = xpu_device::device(0).unwrap();
        for _ in 0..256 {
            let u = dev.create_user_event().unwrap();
            let a = Event::from_cl_event(u.clone(), &other, EventFlags::default()).unwrap();
            s.wait_event(&a).unwrap();
            u.set_failed(-5).unwrap();
            common::synchronize_after_failure(&s);
        }
        let after = start.elapsed_time(&end);
        assert!(
            after.is_err(),
            "elapsed_time from `start` to `end` (recorded after a failed wait; Err before) is \
             {after:?} after 256 more failed waits each cleared by a synchronize"
        );
    });
}
