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

mod host_common;

use std::time::Duration;

use host_common::{allocator, external_over, their_queue, TestResult};
use xpu_event::Gate;

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
