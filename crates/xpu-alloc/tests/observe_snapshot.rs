//! Snapshots: segments and blocks with their states, JSON round trip, and the pickle export
//! read back (by serde-pickle, and by Python's `pickle` where `python3` is present).

use std::process::Command;

use xpu_alloc::observe::{snapshot_from_pickle, snapshot_to_pickle, MemorySnapshot, TraceAction};
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::stream::StreamKey;
use xpu_alloc::StreamRef;
use xpu_alloc::{AllocConfig, DataPtr, DeviceCore, SimulatedSource};

const GIB: u64 = 1 << 30;

/// A core on simulated device 1 with: stream 0 holding a live 1000 B block and a 3 MiB
/// block freed while a gated use on stream 2 is outstanding (pending free); stream 1
/// holding a live 5000 B block. History recording on.
fn scene() -> (DeviceCore, Vec<DataPtr>, std::sync::Arc<SimStream>) {
    let core = DeviceCore::new(
        Box::new(SimulatedSource::new(1, 80 * GIB, 20 * GIB)),
        AllocConfig::default(),
    );
    core.memory_history().record_memory_history(true, 1000);
    let s0 = StreamRef::from(SimStream::new(StreamKey::new(1, 0)));
    let s1 = StreamRef::from(SimStream::new(StreamKey::new(1, 1)));
    let user = SimStream::new(StreamKey::new(1, 2));
    user.close_gate();
    let a = core.allocate(1000, &s0).unwrap();
    let b = core.allocate(3 << 20, &s0).unwrap();
    core.record_stream(&b, &StreamRef::from(user.clone()))
        .unwrap();
    drop(b);
    let c = core.allocate(5000, &s1).unwrap();
    (core, vec![a, c], user)
}

#[test]
fn snapshot_lists_segments_blocks_and_states() {
    let (core, live, _user) = scene();
    let snap = core.memory_snapshot().unwrap();
    assert_eq!(snap.segments.len(), 3);
    assert_eq!(snap.reserved_bytes(), core.memory_reserved());
    assert_eq!(snap.reserved_bytes(), (2 << 20) + (20 << 20) + (2 << 20));
    assert_eq!(snap.allocated_bytes(), 1024 + 5120);
    assert_eq!(snap.active_bytes(), 1024 + 5120 + (3 << 20));
    for s in &snap.segments {
        assert_eq!(s.device, 1);
        assert_eq!(s.total_size, s.blocks.iter().map(|b| b.size).sum::<u64>());
        assert_eq!(s.segment_pool_id, (0, 0));
        assert!(!s.is_expandable);
        assert_eq!(
            s.segment_type,
            if s.total_size == 20 << 20 {
                "large"
            } else {
                "small"
            }
        );
        assert!(
            s.blocks
                .windows(2)
                .all(|w| w[0].address + w[0].size == w[1].address),
            "blocks tile the segment"
        );
        assert_eq!(s.blocks[0].address, s.address);
    }
    let states: Vec<(u64, &str)> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| (b.size, b.state.as_str()))
        .filter(|(_, st)| *st != "inactive")
        .collect();
    assert!(states.contains(&(1024, "active_allocated")), "{states:?}");
    assert!(states.contains(&(5120, "active_allocated")), "{states:?}");
    assert!(
        states.contains(&(3 << 20, "active_pending_free")),
        "{states:?}"
    );
    assert_eq!(states.len(), 3);
    let ptrs: Vec<u64> = live.iter().map(DataPtr::address).collect();
    let allocated: Vec<u64> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == "active_allocated")
        .map(|b| b.address)
        .collect();
    assert!(ptrs.iter().all(|p| allocated.contains(p)));
    let large = snap
        .segments
        .iter()
        .find(|s| s.segment_type == "large")
        .unwrap();
    assert_eq!((large.allocated_size, large.active_size), (0, 3 << 20));
    // History: allocs of a, b, c, b's free request, three segments; the snapshot entry last.
    let trace = &snap.device_traces[1];
    assert!(snap.device_traces[0].is_empty());
    let count = |a: &str| trace.iter().filter(|e| e.action == a).count();
    assert_eq!(
        (
            count("alloc"),
            count("free_requested"),
            count("free_completed")
        ),
        (3, 1, 0)
    );
    assert_eq!(count("segment_alloc"), 3);
    let last = trace.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.size),
        ("snapshot", 1024 + 5120 + (3 << 20))
    );
    assert_eq!(last.to_entry().unwrap().action, TraceAction::Snapshot);
}

#[test]
fn snapshot_round_trips_through_json_and_pickle() {
    let (core, _live, _user) = scene();
    let snap = core.memory_snapshot().unwrap();
    let json = snap.to_json().unwrap();
    assert!(json.contains("\"active_pending_free\""));
    assert_eq!(MemorySnapshot::from_json(&json).unwrap(), snap);
    let bytes = snapshot_to_pickle(&snap).unwrap();
    assert_eq!(bytes[..2], [0x80, 3], "pickle protocol 3");
    assert_eq!(snapshot_from_pickle(&bytes).unwrap(), snap);
}

/// Python reads the pickle as PyTorch's visualizer would: a dict whose segments' block sizes
/// add up, with a tuple pool id, Python bools and str states, and per-device trace lists.
#[test]
fn python_reads_the_pickle() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("python3 not found: skipping the Python pickle check");
        return;
    }
    let (core, _live, _user) = scene();
    let snap = core.memory_snapshot().unwrap();
    let dir = std::env::temp_dir().join(format!("xpu-observe-pickle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snapshot.pickle");
    snap.save(&path).unwrap();
    let script = r#"
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
assert isinstance(s, dict) and {'segments', 'device_traces', 'allocator_settings'} <= set(s), s.keys()
total = 0
for seg in s['segments']:
    assert sum(b['size'] for b in seg['blocks']) == seg['total_size']
    assert seg['segment_pool_id'] == (0, 0) and isinstance(seg['segment_pool_id'], tuple)
    assert seg['is_expandable'] is False and seg['frames'] == []
    assert seg['segment_type'] in ('small', 'large')
    for b in seg['blocks']:
        assert b['state'] in ('active_allocated', 'active_pending_free', 'inactive')
        assert isinstance(b['state'], str) and b['frames'] == []
    total += seg['total_size']
traces = s['device_traces']
assert isinstance(traces, list) and all(isinstance(t, list) for t in traces)
actions = [e['action'] for e in traces[1]]
assert actions.count('alloc') == 3 and actions[-1] == 'snapshot', actions
assert all('addr' in e and 'time_us' in e and 'stream' in e for e in traces[1] if e['action'] != 'oom')
print(len(s['segments']), total)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(printed.trim(), format!("3 {}", snap.reserved_bytes()));
}

/// A snapshot taken after a move (`relocation:merge`) lists the moved block at its new place
/// and writes the move in PyTorch's action names, so that PyTorch's visualizer stays
/// consistent: walked back from the snapshot's blocks, as its segment view does, every
/// `free_requested` and `alloc` finds its block; its timeline (an `alloc` adds the requested
/// size, a `free_completed` removes it) peaks at the recording's requested peak. The entries
/// read back (`to_entry`) are the history's, moves included.
///
/// Layout (as relocation_review.rs): segment A (20 MiB) holds p 6, q 2, r 6, x 6 MiB;
/// segment B y 6 and z 8 MiB. p and r are freed; an 8 MiB request moves q into B's free
/// tail and takes A's first 8 MiB.
#[test]
fn a_snapshot_after_a_move_shows_the_block_at_its_new_place_in_pytorchs_actions() {
    const MIB: u64 = 1 << 20;
    let core = DeviceCore::new(
        Box::new(SimulatedSource::new(0, GIB, GIB)),
        AllocConfig::parse("relocation:merge").unwrap(),
    );
    core.memory_history()
        .record_memory_history(true, usize::MAX);
    let s = StreamRef::from(SimStream::new(StreamKey::new(0, 1)));
    let a = |mib: u64| core.allocate(mib * MIB, &s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    drop((p, r));
    let big = a(8);
    assert_eq!(core.relocation_stats().moves, 1);
    let snap = core.memory_snapshot().unwrap();
    let history = core.memory_history().entries();

    // The blocks at their current places (observing q now fixes its place, after the move).
    assert_eq!(snap.segments.len(), 2);
    let segment_of = |addr: u64| {
        snap.segments
            .iter()
            .position(|seg| (seg.address..seg.address + seg.total_size).contains(&addr))
            .unwrap()
    };
    let blocks = |i: usize| -> Vec<(u64, u64, &str)> {
        snap.segments[i]
            .blocks
            .iter()
            .map(|b| (b.address, b.size, b.state.as_str()))
            .collect()
    };
    let (seg_a, seg_b) = (segment_of(big.address()), segment_of(y.address()));
    assert_ne!(seg_a, seg_b);
    let (base_a, base_b) = (snap.segments[seg_a].address, snap.segments[seg_b].address);
    assert_eq!(
        blocks(seg_a),
        [
            (base_a, 8 * MIB, "active_allocated"),
            (base_a + 8 * MIB, 6 * MIB, "inactive"),
            (base_a + 14 * MIB, 6 * MIB, "active_allocated"),
        ]
    );
    assert_eq!(
        blocks(seg_b),
        [
            (base_b, 6 * MIB, "active_allocated"),
            (base_b + 6 * MIB, 8 * MIB, "active_allocated"),
            (base_b + 14 * MIB, 2 * MIB, "active_allocated"),
            (base_b + 16 * MIB, 4 * MIB, "inactive"),
        ]
    );
    assert_eq!(q.address(), base_b + 14 * MIB, "q moved into B's tail");
    assert_eq!(
        (x.address(), z.address()),
        (base_a + 14 * MIB, base_b + 6 * MIB)
    );

    // The move in PyTorch's names: q's old place freed, then its new place allocated.
    let trace = &snap.device_traces[0];
    let pytorch = [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "oom",
        "snapshot",
    ];
    assert!(trace.iter().all(|e| pytorch.contains(&e.action.as_str())));
    let moved: Vec<(&str, u64, u64, &str)> = trace
        .iter()
        .filter_map(|e| {
            let tag = e.relocation.as_deref()?;
            Some((e.action.as_str(), e.addr.unwrap(), e.size, tag))
        })
        .collect();
    let old = base_a + 6 * MIB;
    assert_eq!(
        moved,
        [
            ("free_requested", old, 2 * MIB, "move_from"),
            ("free_completed", old, 2 * MIB, "move_from"),
            ("alloc", q.address(), 2 * MIB, "move_to"),
        ]
    );

    // The visualizer's segment view: back from the snapshot's active blocks.
    let mut blocks_at: std::collections::BTreeMap<u64, u64> = snap
        .segments
        .iter()
        .flat_map(|seg| &seg.blocks)
        .filter(|b| b.state != "inactive")
        .map(|b| (b.address, b.size))
        .collect();
    for e in trace.iter().rev() {
        match e.action.as_str() {
            "alloc" => assert!(blocks_at.remove(&e.addr.unwrap()).is_some(), "{e:?}"),
            "free_requested" => assert!(blocks_at.contains_key(&e.addr.unwrap()), "{e:?}"),
            "free_completed" => assert!(blocks_at.insert(e.addr.unwrap(), e.size).is_none()),
            _ => {}
        }
    }
    assert!(
        blocks_at.is_empty(),
        "blocks before the recording: {blocks_at:?}"
    );

    // The visualizer's timeline: the move adds no peak.
    let (mut sizes, mut total, mut top) = (std::collections::HashMap::new(), 0u64, 0u64);
    for e in trace {
        match e.action.as_str() {
            "alloc" => {
                sizes.insert(e.addr.unwrap(), e.size);
                total += e.size;
            }
            "free_completed" => total -= sizes.remove(&e.addr.unwrap()).unwrap(),
            _ => {}
        }
        top = top.max(total);
    }
    let requested = core.memory_stats().requested_bytes.all;
    assert_eq!(top, u64::try_from(requested.peak).unwrap());
    assert_eq!(total, u64::try_from(requested.current).unwrap());
    assert_eq!(top, 34 * MIB, "p, q, r, x, y and z");

    // Read back: the history's entries, the move as recorded.
    let back: Vec<_> = trace
        .iter()
        .filter_map(xpu_alloc::observe::TraceEntryDict::to_entry)
        .collect();
    assert_eq!(back, history);
    assert!(back
        .windows(2)
        .any(|w| (w[0].action, w[1].action) == (TraceAction::MoveFrom, TraceAction::MoveTo)));
    let bytes = snapshot_to_pickle(&snap).unwrap();
    assert_eq!(snapshot_from_pickle(&bytes).unwrap(), snap);
    assert_eq!(
        MemorySnapshot::from_json(&snap.to_json().unwrap()).unwrap(),
        snap
    );
    drop((q, x, y, z, big));
}
