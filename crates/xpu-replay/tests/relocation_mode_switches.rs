//! Switching the relocation mode (`off`, `merge`, `merge_all`) while blocks are live: statistics
//! stay equal to the snapshot after every step, and the recorded history replays with every move
//! paired.
//!
//! Review h18 (fresh eyes on `relocation:merge` moving large blocks only and
//! `relocation:merge_all` moving small ones too): the probe of the transitions between `off`,
//! `merge` and `merge_all` whose recorded history is replayed (the others are xpu-alloc's
//! `tests/relocation_mode_switches.rs`).

mod common;

use common::relocation::check_history;
use common::{lcg, sim_core, stream, MIB};
use xpu_alloc::observe::history::trace_text;
use xpu_alloc::{AllocConfig, BlockState, DataPtr, DeviceCore, PoolKind};
use xpu_replay::{self as replay, ReplayOptions};

/// The currents of `memory_stats` against what `snapshot` shows (per pool).
fn stats_match_snapshot(core: &DeviceCore, step: usize) {
    let stats = core.memory_stats();
    let snap = core.snapshot();
    let mut alloc_bytes = [0i64; 3];
    let mut allocs = [0i64; 3];
    let mut split = [0i64; 3];
    let mut split_bytes = [0i64; 3];
    let mut reserved = [0i64; 3];
    let mut requested = [0i64; 3];
    let mut active = [0i64; 3];
    let mut pending_free = false;
    for seg in &snap {
        let p = if seg.pool == PoolKind::Small { 1 } else { 2 };
        let is_split = seg.blocks.len() > 1;
        for i in [0, p] {
            reserved[i] += seg.size as i64;
            for b in &seg.blocks {
                match b.state {
                    BlockState::Allocated => {
                        alloc_bytes[i] += b.size as i64;
                        allocs[i] += 1;
                        requested[i] += b.requested as i64;
                        active[i] += b.size as i64;
                    }
                    BlockState::PendingFree => {
                        active[i] += b.size as i64;
                        pending_free = true;
                    }
                    BlockState::Inactive if is_split => {
                        split[i] += 1;
                        split_bytes[i] += b.size as i64;
                    }
                    _ => {}
                }
            }
        }
    }
    let pools =
        |a: &xpu_alloc::StatArray| [a.all.current, a.small_pool.current, a.large_pool.current];
    assert_eq!(
        pools(&stats.allocated_bytes),
        alloc_bytes,
        "step {step}: allocated_bytes"
    );
    assert_eq!(pools(&stats.allocation), allocs, "step {step}: allocation");
    assert_eq!(
        pools(&stats.reserved_bytes),
        reserved,
        "step {step}: reserved"
    );
    assert_eq!(
        pools(&stats.active_bytes),
        active,
        "step {step}: active_bytes"
    );
    // A block pending free counts its requested bytes until its markers complete, and the
    // snapshot shows none for it.
    if !pending_free {
        assert_eq!(
            pools(&stats.requested_bytes),
            requested,
            "step {step}: requested"
        );
    }
    assert_eq!(
        pools(&stats.inactive_split),
        split,
        "step {step}: inactive_split"
    );
    assert_eq!(
        pools(&stats.inactive_split_bytes),
        split_bytes,
        "step {step}: inactive_split_bytes"
    );
    // Live blocks never overlap (the snapshot's blocks tile their segments).
    for seg in &snap {
        let mut at = seg.address;
        for b in &seg.blocks {
            assert_eq!(b.address, at, "step {step}: blocks tile the segment");
            at += b.size;
        }
        assert_eq!(at, seg.address + seg.size, "step {step}");
    }
}

const MODES: [&str; 3] = ["relocation:off", "relocation:merge", "relocation:merge_all"];

/// Random allocations of both pools on three simulated streams, frees, `record_stream`,
/// closed and opened gates, addresses read, `empty_cache` and `set_config` switching among
/// `off`, `merge` and `merge_all` while blocks of both pools are live, cached in this
/// thread's cache, pinned or moved: after every step the statistics equal the snapshot, and
/// the history recorded from the start is a consistent trace that replays with every
/// recorded move paired.
#[test]
fn passing_statistics_and_history_stay_exact_across_relocation_mode_switches() {
    for seed in [1u64, 2, 3] {
        let (core, _src) = sim_core(8 << 30, "relocation:merge_all");
        core.memory_history()
            .record_memory_history(true, usize::MAX);
        let streams = [stream(1), stream(2), stream(3)];
        let mut live: Vec<DataPtr> = Vec::new();
        let mut rnd = lcg(seed);
        for step in 0..1500 {
            let r = rnd() % 100;
            if r < 48 || live.is_empty() {
                let size = match rnd() % 4 {
                    0 => 1 + rnd() % 4096,
                    1 => 1 + rnd() % MIB,
                    2 => MIB + 1 + rnd() % (12 * MIB),
                    _ => 1 + rnd() % (40 * MIB),
                };
                let s = &streams[(rnd() % 2) as usize].1;
                live.push(core.allocate(size, s).unwrap());
            } else if r < 88 {
                let i = (rnd() as usize) % live.len();
                drop(live.swap_remove(i));
            } else if r < 90 {
                let i = (rnd() as usize) % live.len();
                let _ = live[i].address();
            } else if r < 92 {
                let i = (rnd() as usize) % live.len();
                core.record_stream(&live[i], &streams[2].1).unwrap();
            } else if r < 94 {
                streams[(rnd() % 3) as usize].0.close_gate();
            } else if r < 96 {
                streams[(rnd() % 3) as usize].0.open_gate();
            } else if r < 99 {
                let mode = MODES[(rnd() % 3) as usize];
                core.set_config(AllocConfig::parse(mode).unwrap());
            } else {
                core.empty_cache();
            }
            stats_match_snapshot(&core, step);
        }
        let moved = core.relocation_stats();
        assert!(moved.moves > 0, "seed {seed}: the sequence moved blocks");
        drop(live);
        for (s, _) in &streams {
            s.open_gate();
        }
        core.empty_cache();
        stats_match_snapshot(&core, usize::MAX);
        let entries = core.memory_history().entries();
        check_history(&entries, true).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let text = trace_text(&entries, 0);
        let out =
            replay::run_reader("recorded", text.as_bytes(), &ReplayOptions::default()).unwrap();
        let rep = out.report;
        assert_eq!(
            (rep.unmatched_frees, rep.moves, rep.unmatched_moves),
            (0, moved.moves, 0),
            "seed {seed}"
        );
        assert_eq!(core.memory_reserved(), 0, "seed {seed}: nothing leaked");
    }
}
