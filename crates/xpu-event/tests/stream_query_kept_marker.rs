//! `Stream::query`'s kept marker: events recorded and cross-stream waits enqueued after the marker
//! an earlier query kept are seen by the next query.
//!
//! Review h48 (of 25874a8: `Stream::query` answers `true` on the marker an earlier query kept
//! once it completed, when nothing was enqueued on the native stream after it): events recorded
//! and cross-stream waits enqueued between queries are seen (a new marker asks), and events
//! recorded before a `true` answer read complete. Holds; the order comes from gates.

mod common;

use common::ever_true;
use xpu_event::{Gate, StreamExt};

/// Polls `done()` for up to 60 s.
fn within_60s(done: impl FnMut() -> bool) -> bool {
    xpu_testing::true_within(std::time::Duration::from_secs(60), done)
}

#[test]
fn events_and_waits_enqueued_after_the_kept_marker_are_seen_by_the_next_query() {
    if !common::devices(1) {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let other = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    assert_ne!(s, other);
    s.synchronize().unwrap();
    assert!(
        within_60s(|| s.query().unwrap()),
        "idle: true (marker kept)"
    );

    // A gated barrier and an event recorded after the kept marker completed.
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    let e1 = s.record_event().unwrap();
    assert!(!s.query().unwrap(), "behind the gate");
    assert!(!e1.query().unwrap());

    // A wait on another stream's gated event, enqueued while the query's marker is pending.
    let gate2 = Gate::new(0).unwrap();
    gate2.block(&other).unwrap();
    let on_other = other.record_event().unwrap();
    s.wait_event(&on_other).unwrap();
    gate.open().unwrap();
    assert!(within_60s(|| e1.query().unwrap()), "e1 is before the wait");
    assert!(
        !ever_true(2_000, || s.query().unwrap()),
        "the stream waits for the other stream's gate"
    );
    gate2.open().unwrap();
    assert!(
        within_60s(|| s.query().unwrap()),
        "idle once both gates opened"
    );
    assert!(e1.query().unwrap() && on_other.query().unwrap());

    // An event recorded on the idle stream: the next queries ask with a new marker, and a
    // `true` makes it read complete.
    let e2 = s.record_event().unwrap();
    assert!(within_60s(|| s.query().unwrap()), "idle after the record");
    assert!(
        e2.query().unwrap(),
        "recorded before a query that answered true"
    );
    s.synchronize().unwrap();
    other.synchronize().unwrap();
}
