//! Graph capture and launch checks: what a failed capture leaves (its private pool released), gated
//! replays on a released external stream, pools under a live graph, nested captures, capture range
//! checks, launch argument checks (no enqueue) and typed-memory sizes and offsets.
//!
//! Review (h19): passing probes (all pass on the reviewed commit, ac89e9f): graph capture errors and
//! what they leave, replays behind a gate on an external stream released before the graph
//! is dropped, pools released under a live graph, nested captures, capture range checks,
//! launch argument checks (no enqueue), typed-memory sizes and offsets. Each is fast; they
//! run one at a time (one lock) since one reads the device's reserved bytes.

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::{device0_stream, fresh_stream, fresh_streams, Claimed};
use xpu_event::Event;
use xpu_kernel::graph::{graph_pool_handle, Graph, GraphError, ReplayMode};
use xpu_kernel::{
    memory, ClRegion, DeviceBuffer, InteropError, KernelError, LaunchExt, LocalMem, MemoryError,
    Program,
};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const N: usize = 1 << 14;

const SRC: &str = r"
__kernel void k(__global float *y, float a, uint n, __local float *tmp) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a;
}
";

/// Passing: a capture whose closure allocates 8 MiB from the graph's private pool and then
/// fails leaves nothing reserved once the device's cache is emptied (the pool and its
/// segment are released on the error path), and the stream is usable again.
#[test]
fn a_failed_capture_releases_its_private_pools_memory() {
    let _one = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    xpu_alloc::empty_cache();
    let before = xpu_alloc::memory_reserved(0).unwrap();
    for mode in [ReplayMode::Auto, ReplayMode::Recorded] {
        let r = Graph::capture_with(&s, mode, |c| {
            let b = c.alloc::<u8>(&s, 8 << 20)?;
            c.fill(&s, &b, 1u8)?;
            let _routed = DeviceBuffer::<u8>::new(4 << 20, &s)?;
            Err(GraphError::ForeignEvent)
        });
        assert!(matches!(r, Err(GraphError::ForeignEvent)));
    }
    xpu_alloc::empty_cache();
    let after = xpu_alloc::memory_reserved(0).unwrap();
    assert!(
        after <= before,
        "reserved {before} -> {after} after failed captures"
    );
    assert!(!s.is_capturing());
    let v = DeviceBuffer::from_slice(&[3u32; 7], &s).unwrap();
    assert_eq!(v.to_vec(&s).unwrap(), vec![3u32; 7]);
}

/// Passing: graph 1 (shared pool) replays on an external stream behind a gate; the external
/// stream is released, then graph 1 dropped; graph 2 in the same pool allocates the same size
/// on s1, fills -7, replays and synchronizes. The gated fill (9) must not land in graph 2's
/// block when the gate opens.
#[test]
fn a_gated_replay_on_a_released_external_stream_keeps_its_block() {
    let _one = serial();
    let Some(([s1], _ext)) = fresh_streams([0]) else {
        return;
    };
    for mode in [ReplayMode::Auto, ReplayMode::Recorded] {
        let pool = graph_pool_handle(0).unwrap();
        let g1 = Graph::capture_in_pool_with(&s1, &pool, mode, |c| {
            let b = c.alloc::<f32>(&s1, N)?;
            c.fill(&s1, &b, 9.0f32)
        })
        .unwrap();
        let ext = fresh_stream(0);
        let e = ext.stream();
        let gate = xpu_event::Gate::new(0).unwrap();
        gate.block(&e).unwrap();
        g1.replay(&e).unwrap();
        let mut done = Event::default();
        done.record(&e).unwrap();
        drop(ext);
        assert!(g1.replay(&e).is_err(), "a replay on a released stream");
        drop(g1);
        let mut b2 = None;
        let g2 = Graph::capture_in_pool_with(&s1, &pool, mode, |c| {
            let b = c.alloc::<f32>(&s1, N)?;
            c.fill(&s1, &b, -7.0f32)?;
            b2 = Some(b);
            Ok(())
        })
        .unwrap();
        g2.replay(&s1).unwrap();
        s1.synchronize().unwrap();
        gate.open().unwrap();
        done.synchronize().unwrap();
        let b2 = b2.unwrap();
        assert_eq!(b2.to_vec(&s1).unwrap(), vec![-7.0f32; N], "{mode:?}");
    }
}

/// Passing: the same with the graph's own pool and the block later taken by ordinary
/// allocations after `empty_cache`: the gated fill lands in none of them.
#[test]
fn a_gated_replay_on_a_released_external_stream_own_pool() {
    let _one = serial();
    let Some(([s1], _ext)) = fresh_streams([0]) else {
        return;
    };
    let g = Graph::capture_with(&s1, ReplayMode::Recorded, |c| {
        let b = c.alloc::<f32>(&s1, N)?;
        c.fill(&s1, &b, 9.0f32)
    })
    .unwrap();
    let ext = fresh_stream(0);
    let e = ext.stream();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&e).unwrap();
    g.replay(&e).unwrap();
    let mut done = Event::default();
    done.record(&e).unwrap();
    drop(ext);
    drop(g);
    let zs: Vec<DeviceBuffer<f32>> = (0..4)
        .map(|_| DeviceBuffer::from_slice(&vec![-7.0f32; N], &s1).unwrap())
        .collect();
    s1.synchronize().unwrap();
    gate.open().unwrap();
    done.synchronize().unwrap();
    for z in &zs {
        assert_eq!(z.to_vec(&s1).unwrap(), vec![-7.0f32; N]);
    }
}

/// Passing: a pool shared by a live graph cannot be released (`PoolInUse`), and the graph
/// replays exactly afterwards; a pool of device 1 is refused for a capture on device 0.
#[test]
fn a_pool_under_a_live_graph_is_not_released() {
    let _one = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let pool = graph_pool_handle(0).unwrap();
    let mut out = None;
    let g = Graph::capture_in_pool(&s, &pool, |c| {
        let b = c.alloc::<u32>(&s, 100)?;
        c.fill(&s, &b, 0x5a5a_5a5a)?;
        out = Some(b);
        Ok(())
    })
    .unwrap();
    let out = out.unwrap();
    assert!(matches!(
        pool.release(),
        Err(xpu_alloc::AllocError::PoolInUse { .. })
    ));
    g.replay(&s).unwrap();
    assert_eq!(out.to_vec(&s).unwrap(), vec![0x5a5a_5a5au32; 100]);
    if xpu_testing::devices(2) {
        let p1 = graph_pool_handle(1).unwrap();
        assert!(matches!(
            Graph::capture_in_pool(&s, &p1, |_| Ok(())),
            Err(GraphError::OtherDevice { .. })
        ));
    }
}

/// Passing: nested captures: the same stream again is `AlreadyCapturing`, another stream
/// captures its own graph inside the first's closure, a replay on the capturing stream from
/// inside is refused; both graphs replay exactly afterwards.
#[test]
fn nested_captures() {
    let _one = serial();
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(64, &s1).unwrap());
    let b = Arc::new(DeviceBuffer::<u32>::zeroed(64, &s2).unwrap());
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    let mut inner = None;
    let outer = Graph::capture(&s1, |c| {
        assert!(matches!(
            Graph::capture(&s1, |_| Ok(())),
            Err(GraphError::AlreadyCapturing { .. })
        ));
        let g = Graph::capture(&s2, |c2| {
            assert!(matches!(
                c2.fill(&s1, &a, 1u32),
                Err(GraphError::NotCaptured { .. })
            ));
            c2.fill(&s2, &b, 2u32)
        })?;
        assert!(matches!(
            g.replay(&s1),
            Err(GraphError::AlreadyCapturing { .. })
        ));
        inner = Some(g);
        c.fill(&s1, &a, 1u32)
    })
    .unwrap();
    let inner = inner.unwrap();
    outer.replay(&s1).unwrap();
    inner.replay(&s2).unwrap();
    assert_eq!(a.to_vec(&s1).unwrap(), vec![1u32; 64]);
    assert_eq!(b.to_vec(&s2).unwrap(), vec![2u32; 64]);
}

/// Passing: capture range checks with offsets and lengths at `usize::MAX`, overlapping
/// copies within one buffer, fills of a zero-sized or 3-byte element type: typed errors, no
/// panic, nothing recorded.
#[test]
fn capture_range_checks() {
    let _one = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(16, &s).unwrap());
    let b = Arc::new(DeviceBuffer::<u32>::zeroed(16, &s).unwrap());
    let z = Arc::new(DeviceBuffer::<()>::new(usize::MAX, &s).unwrap());
    let t = Arc::new(DeviceBuffer::<[u8; 3]>::zeroed(4, &s).unwrap());
    let g = Graph::capture(&s, |c| {
        let range = |r: Result<(), GraphError>| {
            assert!(
                matches!(&r, Err(GraphError::Kernel(KernelError::Memory(m))) if matches!(**m, MemoryError::OutOfRange { .. })),
                "{r:?}"
            );
        };
        range(c.copy(&s, &a, usize::MAX, &b, 0, 1));
        range(c.copy(&s, &a, 0, &b, 1, usize::MAX));
        range(c.copy(&s, &a, 1, &b, 0, 16));
        range(c.write(&s, &a, usize::MAX, &[1u32]));
        range(c.write(&s, &a, 16, &[1u32]));
        let r = c.copy(&s, &a, 0, &a, 4, 8);
        assert!(
            matches!(&r, Err(GraphError::Kernel(KernelError::Memory(m))) if matches!(**m, MemoryError::Overlap { .. })),
            "{r:?}"
        );
        assert!(matches!(c.fill(&s, &z, ()), Err(GraphError::FillPattern { size: 0 })));
        assert!(matches!(c.fill(&s, &t, [1, 2, 3]), Err(GraphError::FillPattern { size: 3 })));
        c.copy(&s, &z, 0, &z, usize::MAX - 5, 5)?;
        c.write(&s, &a, 16, &[])?;
        c.copy(&s, &a, 0, &a, 8, 8)
    })
    .unwrap();
    assert_eq!(g.len(), 1);
}

/// Passing: launch argument checks without an enqueue: scalar kind and size, `__local`
/// sizes (0, `usize::MAX`, for a non-local parameter), a pointer for a scalar, too many
/// arguments, work sizes of 0, of 4 dimensions, of another rank, overflowing; a block of
/// device 1 on a stream of device 0, a function of device 1 on a stream of device 0.
#[test]
fn launch_argument_checks() {
    let _one = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = Program::build(0, SRC, "").unwrap().function("k").unwrap();
    let y = DeviceBuffer::<f32>::zeroed(16, &s).unwrap();
    let yd = DeviceBuffer::<f64>::zeroed(16, &s).unwrap();
    let l = || s.launch(&f, &[16], None).unwrap();
    assert!(l().arg(&yd).is_err(), "f64 buffer for float*");
    assert!(l().arg(1.0f32).is_err(), "scalar for a pointer");
    assert!(l().arg(&y).unwrap().arg(1i32).is_err(), "int for float");
    assert!(
        l().arg(&y).unwrap().arg(1.0f64).is_err(),
        "double for float"
    );
    assert!(
        l().arg(&y).unwrap().arg(1.0f32).unwrap().arg(1u64).is_err(),
        "ulong for uint"
    );
    assert!(
        l().arg(&y).unwrap().arg(LocalMem(4)).is_err(),
        "local for float"
    );
    let three = || {
        l().arg(&y)
            .unwrap()
            .arg(1.0f32)
            .unwrap()
            .arg(16u32)
            .unwrap()
    };
    assert!(three().arg(LocalMem(usize::MAX)).is_err());
    assert!(three().arg(LocalMem(0)).is_err());
    assert!(three().arg(&y).is_err(), "buffer for local");
    assert!(
        three().arg(LocalMem(64)).unwrap().arg(1u32).is_err(),
        "a fifth argument"
    );
    for (g, lo) in [
        (&[0usize][..], None),
        (&[1, 1, 1, 1][..], None),
        (&[][..], None),
        (&[16][..], Some(&[0usize][..])),
        (&[16][..], Some(&[4usize, 4][..])),
        (&[usize::MAX, 2][..], None),
        (&[1 << 32, 1 << 32][..], None),
    ] {
        assert!(
            matches!(s.launch(&f, g, lo), Err(KernelError::WorkSize { .. })),
            "{g:?} {lo:?}"
        );
    }
    if xpu_testing::devices(2) {
        let s1 = fresh_stream(1);
        let y1 = DeviceBuffer::<f32>::zeroed(16, &s1.stream()).unwrap();
        assert!(matches!(l().arg(&y1), Err(KernelError::OtherDevice { .. })));
        let f1 = Program::build(1, SRC, "").unwrap().function("k").unwrap();
        assert!(matches!(
            s.launch(&f1, &[16], None),
            Err(KernelError::StreamDevice { .. })
        ));
        let g = Graph::capture(&s, |c| {
            assert!(c.launch(&s, &f1, &[16], None).is_err());
            let yy = Arc::new(y1);
            let r = c.launch(&s, &f, &[16], None)?.arg(&yy);
            assert!(r.is_err(), "a captured block of device 1");
            Ok(())
        })
        .unwrap();
        assert!(matches!(
            g.replay(&s1.stream()),
            Err(GraphError::OtherDevice { .. })
        ));
    }
    // A released external stream: a launch is built (no queue needed) but nothing panics.
    let ext = fresh_stream(0);
    let e = ext.stream();
    drop(ext);
    if let Ok(launch) = e.launch(&f, &[16], None) {
        let _ = launch.arg(&y);
    }
}

/// Passing: typed-memory sizes and offsets: a byte size that overflows is `TooLarge`, ranges
/// with `usize::MAX` bounds are `OutOfRange`, `copy_within` with a destination past the end,
/// zero-sized elements of `usize::MAX` length, a claimed region past its block for copies
/// (`copy_dtoh` into a caller's slice, `copy_dtod`, `copy_htod`) and for `ClRegion::new`.
#[test]
fn typed_memory_sizes_and_offsets() {
    let _one = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    assert!(matches!(
        DeviceBuffer::<f32>::new(usize::MAX, &s),
        Err(MemoryError::TooLarge { .. })
    ));
    let mut a = DeviceBuffer::<f32>::from_slice(&[1.0, 2.0, 3.0, 4.0], &s).unwrap();
    use std::ops::Bound::{Excluded, Included, Unbounded};
    assert!(a.slice((Excluded(usize::MAX), Unbounded)).is_err());
    assert!(a.slice((Included(0), Included(usize::MAX))).is_err());
    assert!(a.slice((Included(3), Excluded(2))).is_err());
    assert!(a.copy_within(&s, 0..2, usize::MAX).is_err());
    assert!(a.copy_within(&s, 0..2, 3).is_err());
    assert!(a.copy_within(&s, 0..2, 1).is_err());
    a.copy_within(&s, 0..2, 2).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![1.0, 2.0, 1.0, 2.0]);
    let mut z = DeviceBuffer::<()>::new(usize::MAX, &s).unwrap();
    z.copy_within(&s, 1.., 0).unwrap();
    assert_eq!(z.slice(5..).unwrap().len(), usize::MAX - 5);
    let claim = Claimed {
        ptr: a.data_ptr(),
        offset: 2,
        len: 4,
    };
    let mut out = [0.0f32; 4];
    assert!(memory::copy_dtoh(&s, &claim, &mut out).is_err());
    let mut b = DeviceBuffer::<f32>::zeroed(4, &s).unwrap();
    assert!(memory::copy_dtod(&s, &claim, &mut b).is_err());
    let far = Claimed {
        ptr: a.data_ptr(),
        offset: usize::MAX,
        len: 4,
    };
    assert!(memory::copy_dtoh(&s, &far, &mut out).is_err());
    assert!(matches!(
        ClRegion::new(&far),
        Err(InteropError::OutsideAllocation { .. })
    ));
    assert!(matches!(
        ClRegion::new(&claim),
        Err(InteropError::OutsideAllocation { .. })
    ));
    assert_eq!(a.to_vec(&s).unwrap(), vec![1.0, 2.0, 1.0, 2.0]);
}

/// Passing: a buffer allocated inside a capture's closure on a stream outside the capture
/// (routed to the graph's pool) and kept past the graph's drop keeps its bytes, and its
/// block is freed normally afterwards.
#[test]
fn a_routed_allocation_outlives_its_graph() {
    let _one = serial();
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let mut kept = None;
    let g = Graph::capture(&s1, |c| {
        let v = DeviceBuffer::from_slice(&[7u32; 1000], &s2)?;
        assert!(c.pool().owns(v.data_ptr()));
        kept = Some(v);
        let b = c.alloc::<u32>(&s1, 1000)?;
        c.fill(&s1, &b, 1u32)
    })
    .unwrap();
    g.replay(&s1).unwrap();
    drop(g);
    s1.synchronize().unwrap();
    let kept = kept.unwrap();
    let _others: Vec<_> = (0..3)
        .map(|_| DeviceBuffer::from_slice(&[9u32; 1000], &s2).unwrap())
        .collect();
    assert_eq!(kept.to_vec(&s2).unwrap(), vec![7u32; 1000]);
    drop(kept);
}
