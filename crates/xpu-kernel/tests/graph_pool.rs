//! Graph-private pools on a real OpenCL device (PoCL in CI): allocations during a capture
//! come from the graph's pool, `graph_pool_handle` shares one pool between captures, and
//! the pool stays reserved while a graph lives and is not reused before a dropped graph's
//! pending replay ran. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::Arc;

use xpu_alloc::MemPool;
use xpu_kernel::graph::{graph_pool_handle, Graph, GraphError};
use xpu_kernel::{DeviceBuffer, Program};
use xpu_stream::Stream;
use xpu_testing::devices;

use common::{device0_stream, fresh_stream};

const N: usize = 1000;
const BYTES: u64 = 4096; // N f32 rounded to 512

const ADD: &str = r"
__kernel void add(__global float *y, float a, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] += a;
}
";

#[test]
fn allocations_during_a_capture_come_from_the_graphs_private_pool() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let add = Program::build(0, ADD, "").unwrap().function("add").unwrap();
    let mut y = None;
    let mut routed = None;
    let graph = Graph::capture(&s, |c| {
        let b = c.alloc::<f32>(&s, N)?;
        c.fill(&s, &b, 1.0f32)?;
        // SAFETY: N work-items touch b[0..N), at every replay; the kernel terminates.
        unsafe {
            c.launch(&s, &add, &[N], None)?
                .arg(&b)?
                .arg(2.0f32)?
                .arg(N as u32)?
                .enqueue()?;
        }
        y = Some(b);
        // Any other allocation of this thread during the capture is routed to the pool.
        routed = Some(DeviceBuffer::<u8>::new(100, &s)?);
        Ok(())
    })
    .unwrap();
    let y = y.unwrap();
    let routed = routed.unwrap();
    let pool = graph.pool();
    assert!(
        pool.owns(y.data_ptr()),
        "Capture::alloc takes the graph's pool"
    );
    assert!(
        pool.owns(routed.data_ptr()),
        "the capturing thread is routed"
    );
    assert!(
        pool.id().0 > 0 && pool.id().1 == 0,
        "a capture pool id (n, 0)"
    );
    assert_eq!(pool.memory_allocated(), BYTES + 512);
    let after = DeviceBuffer::<f32>::new(N, &s).unwrap();
    assert!(
        !pool.owns(after.data_ptr()),
        "routing ends with the capture"
    );
    for _ in 0..3 {
        graph.replay(&s).unwrap();
    }
    assert_eq!(y.to_vec(&s).unwrap(), vec![3.0f32; N]);
    // The graph's block is never handed to the default pool while the graph lives.
    drop(y);
    let other = DeviceBuffer::<f32>::new(N, &s).unwrap();
    assert!(!pool.owns(other.data_ptr()));
    assert_eq!(
        pool.memory_allocated(),
        BYTES + 512,
        "the graph still holds its block"
    );
}

/// A graph, captured into `pool`, that fills a buffer it allocates with `value`.
fn capture_fill(s: &Stream, pool: &MemPool, value: f32) -> (Graph, Arc<DeviceBuffer<f32>>) {
    let mut out = None;
    let graph = Graph::capture_in_pool(s, pool, |c| {
        let b = c.alloc::<f32>(s, N)?;
        c.fill(s, &b, value)?;
        out = Some(b);
        Ok(())
    })
    .unwrap();
    (graph, out.unwrap())
}

#[test]
fn two_graphs_share_one_pool_from_graph_pool_handle_and_hold_it_while_they_live() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let handle = graph_pool_handle(0).unwrap();
    assert_eq!(handle.id().0, 0, "a handle's id is (0, n)");
    let base = xpu_alloc::memory_reserved(0).unwrap();
    let (g1, a) = capture_fill(&s, &handle, 5.0);
    let (g2, b) = capture_fill(&s, &handle, 7.0);
    assert_eq!(g1.pool().id(), handle.id());
    assert_eq!(g2.pool().id(), handle.id());
    assert!(handle.owns(a.data_ptr()) && handle.owns(b.data_ptr()));
    assert_eq!(handle.memory_allocated(), 2 * BYTES);
    // Where segments are not split (NVIDIA), each block is a segment of its own.
    let segments = if xpu_alloc::device_splits_segments(0).unwrap() {
        1
    } else {
        2
    };
    assert_eq!(
        handle.segments().len(),
        segments,
        "one segment of the shared pool holds both"
    );
    g1.replay(&s).unwrap();
    g2.replay(&s).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![5.0f32; N]);
    assert_eq!(b.to_vec(&s).unwrap(), vec![7.0f32; N]);
    let reserved = handle.memory_reserved();
    assert_eq!(xpu_alloc::memory_reserved(0).unwrap() - base, reserved);
    // The handle and the buffers go; the graphs keep the pool and its blocks.
    let pool = g1.pool().clone();
    drop((handle, a, b));
    xpu_alloc::empty_cache();
    assert_eq!(pool.memory_allocated(), 2 * BYTES);
    assert_eq!(pool.memory_reserved(), reserved, "reserved for the replays");
    g2.replay(&s).unwrap();
    drop(pool);
    drop(g1);
    drop(g2);
    xpu_alloc::wait_pool_releases();
    assert_eq!(
        xpu_alloc::memory_reserved(0).unwrap(),
        base,
        "the pool is released once no graph holds it"
    );
}

#[test]
fn capturing_into_a_pool_of_another_device_is_refused() {
    if !devices(2) {
        return;
    }
    let ext = fresh_stream(0);
    let s = ext.stream();
    let pool = graph_pool_handle(1).unwrap();
    let err = Graph::capture_in_pool(&s, &pool, |_| Ok(())).unwrap_err();
    assert!(
        matches!(
            err,
            GraphError::OtherDevice {
                graph_device: 1,
                stream_device: 0
            }
        ),
        "{err}"
    );
    // The stream is usable afterwards.
    let g = Graph::capture(&s, |_| Ok(())).unwrap();
    assert!(g.is_empty());
}

// A dropped graph's pool memory is not reused before its pending replay.

/// A graph whose private pool holds its only buffer is dropped while its replay is held back
/// by a gate: neither the buffer's block nor the pool's segment is handed to another
/// allocation (of the global allocator, on another stream) before the replay ran, so the
/// replay's late fill cannot land in the new owner's memory. `empty_cache` waits for the
/// pool's release, which waits for the replay (as torch's `empty_cache` synchronizes its
/// events), so it runs on another thread while allocations go on here.
#[test]
fn a_dropped_graphs_pool_memory_is_not_reused_before_its_pending_replay() {
    let Some(([s1, s2], _ext)) = common::fresh_streams([0, 0]) else {
        return;
    };
    const N: usize = 1 << 16;
    let mut addr = 0;
    let graph = Graph::capture(&s1, |c| {
        let buf = c.alloc::<f32>(&s1, N)?;
        addr = buf.data_ptr().address();
        c.fill(&s1, &buf, 9.0f32)?;
        Ok(())
    })
    .unwrap();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    graph.replay(&s1).unwrap();
    drop(graph);
    let (tx, rx) = std::sync::mpsc::channel();
    let emptying = std::thread::spawn(move || {
        xpu_alloc::empty_cache();
        tx.send(()).unwrap();
    });
    let (atx, arx) = std::sync::mpsc::channel();
    let allocating = std::thread::spawn(move || {
        let zs: Vec<DeviceBuffer<f32>> = (0..4)
            .map(|_| DeviceBuffer::from_slice(&vec![-7.0f32; N], &s2).unwrap())
            .collect();
        s2.synchronize().unwrap();
        atx.send(()).unwrap();
        zs
    });
    let allocated = arx.recv_timeout(std::time::Duration::from_secs(20));
    let emptied_early = rx.try_recv().is_ok();
    gate.open().unwrap();
    assert!(
        allocated.is_ok(),
        "allocating on another stream blocked while empty_cache waited for the gated replay"
    );
    assert!(
        !emptied_early,
        "empty_cache returned before the gated replay ran"
    );
    let zs = allocating.join().unwrap();
    emptying.join().unwrap();
    s1.synchronize().unwrap();
    let reused = zs.iter().any(|z| z.data_ptr().address() == addr);
    for z in &zs {
        assert_eq!(
            z.to_vec(&s2).unwrap(),
            vec![-7.0f32; N],
            "the gated replay's fill landed in a new allocation (block reused: {reused})"
        );
    }
}
