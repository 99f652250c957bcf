//! A second newcomer's review of `relocation:merge` and the threads' freed-block caches
//! (docs/relocation.md): attempts to break the contract with safe calls, on the simulated
//! backend (a gated `SimStream` stands for device work not yet done; its counters show the
//! device-side waits enqueued).

use super::{sim_core, stream, GIB, MIB};
use crate::allocator::{Allocation, CachingAllocator};
use crate::config::AllocConfig;
use crate::sim_stream::{SimBackend, SimStream};
use std::sync::Arc;

/// The current address of a relocating allocation, read under a pin (an observation would
/// fix its place for good).
fn pinned_address(a: &Allocation<SimBackend>) -> u64 {
    let pin = a.pin();
    a.with_pinned_segment(&pin, |segment, offset| segment.address + offset)
        .expect("a live allocation's place")
}

/// The clearing layout of the relocation tests on `s` (20 MiB segments): A = p 6, q 2, r 6,
/// x 6 MiB, B = y 6, z 8 MiB and a 6 MiB tail; p and r freed. An 8 MiB request then moves q
/// into B's tail and takes p|q's run. Returns (q, [x, y, z]).
fn layout(
    core: &CachingAllocator<SimBackend>,
    s: &Arc<SimStream>,
) -> (Allocation<SimBackend>, [Allocation<SimBackend>; 3]) {
    let a = |mib: u64| core.alloc(mib * MIB, s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    assert_eq!(core.memory_stats().num_device_alloc, 2);
    drop((p, r));
    (q, [x, y, z])
}

/// A move's marker stays with the bytes its copy read (`Block::moved`): the new owner of the
/// vacated place, used on another stream T, makes T wait for it (`PlacePin::prepare_use_on`),
/// since an event from before the move orders T after S's earlier work but not after the
/// copy. That holds only while the new owner is handed out as relocating: after
/// `set_config` turns relocation off, the place goes to an allocation that does not relocate,
/// whose pin is empty, and `prepare_use_on` enqueues no wait (nor does `observe` wait on the
/// host), so a command on T through it overwrites the bytes that the gated copy on S still
/// reads: the moved block q gets the new owner's bytes. (On PoCL the race shows only at
/// times; here T's waits are counted.) Fixed: a block whose bytes carry an incomplete move
/// marker is handed out as relocating under any configuration.
#[test]
fn a_vacated_place_handed_out_after_relocation_is_turned_off_still_waits_for_the_copy() {
    for turn_off in [false, true] {
        let (core, _src) = sim_core(GIB, "relocation:merge");
        let (s, _) = stream(1);
        let (t, _) = stream(2);
        let (q, rest) = layout(&core, &s);
        // S's work (the copy enqueued next) stays outstanding.
        let _gate = s.close_gate();
        let big = core.alloc(8 * MIB, &s).unwrap();
        assert_eq!(core.relocation_stats().moves, 1, "q moved");
        let vacated = pinned_address(&big);
        drop(big);
        if turn_off {
            // The caches are flushed; the next hand-outs never relocate.
            core.set_config(AllocConfig::parse("relocation:off").expect("config"));
        } else {
            core.empty_cache();
        }
        let again = core.alloc(8 * MIB, &s).unwrap();
        // Relocating either way: with relocation off, because its bytes carry a copy that
        // may still run (the fix: a non-relocating hand-out's pin is empty).
        assert!(again.relocatable());
        let at = if turn_off {
            again.address()
        } else {
            pinned_address(&again)
        };
        assert_eq!(at, vacated, "the vacated place, from the pool");
        let before = t.counters().waits;
        let pin = again.pin();
        pin.prepare_use_on(&t).expect("prepare");
        assert_eq!(
            t.counters().waits,
            before + 1,
            "T waits for the gated copy that still reads the vacated place \
             (relocation turned off: {turn_off})"
        );
        drop(pin);
        drop((again, q, rest));
    }
}

/// A simulated stream whose copies fail once `copies_left` successful ones were enqueued
/// (a copy refused mid-plan, as `ClStream::enqueue_copy` refuses once another thread began
/// a graph capture of the stream after the plan's first copy took its permit).
struct FlakyStream {
    sim: Arc<SimStream>,
    copies_left: std::sync::atomic::AtomicU32,
    /// Markers are refused (a stream that began capturing refuses them too).
    markers_fail: std::sync::atomic::AtomicBool,
}

#[derive(Clone)]
struct FlakyBackend;

impl crate::backend::Backend for FlakyBackend {
    type Memory = crate::source::Simulated;
    type Stream = Arc<FlakyStream>;
    type Marker = crate::sim_stream::SimMarker;

    fn stream_key(stream: &Arc<FlakyStream>) -> crate::stream::StreamKey {
        stream.sim.key()
    }
    fn record_marker(
        stream: &Arc<FlakyStream>,
    ) -> Result<Self::Marker, crate::stream::MarkerError> {
        if stream
            .markers_fail
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(crate::stream::MarkerError::message(
                "the stream began capturing",
            ));
        }
        Ok(stream.sim.record_marker())
    }
    fn marker_complete(marker: &Self::Marker) -> bool {
        marker.is_complete()
    }
    fn wait(marker: &Self::Marker) -> Result<(), crate::stream::MarkerError> {
        marker.wait();
        Ok(())
    }
    fn stream_wait(
        stream: &Arc<FlakyStream>,
        marker: &Self::Marker,
    ) -> Result<(), crate::stream::MarkerError> {
        stream.sim.wait_marker(marker);
        Ok(())
    }
    fn synchronize(stream: &Arc<FlakyStream>) -> Result<(), crate::stream::MarkerError> {
        stream.sim.synchronize();
        Ok(())
    }
    fn enqueue_copy(
        stream: &Arc<FlakyStream>,
        src: &crate::source::Simulated,
        src_offset: u64,
        dst: &crate::source::Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), crate::error::CopyError> {
        use std::sync::atomic::Ordering;
        let left = stream.copies_left.load(Ordering::Relaxed);
        if left == 0 {
            return Err(crate::error::CopyError::Device(
                crate::error::DeviceFailure::message("the stream began capturing"),
            ));
        }
        stream.copies_left.store(left - 1, Ordering::Relaxed);
        stream
            .sim
            .enqueue_copy(src, src_offset, dst, dst_offset, len)
    }
}

crate::thread_caches!(FlakyBackend);

fn flaky(id: u64, copies: u32) -> (Arc<SimStream>, Arc<FlakyStream>) {
    let sim = SimStream::new(crate::stream::StreamKey::new(0, id));
    let stream = Arc::new(FlakyStream {
        sim: sim.clone(),
        copies_left: std::sync::atomic::AtomicU32::new(copies),
        markers_fail: std::sync::atomic::AtomicBool::new(false),
    });
    (sim, stream)
}

/// A plan of two moves whose second copy fails to enqueue is rolled back (`roll_back`): the
/// blocks stay, the targets are freed. The first copy is already enqueued on S, though, and
/// still writes its target's bytes; the docs say "copies already enqueued do no harm, since
/// their targets are reused only on S after them", but a target's next owner may use it on
/// another stream T, ordered after S by an event from before the plan (the very case of the
/// vacated place, whose new owner waits for the move's marker). A rolled-back plan records
/// no marker and leaves none on its targets, so `prepare_use_on` makes T wait for nothing,
/// and the new owner's bytes on T are overwritten by the stale copy when S runs it.
/// Layout (20 MiB segments): A = p 5, q1 2, q2 2, r 5, x 6 MiB, B = y 6, z 8 MiB and a 6 MiB
/// tail; p and r freed. An 8 MiB request plans to move q1 and q2 into B's tail (cost 4 MiB,
/// the cheapest run); the first copy goes into the tail's first 2 MiB, the second fails.
#[test]
fn the_target_of_a_copy_enqueued_before_a_rolled_back_plan_waits_for_that_copy() {
    let source = crate::source::SimulatedSource::<crate::source::Simulated>::new(0, GIB, GIB);
    let core: CachingAllocator<FlakyBackend> = CachingAllocator::new(
        Box::new(source),
        AllocConfig::parse("relocation:merge").expect("config"),
    );
    let (s_sim, s) = flaky(1, 1);
    let (t_sim, t) = flaky(2, 0);
    let a = |mib: u64| core.alloc(mib * MIB, &s).unwrap();
    let (p, q1, q2, r, x, y, z) = (a(5), a(2), a(2), a(5), a(6), a(6), a(8));
    assert_eq!(core.memory_stats().num_device_alloc, 2);
    let tail = y.address() + 14 * MIB;
    drop((p, r));
    // S's work (the first copy) stays outstanding.
    let _gate = s_sim.close_gate();
    let big = core.alloc(8 * MIB, &s).unwrap();
    assert_eq!(s_sim.counters().copies, 1, "the first copy was enqueued");
    assert_eq!(core.relocation_stats().moves, 0, "the plan was rolled back");
    assert_eq!(core.memory_stats().num_device_alloc, 3, "the request grew");
    // The tail (the first copy's target, still being written on S) goes to a new owner.
    let owner = core.alloc(6 * MIB, &s).unwrap();
    assert_eq!(owner.address(), tail, "the rolled-back target's place");
    let before = t_sim.counters().waits;
    let pin = owner.pin();
    pin.prepare_use_on(&t).expect("prepare");
    assert_eq!(
        t_sim.counters().waits,
        before + 1,
        "a command on T through the tail waits for the copy still writing it"
    );
    drop(pin);
    drop((owner, big, q1, q2, x, y, z));
}

/// The other side of the first fix: once the copy that a vacated place's bytes carry has
/// completed, its marker is forgotten at the next hand-out, and with relocation off the place
/// is handed out as usual (not relocating: no cell, an empty pin).
#[test]
fn a_vacated_place_whose_copy_completed_is_handed_out_as_usual_with_relocation_off() {
    let (core, _src) = sim_core(GIB, "relocation:merge");
    let (s, _) = stream(1);
    let (q, rest) = layout(&core, &s);
    let _gate = s.close_gate();
    let big = core.alloc(8 * MIB, &s).unwrap();
    assert_eq!(core.relocation_stats().moves, 1, "q moved");
    let vacated = pinned_address(&big);
    drop(big);
    core.set_config(AllocConfig::parse("relocation:off").expect("config"));
    let pending = core.alloc(8 * MIB, &s).unwrap();
    assert!(pending.relocatable(), "the copy is still gated");
    assert_eq!(pending.address(), vacated);
    drop(pending);
    // The copy runs; the thread's cache (which keeps a block's hand-out) is flushed.
    s.open_gate();
    core.empty_cache();
    let done = core.alloc(8 * MIB, &s).unwrap();
    assert_eq!(done.address(), vacated, "the vacated place, from the pool");
    assert!(!done.relocatable(), "nothing left to wait for");
    drop((done, q, rest));
}

/// The rolled-back plan of the test above when no marker can be recorded either: nothing
/// would order a use of the first target's place elsewhere after the copy still writing it,
/// so that place stays out of the pool for good (never handed out, merged or released), as
/// a block whose free marker failed. A 6 MiB request then does not get the tail.
#[test]
fn a_rolled_back_copy_s_target_without_a_marker_is_never_handed_out_again() {
    let source = crate::source::SimulatedSource::<crate::source::Simulated>::new(0, GIB, GIB);
    let core: CachingAllocator<FlakyBackend> = CachingAllocator::new(
        Box::new(source),
        AllocConfig::parse("relocation:merge").expect("config"),
    );
    let (s_sim, s) = flaky(1, 1);
    let a = |mib: u64| core.alloc(mib * MIB, &s).unwrap();
    let (p, q1, q2, r, x, y, z) = (a(5), a(2), a(2), a(5), a(6), a(6), a(8));
    let tail = y.address() + 14 * MIB;
    drop((p, r));
    let _gate = s_sim.close_gate();
    s.markers_fail
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let big = core.alloc(8 * MIB, &s).unwrap();
    assert_eq!(s_sim.counters().copies, 1, "the first copy was enqueued");
    assert_eq!(core.relocation_stats().moves, 0, "the plan was rolled back");
    s.markers_fail
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let owner = core.alloc(6 * MIB, &s).unwrap();
    assert_ne!(
        owner.address(),
        tail,
        "the unmarked target's place is kept out"
    );
    // Its segment (y's) is never released: the other two are.
    drop((owner, big, q1, q2, x, y, z));
    s_sim.open_gate();
    core.empty_cache();
    let stats = core.memory_stats();
    assert_eq!(stats.num_device_alloc, 3);
    assert_eq!(
        stats.num_device_free, 2,
        "y's segment holds the kept-out place"
    );
}
