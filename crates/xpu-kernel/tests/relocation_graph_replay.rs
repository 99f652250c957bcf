//! Relocation (`relocation:merge`) and graph replay: graphs of commands on a moved block, captured
//! on one stream and replayed on several others, each wait on the device for the move's gated copy.
//!
//! Review h14 of 7f354a5 ("relocation: observing a moved block's place never waits on the
//! host where the command's stream is known"): graph replays of commands on a block that the
//! allocator has just moved, its move's copy held behind a user-event gate on the allocation
//! stream S, replayed on several other streams (safe calls only: no kernel launches, whose
//! `enqueue` is `unsafe`). PoCL: `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::relocation::{layout, pattern, relocations, streams, MIB};
use xpu_event::{Event, Gate, StreamExt};
use xpu_kernel::graph::{Graph, ReplayMode};
use xpu_kernel::DeviceBuffer;

/// Whether every event stays incomplete for `limit` with `gate` closed (an unordered command
/// on an ungated stream completes well within it; the limit orders nothing); the gate is
/// opened afterwards and the events waited for.
fn all_wait_for_gate(done: &[Event], gate: &Gate, limit: Duration) -> bool {
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        let waiter = scope.spawn(move || {
            for d in done {
                d.synchronize().unwrap();
                let _ = tx.send(());
            }
        });
        let waited = rx.recv_timeout(limit).is_err();
        gate.open().unwrap();
        waiter.join().unwrap();
        waited
    })
}

/// Passing probe. With q moved behind S's gate, graphs captured on T (auto mode: a command
/// buffer where the device has them, else recorded) of a copy out of q and of a fill of the
/// vacated place's new owner (big) are captured without a host wait and replayed on T, U and
/// V: every replay waits on the device for the move's copy; the copy out of q reads q's bytes,
/// q keeps them (the fill of its old place ran after the move's copy read it), big holds the
/// fill. Then a replay on a fourth stream after the move completed.
#[test]
fn graph_replays_on_several_streams_wait_for_a_gated_move() {
    for mode in [ReplayMode::Auto, ReplayMode::Recorded] {
        let Some([s, t, u, v, w]) = streams::<5>() else {
            return;
        };
        let (q, rest) = layout(&s);
        let out = Arc::new(DeviceBuffer::<u8>::new(2 * MIB, &t).unwrap());
        let gate = Gate::new(0).unwrap();
        gate.block(&s).unwrap();
        let before = relocations();
        let big = Arc::new(DeviceBuffer::<u8>::new(8 * MIB, &s).unwrap());
        assert!(relocations() > before, "the 8 MiB request moved q");
        let (tx, rx) = mpsc::channel();
        let captured = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                let g = Graph::capture_with(&t, mode, |c| {
                    c.copy(&t, &q, 0, &out, 0, 2 * MIB)?;
                    c.fill(&t, &big, 0x5Au8)
                })
                .unwrap();
                let _ = tx.send(());
                g
            });
            let ok = rx.recv_timeout(Duration::from_secs(10)).is_ok();
            if !ok {
                gate.open().unwrap();
            }
            (ok, h.join().unwrap())
        });
        let (ok, graph) = captured;
        assert!(ok, "{mode:?}: the capture waited on the host for S's gate");
        eprintln!("{mode:?}: command buffer {}", graph.uses_command_buffer());
        let mut done = Vec::new();
        for r in [&t, &u, &v] {
            graph.replay(r).unwrap();
            done.push(r.record_event().unwrap());
        }
        assert!(
            all_wait_for_gate(&done, &gate, Duration::from_millis(500)),
            "{mode:?}: a replay completed with S's gate closed"
        );
        s.synchronize().unwrap();
        assert!(
            q.to_vec(&s).unwrap() == pattern(1, 2 * MIB),
            "{mode:?}: q kept its bytes"
        );
        assert!(
            out.to_vec(&s).unwrap() == pattern(1, 2 * MIB),
            "{mode:?}: the replayed copy read q's bytes"
        );
        assert!(
            big.to_vec(&s).unwrap().iter().all(|&b| b == 0x5A),
            "{mode:?}: big filled"
        );
        out.data_ptr()
            .view()
            .unwrap()
            .fill(&s, &[0], 0, 2 * MIB)
            .unwrap();
        s.synchronize().unwrap();
        graph.replay(&w).unwrap();
        w.synchronize().unwrap();
        assert!(
            out.to_vec(&w).unwrap() == pattern(1, 2 * MIB),
            "{mode:?}: the replay on W after the move"
        );
        for (seed, b) in rest.iter().enumerate() {
            assert!(b.to_vec(&s).unwrap() == pattern(seed as u8 + 2, b.len()));
        }
    }
}
