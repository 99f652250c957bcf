//! Memory reuse after a failed wait (a stream's barrier on an event that fails while work
//! before it is held back): a block or segment of that stream is not handed out, moved or
//! released while the held work can still land in it, and it comes back once the stream is
//! synchronized; also over an external stream made again over other code's queue. Review
//! h34 (relocation and reuse), h60 (kept-out memory coming back, in the snapshot as in the
//! statistics), h61 (external streams). Every test uses an allocator or core of its own and
//! streams of its own.
//!
//! Review h34: the three suspicions review h29 left open about failed waits (docs/
//! performance.md, 2026-12-05), each a test. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`; run on PoCL with `POCL_DEVICES="pthread pthread"`.
//!
//! A failed wait: a barrier of stream S on gate B, which fails (a negative status) while
//! work before it on S is held by gate A. PoCL then completes later markers of S and runs
//! S's later commands while the held work stays queued; NVIDIA keeps the order (a wait for
//! such a marker blocks until A opens: A's watchdog opens it after 5 s there).
//!
//! Review h60: the caching device allocator used as torch.cuda's allocator API by a newcomer,
//! each test failing on the reviewed commit (df956e1). Memory caught by a failed wait of a
//! stream is kept out of the cache, rightly, but it never comes back once that stream is
//! synchronized, and a segment kept out that way is in the statistics but not in the
//! snapshot. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`; run on PoCL with
//! `POCL_DEVICES="pthread pthread"`.
//!
//! Fixed in 50483cf (failed markers asked again; read complete once their stream was
//! synchronized after them; kept releases in the snapshot): these pass now.
//!
//! Review h61 (fresh eyes on 99f3f47 and 50483cf): the caching device allocator over an
//! external stream made again over other code's queue. Fails on the reviewed commit
//! (fe07bcb). PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates; one bounded
//! poll of the allocator's own answers, no sleeps.
//!
//! Root (as crates/xpu-host/tests/host_reuse_after_a_failed_wait.rs): 99f3f47's registry shares a
//! raw queue's
//! wait log only between wrappers alive at the same time; once the last one drops
//! (crates/xpu-device/src/backend/queue.rs:1370-1382), a wrapper made again over the raw
//! handle starts with an empty log, and its ordered markers after a failed wait read
//! `Complete` while the commands before that wait are still queued.

mod common;

use std::time::Duration;

use common::relocation::{holds, layout, relocating_core};
use common::{device_streams, fill, fresh_stream, read, MIB};
use xpu_alloc::{AllocConfig, ClStream, DeviceAllocator};
use xpu_device::backend::{ForeignQueue, QueueOptions};
use xpu_event::{Gate, StreamExt};
use xpu_stream::ExternalStream;

// ---- Review h34 ----

/// Suspicion 1: the new owner of a place a relocation vacated, used on another stream T, is
/// ordered after the old owner's work on S through the move's marker M
/// (`PlacePin::prepare_use_on`: a barrier of T on M's event). q's owner fills q on S behind
/// gate A (a use on q's own stream: q stays movable), a barrier of S on gate B fails, and an
/// 8 MiB request moves q and takes its old place. T is ordered after everything enqueued on
/// the new block's bytes before its allocation (`ready`, complete), and its fill goes
/// through `prepare_use_on`. The held fill of q must not land in the new block after T's.
#[test]
fn the_new_owner_of_a_vacated_place_is_not_overwritten_by_a_fill_held_before_a_failed_wait() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    let ready = s.record_event().expect("event");
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).expect("gate");
    a.block(&s).expect("block");
    fill(&q, &s, 0xEE);
    let fill_done = s.record_event().expect("event");
    let b = Gate::new(0).expect("gate");
    b.block(&s).expect("block");
    b.as_cl_event().set_failed(-5).expect("fail");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    // Refusing the move (the request grows instead) is sound: nothing then vacates q's place.
    let moved = core.relocation_stats().moves;
    t.wait_event(&ready).expect("wait");
    let t_ran = match big.view().unwrap().fill(&t, &[0x55], 0, 8 << 20) {
        Ok(()) => t.record_event().expect("event").synchronize().is_ok(),
        // Refusing the use is sound.
        Err(_) => false,
    };
    let fill_held = !fill_done.query().unwrap_or(true);
    a.open().expect("open");
    let _ = s.synchronize();
    let seen = if t_ran { read(&big, &t) } else { Vec::new() };
    let overwritten = seen.iter().filter(|&&v| v != 0x55).count();
    assert_eq!(
        overwritten, 0,
        "the new owner of q's old place (moves: {moved}) lost {overwritten} bytes of T's fill \
         to S's fill of q (T's fill ran: {t_ran}, with S's fill held: {fill_held})"
    );
}

/// Suspicion 2, through relocation: the move's copy is enqueued on S after the failed wait,
/// and PoCL runs it at once, before q's owner's fill held by A: q, read at its new place
/// after S drained, must hold its owner's fill (0xEE), not the bytes from before it.
#[test]
fn a_block_moved_after_a_failed_wait_keeps_its_owners_held_fill() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).expect("gate");
    a.block(&s).expect("block");
    fill(&q, &s, 0xEE);
    let b = Gate::new(0).expect("gate");
    b.block(&s).expect("block");
    b.as_cl_event().set_failed(-5).expect("fail");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    let moved = core.relocation_stats().moves;
    a.open().expect("open");
    let _ = s.synchronize();
    let seen = read(&q, &s);
    let wrong = seen.iter().filter(|&&v| v != 0xEE).count();
    assert_eq!(
        wrong, 0,
        "q (moved: {moved}) lost its owner's fill: {wrong} bytes differ"
    );
    drop(big);
}

/// Suspicion 2, without relocation: x is filled on S behind A, a wait of S fails, x is
/// freed on S and its block handed out again on S to y (same-stream reuse: no marker), and y
/// is filled on S. S's order puts x's fill before y's, but PoCL runs y's at once and x's when
/// A opens: y must still hold its own fill once S drained.
#[test]
fn a_block_reused_on_its_stream_after_a_failed_wait_is_not_overwritten_by_its_old_owner() {
    let Some(run) = reuse_after_a_failed_wait(false) else {
        return;
    };
    assert_eq!(
        run.wrong, 0,
        "y (x's block reused: {}) holds {} bytes of x's held fill",
        run.reused, run.wrong
    );
}

/// Suspicion 2, without relocation, the block cached before the failure: x is filled on S
/// behind A and freed on S before any other wait of S (into the freeing thread's cache: a
/// same-stream free with no recorded use), then a barrier of S on B fails, and y, of x's
/// size on S, is allocated and filled. x's last use is queued before the failed wait, y's
/// fill after it: PoCL runs y's at once and x's when A opens, so x's block must not be handed
/// out to y while the failure stands. Once S drained (a successful finish: nothing before
/// it is queued any more) the stream's blocks are reused again.
#[test]
fn a_block_cached_before_a_wait_of_its_stream_failed_is_not_handed_out_after_it() {
    let Some(run) = reuse_after_a_failed_wait(true) else {
        return;
    };
    assert_eq!(
        run.wrong, 0,
        "y (x's cached block reused: {}) holds {} bytes of x's held fill",
        run.reused, run.wrong
    );
    // S drained with success: its free blocks are handed out on it again (no new segment).
    let (core, s, sr) = (&run.core, &run.s, &run.sr);
    s.synchronize().expect("synchronize");
    let reserved = core.memory_reserved();
    drop(run.y);
    let z = core.allocate(12 * MIB, sr).unwrap();
    assert_eq!(
        core.memory_reserved(),
        reserved,
        "a block of S is reused on S once S drained"
    );
    drop(z);
}

/// What [`reuse_after_a_failed_wait`] leaves: the allocator, S, y, whether y took x's block
/// (no new segment) and how many of y's bytes are not its own fill.
struct ReuseRun {
    core: xpu_alloc::DeviceCore,
    s: xpu_stream::Stream,
    sr: xpu_alloc::StreamRef,
    y: xpu_alloc::DataPtr,
    reused: bool,
    wrong: usize,
}

/// Suspicion 2's sequence, without relocation: x (12 MiB) is filled on S behind gate A, a
/// barrier of S on gate B fails, and y of x's size on S is allocated and filled; x is freed
/// before the barrier (`freed_before_wait`: into the freeing thread's cache) or after it.
/// `None` without a device, and where y's fill did not run: NVIDIA keeps S's order and
/// terminates y's fill after the failed wait (its synchronize reports that), so it wrote
/// nothing and y's bytes are unspecified, as a new block's are (only a fill that ran can have
/// been overwritten).
fn reuse_after_a_failed_wait(freed_before_wait: bool) -> Option<ReuseRun> {
    let [s] = device_streams::<1>()?;
    let sr = ClStream::shared(s);
    let core = xpu_alloc::DeviceCore::new(
        Box::new(xpu_alloc::BufferSource::new(0).expect("source")),
        xpu_alloc::AllocConfig::parse("relocation:off").expect("config"),
    );
    let x = core.allocate(12 * MIB, &sr).unwrap();
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).expect("gate");
    a.block(&s).expect("block");
    fill(&x, &s, 0xEE);
    let x = if freed_before_wait {
        drop(x);
        None
    } else {
        Some(x)
    };
    let b = Gate::new(0).expect("gate");
    b.block(&s).expect("block");
    b.as_cl_event().set_failed(-5).expect("fail");
    drop(x);
    let y = core.allocate(12 * MIB, &sr).unwrap();
    let reused = core.memory_reserved() == 12 * MIB;
    fill(&y, &s, 0x55);
    let y_filled = s.record_event().expect("event");
    a.open().expect("open");
    // NVIDIA reports the commands it terminated behind the failed wait (y's fill among them)
    // once, from this synchronize, which drains S all the same (`CommandQueue::finish`): y's
    // marker then reads over, though the fill never ran (an H100, 2026-12-07). PoCL's
    // succeeds: it ran y's fill.
    let terminated = s.synchronize().is_err();
    y_filled.synchronize().ok()?;
    if terminated {
        return None;
    }
    let wrong = read(&y, &s).iter().filter(|&&v| v != 0x55).count();
    Some(ReuseRun {
        core,
        s,
        sr,
        y,
        reused,
        wrong,
    })
}

/// The relocation layout's patterns stay where they were when nothing failed (a control for
/// the tests above: the same sequence with B opened instead of failed).
#[test]
fn control_the_same_sequences_with_the_wait_succeeding() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, rest) = layout(&core, &sr, Some(&s));
    let ready = s.record_event().expect("event");
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).expect("gate");
    a.block(&s).expect("block");
    fill(&q, &s, 0xEE);
    let b = Gate::new(0).expect("gate");
    b.block(&s).expect("block");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1, "q moved");
    t.wait_event(&ready).expect("wait");
    big.view().unwrap().fill(&t, &[0x55], 0, 8 << 20).unwrap();
    let t_done = t.record_event().expect("event");
    assert!(!t_done.query().unwrap(), "T waits for the move");
    b.open().expect("open");
    a.open().expect("open");
    t_done.synchronize().unwrap();
    s.synchronize().unwrap();
    assert!(read(&big, &t).iter().all(|&v| v == 0x55));
    assert!(read(&q, &s).iter().all(|&v| v == 0xEE));
    assert!(holds(&rest[0], &s, 2));
}

/// Suspicion 3: a wait is numbered in its queue's log before its enqueue call, and an
/// ordered marker after its own. A wait numbered before a release marker of `empty_cache`
/// but enqueued after it by another thread (here a barrier on a gate that its thread opens
/// right after enqueueing it) is still pending when the release checks the marker, which
/// the driver completed (the barrier is behind it): the marker reads pending, and the
/// batch's segments were kept out for good, still reserved, though no wait failed (1,820 and
/// 2,060 MiB in 2 of 2 runs). Now such a batch is kept aside and freed by a later release
/// once its marker reads complete. A race: many rounds, each a chance. Once every gate is
/// open and S drained, `empty_cache` must give every segment back.
#[test]
fn a_wait_racing_a_release_marker_does_not_keep_segments_reserved_for_good() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = xpu_alloc::DeviceCore::new(
        Box::new(xpu_alloc::BufferSource::new(0).expect("source")),
        xpu_alloc::AllocConfig::parse("relocation:off").expect("config"),
    );
    const ROUNDS: usize = 3000;
    let mut hits = 0usize;
    let stop = std::sync::atomic::AtomicBool::new(false);
    // The waiter enqueues one wait per round of the main thread, while that round runs: at
    // most one wait ahead, so the queue never grows (on NVIDIA, whose user events resolve
    // slowly, an unbounded waiter piled up barriers and 3,000 rounds took over 300 s).
    let round = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let mut waits = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                if round.load(std::sync::atomic::Ordering::Acquire) <= waits {
                    std::thread::yield_now();
                    continue;
                }
                let g = Gate::new(0).expect("gate");
                g.block(&s).expect("block");
                g.open().expect("open");
                waits += 1;
            }
            waits
        });
        for _ in 0..ROUNDS {
            round.fetch_add(1, std::sync::atomic::Ordering::Release);
            drop(core.allocate(4 * MIB, &sr).unwrap());
            core.empty_cache();
            // A release kept aside (its marker read pending): the race's hits.
            if core.memory_reserved() > 0 {
                hits += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        assert!(waiter.join().unwrap() > 0);
    });
    s.synchronize().expect("synchronize");
    core.empty_cache();
    assert_eq!(
        core.memory_reserved(),
        0,
        "segments kept out by release markers that raced a wait ({} MiB still reserved; \
         rounds after which a release was kept aside: {hits} of {ROUNDS})",
        core.memory_reserved() / MIB
    );
}

// ---- Review h60 ----

/// Synchronizes `s`, retrying once: NVIDIA's clFinish reports a failed wait once (after every
/// earlier command completed), PoCL's returns success.
fn synchronize(s: &xpu_stream::Stream) {
    if s.synchronize().is_err() {
        s.synchronize().unwrap();
    }
}

/// Allocates 12 MiB on S (a 12 MiB segment of its own), fills it on S, records it on T, makes
/// a barrier of T wait for a user event set failed (-5), then frees it: the free marker is
/// recorded on T after the failed wait (it reads failed: PoCL completes later commands while
/// earlier ones may stay queued, so the block is rightly kept out). Returns the allocator.
fn recorded_block_freed_after_a_failed_wait_of_t(
    s: &xpu_stream::Stream,
    t: &xpu_stream::Stream,
) -> DeviceAllocator {
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let x = alloc.allocate(12 * MIB, s).unwrap();
    fill(&x, s, 0x11);
    alloc.record_stream(&x, t).unwrap();
    let b = Gate::new(0).unwrap();
    b.block(t).unwrap();
    b.as_cl_event().set_failed(-5).unwrap();
    drop(x);
    alloc
}

/// Finding 1. A block recorded on T (`record_stream`) and freed after a wait of T failed is
/// kept out of the cache, as it must be while T's earlier work may still be queued. But once
/// T is synchronized (`clFinish` returned: nothing enqueued before the marker is left, which
/// `OrderedMarker::drained_by_finish` tells), the block never comes back: it stays active,
/// its segment reserved, and `empty_cache` cannot release it, for the rest of the allocator's
/// life (each such tensor leaks its segment). Here T is synchronized right after the free,
/// before the allocator even looked at the marker.
///
/// Observed on PoCL (6 of 6 runs, threads and one at a time): after `synchronize(T)`, an
/// allocation on S and
/// `empty_cache`: `(active, active_bytes, reserved) = (1, 12582912, 12582912)`, expected
/// `(0, 0, 0)`.
///
/// Cause: `EventMarker::status` (crates/xpu-alloc/src/cl_stream.rs:128-137) maps the ordered
/// marker's sticky `Error` to `MarkerStatus::Failed` and never asks
/// `OrderedMarker::drained_by_finish` (the pinned-host allocator does since b95ed45); and once
/// a pending free pops as failed (`Pending::pop_completed`,
/// crates/xpu-caching/src/allocator/pending.rs:55) the block's marker count is never
/// decremented (`ShardState::process_events_slow` -> `marker_failed`,
/// crates/xpu-caching/src/allocator/stream_state.rs:644-650, 669-677): nothing, not even a
/// later synchronize of T, frees it.
#[test]
fn a_block_recorded_on_a_failed_stream_comes_back_once_that_stream_is_synchronized() {
    if !xpu_testing::devices(1) {
        return;
    }
    let (s, t) = (fresh_stream(0), fresh_stream(0));
    let (s, t) = (s.stream(), t.stream());
    let alloc = recorded_block_freed_after_a_failed_wait_of_t(&s, &t);
    // Everything T (and S) had queued before the free marker has completed now.
    synchronize(&t);
    synchronize(&s);
    // An allocation on S processes the pending frees; `empty_cache` waits for the markers and
    // releases idle segments.
    drop(alloc.allocate(4096, &s).unwrap());
    alloc.empty_cache();
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.active.all.current,
            st.active_bytes.all.current,
            st.reserved_bytes.all.current
        ),
        (0, 0, 0),
        "a block freed on a failed stream stays active and reserved after that stream was \
         synchronized (active, active bytes, reserved)"
    );
}

/// Finding 1, second order: the allocator sees the failed free marker first (an allocation on
/// S), then T is synchronized. The block is still lost for good.
///
/// Observed on PoCL (6 of 6 runs, threads and one at a time): `(1, 12582912, 12582912)`,
/// expected `(0, 0, 0)`.
#[test]
fn a_block_whose_free_marker_was_seen_failed_comes_back_once_its_stream_is_synchronized() {
    if !xpu_testing::devices(1) {
        return;
    }
    let (s, t) = (fresh_stream(0), fresh_stream(0));
    let (s, t) = (s.stream(), t.stream());
    let alloc = recorded_block_freed_after_a_failed_wait_of_t(&s, &t);
    drop(alloc.allocate(4096, &s).unwrap());
    synchronize(&t);
    synchronize(&s);
    drop(alloc.allocate(4096, &s).unwrap());
    alloc.empty_cache();
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.active.all.current,
            st.active_bytes.all.current,
            st.reserved_bytes.all.current
        ),
        (0, 0, 0),
        "(active, active bytes, reserved) after T was synchronized"
    );
}

/// Allocates 12 MiB on S, fills it, makes a barrier of S wait for a user event set failed,
/// frees the block (cached on S) and calls `empty_cache`: its release marker, recorded on S
/// after the failed wait, reads failed and the segment is kept out (rightly, while S's
/// earlier work may be queued).
fn segment_kept_out_by_a_failed_release_marker(s: &xpu_stream::Stream) -> DeviceAllocator {
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let x = alloc.allocate(12 * MIB, s).unwrap();
    fill(&x, s, 0x11);
    let b = Gate::new(0).unwrap();
    b.block(s).unwrap();
    b.as_cl_event().set_failed(-5).unwrap();
    drop(x);
    alloc.empty_cache();
    alloc
}

/// Finding 2. A segment that `empty_cache` kept out because its release marker followed a
/// failed wait of its stream is never given back, not even after the stream is synchronized:
/// the `ReleaseBatch` is dropped and its segments forgotten (`mem::forget`), still counted as
/// reserved. Every later `empty_cache` leaves the 12 MiB reserved; under a memory fraction
/// they count against the limit for good; the `cl_mem` is never released, even when the
/// allocator drops. (ordered_markers_after_a_failed_wait.rs's last test (review h29) shows that
/// segments freed *after* the
/// synchronize come back; this one was kept out before it.)
///
/// Observed on PoCL (6 of 6 runs, threads and one at a time): after `synchronize(S)` and
/// `empty_cache`:
/// `(reserved, segments) = (12582912, 1)`, expected `(0, 0)`.
///
/// Cause: `ReleaseBatch::free` (crates/xpu-caching/src/allocator/stream_state.rs:987-1007)
/// drops a batch whose marker reads `Failed` ("kept out for good") instead of keeping it aside
/// as it does for `Pending` (`DeviceShared::keep_release`) until the marker is drained by a
/// finish of its stream; and `EventMarker::status` (crates/xpu-alloc/src/cl_stream.rs:128-137)
/// never reports a drained marker complete.
#[test]
fn a_segment_kept_out_after_a_failed_wait_is_released_once_its_stream_is_synchronized() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = fresh_stream(0);
    let s = s.stream();
    let alloc = segment_kept_out_by_a_failed_release_marker(&s);
    assert_eq!(
        alloc.core().memory_reserved(),
        12 * MIB,
        "kept out while S may run"
    );
    synchronize(&s);
    alloc.empty_cache();
    let st = alloc.memory_stats();
    assert_eq!(
        (st.reserved_bytes.all.current, st.segment.all.current),
        (0, 0),
        "the segment kept out before S was synchronized stays reserved for good \
         (reserved bytes, segments)"
    );
}

/// Finding 3 (same mechanism, a different rule: snapshots consistent with stats). While such
/// a segment is kept out, the statistics count it (reserved 12 MiB, one segment) but the
/// snapshot lists no segment at all: `memory_snapshot` / PyTorch's visualizer show 0 bytes
/// reserved where `memory_reserved` says 12 MiB, and no trace of where they went.
///
/// Observed on PoCL (6 of 6 runs, threads and one at a time): stats `(12582912, 1)`,
/// snapshot `(0, 0)` (bytes, segments).
///
/// Cause: `ShardState::take_releasable` takes the segment out of its shard before the release
/// marker is judged; a failed batch is then dropped (crates/xpu-caching/src/allocator/
/// stream_state.rs:1001-1005) and no shard or kept list holds it any more, so
/// `CachingAllocator::snapshot` (crates/xpu-caching/src/allocator/snapshot.rs:53-63), which
/// walks the shards only, cannot show it.
#[test]
fn a_segment_kept_out_after_a_failed_wait_is_in_the_snapshot_as_in_the_statistics() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = fresh_stream(0);
    let s = s.stream();
    let alloc = segment_kept_out_by_a_failed_release_marker(&s);
    let st = alloc.memory_stats();
    let snap = alloc.core().snapshot();
    let stats = (
        u64::try_from(st.reserved_bytes.all.current).unwrap(),
        st.segment.all.current as usize,
    );
    let listed = (snap.iter().map(|g| g.size).sum::<u64>(), snap.len());
    let _ = s.synchronize();
    assert_eq!(
        listed, stats,
        "the snapshot's segments (bytes, count) against the statistics' reserved bytes and \
         segment count"
    );
}

// ---- Review h61 ----

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
