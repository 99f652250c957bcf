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

use std::ffi::c_void;
use std::time::Duration;

use host_common::{allocator, TestResult};
use xpu_device::backend::{CommandQueue, QueueOptions};
use xpu_event::Gate;
use xpu_stream::ExternalStream;

// The other code's own reference to its queue (it made the queue and keeps it, as a library
// that hands its `cl_command_queue` to the runtime now and then does).
#[link(name = "libOpenCL.so.1", kind = "dylib", modifiers = "+verbatim")]
extern "C" {
    fn clRetainCommandQueue(queue: *mut c_void) -> i32;
    fn clReleaseCommandQueue(queue: *mut c_void) -> i32;
}

/// Other code's in-order queue on device 0's context: the raw handle, with one reference
/// that other code owns (released by [`release_theirs`]). Made through the runtime only to
/// get a queue of the right context; that wrapper is dropped at once.
fn their_queue() -> TestResult<*mut c_void> {
    let q = xpu_device::device(0)?.create_queue(QueueOptions::default())?;
    let raw = q.as_raw().cast::<c_void>();
    // SAFETY: `q` holds a reference to the live queue; this takes other code's own.
    assert_eq!(unsafe { clRetainCommandQueue(raw) }, 0);
    drop(q);
    Ok(raw)
}

/// Releases other code's reference ([`their_queue`]).
fn release_theirs(raw: *mut c_void) {
    // SAFETY: the reference taken by `their_queue`, released once.
    assert_eq!(unsafe { clReleaseCommandQueue(raw) }, 0);
}

/// An external stream registered over other code's queue (`raw`, alive: other code holds a
/// reference).
fn external_over(raw: *mut c_void) -> TestResult<ExternalStream> {
    // SAFETY: `raw` is a live queue (other code's reference, kept to the end of the test).
    let queue = unsafe { CommandQueue::from_raw_borrowed(raw.cast()) }?;
    Ok(ExternalStream::new(queue, 0)?)
}

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
    let raw = their_queue()?;
    let earlier = Gate::new(0)?;
    let failing = Gate::new(0)?;
    {
        let e1 = external_over(raw)?;
        earlier.block(&e1.stream())?;
        failing.block(&e1.stream())?;
        failing.as_cl_event().set_failed(-5)?;
    }
    let e2 = external_over(raw)?;
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
    release_theirs(raw);
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
