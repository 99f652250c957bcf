//! Review of `relocation:merge` (docs/relocation.md, stages 3 and 5) by a helper with fresh
//! eyes: attempts to break the contract. Three found defects of 7113dc6, fixed since (a
//! move's marker stays with the bytes it read; `address()` no longer waits for the device; a
//! move no longer counts as a hand-out and a free in the statistics); the one marked
//! `#[ignore = "defect: ..."]` still fails and describes what is left (the history across
//! moves, docs/relocation.md stage 6); the others pin down behaviour found sound.
//! Device tests run on PoCL: `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::relocation::{holds, layout, relocating_core};
use common::{device_streams, sim_core, stream, MIB};
use xpu_alloc::observe::history::trace_text;
use xpu_alloc::observe::TraceAction;
use xpu_alloc::replay::{self, ReplayOptions};
use xpu_alloc::ClStream;
use xpu_event::{Gate, StreamExt};

/// The new owner of a moved block's old place is ordered after the move's copy only on the
/// allocation stream S. A user who orders another stream T after S with an event recorded
/// *before* the allocation (valid without relocation: every earlier command on the block's
/// bytes is before the event) writes the new allocation on T while S's copy still reads the
/// same bytes: the moved block, whose owner did nothing wrong, gets the new owner's bytes.
/// `prepare_use_on` only makes commands through the *moved* block wait for `M`, not commands
/// through the block that took its old place.
#[test]
fn the_new_owner_of_a_vacated_place_used_on_another_stream_does_not_corrupt_the_moved_block() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    // Everything the user enqueued on S so far (the writes) is before this event.
    let ready = s.record_event().expect("event");
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    // The 8 MiB request moves q: its copy is enqueued on S, behind the gate.
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    // T is ordered after everything that touched big's bytes before it was allocated.
    t.wait_event(&ready).expect("wait");
    // A non-blocking fill on T: it must wait for the move's copy (held by the gate), which
    // still reads q's bytes from the place big took.
    let len = usize::try_from(8 * MIB).unwrap();
    big.view().unwrap().fill(&t, &[0xAB], 0, len).expect("fill");
    let filled = t.record_event().expect("event");
    assert!(
        !filled.query().expect("query"),
        "the fill on T waits for the gated copy"
    );
    gate.open().expect("open");
    s.synchronize().expect("synchronize");
    filled.synchronize().expect("synchronize");
    assert!(
        holds(&q, &s, 1),
        "the moved block q lost its bytes to big's write on T"
    );
    let mut out = vec![0u8; len];
    big.view().unwrap().read(&t, 0, &mut out).expect("read");
    assert!(out.iter().all(|&b| b == 0xAB), "big holds the fill");
    drop(big);
}

/// The first test's case through a thread's cache: the new owner of the vacated place frees
/// it into its thread's cache, and the thread's next allocation of that size gets it back
/// from there (the block freed last; the pool's best fit would be z's exact 8 MiB). That
/// hand-out takes no lock and resets the block's place cell, but the relocation marker stays
/// with the block's bytes: a fill on another stream, ordered after S only by an event from
/// before the move, still waits for the gated copy that reads q's old bytes there.
#[test]
fn a_vacated_place_handed_out_again_from_a_thread_cache_still_waits_for_the_copy() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, [x, y, z]) = layout(&core, &sr, Some(&s));
    let ready = s.record_event().expect("event");
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    // The 8 MiB request moves q: its copy is enqueued on S, behind the gate.
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    let vacated = big.address();
    // Both 8 MiB blocks go into this thread's cache, big last.
    drop(z);
    drop(big);
    let again = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(
        again.address(),
        vacated,
        "the vacated place, from this thread's cache"
    );
    t.wait_event(&ready).expect("wait");
    let len = usize::try_from(8 * MIB).unwrap();
    again
        .view()
        .unwrap()
        .fill(&t, &[0xCD], 0, len)
        .expect("fill");
    let filled = t.record_event().expect("event");
    assert!(
        !filled.query().expect("query"),
        "the fill on T waits for the gated copy"
    );
    gate.open().expect("open");
    s.synchronize().expect("synchronize");
    filled.synchronize().expect("synchronize");
    assert!(
        holds(&q, &s, 1),
        "the moved block q lost its bytes to the fill on T"
    );
    assert!(holds(&x, &s, 2) && holds(&y, &s, 3));
    let mut out = vec![0u8; len];
    again.view().unwrap().read(&t, 0, &mut out).expect("read");
    assert!(
        out.iter().all(|&b| b == 0xCD),
        "the new owner holds the fill"
    );
}

/// `address()` of a block that moved waits on the host for the move's copies
/// (`Allocation::observe`). With the allocation stream held by a user event that this thread
/// opens later, the getter never returns: a hang from safe calls, the very hazard the
/// design rejected a device-wide synchronize for. The same wait sits in `cl_mem_and_offset`,
/// `block_cl_mem`, `set_kernel_arg` (so graph capture and `ClRegion`) and
/// `DeviceMemory::device_region` (pinned host copies).
#[test]
fn address_of_a_moved_block_does_not_wait_for_a_gated_stream() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    let (tx, rx) = mpsc::channel();
    let returned = std::thread::scope(|scope| {
        scope.spawn(|| {
            let address = q.address();
            let _ = tx.send(address);
        });
        // A time limit only to detect the hang (not for ordering): the gate is opened
        // either way so the test ends.
        let returned = rx.recv_timeout(Duration::from_secs(10)).is_ok();
        gate.open().expect("open");
        returned
    });
    assert!(returned, "q.address() waited for the gated copy");
    drop(big);
}

/// A move hands out the target before it frees the old place, and counts both in the
/// statistics: `allocated_bytes` (and the requested bytes) reach a peak that no set of live
/// user allocations ever had. Layout: A = p 6, q 6, w 8 (full); B = f1 6, y 2, f2 6, z 6
/// with f1 and f2 freed. An 8 MiB request clears A's run p|q (12 MiB moved into f1 and f2).
/// Live bytes: 28 MiB before, 36 MiB after; the moves take the peak to 40 MiB.
#[test]
fn a_move_does_not_raise_the_allocated_peak() {
    let (core, _source) = sim_core(1 << 30, "relocation:merge");
    let (_s, s) = stream(1);
    let a = |mib: u64| core.allocate(mib * MIB, &s).unwrap();
    let (p, q, w) = (a(6), a(6), a(8));
    let (f1, y, f2, z) = (a(6), a(2), a(6), a(6));
    assert_eq!(
        core.memory_stats().num_device_alloc,
        2,
        "two 20 MiB segments"
    );
    drop((f1, f2));
    core.reset_peak_stats();
    let big = a(8);
    let stats = core.memory_stats();
    assert_eq!(
        core.relocation_stats().moved_bytes,
        12 * MIB,
        "p and q moved"
    );
    assert_eq!(stats.num_device_alloc, 2, "no growth");
    let live = i64::try_from(36 * MIB).unwrap();
    assert_eq!(stats.allocated_bytes.all.current, live);
    assert_eq!(
        stats.allocated_bytes.all.peak, live,
        "the allocated peak counts moved blocks twice"
    );
    drop((p, q, w, y, z, big));
}

/// The history records no move: the old place's `free_completed` appears without a request,
/// the moved block's later free is requested at its *old* address (`Handed::addr`) and
/// completed at its new one, and nothing allocates the new place. `replay` tolerates it (it
/// keys on requests), but the trace is no consistent history (relocate.rs's module docs say
/// "the history records both"; docs/relocation.md says history addresses "describe the place
/// at that instant").
#[test]
#[ignore = "defect: the memory history of a run with moves is inconsistent: free_completed of the old place never requested, big allocated over q's live range, q's free requested at its old address"]
fn a_recorded_history_with_moves_replays() {
    let (core, _source) = sim_core(1 << 30, "relocation:merge");
    core.memory_history()
        .record_memory_history(true, usize::MAX);
    let (_s, s) = stream(1);
    let (q, rest) = layout(&core, &s, None);
    let big = core.allocate(8 * MIB, &s).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    drop((q, rest, big));
    let text = trace_text(&core.memory_history().entries(), 0);
    let out = replay::run_reader("recorded", text.as_bytes(), &ReplayOptions::default()).unwrap();
    let r = out.report;
    // The replay tolerates it (it keys on requests)...
    assert_eq!((r.allocs, r.unmatched_frees, r.ooms), (7, 0, 0), "{text}");
    // ...but the trace is not a consistent history: per the trace, big is allocated over
    // q's still-live bytes, and q's free completes at an address nothing allocated.
    let mut live: Vec<(u64, u64)> = Vec::new(); // (addr, size) allocated, not yet requested free
    let mut requested: Vec<u64> = Vec::new();
    for e in core.memory_history().entries() {
        match e.action {
            TraceAction::Alloc => {
                assert!(
                    live.iter()
                        .all(|&(a, n)| e.addr + e.size <= a || a + n <= e.addr),
                    "alloc at {:#x} overlaps a live block of the history\n{text}",
                    e.addr
                );
                live.push((e.addr, e.size));
            }
            TraceAction::FreeRequested => {
                live.retain(|&(a, _)| a != e.addr);
                requested.push(e.addr);
            }
            TraceAction::FreeCompleted => {
                let at = requested.iter().position(|&a| a == e.addr);
                assert!(
                    at.is_some(),
                    "free_completed at {:#x} was never requested\n{text}",
                    e.addr
                );
                requested.remove(at.unwrap());
            }
            _ => {}
        }
    }
}

/// Sound: a block whose owner drops it right after a move is freed once at its new place,
/// and the statistics return to zero (no leak, no double free).
#[test]
fn dropping_moved_blocks_returns_every_byte() {
    let (core, _source) = sim_core(1 << 30, "relocation:merge");
    let (_s, s) = stream(1);
    let (q, rest) = layout(&core, &s, None);
    let big = core.allocate(8 * MIB, &s).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    drop((q, rest, big));
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.allocation.all.current, 0);
    core.empty_cache();
    assert_eq!(core.memory_stats().reserved_bytes.all.current, 0);
}
