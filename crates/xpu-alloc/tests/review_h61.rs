//! Review h61 (fresh eyes on 99f3f47 and 50483cf): the caching device allocator over an
//! external stream made again over other code's queue. Fails on the reviewed commit
//! (fe07bcb). PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates; one bounded
//! poll of the allocator's own answers, no sleeps.
//!
//! Root (as crates/xpu-host/tests/review_h61.rs): 99f3f47's registry shares a raw queue's
//! wait log only between wrappers alive at the same time; once the last one drops
//! (crates/xpu-device/src/backend/queue.rs:1370-1382), a wrapper made again over the raw
//! handle starts with an empty log, and its ordered markers after a failed wait read
//! `Complete` while the commands before that wait are still queued.

mod common;

use std::time::Duration;

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_device::backend::{ForeignQueue, QueueOptions};
use xpu_event::Gate;
use xpu_stream::ExternalStream;

use common::fresh_stream;

/// An external stream registered over other code's queue (alive: other code holds a
/// reference, `CommandQueue::foreign_reference`).
fn external_over(theirs: &ForeignQueue) -> ExternalStream {
    ExternalStream::new(theirs.wrap().unwrap(), 0).unwrap()
}

/// Finding 2 (reuse while recorded work is pending). Sequence: other code's in-order queue
/// `Q` (its own reference held throughout); `e1 = ExternalStream::new(from_raw_borrowed(Q))`;
/// `earlier.block(e1)` (work held back behind a closed gate); `failing.block(e1)`,
/// `failing.set_failed(-5)`; `drop(e1)` (the runtime's last wrapper of `Q`); `e2 =
/// ExternalStream::new(from_raw_borrowed(Q))`; on a fresh stream `S`: `x = allocate(4096,
/// S)`, `record_stream(x, e2)`, `drop(x)` (free markers on `S` and on `Q`, after both
/// waits); `allocate(4096, S)` polled (at most 10 s) until it returns `x`'s address.
///
/// Observed (PoCL, 5 of 5 runs, at once): the next allocation on `S` is `x`'s block while
/// `earlier` is still closed. With `e1` alive while `e2` is made, the block is not reused
/// (its marker reads the failed wait; `EventMarker::status` keeps it out until `Q` is
/// synchronized).
///
/// Cause: `e2`'s wrapper has a fresh `QueueShared` (queue.rs:84-93, the entry removed with
/// `e1`'s wrapper at queue.rs:1370-1382), so its `OrderedMarker` reads `Complete`
/// (queue.rs:197-199, 239-249: `in_order` with `earlier` `None`) and `EventMarker::status`
/// (crates/xpu-alloc/src/cl_stream.rs:131-142) answers `MarkerStatus::Complete`:
/// `Pending::pop_completed` frees the block.
#[test]
fn a_block_recorded_on_a_new_external_stream_over_a_queue_is_not_reused_while_its_earlier_work_is_held_back(
) {
    if !xpu_testing::devices(1) {
        return;
    }
    let q = xpu_device::device(0)
        .unwrap()
        .create_queue(QueueOptions::default())
        .unwrap();
    let theirs = q.foreign_reference().unwrap();
    drop(q);
    let earlier = Gate::new(0).unwrap();
    let failing = Gate::new(0).unwrap();
    {
        let e1 = external_over(&theirs);
        earlier.block(&e1.stream()).unwrap();
        failing.block(&e1.stream()).unwrap();
        failing.as_cl_event().set_failed(-5).unwrap();
    }
    let e2 = external_over(&theirs);
    let s = fresh_stream(0);
    let s = s.stream();
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let x = alloc.allocate(4096, &s).unwrap();
    let addr = x.address();
    alloc.record_stream(&x, &e2.stream()).unwrap();
    drop(x);
    let reused = xpu_testing::true_within(Duration::from_secs(10), || {
        alloc.allocate(4096, &s).unwrap().address() == addr
    });
    let still_closed = !earlier.is_open();
    earlier.open().unwrap();
    for _ in 0..3 {
        if e2.stream().synchronize().is_ok() {
            break;
        }
    }
    drop(e2);
    drop(theirs);
    assert!(
        !reused || !still_closed,
        "x's block (recorded on e2) was handed out again on S while the work enqueued on \
         e2's queue before its free was still held back (gate closed: {still_closed})"
    );
}
