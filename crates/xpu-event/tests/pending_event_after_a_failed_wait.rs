//! A pending event (marker) recorded after a failed wait: `query` does not settle it failed, agrees
//! with `Stream::query`, costs one status query, `elapsed_time` reads `NotCompleted`; a synchronize
//! whose `clFinish` fails at once (a loader layer) waits for the work.
//!
//! Review h90 of 74df074 (a failed `clFinish` called again up to `FINISH_RETRIES` times and a
//! retry that succeeded counted as a drain; the stream's watermark raised on such a drain;
//! `Recorded::status` reading a still-pending marker after a failed wait before it as
//! `Error(-14)`, so `Event::query` reports the failure as `Event::synchronize` does).
//! Findings; each test here fails on 74df074. Probes that held are in
//! pending_event_after_a_failed_wait_probes.rs.
//!
//! 1. `Recorded::status` (recorded.rs:151-154) asks `OrderedMarker::follows_failed_wait` of a
//!    *pending* marker on every `Event::query`, and `EarlierWaits` keeps its first answer
//!    other than `Pending` for ever (waits.rs `settled`). A query made while a synchronize
//!    that began before the record and covers the failed wait is still in `clFinish` settles
//!    the marker `Failed`; once that synchronize returned `Ok` (and the marker completed),
//!    the event reads the failure for ever (query and synchronize), where the same event not
//!    queried while pending reads `Ok(true)` (pending_event_after_a_failed_wait_probes.rs: the
//!    control). Before
//!    74df074 a pending query made one status call and judged no wait.
//! 2. `Event::query` and `Stream::query` disagree on the same point: the last event recorded on
//!    a stream after a failed wait, behind a closed gate: `Event::query` is `Err(-14)`,
//!    `Stream::query` `Ok(false)` (its kept marker is pending: stream.rs:282).
//! 3. Cost (as review h73 found for `Stream::query`): `Event::query` of a pending event now
//!    judges every wait logged on its queue before it (`follows_failed_wait` ->
//!    `EarlierWaits::status` -> `Inner::judge`: one `clGetEventInfo` per logged wait, under the
//!    log's lock) on every call, also when no wait ever failed: 300 gated waits, about 301
//!    status queries per query, where 74df074^ made 1.
//! 4. `Event::elapsed_time` documents its checks in order, "4. both completed (`NotCompleted`)"
//!    before "5. neither recorded after a failed wait": an `end` still pending after a failed
//!    wait now gets check 5's `"command execution"` -14 error (its `poll` fails), not
//!    `NotCompleted`.
//! 5. `CommandQueue::finish_outcome` (queue.rs:937-943): after a `clFinish` that returned an
//!    error the retry is a real, blocking `clFinish`. Under an OpenCL loader layer
//!    (failing_finish_layer/finish_layer.c, `OPENCL_LAYERS`) whose `clFinish` returns -5 at once
//!    (a driver returning an error without waiting, which the docs allow for), a
//!    `Stream::synchronize` of a gated stream no longer returns: it waits for the gated work
//!    (10 s here, until the test opened the gate), where 74df074^ returned the error at once.
//!
//! Each of the five tests failed 5 of 5 runs on 74df074 and passed at 74df074^ (the three
//! changed `src` files reverted) on PoCL 3.1, 2 pthread devices, debug build.
//!
//! Fixed since (1-4): a pending marker reads only a failure already judged
//! (`OrderedMarker::known_failed_wait`: no status query, nothing settled), in `Event::query`
//! and in `Stream::query`'s probe alike, so `elapsed_time` of a pending `end` is
//! `NotCompleted` unless the failure was reported already. Finding 5 is the intended
//! behaviour (a synchronize waits for the work); its test now asserts that.
//!
//! Order comes from gates and user events; a thread blocked in `clFinish` is seen through
//! `/proc`; a bound only detects a call that never returns. Each scenario runs in a child
//! process (this test re-run), as adopted_command_after_a_failed_wait.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

/// Why finding 1's scene is PoCL's only: its `clFinish` succeeds after the failed wait and
/// the marker recorded behind it completes; NVIDIA reports the failure once and fails every
/// command queued behind the failed barrier, that marker too (its own status then reads the
/// failure, rightly).
const SYNC_OK: &str = "the marker behind the failed wait completes (NVIDIA fails it)";

/// Why the loader layer's tests run on PoCL only: the layer models a driver's `clFinish`
/// through ocl-icd's `OPENCL_LAYERS`, which the GPU machine's NVIDIA registration bypassed
/// (no `clFinish` reached it on an H100, 2026-12-07).
const LAYER: &str = "the loader layer models a driver over PoCL";

use common::{
    blocked_synchronize, covered_by_a_synchronize_begun_before_the_record, fail_next_finish,
    with_failing_finish_layer,
};

use xpu_device::backend::status_queries_on_this_thread;
use xpu_event::{Event, EventError, Gate, StreamExt};

/// FINDING 1. See the module docs and `covered_by_a_synchronize_begun_before_the_record`.
/// Expected: `e.query()` `Ok(true)` and `e.synchronize()` `Ok` once B's synchronize (begun
/// before the record, covering the failed wait; the docs of `WaitLog`'s `drained`: "A finish
/// that began before the marker and covered the failure clears it for the marker") returned
/// `Ok`, as without the query while pending (the control in
/// pending_event_after_a_failed_wait_probes.rs). Observed:
/// `Err(command execution -5)` for both, for ever (until a synchronize begun after the record):
/// the pending query settled the marker's earlier waits `Failed`.
#[test]
fn a_query_while_pending_does_not_make_the_event_fail_after_a_covering_synchronize() {
    common::in_child("query_while_pending_settles", 1, || {
        if !common::pocl_only(SYNC_OK) {
            return;
        }
        let (q, sync, pending) = covered_by_a_synchronize_begun_before_the_record(true);
        assert!(
            matches!(q, Ok(true)) && sync.is_ok(),
            "after the covering synchronize returned Ok: query {q:?}, synchronize {sync:?} \
             (the query while pending read {pending}; not asked, both are Ok)"
        );
    });
}

/// FINDING 2. `s` waits on a user event that fails, then a closed gate blocks `s`, then `e` is
/// recorded (the last command of `s`). Expected: `Event::query` and `Stream::query` agree
/// (both report the failed wait, as `cudaEventQuery` / `cudaStreamQuery` both return a sticky
/// error, and as the architecture table says of each: "a failed wait is reported until a
/// synchronize"). Observed: `e.query()` `Err(-14)`, `s.query()` `Ok(false)`.
#[test]
fn event_query_and_stream_query_agree_on_a_pending_point_after_a_failed_wait() {
    common::in_child("event_and_stream_query_agree", 1, || {
        let s = common::fresh_stream(0).leak();
        let (gate, e) = common::gated_event_after_a_failed_wait(&s);
        let eq = e.query();
        let sq = s.query();
        let eq2 = e.query();
        let sq2 = s.query();
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        assert!(
            eq.is_err() == sq.is_err() && eq2.is_err() == sq2.is_err(),
            "the last event of the stream: Event::query {eq:?} then {eq2:?}, \
             Stream::query {sq:?} then {sq2:?}"
        );
    });
}

/// FINDING 3 (cost). 300 barriers of a fresh stream, each on its own closed gate (no wait
/// failed); `e` recorded after them; `e.query()` once (`false`), then 20 more, counting
/// `status_queries_on_this_thread()`. Expected (the `Event::query` docs: "Otherwise: one
/// status call", as at 74df074^): about 1 per query. Observed: about 301 per query.
#[test]
fn polling_a_pending_event_costs_one_status_query() {
    common::in_child("pending_query_cost", 1, || {
        let s = common::fresh_stream(0).leak();
        let gates: Vec<Gate> = (0..300).map(|_| Gate::new(0).unwrap()).collect();
        for g in &gates {
            g.block(&s).unwrap();
        }
        let e = s.record_event().unwrap();
        assert!(matches!(e.query(), Ok(false)));
        let q0 = status_queries_on_this_thread();
        for _ in 0..20 {
            assert!(matches!(e.query(), Ok(false)));
        }
        let per_query = (status_queries_on_this_thread() - q0) / 20;
        for g in &gates {
            g.open().unwrap();
        }
        s.synchronize().unwrap();
        assert!(e.query().unwrap());
        assert!(
            per_query <= 2,
            "a pending event's query made {per_query} status queries (300 gated waits before it)"
        );
    });
}

/// FINDING 4 (docs). `start` recorded and synchronized; `s` waits on a user event that fails;
/// a closed gate blocks `s`; `end` recorded (pending). Expected, by the documented order of
/// `elapsed_time`'s checks (4. `NotCompleted` before 5. the failed wait's error):
/// `NotCompleted`. Observed: a `"command execution"` -14 error.
#[test]
fn elapsed_time_to_a_pending_end_after_a_failed_wait_is_not_completed() {
    common::in_child("elapsed_pending_after_failure", 1, || {
        let s = common::fresh_stream(0).leak();
        let mut start = Event::timing();
        start.record(&s).unwrap();
        start.synchronize().unwrap();
        common::fail_a_wait(&s);
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let mut end = Event::timing();
        end.record(&s).unwrap();
        let r = start.elapsed_time(&end);
        gate.open().unwrap();
        common::synchronize_after_failure(&s);
        assert!(
            matches!(r, Err(EventError::NotCompleted)),
            "elapsed_time to a pending end: {r:?}"
        );
    });
}

/// Finding 5, kept as the intended behaviour (the retry is a real `clFinish`): under a loader
/// layer whose `clFinish` returns -5 at once, once (a driver returning a `clFinish` error
/// without waiting), a `Stream::synchronize` of a gated stream waits for the gated work
/// (the thread is seen blocked while the gate is closed), then returns the first error; the
/// stream is drained (`Stream::query` `true`, the next synchronize `Ok`). Returning the error
/// at once (74df074^) let a caller take a stream with queued work for finished: a
/// synchronize waits for the work, as `torch.cuda.Stream.synchronize`; a caller that opens the
/// gate only after the synchronize returned would wait for ever with a driver that does not
/// fail `clFinish` too.
#[test]
fn a_synchronize_whose_clfinish_fails_at_once_waits_for_the_work_and_reports_the_error() {
    with_failing_finish_layer();
    common::in_child("finish_fails_at_once", 1, || {
        if !common::pocl_only(LAYER) {
            return;
        }
        let s = common::fresh_stream(0).leak();
        s.synchronize().unwrap();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let flag = fail_next_finish();
        let b = blocked_synchronize(s);
        assert!(
            !flag.exists(),
            "the layer is not loaded (no clFinish consumed the flag)"
        );
        assert!(
            !b.is_finished(),
            "the synchronize returned before the gate opened"
        );
        gate.open().unwrap();
        let r = b.join().unwrap();
        assert!(r.is_err(), "the first error is reported: {r:?}");
        assert!(s.query().unwrap());
        s.synchronize().unwrap();
    });
}
