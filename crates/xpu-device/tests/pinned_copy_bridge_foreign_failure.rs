//! A pinned copy's bridge (`ClEvent::complete_when_over`) when a download fails through a failure
//! set by foreign code (a raw handle): the healthy queue's upload still finishes.
//!
//! Review h43 (fresh eyes on today's pinned-copy bridges, `ClEvent::complete_when_over`):
//! findings in xpu-device, each a test that fails on the code as reviewed. PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread"`; skipped without devices unless `XPU_REQUIRE_DEVICE=1`.
//! Ordering by user events only; `within` gives the verdict "never returned" on a call that
//! should return once everything it waits for is over (the limit orders nothing).

mod common;

use std::time::Duration;

use opencl3::event as cle;
use xpu_device::backend::{Buffer, ClEvent, MemFlags, PinnedBuffer, PinnedBytes};

const N: usize = 4096;
/// Generous: the healthy queue's work is one 4 KiB copy once its wait is over.
const LIMIT: Duration = Duration::from_secs(10);

/// Finding 1 (a hang that was an error before 4b72cfe): a pinned upload on a healthy queue
/// now waits for a pinned download of another queue *of the same context* through a bridge
/// (`complete_when_over`), which only the runtime's sweep completes when the download fails
/// (PoCL 3.1 makes no callback for a failed command). A failure started by foreign code
/// through a raw handle (an application's own user event that an `ExternalStream`'s queue, or
/// a command of the runtime's, waits on; OpenCL interop with another library) runs no sweep:
/// the bridge stays unset, and the healthy queue never finishes. Before 4b72cfe the download's
/// event was in the upload's wait list (same context): the upload failed with it (review h41's
/// finding 3, as its text records; not rerun on the old code here), but `finish` returned.
///
/// Sequence: queues qa and qb of device 0; a user event made and failed by foreign code
/// (`clCreateUserEvent` / `clSetUserEventStatus` through the raw handles, the runtime only
/// wraps it for the wait list); `qa.copy_pinned(Into pinned)` waiting on it;
/// `qb.copy_pinned(From pinned)`; the foreign code sets its event to -5; `qb.finish()`.
///
/// Observed (3 of 3 runs): `qb.finish()` has not returned after 10 s; the download's status
/// is `Error(-1)`, the upload's `Queued` (behind the unset bridge). Reading `live_objects()` (which sweeps)
/// releases it, which the test does afterwards so that it ends. The module docs of `forwards`
/// name the limit ("a failure set through a raw handle by foreign code reaches the targets at
/// the next sweep"), but there may be no next sweep: a process with no other failure hangs.
// Fixed (2026-12-06): `CommandQueue::finish` of a PoCL-before-4.0 queue sweeps the forwards
// first, so a foreign failure set before it reaches the bridge. A foreign failure set while a
// `finish` already waits still reaches it only at the next sweep (documented in `forwards`).
#[test]
fn a_foreign_failure_of_a_download_hangs_the_upload_of_another_queue() {
    let Some((dev, ctx, qa)) = common::device0_queue() else {
        return;
    };
    let qb = common::queue(dev);
    let da = Buffer::new(ctx, N, MemFlags::default()).unwrap();
    let db = Buffer::new(ctx, N, MemFlags::default()).unwrap();
    qa.write(&da, 0, &[0x5A; N]).unwrap();
    qb.write(&db, 0, &[0x11; N]).unwrap();
    let mut pinned = PinnedBuffer::new(ctx, &qa, N).unwrap();
    pinned.as_mut_slice().fill(0x22);
    // The foreign code's user event.
    let raw = cle::create_user_event(ctx.as_raw()).expect("clCreateUserEvent");
    // SAFETY: `raw` is a live user event; the runtime's wrapper takes a reference of its own.
    let foreign = unsafe { ClEvent::from_raw_retained(raw) }.unwrap();
    let download = qa
        .copy_pinned(&da, 0, PinnedBytes::Into(&mut pinned), 0, N, &[&foreign])
        .unwrap();
    let upload = qb
        .copy_pinned(&db, 0, PinnedBytes::From(&pinned), 0, N, &[])
        .unwrap();
    qa.flush().unwrap();
    qb.flush().unwrap();
    // The foreign code fails its event through the raw handle.
    cle::set_user_event_status(raw, -5).expect("clSetUserEventStatus");
    let q = qb.clone();
    let finished = common::within(LIMIT, move || q.finish());
    let download_status = download.status();
    let upload_status = upload.status();
    // Unblock (a sweep) whatever the verdict, so that the process ends.
    let _ = xpu_device::live_objects();
    let after_sweep = common::within(LIMIT, move || qb.finish());
    // SAFETY: the foreign code's own reference, released once.
    let _ = unsafe { cle::release_event(raw) };
    assert!(
        finished.is_some(),
        "qb.finish() never returned after a foreign failure of qa's download (download \
         {download_status:?}, upload {upload_status:?}); after a sweep: {after_sweep:?}"
    );
}
