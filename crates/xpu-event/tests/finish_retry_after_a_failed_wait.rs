//! `clFinish` retried after it failed once (the loader layer): a device or stream synchronize
//! drains every stream, clears a kept failed query marker, and queries during a blocked retry
//! return; events recorded before a known failure read pending.
//!
//! Review h91 of 333db9c: probes that found nothing (each passes on 333db9c). Findings are
//! in pending_point_after_a_known_failure.rs.
//!
//! The loader layer of review h90 (failing_finish_layer/finish_layer.c: one `clFinish` returns -5
//! at once, the driver's next one is real) stands for NVIDIA's `clFinish` reporting a failure
//! once; PoCL's own `clFinish` never fails after a failed wait.
//!
//! Checked by reading, no test: the allocators (xpu-alloc's `cl_stream.rs`, xpu-caching) free
//! under `OrderedMarker::status` / `drained_by_finish` / `follows_failed_wait`, none of which
//! the change touched (`pending_in_order` serves `IdleProbe` only, i.e. `Stream::query`), so a
//! freed block's reuse is unchanged; `known_failure` takes only the wait log's lock, from
//! `Recorded::status` and `IdleProbe::is_complete`, whose callers (`Event::query`/`synchronize`
//! /`elapsed_time`, `Stream::query`) hold no other lock then (the query-marker slot's lock is
//! dropped before `is_complete`), and under the log's lock only driver status/release calls
//! are made: no new lock order.
//!
//! Order comes from gates and user events; a thread blocked in `clFinish` is seen through
//! `/proc`; a bound only detects a call that never returns. Each scenario runs in a child
//! process (this test re-run), as pending_event_after_a_failed_wait_probes.rs does.
//!
//! Run with `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use common::{blocked_synchronize, fail_next_finish, with_failing_finish_layer};
use xpu_event::{Gate, StreamExt};

const LAYER: &str = "the loader layer models a driver over PoCL";

/// `known_failure` compares numbers: an event recorded *before* the failed wait, pending
/// behind a closed gate, reads `Ok(false)` once the failure is known (an event recorded after
/// it reported it), then `Ok(true)` once the gate opens.
#[test]
fn a_pending_event_recorded_before_a_known_failure_reads_false() {
    common::in_child("pending_before_failure", 1, || {
        let s = common::fresh_stream(0).leak();
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let before = s.record_event().unwrap();
        common::fail_a_wait(&s);
        let after = s.record_event().unwrap();
        assert!(after.synchronize().is_err());
        assert!(after.query().is_err());
        assert!(matches!(before.query(), Ok(false)), "{:?}", before.query());
        gate.open().unwrap();
        before.synchronize().unwrap();
        assert!(before.query().unwrap());
        common::synchronize_after_failure(&s);
    });
}

/// The device-wide synchronize with the retry: one `clFinish` fails at once (the layer); the
/// retry drains. `xpu_stream::synchronize(0)` returns the error; the stream's event recorded
/// before reads `Ok(true)`, `Stream::query` `Ok(true)`, the next device synchronize `Ok`.
#[test]
fn a_device_synchronize_whose_clfinish_fails_once_drains_every_stream() {
    with_failing_finish_layer();
    common::in_child("device_sync_retry", 1, || {
        if !common::pocl_only(LAYER) {
            return;
        }
        let s = common::fresh_stream(0).leak();
        common::fail_a_wait(&s);
        let e = s.record_event().unwrap();
        assert!(e.synchronize().is_err());
        let flag = fail_next_finish();
        let r = xpu_stream::synchronize(0);
        assert!(!flag.exists(), "the layer is not loaded");
        assert!(r.is_err(), "the first error is returned: {r:?}");
        assert!(e.query().unwrap());
        assert!(s.query().unwrap());
        xpu_stream::synchronize(0).unwrap();
    });
}

/// A stream query's kept marker that read a known failure (`Err`) does not outlive a
/// synchronize whose first `clFinish` failed and whose retry drained: `Stream::query` reads
/// `Ok(true)` right after it (idle since the drain), and stays so.
#[test]
fn a_kept_failed_query_marker_is_cleared_by_a_retry_drain() {
    with_failing_finish_layer();
    common::in_child("kept_marker_retry", 1, || {
        if !common::pocl_only(LAYER) {
            return;
        }
        let s = common::fresh_stream(0).leak();
        let (gate, e) = common::gated_event_after_a_failed_wait(&s);
        assert!(e.synchronize().is_err());
        assert!(
            s.query().is_err(),
            "the kept marker reads the known failure"
        );
        assert!(s.query().is_err());
        gate.open().unwrap();
        let flag = fail_next_finish();
        let r = s.synchronize();
        assert!(!flag.exists(), "the layer is not loaded");
        assert!(r.is_err(), "{r:?}");
        assert!(s.query().unwrap());
        assert!(s.query().unwrap());
        assert!(e.query().unwrap());
    });
}

/// Lock order: while a synchronize is blocked in its retry `clFinish` (the layer failed the
/// first at once; a gate holds the queue), `Event::query`, `Stream::query` and
/// `Event::synchronize` of the same stream from another thread return at once (none waits on
/// the wait log's lock or the query marker's), and the synchronize returns once the gate
/// opens.
#[test]
fn queries_during_a_blocked_retry_return() {
    with_failing_finish_layer();
    common::in_child("queries_during_retry", 1, || {
        if !common::pocl_only(LAYER) {
            return;
        }
        let s = common::fresh_stream(0).leak();
        let (gate, e) = common::gated_event_after_a_failed_wait(&s);
        assert!(e.synchronize().is_err());
        let flag = fail_next_finish();
        let b = blocked_synchronize(s);
        assert!(!flag.exists(), "the layer is not loaded");
        for _ in 0..100 {
            assert!(e.query().is_err());
            assert!(s.query().is_err());
            assert!(e.synchronize().is_err());
        }
        assert!(!b.is_finished(), "the retry waits for the gated work");
        gate.open().unwrap();
        let r = b.join().unwrap();
        assert!(r.is_err(), "{r:?}");
        assert!(e.query().unwrap());
        assert!(s.query().unwrap());
    });
}
