//! History recording, replayed: a text export that replays to the same peaks as the
//! recorded run, moves included (the recording itself is tested in xpu-alloc's
//! `tests/observe_history.rs`).

use xpu_alloc::observe::history::trace_text;
use xpu_alloc::observe::TraceAction;
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::stream::StreamKey;
use xpu_alloc::StreamRef;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource};
use xpu_replay::{self as replay, ReplayOptions, H200_CAPACITY, H200_MAX_ALLOC};

fn core() -> DeviceCore {
    DeviceCore::new(
        Box::new(SimulatedSource::new(0, H200_CAPACITY, H200_MAX_ALLOC)),
        AllocConfig::default(),
    )
}

/// Runs a deterministic mix of 400 allocations on `core` (stream 0): small and large sizes
/// with interleaved frees, and a block used on a side stream whose free completes only after
/// later allocations. Every block is freed at the end.
fn run_mix(core: &DeviceCore) {
    let s0 = StreamRef::from(SimStream::new(StreamKey::new(0, 0)));
    let side = SimStream::new(StreamKey::new(0, 1));
    let mut live = Vec::new();
    let mut x: u64 = 12345;
    for step in 0..400u64 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let size = match x >> 62 {
            0 => 1 + (x >> 40) % 4096,
            1 => 1 + (x >> 30) % (1 << 20),
            2 => (1 << 20) + (x >> 30) % (9 << 20),
            _ => (10 << 20) + (x >> 30) % (60 << 20),
        };
        live.push(core.allocate(size, &s0).unwrap());
        if step == 50 {
            side.close_gate();
            core.record_stream(&live[0], &StreamRef::from(side.clone()))
                .unwrap();
            drop(live.remove(0));
        }
        if step == 90 {
            side.open_gate();
        }
        if live.len() > 12 || (x >> 20) % 3 == 0 {
            let at = usize::try_from((x >> 8) % live.len() as u64).unwrap();
            drop(live.remove(at));
        }
    }
    drop(live);
}

#[test]
fn exported_history_replays_to_the_same_peaks() {
    let core = core();
    core.memory_history()
        .record_memory_history(true, usize::MAX);
    run_mix(&core);
    let stats = core.memory_stats();
    let text = trace_text(&core.memory_history().entries(), 0);
    assert!(text.lines().any(|l| l.starts_with("segment_alloc ")));
    let out = replay::run_reader("recorded", text.as_bytes(), &ReplayOptions::default()).unwrap();
    let r = out.report;
    assert_eq!(r.allocs, 400);
    assert_eq!(r.peak_allocated, core.max_memory_allocated());
    assert_eq!(r.peak_reserved, core.max_memory_reserved());
    assert_eq!(r.segment_allocs, stats.num_device_alloc);
    // Relocation is on by default: every move recorded replays as one.
    assert_eq!(
        (r.moves, r.unmatched_moves),
        (core.relocation_stats().moves, 0)
    );
}

/// Under relocation (`merge_all`: the mix's small blocks move too) the history records every
/// move (`move_from` then `move_to`),
/// and the exported trace replays under the same configuration to the recording's figures:
/// the same peaks, segments and moves, each recorded move read as a rename (neither an
/// allocation nor a free), no free unmatched. Replayed with relocation off, the moves still
/// pair up and the requested peak, which no placement changes, is the same.
#[test]
fn a_history_with_moves_replays_to_the_same_peaks() {
    let config = "relocation:merge_all";
    let core = DeviceCore::new(
        Box::new(SimulatedSource::new(0, H200_CAPACITY, H200_MAX_ALLOC)),
        AllocConfig::parse(config).unwrap(),
    );
    core.memory_history()
        .record_memory_history(true, usize::MAX);
    run_mix(&core);
    let stats = core.memory_stats();
    let moved = core.relocation_stats();
    assert_eq!(
        (moved.relocations, moved.moves, moved.emptied_segments),
        (3, 9, 3),
        "the mix moves blocks, to serve requests and to empty segments"
    );
    let entries = core.memory_history().entries();
    let count = |a: TraceAction| entries.iter().filter(|e| e.action == a).count() as u64;
    assert_eq!(
        (count(TraceAction::MoveFrom), count(TraceAction::MoveTo)),
        (moved.moves, moved.moves)
    );
    assert_eq!(count(TraceAction::Alloc), 400, "a move records no alloc");
    let text = trace_text(&entries, 0);
    let replayed = |config: Option<&str>| {
        replay::run_reader(
            "recorded",
            text.as_bytes(),
            &ReplayOptions {
                config: config.map(str::to_owned),
                ..ReplayOptions::default()
            },
        )
        .unwrap()
        .report
    };
    let r = replayed(Some(config));
    assert_eq!(
        (r.allocs, r.unmatched_frees, r.moves, r.unmatched_moves),
        (400, 0, moved.moves, 0)
    );
    let peak = |s: &xpu_alloc::Stat| u64::try_from(s.peak).unwrap();
    assert_eq!(r.peak_requested, peak(&stats.requested_bytes.all));
    assert_eq!(r.peak_allocated, core.max_memory_allocated());
    assert_eq!(r.peak_reserved, core.max_memory_reserved());
    assert_eq!(
        (r.segment_allocs, r.segment_frees),
        (stats.num_device_alloc, stats.num_device_free)
    );
    assert_eq!(r.relocation, Some(moved), "the replay makes the same moves");
    let off = replayed(None);
    assert_eq!(
        (
            off.allocs,
            off.unmatched_frees,
            off.moves,
            off.unmatched_moves
        ),
        (400, 0, moved.moves, 0)
    );
    assert_eq!(off.peak_requested, r.peak_requested);
}
