//! Review h58 (fresh eyes on the pinned-host allocator): findings, each a test that fails on
//! the code as reviewed. PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"`; skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates, no sleeps.
//!
//! Fixed in b95ed45 and fe07bcb (ordered free markers; a failed one keeps its block out until
//! its stream is synchronized, and allocation asks those blocks first): these pass now.

mod host_common;

use host_common::{allocator, TestResult};
use xpu_event::Gate;
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

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
