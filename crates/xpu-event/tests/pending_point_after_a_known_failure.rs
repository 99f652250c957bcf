//! A pending point after a failed wait already known: a synchronize while pending does not settle
//! it failed, `query` / `synchronize` / `wait` report one code (-14), and polling `Stream::query`
//! costs one status query.
//!
//! Review h91 of 333db9c (fresh eyes on 74df074..333db9c: `CommandQueue::finish` retrying a
//! failed `clFinish` and counting a successful retry as a drain; a marker still pending after
//! a wait already known to have failed reading `Error(code)` in `Event::query`
//! (`Recorded::status`) and in `Stream::query` (`IdleProbe::is_complete` ->
//! `pending_in_order` -> `EarlierWaits::known_failure`)). Findings; each test here fails on
//! 333db9c (7 of 7 runs, PoCL 3.1, 2 pthread devices, debug build). Probes that held are in
//! finish_retry_after_a_failed_wait.rs.
//!
//! Fixed since (all three): `OrderedMarker::follows_failed_wait` judges the waits now and
//! settles no `Failed` answer (`EarlierWaits::failure_now`; `EarlierWaits::status` still
//! settles what it reads once the marker completed, review h75); a pending point reads -14 in
//! `Event::query` as in `synchronize` and `wait`; `Stream::query` keeps `in_order` for its
//! probe and, while the probe is queued, reads a known failure through the wait log's lock
//! (`IdleProbe::known_failed_wait`, no status query).
//!
//! 1. Review h90's finding 1 with `Event::synchronize` in place of `Event::query`: an
//!    `Event::synchronize` (likewise `Event::wait`, `elapsed_time`: any
//!    `OrderedMarker::follows_failed_wait`) asked while a synchronize begun before the record
//!    and covering the failed wait is still in `clFinish` settles the marker's earlier waits
//!    `Failed` (waits.rs:391, `settled`); once that synchronize returned `Ok` and the marker
//!    completed, the event reads the failure for ever (`query` and `synchronize`, -5), where
//!    the control not asked while pending reads `Ok(true)`
//!    (pending_event_after_a_failed_wait_probes.rs) and
//!    `Stream::query` reads `Ok(true)`. Older than 74df074 (this test fails at 7156887 too):
//!    the h90 fix made the pending *query* not settle, and left the other askers settling.
//!    `known_failure` (waits.rs:402-407) returns that settled answer first, against its own
//!    docs ("not cleared for this marker by a finish that began before it").
//! 2. Error codes: since 646eb31 a pending marker reads the failed wait's own status (-5 for
//!    a user event failed with -5) in `Event::query` (recorded.rs:156), while
//!    docs/architecture.md:173 says it "reads that failure (-14) in `query` as in
//!    `synchronize`", and a blocking event's `synchronize` and `Event::wait` report -14
//!    (event.rs:303, wait.rs: `Recorded::failed_before` -> `FAILED_WAIT`, recorded.rs:171):
//!    one pending point reports -14, -5, -14. (At 7156887 `query` read `Ok(false)`.)
//! 3. Cost: a pending kept `Stream::query` marker after a known failed wait now reads `Err`,
//!    and the `Err` arm of `Stream::query` (stream.rs:270) asks
//!    `CommandQueue::follows_failed_wait` (waits.rs:310 `failed_since_finish`), which judges
//!    every logged wait (a status query each, under the log's lock) on every poll: with 300
//!    gated barriers after the failure, 301 status queries per poll, where the same pending
//!    kept marker cost one at 7156887 (this test passes there) -- review h73's cost, which
//!    stream.rs:279-282 says was removed ("asking the wait log here cost a status query per
//!    logged wait on every poll"). The `Stream::query` docs (stream.rs:227) still say "While
//!    the kept marker is still queued the query answers `false` (one driver call)".
//!
//! Not tested (unreachable on PoCL, whose `clFinish` also waits for the commands enqueued
//! after it began): with finding 1's settled answer, a marker still *pending* after the
//! covering synchronize returned would read `Err` in `Event::query` while `Stream::query`
//! reads `Ok(false)` (review h90's finding 2 by another road). On PoCL the scene hangs: B's
//! `clFinish` waits for the gate enqueued after it.
//!
//! Order comes from gates and user events; a thread blocked in `clFinish` is seen through
//! `/proc` (`blocked_synchronize`). Each scenario runs in a child process (this test re-run),
//! as pending_event_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use common::blocked_synchronize;
use xpu_device::backend::status_queries_on_this_thread;
use xpu_event::{Event, EventFlags, Gate, StreamExt};

/// The OpenCL code in an error's `Debug` (`ClError { .., code: -5 }`), if any.
fn code_of<T: std::fmt::Debug, E: std::fmt::Debug>(r: &Result<T, E>) -> Option<i32> {
    let Err(e) = r else { return None };
    let s = format!("{e:?}");
    let at = s.find("code: ")? + "code: ".len();
    let digits: String = s[at..]
        .chars()
        .take_while(|c| *c == '-' || c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The scene of finding 1 (review h90's finding 1 scene, `covered_by_a_synchronize_begun_
/// before_the_record`, with `e.synchronize()` asked while pending instead of `e.query()`):
/// `s` gated by `g1`; a wait of `s` on a user event failed with -5; thread B's
/// `s.synchronize()` blocks behind `g1` (it covers the failed wait); `s` gated by `g2`; `e`
/// recorded (after B's `clFinish` began); `e.synchronize()` now (the failure stands: `Err`);
/// `g1` and `g2` open, B returns `Ok` (PoCL; its `clFinish` waits for `g2` too), `e` has
/// completed. Returns `s`, `e`, and what the synchronize while pending returned.
fn synchronized_while_a_covering_synchronize_runs(
) -> (xpu_stream::Stream, Event, Result<(), xpu_event::EventError>) {
    let s = common::fresh_stream(0).leak();
    let g1 = Gate::new(0).unwrap();
    g1.block(&s).unwrap();
    common::fail_a_wait(&s);
    let b = blocked_synchronize(s);
    let g2 = Gate::new(0).unwrap();
    g2.block(&s).unwrap();
    let e = s.record_event().unwrap();
    let while_pending = e.synchronize();
    g1.open().unwrap();
    g2.open().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "PoCL's clFinish succeeds: {synced:?}");
    // The marker is over (`clFinish` waits for the whole queue on PoCL).
    let _ = common::query_once_over(&e);
    (s, e, while_pending)
}

/// FINDING 1. See the module docs. Expected, as review h90's finding 1 test and its control
/// (pending_event_after_a_failed_wait_probes.rs: not asked while pending, both are `Ok`): once B
/// (begun before the
/// record, covering the failed wait) returned `Ok` and `e` completed, `e.query()` `Ok(true)`
/// and `e.synchronize()` `Ok`. Observed: both `Err(command execution -5)`, for ever (until
/// a synchronize begun after the record), because `e.synchronize()` while pending settled
/// the marker's earlier waits `Failed` (waits.rs `settled`).
#[test]
fn a_synchronize_while_pending_does_not_make_the_event_fail_after_a_covering_synchronize() {
    common::in_child("synchronize_while_pending_settles", 1, || {
        if !common::pocl_only("PoCL's clFinish succeeds after the failed wait") {
            return;
        }
        let (s, e, while_pending) = synchronized_while_a_covering_synchronize_runs();
        let (q, sync) = (e.query(), e.synchronize());
        let (q2, sync2) = (e.query(), e.synchronize());
        let stream = s.query();
        s.synchronize().unwrap();
        assert!(
            matches!(q, Ok(true)) && sync.is_ok(),
            "after the covering synchronize returned Ok and e completed: query {q:?} then \
             {q2:?}, synchronize {sync:?} then {sync2:?} (Stream::query {stream:?}; \
             e.synchronize while pending: {while_pending:?})"
        );
    });
}

/// FINDING 2. A blocking event `e` recorded on `s` after a wait on a user event failed with
/// -5, behind a closed gate (pending). Expected (docs/architecture.md, `Event::query` row:
/// "reads that failure (-14) in query as in synchronize"): `synchronize`, `query` and `wait`
/// report one code, -14. Observed: `synchronize` -14, `query` -5, `wait` -14.
#[test]
fn a_pending_point_after_a_failed_wait_reports_one_code_in_query_synchronize_and_wait() {
    common::in_child("pending_codes", 1, || {
        let s = common::fresh_stream(0).leak();
        let waiter = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let e = s
            .record_event_with(EventFlags {
                enable_timing: false,
                blocking: true,
            })
            .unwrap();
        let sy = e.synchronize();
        let q = e.query();
        let w = e.wait(&waiter);
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        let codes = (code_of(&sy), code_of(&q), code_of(&w));
        assert!(
            codes == (Some(-14), Some(-14), Some(-14)),
            "codes (synchronize, query, wait) of one pending point: {codes:?} \
             ({sy:?} / {q:?} / {w:?}); docs/architecture.md: -14 in query as in synchronize"
        );
    });
}

/// FINDING 3 (cost). `s` waits on a user event failed with -5, then 300 barriers, each on its
/// own closed gate (the log's pruning at 16 entries judges the failed wait: it is known).
/// `s.query()` once (a fresh marker, pending, reads the known failure: `Err`, kept), then 20
/// more, counting `status_queries_on_this_thread()`. Expected (stream.rs:279-282, review
/// h73: a kept marker still queued costs one driver call): about 1 per query. Observed: about
/// 300 per query (`follows_failed_wait` judges every logged wait).
#[test]
fn polling_a_stream_whose_kept_marker_is_pending_after_a_known_failure_costs_one_status_query() {
    common::in_child("pending_stream_query_cost", 1, || {
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let gates: Vec<Gate> = (0..300).map(|_| Gate::new(0).unwrap()).collect();
        for g in &gates {
            g.block(&s).unwrap();
        }
        let first = s.query();
        let q0 = status_queries_on_this_thread();
        let mut answers = Vec::new();
        for _ in 0..20 {
            answers.push(s.query().is_err());
        }
        let per_query = (status_queries_on_this_thread() - q0) / 20;
        for g in &gates {
            g.open().unwrap();
        }
        common::synchronize_after_failure(&s);
        assert!(s.query().unwrap());
        assert!(
            per_query <= 2,
            "a Stream::query whose kept marker is pending made {per_query} status queries \
             (300 gated waits logged; first answer {first:?}, then Err: {answers:?})"
        );
    });
}
