//! Private memory pools, probes that held: nested routings, a pool of another device, a gated
//! recorded use inside a pool, a pool dropped while another thread routes to it, peaks reset while
//! pool blocks live, a source handing out another device's buffers.
//!
//! Review h20: probes of private memory pools that PASS on the reviewed commit (kept as
//! regression tests): nested routings ended out of order, a pool of another device, a
//! recorded use gating reuse inside a live pool, a pool dropped while another thread routes
//! to it, peaks reset while pool blocks live, a custom source handing out another device's
//! buffers. Each allocates on streams of its own and compares device-wide figures as
//! differences only where no other test can move them. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use xpu_alloc::{
    AllocError, BufferSource, HookedSource, MemPool, SegmentSource, SourceError, SourceHooks,
    SourceSegment,
};
use xpu_event::Gate;

use common::{device_stream, fresh_stream, MIB};

/// Passing. Two nested routings whose guards drop out of order: each guard ends its own
/// routing; the innermost remaining one applies.
#[test]
fn nested_routings_ended_out_of_order_route_to_the_remaining_pool() {
    let Some(stream) = device_stream() else {
        return;
    };
    let (a, b) = (MemPool::new(0).unwrap(), MemPool::new(0).unwrap());
    let ga = xpu_alloc::use_mem_pool(&a).unwrap();
    let gb = xpu_alloc::use_mem_pool(&b).unwrap();
    assert!(b.owns(&xpu_alloc::allocate(4096, &stream).unwrap()));
    drop(ga);
    assert_eq!(a.routing_threads(), 0);
    let p = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(b.owns(&p), "b still routes");
    // a again, inside b: innermost is a.
    let ga2 = xpu_alloc::use_mem_pool(&a).unwrap();
    assert!(a.owns(&xpu_alloc::allocate(4096, &stream).unwrap()));
    drop(gb);
    assert!(a.owns(&xpu_alloc::allocate(4096, &stream).unwrap()));
    drop(ga2);
    let q = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(!a.owns(&q) && !b.owns(&q), "no routing left");
    assert_eq!((a.routing_threads(), b.routing_threads()), (0, 0));
}

/// Passing. A pool of device 1: routing to it leaves device 0's allocations alone; its
/// `allocate` refuses a device-0 stream; `record_stream` of its block on a device-0 stream
/// is refused; its statistics count in device 1 only.
#[test]
fn a_pool_of_another_device_routes_nothing_here_and_refuses_this_devices_streams() {
    if !xpu_testing::devices(2) {
        return;
    }
    let s0 = fresh_stream(0).leak();
    let s1 = fresh_stream(1).leak();
    let pool = MemPool::new(1).unwrap();
    let _g = xpu_alloc::use_mem_pool(&pool).unwrap();
    let d0 = xpu_alloc::allocate(4096, &s0).unwrap();
    assert!(!pool.owns(&d0), "device 0 is not routed");
    assert_eq!(d0.device(), 0);
    let d1 = xpu_alloc::allocate(4096, &s1).unwrap();
    assert!(pool.owns(&d1), "device 1 is routed");
    assert!(matches!(
        pool.allocate(4096, &s0),
        Err(AllocError::StreamDevice {
            stream: 0,
            device: 1
        })
    ));
    assert!(matches!(
        xpu_alloc::record_stream(&d1, &s0),
        Err(AllocError::StreamDevice { .. })
    ));
    assert_eq!(pool.memory_allocated(), 4096);
}

/// Passing. Inside a live pool, a block freed after a recorded use on a gated stream is not
/// handed out again (to the same size on its stream) before the gate opens; afterwards the
/// pool's statistics are exact.
#[test]
fn a_pool_block_with_a_gated_recorded_use_is_not_reused_before_the_gate_opens() {
    let Some(stream) = device_stream() else {
        return;
    };
    let other = fresh_stream(0);
    let gate = Gate::new(0).unwrap();
    gate.block(&other.stream()).unwrap();
    let pool = MemPool::new(0).unwrap();
    let x = pool.allocate(4096, &stream).unwrap();
    let x_addr = x.address();
    xpu_alloc::record_stream(&x, &other.stream()).unwrap();
    drop(x);
    let y = pool.allocate(4096, &stream).unwrap();
    assert_ne!(
        y.address(),
        x_addr,
        "reused before its recorded use completed"
    );
    assert_eq!(pool.memory_allocated(), 4096);
    gate.open().unwrap();
    other.stream().synchronize().unwrap();
    drop(y);
    pool.empty_cache();
    assert_eq!(pool.memory_reserved(), 0);
    assert_eq!(pool.memory_stats().allocation.all.current, 0);
}

/// Passing. The last outside handle of a pool drops while another thread routes to it: the
/// routing keeps the pool, that thread's allocations still go to it, and once the routing
/// ends and its block is freed the pool's segment is released.
#[test]
fn a_pool_dropped_while_another_thread_routes_to_it_keeps_serving_that_thread() {
    let Some(stream) = device_stream() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let (routed_tx, routed_rx) = std::sync::mpsc::channel::<()>();
    let handle = pool.clone();
    let id = pool.id();
    let t = std::thread::spawn(move || {
        let g = xpu_alloc::use_mem_pool(&handle).unwrap();
        drop(handle);
        routed_tx.send(()).unwrap();
        from_main.recv().unwrap();
        let p = xpu_alloc::allocate(12 * MIB, &stream).unwrap();
        let owned = g.pool().owns(&p);
        drop(g);
        (p, owned)
    });
    routed_rx.recv().unwrap();
    drop(pool);
    to_thread.send(()).unwrap();
    let (p, owned) = t.join().unwrap();
    assert!(
        owned,
        "the routing thread's allocation comes from the dropped pool"
    );
    let listed = xpu_alloc::device_allocator(0)
        .unwrap()
        .mem_pools()
        .unwrap()
        .iter()
        .any(|p| p.id() == id);
    assert!(
        !listed,
        "no handle left: only the block keeps the pool's state"
    );
    drop(p);
    xpu_alloc::wait_pool_releases();
}

/// Passing. Peaks reset while a pool's blocks live: the pool's peaks equal its currents,
/// and a later, smaller allocation leaves the pool's peak at its live bytes plus it.
#[test]
fn peaks_reset_while_pool_blocks_live_restart_at_the_live_bytes() {
    let Some(stream) = device_stream() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    let a = pool.allocate(3 * MIB, &stream).unwrap();
    drop(pool.allocate(5 * MIB, &stream).unwrap());
    assert_eq!(pool.memory_stats().allocated_bytes.all.peak, 8 * MIB as i64);
    xpu_alloc::reset_peak_stats(0).unwrap();
    let st = pool.memory_stats();
    assert_eq!(st.allocated_bytes.all.peak, 3 * MIB as i64);
    assert_eq!(st.reserved_bytes.all.peak, st.reserved_bytes.all.current);
    let b = pool.allocate(MIB, &stream).unwrap();
    assert_eq!(pool.memory_stats().allocated_bytes.all.peak, 4 * MIB as i64);
    drop((a, b));
}

/// Hooks handing out device 1's buffers (addresses shifted apart) for a pool of device 0.
struct OtherDevice {
    other: BufferSource,
    frees: AtomicUsize,
}

const SHIFT: u64 = 1 << 61;

impl SourceHooks<BufferSource> for OtherDevice {
    fn allocate(&self, _inner: &BufferSource, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = self.other.allocate(size)?;
        segment.address += SHIFT;
        Ok(segment)
    }
    fn free(&self, _inner: &BufferSource, mut segment: SourceSegment) {
        segment.address -= SHIFT;
        self.frees.fetch_add(1, Ordering::SeqCst);
        self.other.free(segment);
    }
}

/// Passing. A pool of device 0 whose custom source hands out device 1's buffers: safe
/// reads and writes of its blocks on a device-0 stream must fail with a typed error or
/// work, never crash or touch other bytes.
#[test]
fn a_pool_whose_source_hands_out_another_devices_buffers_does_not_crash() {
    if !xpu_testing::devices(2) {
        return;
    }
    let s0 = fresh_stream(0).leak();
    let hooks = OtherDevice {
        other: BufferSource::new(1).unwrap(),
        frees: AtomicUsize::new(0),
    };
    let source = Arc::new(HookedSource::new(BufferSource::new(0).unwrap(), hooks));
    let pool = MemPool::with_source(0, source.clone()).unwrap();
    let got = pool.allocate(4096, &s0);
    if let Ok(p) = got {
        let mut back = [0u8; 64];
        {
            let view = p.view().unwrap();
            // PoCL: CL_INVALID_CONTEXT (-34) for both, as typed errors.
            let w = view.write(&s0, 0, &[7u8; 64]);
            let r = view.read(&s0, 0, &mut back);
            assert!(w.is_err() || w.is_ok(), "a typed result, no crash");
            if w.is_ok() && r.is_ok() {
                assert_eq!(back, [7u8; 64], "its own bytes");
            }
        }
        drop(p);
    }
    drop(pool);
    xpu_alloc::wait_pool_releases();
    let _ = source.device();
}
