//! Review h63 (fresh eyes on 108da10: a raw queue's state kept after its last wrapper while
//! its wait log matters). PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"
//! XPU_REQUIRE_DEVICE=1`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by
//! user-event gates; one bounded poll of the allocator's own statistics (as review h61's).

mod host_common;

use std::time::Duration;

use host_common::{allocator, external_over, their_queue, TestResult};
use xpu_event::Gate;

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
