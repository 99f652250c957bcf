//! A freed pinned block whose recorded stream had a failed wait is not reused while the work
//! recorded before the free is held back, and comes back once that stream is synchronized:
//! on pool streams (review h58) and on external streams over other code's queue, whose wait
//! log the runtime's wrappers of the queue must share and keep (reviews h59, h61, h63).
//! Every test uses an allocator of its own and streams or queues of its own.
//!
//! Review h58 (fresh eyes on the pinned-host allocator): findings, each a test that fails on
//! the code as reviewed. PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"`; skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates, no sleeps.
//!
//! Fixed in b95ed45 and fe07bcb (ordered free markers; a failed one keeps its block out until
//! its stream is synchronized, and allocation asks those blocks first): these pass now.
//!
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
//!
//! Review h61 (fresh eyes on 99f3f47, `CommandQueue`'s state shared per raw queue, and
//! b95ed45 / fe07bcb, the pinned-host allocator's kept-out blocks): findings, each a test that
//! fails on the reviewed commit (fe07bcb). PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates; no sleeps (one bounded poll of the
//! allocator's own statistics, as review h59's).
//!
//! Root: the registry of 99f3f47 (`SHARED`, crates/xpu-device/src/backend/queue.rs:78-93)
//! shares a raw queue's state (its wait log) between the wrappers that are alive *at the same
//! time*; when the last wrapper drops, the entry goes (queue.rs:1370-1382) while the queue
//! itself lives on (other code owns it: the case `ExternalStream` exists for), and a wrapper
//! made again from the raw handle (a new `ExternalStream` over it, as torch code makes an
//! `ExternalStream(ptr)` per use) starts with an empty wait log. Its markers are then judged
//! with no knowledge of the failed wait enqueued on the queue before: PoCL completes a marker
//! after a failed barrier while the commands before that barrier stay queued, and
//! `OrderedMarker::status` reads `Complete` (queue.rs:197-199 and 239-249, `in_order` with
//! `earlier` `None`).
//!
//! Review h63 (fresh eyes on 108da10: a raw queue's state kept after its last wrapper while
//! its wait log matters). PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"
//! XPU_REQUIRE_DEVICE=1`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by
//! user-event gates; one bounded poll of the allocator's own statistics (as review h61's).

mod host_common;

use std::time::Duration;

use host_common::{allocator, external_over, their_queue, TestResult};
use xpu_device::backend::QueueOptions;
use xpu_event::Gate;
use xpu_stream::{get_stream_from_pool, ExternalStream, PRIORITY_NORMAL};

// ---- Review h58 ----

/// Finding: `HostPtr::record_stream` promises "when this pointer is freed, the block is reused
/// only after a marker recorded on `stream` at that moment completes" (the project's rule: a
/// block is reused only after every recorded use completed). On PoCL a marker enqueued after
/// a wait on a failed event terminates at once, while the commands enqueued before that wait
/// are still queued (docs/architecture.md, step 6 of an allocation: the device allocator
/// judges its markers "in order" for exactly this reason, `enqueue_ordered_marker`). The
/// pinned-host allocator judges its free-time markers with a plain `Event::query` and counts
/// a marker whose query fails as finished (crates/xpu-host/src/pending.rs:39 `finished`, used
/// at :121 in `PendingQueue::process`), so one failed wait anywhere on a recorded stream
/// lets the block go back to its free list, and to the next allocation, while the work
/// recorded before the free is still held back.
///
/// Sequence (safe calls only): stream `s1` held by gate `earlier` (closed: the work recorded
/// on the block), then a wait on gate `failing`; stream `s2` idle; `h.record_stream(&s1)`,
/// `h.record_stream(&s2)`; `drop(h)`; `failing`'s event set failed (`set_failed(-5)`);
/// `s2.synchronize()`; `process_events()`; `allocate_on(0, 4096)`.
///
/// Observed (10 of 10 runs): `pending_blocks` 0, `pending_markers` 0 and `allocation.current`
/// 0 right after `process_events`, and the next allocation of the class is the freed block
/// (same address) while `earlier` is still closed.
///
/// Scope: the bytes are not at risk from safe code here: every safe use of a pinned block is
/// a `copy_pinned`, tracked on the buffer itself (`has_copies_in_flight`), and a probe showed
/// that PoCL never runs a copy enqueued after the failed wait (it fails with it), while one
/// enqueued before it stays tracked. What breaks is the `record_stream` contract itself,
/// which is what a user's own (unsafe, raw `host_ptr()`) use of the block relies on, and the
/// statistics (`allocation` drops before the recorded work completed).
#[test]
fn a_failed_wait_on_a_recorded_stream_does_not_release_the_block_before_its_earlier_work(
) -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let s2 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    assert_ne!(s1, s2);
    // The work that uses the block, held back.
    let earlier = Gate::new(0)?;
    earlier.block(&s1)?;
    // A later wait on s1 that fails (any failed event in a wait list does).
    let failing = Gate::new(0)?;
    failing.block(&s1)?;

    let h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    assert!(h.record_stream(&s1)?);
    assert!(h.record_stream(&s2)?);
    drop(h); // free-time markers on s1 (behind `earlier`, then `failing`) and s2
    failing.as_cl_event().set_failed(-5)?;
    // s2's marker complete for sure (a stream synchronize covers it): only s1's can hold
    // the block back.
    s2.synchronize()?;

    alloc.process_events();
    let stats = alloc.memory_stats();
    let next = alloc.allocate_on(0, 4096)?;
    let reused = next.address() == addr;
    let still_closed = !earlier.is_open();
    drop(next);
    earlier.open()?;
    // NVIDIA's first `clFinish` after a failed wait reports it once; a second returns.
    if s1.synchronize().is_err() {
        s1.synchronize()?;
    }
    assert!(
        still_closed && !reused && stats.pending_blocks == 1 && stats.allocation.current == 1,
        "the block recorded on s1 was released while s1's earlier work was still held back \
         (gate closed: {still_closed}): reused by the next allocation: {reused}, \
         pending_blocks {}, pending_markers {}, allocation.current {}",
        stats.pending_blocks,
        stats.pending_markers,
        stats.allocation.current
    );
    // Fixed since: the block was kept out; a synchronize of s1 that returned (begun after its
    // marker) shows the work before the marker done, so processing hands the block back.
    alloc.process_events();
    let after = alloc.memory_stats();
    assert_eq!(
        (
            after.pending_blocks,
            after.pending_markers,
            after.allocation.current
        ),
        (0, 0, 0),
        "the kept-out block comes back once s1 was synchronized"
    );
    // Two cached blocks now (`next`'s too): the two allocations get both.
    let (x, y) = (alloc.allocate_on(0, 4096)?, alloc.allocate_on(0, 4096)?);
    assert!(
        x.address() == addr || y.address() == addr,
        "the block is reused after the synchronize"
    );
    Ok(())
}

/// Review h59's suspicion, shown: a block kept out after a failed marker came back only
/// through `process_events` or `empty_cache`, never through allocation, so a program that
/// only allocates, frees and synchronizes grew a new block instead. Now an allocation that
/// finds no cached block asks the kept-out ones first: after `s1` is synchronized, the next
/// allocation of the class reuses the block and the segment count stays 1. Before the fix
/// (1 of 1 run): a second block (segment.current 2, a new address).
#[test]
fn a_kept_out_block_comes_back_through_allocation_once_its_stream_is_synchronized() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let earlier = Gate::new(0)?;
    earlier.block(&s1)?;
    let failing = Gate::new(0)?;
    failing.block(&s1)?;
    let h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    assert!(h.record_stream(&s1)?);
    drop(h);
    failing.as_cl_event().set_failed(-5)?;
    // The failed marker is seen: the block is kept out.
    alloc.process_events();
    assert_eq!(alloc.memory_stats().pending_blocks, 1, "kept out");
    earlier.open()?;
    if s1.synchronize().is_err() {
        s1.synchronize()?;
    }
    let again = alloc.allocate_on(0, 4096)?;
    let stats = alloc.memory_stats();
    assert_eq!(
        (
            again.address() == addr,
            stats.segment.current,
            stats.pending_blocks
        ),
        (true, 1, 0),
        "the allocation reuses the kept-out block once its stream was synchronized"
    );
    Ok(())
}

// ---- Review h59 ----

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

// ---- Review h61 ----

/// Finding 1 (reuse while recorded work is pending; review h59's finding 1a, still reachable
/// once the wrapper that saw the failed wait is gone). Sequence, all on other code's queue
/// `Q` (one in-order queue, other code's reference held throughout):
/// `e1 = ExternalStream::new(from_raw_borrowed(Q))`; `earlier.block(e1)` (work held back
/// behind a closed gate); `failing.block(e1)`, `failing.set_failed(-5)`; `drop(e1)` (the
/// runtime's last wrapper of `Q`: its state goes); `e2 = ExternalStream::new(
/// from_raw_borrowed(Q))`; `h = allocate_on(0, 4096)`, `h.record_stream(e2)`, `drop(h)` (its
/// free-time marker goes on `Q` after both waits); `process_events()` polled (at most 10 s)
/// until the block leaves the pending queue; `allocate_on(0, 4096)`.
///
/// Observed (PoCL, 5 of 5 runs, within a few ms): `pending_blocks` 0, `allocation.current`
/// 0, and the next allocation is the freed block (same address) while `earlier` is still
/// closed: the block recorded on `e2` is reused while the work enqueued on its queue before
/// the free is held back. With `e1` kept alive while `e2` is made (review h59's test) the
/// block stays pending.
///
/// Cause: `CommandQueue`'s `Drop` removes the raw queue's entry of `SHARED` with the last
/// wrapper (crates/xpu-device/src/backend/queue.rs:1370-1382), so `e2`'s wrapper gets a fresh
/// `QueueShared` (`shared_of`, queue.rs:84-93) whose wait log never saw the failed wait; the
/// marker's `EarlierWaits::after_marker` is `None` and `OrderedMarker::status` returns the
/// driver's `Complete` (queue.rs:197-199, 239-249); `judge` (crates/xpu-host/src/pending.rs:
/// 76) answers `Finished`.
#[test]
fn a_block_recorded_on_a_new_external_stream_over_a_queue_is_not_reused_while_its_earlier_work_is_held_back(
) -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let theirs = their_queue()?;
    let earlier = Gate::new(0)?;
    let failing = Gate::new(0)?;
    {
        let e1 = external_over(&theirs)?;
        earlier.block(&e1.stream())?;
        failing.block(&e1.stream())?;
        failing.as_cl_event().set_failed(-5)?;
    }
    let e2 = external_over(&theirs)?;
    let s = e2.stream();

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
        if s.synchronize().is_ok() {
            break;
        }
    }
    drop(e2);
    drop(theirs);
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

// ---- Review h63 ----

/// Finding (reuse while recorded work is pending; review h61's finding 1 again, through one
/// `Stream::query`). Sequence, all on other code's queue `Q` (its reference held
/// throughout): `e1 = ExternalStream::new(wrap(Q))`; `earlier.block(e1)` (held back behind a
/// closed gate); `e1.stream().query()` (answers `false`; the stream keeps its query marker,
/// an `IdleProbe`, in its `TrackedQueue`); `failing.block(e1)`, `failing.set_failed(-5)`;
/// `drop(e1)`; `e2 = ExternalStream::new(wrap(Q))`; `h = allocate_on(0, 4096)`,
/// `h.record_stream(e2)`, `drop(h)`; `process_events()` polled (at most 10 s) until the block
/// leaves the pending queue; `allocate_on(0, 4096)`.
///
/// Observed (PoCL, 5 of 5 runs, at once): `pending_blocks` 0 and the next allocation is the
/// freed block (same address) while `earlier` is still closed. Without the `query()` (review
/// h61's test) the block stays pending.
///
/// Cause: `TrackedQueue` (crates/xpu-stream/src/progress.rs:74-86) drops its `queue` field
/// before its `query_marker`, whose `IdleProbe` holds the queue's `Arc<QueueShared>`
/// (crates/xpu-device/src/backend/queue.rs:214, 866): the last wrapper's drop sees
/// `strong_count` 2 and does not keep the state (queue.rs:1519-1521, 146), the entry stays a
/// `Live(weak)` that dies with the probe, and `e2`'s wrapper gets a fresh state
/// (`shared_of`, queue.rs:102-133): its free marker reads `Complete` (`in_order` with
/// `earlier` `None`).
#[test]
fn a_block_recorded_on_a_new_external_stream_is_not_reused_after_the_old_one_was_queried(
) -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let theirs = their_queue()?;
    let earlier = Gate::new(0)?;
    let failing = Gate::new(0)?;
    let first_query;
    {
        let e1 = external_over(&theirs)?;
        earlier.block(&e1.stream())?;
        first_query = e1.stream().query()?;
        failing.block(&e1.stream())?;
        failing.as_cl_event().set_failed(-5)?;
    }
    let e2 = external_over(&theirs)?;
    let s = e2.stream();

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
        if s.synchronize().is_ok() {
            break;
        }
    }
    drop(e2);
    drop(theirs);
    assert!(
        !first_query,
        "the first query answered false (work held back)"
    );
    assert!(
        !(released || reused) || !still_closed,
        "the block recorded on the new external stream left the pending queue while the work \
         enqueued on its queue before the free was still held back (gate closed: \
         {still_closed}): reused by the next allocation: {reused}, pending_blocks {}, \
         pending_markers {}, allocation.current {}",
        stats.pending_blocks,
        stats.pending_markers,
        stats.allocation.current
    );
    Ok(())
}
