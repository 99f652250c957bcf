//! Review h59 (fresh eyes on b95ed45, the pinned-host allocator's ordered free-time markers):
//! findings, each a test that fails on the reviewed commit (df956e1). PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates; no sleeps (one bounded poll of the
//! allocator's own statistics, see below).
//!
//! Both come from one root: an `OrderedMarker` is judged with the waits logged in its
//! *wrapper's* `WaitLog` only (crates/xpu-device/src/backend/queue.rs:66-68, "a queue wrapped
//! twice from its raw handle does not" share; `QueueShared::waits`, :79), and an external
//! stream is by construction another wrapper of a queue that other runtime wrappers enqueue
//! on (ExternalStream's own doc example keeps `theirs`, a runtime `CommandQueue`, and wraps
//! its raw handle a second time). A wait that failed through `theirs` is invisible to the
//! markers the allocator enqueues through the stream: `EarlierWaits::after_marker`
//! (waits.rs:309) returns `None` (the stream's log is not watched), so the marker's status is
//! the driver's own (queue.rs:208 `in_order`), and `drained_by_finish` is `false` for ever
//! (queue.rs:177, `is_some_and` on `None`).
//!
//! Fixed in 99f3f47 (one wait log per raw queue; `drained_by_finish` counts finishes): these
//! pass now.

mod host_common;

use std::time::Duration;

use host_common::{allocator, TestResult};
use xpu_device::backend::QueueOptions;
use xpu_event::Gate;
use xpu_stream::ExternalStream;

/// A runtime queue (`theirs`, as other code's would be) and an external stream registered
/// over its raw handle, as in `ExternalStream`'s doc example.
fn external() -> TestResult<(xpu_device::backend::CommandQueue, ExternalStream)> {
    let theirs = xpu_device::device(0)?.create_queue(QueueOptions::default())?;
    // A second wrapper from the raw handle (`rewrapped`: `from_raw_borrowed` of `as_raw`).
    let queue = theirs.rewrapped()?;
    let ext = ExternalStream::new(queue, 0)?;
    Ok((theirs, ext))
}

/// Finding 1a (reuse while recorded work is pending; review h58's defect, still reachable
/// through an external stream). Sequence: `theirs` holds work behind gate `earlier` (closed:
/// the work recorded on the block), then a wait on gate `failing`, which is set failed
/// (`set_failed(-5)`); `h = allocate_on(0, 4096)`, `h.record_stream(&ext.stream())`,
/// `drop(h)` (its free-time marker goes on the same in-order queue, after both);
/// `process_events()` polled (at most 10 s) until the block leaves the pending queue;
/// `allocate_on(0, 4096)`.
///
/// Observed (5 of 5 runs, within a few ms): `pending_blocks` 0, `allocation.current` 0, and
/// the next allocation is the freed block (same address) while `earlier` is still closed.
/// PoCL completes the marker enqueued after the failed barrier while the command before it
/// stays queued (waits.rs module docs); the marker is not judged with `theirs`'s failed wait
/// (pending.rs:71-76 `judge` → `Finished`).
#[test]
fn a_block_recorded_on_an_external_stream_is_not_reused_while_earlier_work_is_held_back(
) -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let (theirs, ext) = external()?;
    let s = ext.stream();
    let earlier = Gate::new(0)?;
    let failing = Gate::new(0)?;
    drop(theirs.enqueue_barrier(&[earlier.as_cl_event()])?);
    drop(theirs.enqueue_barrier(&[failing.as_cl_event()])?);
    failing.as_cl_event().set_failed(-5)?;

    let h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    assert!(h.record_stream(&s)?);
    drop(h);
    // Correct behaviour keeps the block pending as long as `earlier` is closed: this poll
    // then ends at its bound.
    let released = xpu_testing::true_within(Duration::from_secs(10), || {
        alloc.process_events();
        alloc.memory_stats().pending_blocks == 0
    });
    let stats = alloc.memory_stats();
    let next = alloc.allocate_on(0, 4096)?;
    let reused = next.address() == addr;
    let still_closed = !earlier.is_open();
    drop(next);
    earlier.open()?;
    for _ in 0..3 {
        if theirs.finish().is_ok() {
            break;
        }
    }
    assert!(
        !(released || reused) || !still_closed,
        "the block recorded on the external stream left the pending queue while the work \
         enqueued on its queue before the free was still held back (gate closed: \
         {still_closed}): reused by the next allocation: {reused}, pending_blocks {}, \
         pending_markers {}, allocation.current {}",
        stats.pending_blocks,
        stats.pending_markers,
        stats.allocation.current
    );
    Ok(())
}

/// Finding 1b (a kept-out block leaked for good in ordinary use). The same queue, but the
/// block is freed before the wait fails (review h58's order): its marker reads failed, so the
/// block is kept out "until its stream is synchronized" (pending.rs:236, the logged error).
/// Then `earlier` is opened and the stream synchronized (three times, and `theirs.finish()`,
/// `xpu_stream::synchronize(0)`, `empty_cache()`): nothing of the queue is pending any more.
///
/// Observed (5 of 5 runs): still `pending_blocks` 1, `pending_markers` 1,
/// `allocation.current` 1 after all of it; the block never comes back (the allocator's drop
/// leaks it, pending.rs:257). `drained_by_finish` is `false` for a marker enqueued while
/// its wrapper's log held nothing (queue.rs:177-178), so `judge` (pending.rs:77-78) keeps
/// answering `Failed` however often the stream is synchronized.
#[test]
fn a_kept_out_block_of_an_external_stream_comes_back_once_the_stream_is_synchronized() -> TestResult
{
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let (theirs, ext) = external()?;
    let s = ext.stream();
    let earlier = Gate::new(0)?;
    let failing = Gate::new(0)?;
    drop(theirs.enqueue_barrier(&[earlier.as_cl_event()])?);
    drop(theirs.enqueue_barrier(&[failing.as_cl_event()])?);

    let h = alloc.allocate_on(0, 4096)?;
    assert!(h.record_stream(&s)?);
    drop(h);
    failing.as_cl_event().set_failed(-5)?;
    alloc.process_events();
    let kept = alloc.memory_stats();
    assert_eq!(kept.pending_blocks, 1, "kept out while `earlier` is closed");

    earlier.open()?;
    // NVIDIA's first finish after a failed wait reports it; the later ones return.
    for _ in 0..3 {
        let _ = s.synchronize();
    }
    let _ = theirs.finish();
    let _ = xpu_stream::synchronize(0);
    s.synchronize()?;
    alloc.process_events();
    alloc.empty_cache();
    let after = alloc.memory_stats();
    assert_eq!(
        (
            after.pending_blocks,
            after.pending_markers,
            after.allocation.current
        ),
        (0, 0, 0),
        "the kept-out block stays out (pending_blocks, pending_markers, allocation.current) \
         after its stream and its queue were synchronized with nothing left on them"
    );
    Ok(())
}
