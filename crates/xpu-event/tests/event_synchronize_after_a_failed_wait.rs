//! `Event::synchronize` of an event recorded after a failed wait does not wait for work enqueued on
//! its stream after the record.
//!
//! Review h68 of xpu-event (fresh eyes on c61c9e7: `Event::record` takes an `OrderedMarker`;
//! after a failed wait `query` / `elapsed_time` report it, `synchronize` drains the stream,
//! `wait` refuses until the stream is synchronized). Each test here fails on c61c9e7; the
//! comment above it says what it shows, what was observed and in how many runs. Probes that
//! found nothing are in event_wait_after_a_failed_wait.rs.
//!
//! Found: `Event::synchronize` of an event recorded after a failed wait drains the whole
//! stream (`Stream::synchronize`, `clFinish`: event.rs:298), so it also waits for work
//! enqueued on the stream *after* the record: behind a gate that the caller opens once the
//! event synchronized, it never returns (torch's `Event.synchronize` waits only for the work
//! captured before the record).
//!
//! Fixed since: `synchronize` no longer drains; after a failed wait it returns the failure
//! at once (sticky until a synchronize of the stream, as `query`, `elapsed_time` and `wait`);
//! the test passes.
//!
//! Order comes from gates and user events; a bound only detects a call that never returns.
//! Each scenario runs in a child process (this test re-run), as
//! event_behind_a_gate_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_event::{Event, Gate, StreamExt};

/// The bound on a call that should return (it takes milliseconds).
const LIMIT: Duration = Duration::from_secs(10);

/// What it shows: `Event::synchronize` of an event recorded after a failed wait also waits
/// for the work enqueued on its stream after the record. `s` waits on a user event that is
/// failed, `after` is recorded on `s`, then `s` is blocked by a gate (after `after`, in the
/// stream's order) that the caller opens once `after` synchronized (a producer/consumer
/// hand-off). Expected: `synchronize` returns (`Ok` or the failure) without the gate, as it
/// does without the failed wait, and as `cudaEventSynchronize` does (it waits only for the
/// work captured before the record). Cause: event.rs:298 drains the stream
/// (`r.stream.synchronize()`: `clFinish` waits for every command of the queue, the gate's
/// barrier after the marker included).
/// Observed on PoCL (2 pthread devices): `synchronize` did not return within 10 s, and
/// returned `Ok(())` once the gate was opened after the limit; 8 of 8 runs.
#[test]
fn synchronize_of_an_event_after_a_failed_wait_waits_for_work_enqueued_after_the_record() {
    common::in_child("synchronize_after", 1, || {
        let s = common::fresh_stream(0).leak();
        let (adopted, user) = common::failable();
        s.wait_event(&adopted).unwrap();
        user.set_failed(-5).unwrap();
        let mut after = Event::default();
        after.record(&s).unwrap();
        // Work after the record, held by a gate the caller opens once `after` synchronized.
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let (returned, result) =
            xpu_testing::returns_within(LIMIT, || after.synchronize(), || gate.open().unwrap());
        let _ = s.synchronize();
        assert!(
            returned,
            "Event::synchronize of an event recorded before the gate's barrier did not return \
             within {LIMIT:?} while only work enqueued after the record was held (returned \
             {result:?} once the gate opened)"
        );
    });
}
