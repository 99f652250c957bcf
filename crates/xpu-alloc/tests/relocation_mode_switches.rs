//! Relocation mode switches (`off`, `merge`, `merge_all`) with moved blocks: a vacated small place
//! still waits for its copy, and bytes survive the moves.
//!
//! Review h18 (fresh eyes on `relocation:merge` moving large blocks only and
//! `relocation:merge_all` moving small ones too): probes of the transitions between `off`,
//! `merge` and `merge_all` that passed (the one whose history is replayed is xpu-replay's
//! `tests/relocation_mode_switches.rs`). Device tests run on PoCL:
//! `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

mod device {
    use crate::common::lcg;
    use crate::common::relocation::{a_fill_on_t_waits_for_the_gated_copy, holds, pattern, write};
    use crate::common::{device_streams, KIB, MIB};
    use xpu_alloc::{AllocConfig, BufferSource, ClStream, DataPtr, DeviceCore, StreamRef};
    use xpu_event::{Gate, StreamExt};

    fn core(mode: &str) -> DeviceCore {
        DeviceCore::new(
            Box::new(BufferSource::new(0).expect("buffer source")),
            AllocConfig::parse(mode).expect("config"),
        )
    }

    /// The small pool's clearing layout: segment A (2 MiB) p 512, q 256, r 512, x 768 KiB;
    /// segment B (2 MiB) y 768, z 768 KiB and a 512 KiB free tail. q, x, y, z hold the
    /// patterns of seeds 1-4. After p and r are freed, a 1 MiB request (small) moves q into B's
    /// tail under `merge_all` and takes the run p|q|r.
    fn small_layout(
        core: &DeviceCore,
        sr: &StreamRef,
        s: &xpu_stream::Stream,
    ) -> (DataPtr, [DataPtr; 3]) {
        let a = |kib: u64| core.allocate(kib * KIB, sr).unwrap();
        let (p, q, r, x, y, z) = (a(512), a(256), a(512), a(768), a(768), a(768));
        for (seed, ptr) in [&q, &x, &y, &z].into_iter().enumerate() {
            write(ptr, s, u8::try_from(seed).unwrap() + 1);
        }
        drop((p, r));
        (q, [x, y, z])
    }

    /// A small block moved under `merge_all` behind a closed gate; then `set_config` makes
    /// the mode `merge` (small blocks are handed out as with relocation off). The vacated
    /// place, handed out again under `merge` (through the stream's pool: the switch flushed
    /// the caches), still makes a fill on another stream wait for the gated copy, and the
    /// moved block keeps its bytes.
    #[test]
    fn passing_a_small_place_vacated_under_merge_all_waits_for_the_copy_after_switching_to_merge() {
        let Some([s, t]) = device_streams::<2>() else {
            return;
        };
        let sr = ClStream::shared(s);
        let core = core("relocation:merge_all");
        let (q, [x, y, z]) = small_layout(&core, &sr, &s);
        let ready = s.record_event().expect("event");
        let gate = Gate::new(0).expect("gate");
        gate.block(&s).expect("block");
        let big = core.allocate(MIB, &sr).unwrap();
        assert_eq!(core.relocation_stats().moves, 1, "q moved");
        core.set_config(AllocConfig::parse("relocation:merge").unwrap());
        drop(big);
        let again = core.allocate(MIB, &sr).unwrap();
        a_fill_on_t_waits_for_the_gated_copy((&again, &q), (&s, &t), &ready, &gate, 0x5A, "again");
        assert!(holds(&x, &s, 2) && holds(&y, &s, 3) && holds(&z, &s, 4));
    }

    /// As above with `relocation:off` as the mode switched to, and a 256 KiB block (smaller
    /// than the run) as the new owner.
    #[test]
    fn passing_a_small_place_vacated_under_merge_all_waits_for_the_copy_after_switching_off() {
        let Some([s, t]) = device_streams::<2>() else {
            return;
        };
        let sr = ClStream::shared(s);
        let core = core("relocation:merge_all");
        let (q, [x, y, z]) = small_layout(&core, &sr, &s);
        let ready = s.record_event().expect("event");
        let gate = Gate::new(0).expect("gate");
        gate.block(&s).expect("block");
        let big = core.allocate(MIB, &sr).unwrap();
        assert_eq!(core.relocation_stats().moves, 1, "q moved");
        drop(big);
        core.set_config(AllocConfig::parse("relocation:off").unwrap());
        // Best fit for 768 KiB (small): the run p|q|r merged back (1.25 MiB), split; the
        // new block covers p's and q's old places.
        let again = core.allocate(768 * KIB, &sr).unwrap();
        a_fill_on_t_waits_for_the_gated_copy((&again, &q), (&s, &t), &ready, &gate, 0x3C, "again");
        assert!(holds(&x, &s, 2) && holds(&y, &s, 3) && holds(&z, &s, 4));
    }

    /// Blocks of both pools on two streams, each written with its own pattern, through
    /// random frees, allocations, `set_config` among `off`, `merge` and `merge_all`, and
    /// `empty_cache`; reads on another stream (views, ordered after the writes by an event)
    /// and on the allocation stream: every live block reads back its pattern, and the
    /// sequence moved blocks.
    #[test]
    fn passing_bytes_survive_moves_across_relocation_mode_switches() {
        let Some([s1, s2, t]) = device_streams::<3>() else {
            return;
        };
        let refs = [ClStream::shared(s1), ClStream::shared(s2)];
        let raw = [s1, s2];
        let core = core("relocation:merge_all");
        let mut live: Vec<(DataPtr, usize, u8)> = Vec::new();
        let mut rnd = lcg(7);
        let modes = ["relocation:off", "relocation:merge", "relocation:merge_all"];
        for step in 0..110u32 {
            let r = rnd() % 100;
            if r < 55 || live.is_empty() {
                let size = match rnd() % 3 {
                    0 => 1 + rnd() % (64 * KIB),
                    1 => 64 * KIB + rnd() % (960 * KIB),
                    _ => MIB + 1 + rnd() % (5 * MIB),
                };
                let k = (rnd() % 2) as usize;
                let ptr = core.allocate(size, &refs[k]).unwrap();
                let seed = (step % 251) as u8;
                write(&ptr, &raw[k], seed);
                live.push((ptr, k, seed));
            } else if r < 88 {
                let i = (rnd() as usize) % live.len();
                let (ptr, k, seed) = live.swap_remove(i);
                if rnd() % 4 == 0 {
                    assert!(
                        holds(&ptr, &raw[k], seed),
                        "step {step}: a freed block's bytes"
                    );
                }
            } else if r < 90 {
                let i = (rnd() as usize) % live.len();
                let (ptr, k, seed) = &live[i];
                let done = raw[*k].record_event().unwrap();
                t.wait_event(&done).unwrap();
                let mut out = vec![0u8; usize::try_from(ptr.size()).unwrap()];
                ptr.view().unwrap().read(&t, 0, &mut out).unwrap();
                assert!(out == pattern(*seed, out.len()), "step {step}: a read on T");
            } else if r < 98 {
                let mode = modes[(rnd() % 3) as usize];
                core.set_config(AllocConfig::parse(mode).unwrap());
            } else {
                core.empty_cache();
            }
        }
        for (ptr, k, seed) in &live {
            assert!(
                holds(ptr, &raw[*k], *seed),
                "a live block's bytes at the end"
            );
        }
        let moved = core.relocation_stats();
        assert!(moved.moves > 0, "the sequence moved blocks: {moved:?}");
    }
}
