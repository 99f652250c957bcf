//! Relocation (`relocation:merge`) and graph capture: capturing or replaying a fill of a block that
//! the allocator has just moved, its move held behind a gate on its allocation stream, neither
//! waits on the host for that gate nor loses the block's bytes.
//!
//! Review h13 of `relocation:merge` as the default allocator configuration (branch
//! `default-merge`): graphs and typed buffers against moves of live blocks, through safe calls
//! only (no kernel launches: `enqueue` is an `unsafe fn`). The blocks come from the global
//! allocator on fresh streams (moves stay inside a stream's shard, so each test has its own
//! layout). PoCL: `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`. Each test says
//! whether it found a defect (it failed until the fix, and now guards it) or probes a risk
//! found sound.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::relocation::{layout, pattern, relocations, streams, MIB};
use xpu_event::Gate;
use xpu_kernel::graph::{command_buffer_supported, Graph, ReplayMode};
use xpu_kernel::DeviceBuffer;
use xpu_stream::Stream;

fn read(b: &DeviceBuffer<u8>, s: &Stream) -> Vec<u8> {
    b.to_vec(s).unwrap()
}

fn check_rest(rest: &[DeviceBuffer<u8>], s: &Stream) {
    for (seed, b) in rest.iter().enumerate() {
        assert!(
            read(b, s) == pattern(seed as u8 + 2, b.len()),
            "block {seed} intact"
        );
    }
}

/// DEFECT, fixed (failed 6 of 6 before the fix: a block with pending relocation copies fails
/// the command buffer, and the graph replays as recorded, ordered on the device). `Graph::capture` on stream T of a fill of a block q (allocation stream S)
/// that the allocator has just moved, while S is held by a user-event gate: the capture
/// records the command buffer for T (`block_buffer` -> `DataPtr::try_block_cl_mem`, whose
/// docs and `graph.rs` say it never waits on the host, "a capture on one stream never waits
/// for another's work, which may be held back by a gate that this thread opens later"). But
/// `try_block_cl_mem` observes the place first, and an observation of a moved block waits on
/// the host for the move's marker, behind S's gate: the capture hangs until the gate opens.
/// A thread that captures, then opens the gate, hangs for ever. (Not reached with
/// `relocation:off`, where q never moves.)
#[test]
fn capturing_a_fill_of_a_moved_block_does_not_wait_for_its_gated_stream() {
    let Some([s, t]) = streams::<2>() else {
        return;
    };
    if !command_buffer_supported(0).unwrap() {
        eprintln!("no command buffers on this device: the capture records nothing ahead");
        return;
    }
    let (q, rest) = layout(&s);
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    let before = relocations();
    let big = DeviceBuffer::<u8>::new(8 * MIB, &s).unwrap();
    assert!(relocations() > before, "the 8 MiB request moved q");
    let (returned, graph) = returns_before_gate_opens(&gate, Duration::from_secs(10), || {
        Graph::capture(&t, |c| c.fill(&t, &q, 0x5Au8)).unwrap()
    });
    assert!(
        returned,
        "Graph::capture on T waited on the host for S's gated relocation copy"
    );
    graph.replay(&t).unwrap();
    t.synchronize().unwrap();
    assert!(read(&q, &t).iter().all(|&b| b == 0x5A));
    check_rest(&rest, &s);
    drop(big);
}

/// Passing probe (graph replay vs a later move). A graph of recorded commands (a fill of q,
/// then an upload into x) replayed on q's own allocation stream S behind a gate; then an
/// 8 MiB request moves q (no pin: the replay's fill was enqueued and its view dropped; a
/// replay on the allocation stream records nothing). The move's copy runs on S after the
/// pending fill, so q, at its new place, holds the fill; a second replay after the move
/// fills q at its new place, and the vacated place's new owner keeps its own bytes.
#[test]
fn a_replayed_fill_pending_behind_a_gate_survives_a_move_of_its_block() {
    let Some([s]) = streams::<1>() else {
        return;
    };
    let (q, rest) = layout(&s);
    let up = Arc::new(DeviceBuffer::<u8>::new(4096, &s).unwrap());
    let graph = Graph::capture_with(&s, ReplayMode::Recorded, |c| {
        c.fill(&s, &q, 0x77u8)?;
        c.write(&s, &up, 0, &pattern(9, 4096))
    })
    .unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    // The fill is enqueued behind the gate; the upload, blocking, waits for it: run the
    // replay on another thread, and open the gate once the 8 MiB request has moved q.
    let before = relocations();
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let replay = scope.spawn(move || {
            let r = graph.replay(&s);
            (graph, r)
        });
        // Either order of the replay's commands and the relocation is valid; the bytes must
        // be right in both.
        let big = DeviceBuffer::<u8>::new(8 * MIB, &s).unwrap();
        let _ = tx.send(());
        gate.open().unwrap();
        let (graph, r) = replay.join().unwrap();
        r.unwrap();
        let _ = rx.recv();
        s.synchronize().unwrap();
        eprintln!("moves: {}", relocations() - before);
        assert!(
            read(&q, &s).iter().all(|&b| b == 0x77),
            "q holds the replay's fill"
        );
        assert!(read(&up, &s) == pattern(9, 4096), "the upload landed");
        big.data_ptr()
            .view()
            .unwrap()
            .fill(&s, &[0x11], 0, 8 * MIB)
            .unwrap();
        q.data_ptr()
            .view()
            .unwrap()
            .fill(&s, &[0], 0, 2 * MIB)
            .unwrap();
        graph.replay(&s).unwrap();
        s.synchronize().unwrap();
        assert!(
            read(&q, &s).iter().all(|&b| b == 0x77),
            "the second replay filled q"
        );
        assert!(
            read(&big, &s).iter().all(|&b| b == 0x11),
            "big kept its bytes"
        );
    });
    check_rest(&rest, &s);
}

/// Runs `f` on another thread and reports whether it returned within `limit`; `gate` is
/// opened either way afterwards (the limit only detects a hang: it orders nothing).
fn returns_before_gate_opens<R: Send>(
    gate: &Gate,
    limit: Duration,
    f: impl FnOnce() -> R + Send,
) -> (bool, R) {
    xpu_testing::returns_within(limit, f, || gate.open().expect("open"))
}
