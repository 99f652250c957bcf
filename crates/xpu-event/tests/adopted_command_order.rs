//! Adopted commands judged in order (`CommandQueue::adopt_in_order`): a command complete before a
//! later pending or failed wait of its stream reads complete.
//!
//! Review h85 of xpu-event at 1d56b4a (commit 27bfb0a: a command of the stream's queue
//! adopted with `Event::from_cl_event` is judged in order with every wait logged on the
//! queue so far, `CommandQueue::adopt_in_order`). Each test here failed on 1d56b4a (8 of 8);
//! the first two pass since a complete command adopted with no failed wait logged is judged
//! by its own status and pending waits logged after an adopted command no longer hold it
//! back; the third is a documented limitation (ignored). The comment above each says what
//! it shows, what was expected and why. Probes that held are in
//! adopted_command_order_probes.rs.
//!
//! The flaw shared by all: `adopt_in_order` (crates/xpu-device/src/backend/queue.rs:1024-1032)
//! numbers the adopted command *at the adoption* (`EarlierWaits::after_marker` at that moment),
//! not at its enqueue. A command adopted after it ran, with a wait logged on its queue after
//! it, is judged with that later wait: with no failure anywhere, a complete command reads
//! incomplete and its event's `synchronize` blocks until unrelated later work of other
//! streams ran; after an unrelated later failed wait (not yet handled by a synchronize of the
//! stream), a command that completed with success before that wait reads failed. The
//! queue.rs comment calls this "towards failure, never towards completion"; FINDING 3 is that
//! documented choice, shown to differ from torch, FINDINGS 1-2 occur with no failure at all. `torch.cuda.Event` captures the
//! work before its point only, and the library's event is the command itself.
//!
//! Order comes from user events; a bound only detects a call that never returns. Each
//! scenario runs in a child process (this test re-run), as adopted_command_after_a_failed_wait.rs
//! does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, EventFlags, StreamExt};
use xpu_stream::Stream;

/// The bound on a call that should return at once (the command is complete).
const LIMIT: Duration = Duration::from_secs(5);

/// A command of `s`'s own queue (a foreign enqueue's event, as a library returns it), waited
/// for through the driver (`clWaitForEvents`): it completed before anything below.
fn completed_command(s: &Stream) -> xpu_device::backend::ClEvent {
    let c = s.queue().unwrap().enqueue_marker(&[]).unwrap();
    c.wait().unwrap();
    assert_eq!(
        c.status().unwrap(),
        xpu_device::backend::EventStatus::Complete
    );
    c
}

/// FINDING 1. What: a library command `C` of stream `s` completes (the driver says
/// `CL_COMPLETE` after `clWaitForEvents`); then `s` is made to wait on work of another
/// stream that is still pending (an unset user event: a closed gate, no failure anywhere);
/// then `C`'s event is adopted with `Event::from_cl_event` on `s`. Expected: `query()` is
/// `Ok(true)` (the command is complete; a torch event reflects its own point only).
/// Observed: `Ok(false)` until the unrelated wait completes. Why: queue.rs:1024-1032
/// `adopt_in_order` takes `EarlierWaits::after_marker` at the adoption, so the wait logged
/// after `C` counts as before it; `in_order` (queue.rs:386-394) then reads `Submitted`.
#[test]
fn an_adopted_command_complete_before_a_pending_wait_reads_incomplete() {
    common::in_child("adopted_before_pending", 1, || {
        let s = common::fresh_stream(0).leak();
        let c = completed_command(&s);
        let (other, user) = common::failable();
        s.wait_event(&other).unwrap();
        let e = Event::from_cl_event(c, &s, EventFlags::default()).unwrap();
        let q = e.query();
        user.set_complete().unwrap();
        assert!(
            matches!(q, Ok(true)),
            "a command complete in the driver, adopted after an unrelated pending wait of its \
             stream: query {q:?}"
        );
    });
}

/// FINDING 2. What: as FINDING 1, with a blocking event (`blocking: true`): `synchronize()`
/// of the adopted, already complete command. Expected: returns `Ok` at once. Observed: it
/// blocks until the unrelated pending wait completes (here: never, up to the bound; the user
/// event is set after). Why: as FINDING 1: `Recorded::status` stays `Submitted` while the
/// later-logged wait is pending, and event.rs:321-333 polls it after `clWaitForEvents`.
#[test]
fn synchronize_of_an_adopted_complete_command_waits_for_unrelated_later_work() {
    common::in_child("adopted_sync_waits", 1, || {
        let s = common::fresh_stream(0).leak();
        let c = completed_command(&s);
        let (other, user) = common::failable();
        s.wait_event(&other).unwrap();
        let e = Event::from_cl_event(
            c,
            &s,
            EventFlags {
                enable_timing: false,
                blocking: true,
            },
        )
        .unwrap();
        let (returned, r) =
            xpu_testing::returns_within(LIMIT, || e.synchronize(), || user.set_complete().unwrap());
        assert!(
            returned && r.is_ok(),
            "synchronize of a complete adopted command blocked on a later wait of another \
             stream (returned in time: {returned}, result {r:?})"
        );
    });
}

/// FINDING 3. What: a command `C` of `s` completed with success (driver `CL_COMPLETE`);
/// later `s` waits on an unrelated event that fails; `C` is adopted (no stream synchronize
/// between; after one it reads fine: adopted_command_order_probes.rs).
/// Expected: `query()` `Ok(true)` (the command ran with success before the failed wait was
/// enqueued; under CUDA a sticky error is reported by the calls after the failure, but an
/// event of work done before reads done). Observed: `Err(command execution)`. Why:
/// queue.rs:1024-1032 (the failed wait logged after `C` is judged as before it).
///
/// Kept as a documented limitation (`CommandQueue::adopt_in_order`): a command adopted after
/// a logged wait failed cannot be told from one that PoCL completed early behind that
/// failure, so it reads failed until a synchronize of its stream (towards failure). It
/// still fails when run.
#[test]
#[ignore = "documented limitation: a command adopted after a failed wait reads failed until a synchronize (adopt_in_order)"]
fn an_adopted_command_complete_before_a_failed_wait_reads_failed() {
    common::in_child("adopted_before_failed", 1, || {
        let s = common::fresh_stream(0).leak();
        let c = completed_command(&s);
        let (other, user) = common::failable();
        s.wait_event(&other).unwrap();
        user.set_failed(-5).unwrap();
        let e = Event::from_cl_event(c, &s, EventFlags::default()).unwrap();
        let q = e.query();
        assert!(
            matches!(q, Ok(true)),
            "a command that completed with success before an unrelated failed wait: query {q:?}"
        );
    });
}
