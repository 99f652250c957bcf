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
/// times; here T's waits are counted.)
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
            core.set_config(AllocConfig::default());
        } else {
            core.empty_cache();
        }
        let again = core.alloc(8 * MIB, &s).unwrap();
        assert_eq!(again.relocatable(), !turn_off);
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
