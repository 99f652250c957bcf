//! Review h34: the three suspicions review h29 left open about failed waits (docs/
//! performance.md, 2026-12-05), each a test. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`; run on PoCL with `POCL_DEVICES="pthread pthread"`.
//!
//! A failed wait: a barrier of stream S on gate B, which fails (a negative status) while
//! work before it on S is held by gate A. PoCL then completes later markers of S and runs
//! S's later commands while the held work stays queued; NVIDIA keeps the order (a wait for
//! such a marker blocks until A opens: A's watchdog opens it after 5 s there).

mod common;

use std::time::Duration;

use common::relocation::{holds, layout, relocating_core};
use common::{device_streams, fill, read, MIB};
use xpu_alloc::ClStream;
use xpu_event::{Gate, StreamExt};

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
