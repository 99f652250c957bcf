//! Graph replays behind gates: a block of a shared or own graph pool is not reused before a gated
//! replay on another stream ran, replays on two streams at once, and a capture does not wait for
//! its blocks' allocation stream.
//!
//! Review (h12): graphs replayed on other streams behind gates, pools shared between graphs,
//! captures that must not block on unrelated streams.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::fresh_streams;
use xpu_kernel::graph::{command_buffer_supported, graph_pool_handle, Graph, ReplayMode};
use xpu_kernel::DeviceBuffer;

const N: usize = 1 << 14;

/// Graph 1 (pool P, captured on s1) fills its block with 9 at each replay; its only replay
/// runs on s2 behind a gate; graph 1 is dropped. Graph 2 is captured in the same pool on s1,
/// allocates a block of the same size and fills it with -7; it is replayed on s1 and
/// synchronized. When the gate opens, graph 1's late fill must not land in graph 2's block.
fn shared_pool_block_not_reused_before_a_gated_replay_on_another_stream(mode: ReplayMode) {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let pool = graph_pool_handle(0).unwrap();
    let mut addr1 = 0;
    let g1 = Graph::capture_in_pool_with(&s1, &pool, mode, |c| {
        let b = c.alloc::<f32>(&s1, N)?;
        addr1 = b.data_ptr().address();
        c.fill(&s1, &b, 9.0f32)
    })
    .unwrap();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s2).unwrap();
    g1.replay(&s2).unwrap();
    drop(g1);
    let mut b2 = None;
    let g2 = Graph::capture_in_pool_with(&s1, &pool, mode, |c| {
        let b = c.alloc::<f32>(&s1, N)?;
        c.fill(&s1, &b, -7.0f32)?;
        b2 = Some(b);
        Ok(())
    })
    .unwrap();
    let b2 = b2.unwrap();
    g2.replay(&s1).unwrap();
    s1.synchronize().unwrap();
    gate.open().unwrap();
    s2.synchronize().unwrap();
    let reused = b2.data_ptr().address() == addr1;
    assert_eq!(
        b2.to_vec(&s1).unwrap(),
        vec![-7.0f32; N],
        "graph 1's gated fill landed in graph 2's block (same block: {reused})"
    );
}

#[test]
fn shared_pool_block_not_reused_before_a_gated_replay_on_another_stream_auto() {
    shared_pool_block_not_reused_before_a_gated_replay_on_another_stream(ReplayMode::Auto);
}

#[test]
fn shared_pool_block_not_reused_before_a_gated_replay_on_another_stream_recorded() {
    shared_pool_block_not_reused_before_a_gated_replay_on_another_stream(ReplayMode::Recorded);
}

/// A graph with its own pool, captured on s1, replayed only on s2 behind a gate, dropped;
/// `empty_cache` on another thread; allocations on s1 meanwhile. The gated fill must not land
/// in them.
fn own_pool_block_not_reused_before_a_gated_replay_on_another_stream(mode: ReplayMode) {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let mut addr = 0;
    let g = Graph::capture_with(&s1, mode, |c| {
        let b = c.alloc::<f32>(&s1, N)?;
        addr = b.data_ptr().address();
        c.fill(&s1, &b, 9.0f32)
    })
    .unwrap();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s2).unwrap();
    g.replay(&s2).unwrap();
    drop(g);
    let (tx, rx) = mpsc::channel();
    let emptying = std::thread::spawn(move || {
        xpu_alloc::empty_cache();
        tx.send(()).unwrap();
    });
    let zs: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|_| DeviceBuffer::from_slice(&vec![-7.0f32; N], &s1).unwrap())
        .collect();
    s1.synchronize().unwrap();
    let emptied_early = rx.try_recv().is_ok();
    gate.open().unwrap();
    emptying.join().unwrap();
    s2.synchronize().unwrap();
    let reused = zs.iter().any(|z| z.data_ptr().address() == addr);
    for z in &zs {
        assert_eq!(
            z.to_vec(&s1).unwrap(),
            vec![-7.0f32; N],
            "the gated replay's fill landed in a new allocation (reused {reused}, empty_cache early {emptied_early})"
        );
    }
}

#[test]
fn own_pool_block_not_reused_before_a_gated_replay_on_another_stream_auto() {
    own_pool_block_not_reused_before_a_gated_replay_on_another_stream(ReplayMode::Auto);
}

#[test]
fn own_pool_block_not_reused_before_a_gated_replay_on_another_stream_recorded() {
    own_pool_block_not_reused_before_a_gated_replay_on_another_stream(ReplayMode::Recorded);
}

/// Replays on two streams at once: s1's replay is gated, s2's runs; each of two graphs on its
/// own buffer; both results exact after the gate opens. And a replay on s2 must not wait
/// for s1's gate (it returns while the gate is closed).
fn replays_on_two_streams_at_once(mode: ReplayMode) {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s1).unwrap());
    let b = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s2).unwrap());
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    let ga = Graph::capture_with(&s1, mode, |c| c.fill(&s1, &a, 5u32)).unwrap();
    let gb = Graph::capture_with(&s2, mode, |c| c.fill(&s2, &b, 6u32)).unwrap();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    ga.replay(&s1).unwrap();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::scope(|sc| {
        sc.spawn(move || {
            gb.replay(&s2).unwrap();
            ga.replay(&s2).unwrap();
            s2.synchronize().unwrap();
            tx.send(()).unwrap();
        });
        let r = rx.recv_timeout(Duration::from_secs(30));
        gate.open().unwrap();
        r
    });
    assert!(t.is_ok(), "a replay on s2 waited for s1's gate");
    s1.synchronize().unwrap();
    assert_eq!(a.to_vec(&s1).unwrap(), vec![5u32; N]);
    assert_eq!(b.to_vec(&s2).unwrap(), vec![6u32; N]);
}

#[test]
fn replays_on_two_streams_at_once_auto() {
    replays_on_two_streams_at_once(ReplayMode::Auto);
}

#[test]
fn replays_on_two_streams_at_once_recorded() {
    replays_on_two_streams_at_once(ReplayMode::Recorded);
}

/// A capture on s2 of a fill of a block allocated on s1 must not wait for s1's work (nothing
/// runs during a capture): with s1 held by a gate, the capture returns.
#[test]
fn a_capture_does_not_wait_for_the_blocks_allocation_stream() {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    if !command_buffer_supported(0).unwrap() {
        return;
    }
    // A block whose command-buffer sub-buffer gets cached, then freed; a larger block at the
    // same place overlaps that cached sub-buffer.
    let a = Arc::new(DeviceBuffer::<f32>::new(1000, &s1).unwrap());
    let a_addr = a.data_ptr().address();
    let g1 = Graph::capture_with(&s1, ReplayMode::Auto, |c| c.fill(&s1, &a, 1.0f32)).unwrap();
    assert!(g1.uses_command_buffer());
    drop(a);
    drop(g1);
    s1.synchronize().unwrap();
    let b = Arc::new(DeviceBuffer::<f32>::new(3000, &s1).unwrap());
    println!("b reuses a's place: {}", b.data_ptr().address() == a_addr);
    let gate = xpu_event::Gate::with_open_limit(0, Duration::from_secs(60)).unwrap();
    gate.block(&s1).unwrap();
    let (tx, rx) = mpsc::channel();
    let (g2, r) = std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            let g = Graph::capture_with(&s2, ReplayMode::Auto, |c| c.fill(&s2, &b, 2.0f32));
            tx.send(()).unwrap();
            g
        });
        let r = rx.recv_timeout(Duration::from_secs(20));
        gate.open().unwrap();
        (h.join().unwrap(), r)
    });
    assert!(
        r.is_ok(),
        "Graph::capture on s2 blocked until s1's gate opened (a host wait for the block's allocation stream)"
    );
    let g2 = g2.unwrap();
    g2.replay(&s2).unwrap();
    assert_eq!(b.to_vec(&s2).unwrap(), vec![2.0f32; 3000]);
}
