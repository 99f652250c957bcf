//! record_stream and deferred frees (reference §4.8), per-stream FIFOs without head-of-line
//! blocking, and cross-stream reuse of cached segments under memory pressure, on the
//! simulated backend.

use std::sync::Arc;

use super::{sim_core, stream, CachingAllocator, GIB, MIB};
use crate::error::CacheError;
use crate::sim_stream::{SimBackend, SimGate, SimStream};

/// An allocator over a simulated 1 GiB device (default configuration) and simulated streams
/// 0 to `N - 1`.
fn core_and_streams<const N: usize>() -> (CachingAllocator<SimBackend>, [Arc<SimStream>; N]) {
    let (core, _) = sim_core(GIB, "");
    (core, std::array::from_fn(|i| stream(i as u64).1))
}

/// Allocates `size` bytes on `s`, closes the gate of each of `users` (their work stays
/// outstanding), records a use of the block on each and frees it: the block stays pending
/// until those markers complete. Returns its address and the gates, in `users` order.
fn free_while_used_on(
    core: &CachingAllocator<SimBackend>,
    size: u64,
    s: &Arc<SimStream>,
    users: &[&Arc<SimStream>],
) -> (u64, Vec<Arc<SimGate>>) {
    let a = core.alloc(size, s).unwrap();
    let gates = users.iter().map(|u| u.close_gate()).collect();
    for u in users {
        core.record_stream(&a, u).unwrap();
    }
    (a.address(), gates)
}

#[test]
fn record_stream_defers_reuse_until_the_marker_completes() {
    let (core, [s0, side]) = core_and_streams();
    let (addr, _) = free_while_used_on(&core, 4096, &s0, &[&side]);
    let st = core.memory_stats();
    assert_eq!(
        (st.allocation.all.current, st.allocated_bytes.all.current),
        (0, 0)
    );
    assert_eq!(
        (
            st.active.all.current,
            st.active_bytes.all.current,
            st.requested_bytes.all.current
        ),
        (1, 4096, 4096)
    );
    assert_eq!(side.counters().markers_recorded, 1);
    let b = core.alloc(4096, &s0).unwrap();
    assert_ne!(b.address(), addr, "pending block not reused");
    side.open_gate();
    let c = core.alloc(4096, &s0).unwrap();
    assert_eq!(c.address(), addr, "reused once the marker completed");
    assert_eq!(core.memory_stats().active.all.current, 2);
}

#[test]
fn record_stream_on_the_allocation_stream_is_ignored() {
    let (core, _) = sim_core(GIB, "");
    let (s, r) = stream(0);
    let (addr, _) = free_while_used_on(&core, 4096, &r, &[&r]);
    assert_eq!(s.counters().markers_recorded, 0);
    assert_eq!(core.memory_stats().active.all.current, 0);
    assert_eq!(core.alloc(4096, &r).unwrap().address(), addr);
}

#[test]
fn record_stream_of_a_foreign_pointer_is_an_error() {
    let (core, _) = sim_core(GIB, "");
    let (other, _) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let p = other.alloc(4096, &s).unwrap();
    assert!(matches!(
        core.record_stream(&p, &s),
        Err(CacheError::Foreign(_))
    ));
}

#[test]
fn pending_frees_of_different_streams_do_not_block_each_other() {
    let (core, [s0, slow, s2]) = core_and_streams();
    let x = core.alloc(1 << 16, &s0).unwrap();
    let _sep = core.alloc(1 << 16, &s0).unwrap();
    let y = core.alloc(1 << 16, &s0).unwrap();
    let _tail = core.alloc(1 << 16, &s0).unwrap();
    let (xa, ya) = (x.address(), y.address());
    slow.close_gate();
    core.record_stream(&x, &slow).unwrap();
    core.record_stream(&y, &s2).unwrap();
    drop(x); // pending on the slow stream
    drop(y); // pending on an idle stream, freed later than x
    let p = core.alloc(1 << 16, &s0).unwrap();
    assert_eq!(
        p.address(),
        ya,
        "y is reusable although x, freed first, is still pending"
    );
    let q = core.alloc(1 << 16, &s0).unwrap();
    assert_ne!(q.address(), xa);
    slow.open_gate();
    let r = core.alloc(1 << 16, &s0).unwrap();
    assert_eq!(r.address(), xa);
}

#[test]
fn a_block_used_on_two_streams_waits_for_both() {
    let (core, [s0, g1, g2]) = core_and_streams();
    let (addr, _) = free_while_used_on(&core, 4096, &s0, &[&g1, &g2, &g2]);
    assert_eq!(
        (
            g1.counters().markers_recorded,
            g2.counters().markers_recorded
        ),
        (1, 1)
    );
    g1.open_gate();
    assert_ne!(core.alloc(4096, &s0).unwrap().address(), addr);
    g2.open_gate();
    assert_eq!(core.alloc(4096, &s0).unwrap().address(), addr);
}

#[test]
fn empty_cache_waits_for_pending_markers() {
    let (core, source) = sim_core(GIB, "");
    let (_, s0) = stream(0);
    let (_, s1) = stream(1);
    let (_, gates) = free_while_used_on(&core, 30 * MIB, &s0, &[&s1]);
    core.empty_cache();
    assert!(gates[0].is_open(), "the marker was waited for");
    assert_eq!(source.counters().live_segments, 0);
    assert_eq!(core.memory_stats().active.all.current, 0);
}

#[test]
fn cross_stream_reuse_under_pressure_orders_by_a_marker() {
    let (core, source) = sim_core(64 * MIB, "release_policy:on_oom");
    let (owner, s0) = stream(0);
    let (taker, s1) = stream(1);
    let a = core.alloc(40 * MIB, &s0).unwrap();
    let addr = a.address();
    drop(a);
    owner.close_gate(); // work that used the segment is still running on stream 0
    let b = core.alloc(40 * MIB, &s1).unwrap();
    assert_eq!(
        b.address(),
        addr,
        "the cached segment of stream 0 is reused"
    );
    assert_eq!(
        (owner.counters().markers_recorded, taker.counters().waits),
        (1, 1)
    );
    let st = core.memory_stats();
    assert_eq!(
        (
            st.num_device_alloc,
            st.num_device_free,
            st.num_alloc_retries,
            st.num_sync_all_streams
        ),
        (1, 0, 0, 0)
    );
    // Work enqueued on stream 1 now runs after stream 0's work.
    let later = taker.record_marker();
    assert!(!later.is_complete());
    owner.open_gate();
    assert!(later.is_complete());
    // The segment now belongs to stream 1.
    drop(b);
    assert_eq!(core.snapshot()[0].stream, crate::StreamKey::new(0, 1));
    assert_eq!(source.counters().live_segments, 1);
}

/// The thread's shard cache holds 8 streams: past them, and on a thread that never used the
/// streams, a known stream's shard is found in the allocator's map (its cached block is
/// reused, no segment is allocated and the stream handle is not asked for again).
#[test]
fn a_known_streams_shard_is_found_past_the_thread_cache_and_on_other_threads() {
    let (core, source) = sim_core(GIB, "");
    let streams: [Arc<SimStream>; 10] = std::array::from_fn(|i| stream(i as u64).1);
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let alloc_on = |core: &CachingAllocator<SimBackend>, s: &Arc<SimStream>| {
        core.allocate_with(4096, s.key(), || {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            s.clone()
        })
        .unwrap()
        .unwrap()
        .address()
    };
    // One small segment per stream, its block cached once freed.
    let first: Vec<u64> = streams.iter().map(|s| alloc_on(&core, s)).collect();
    assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 10);
    let segments = source.counters().live_segments;
    assert_eq!(segments, 10);
    let again = |core: &CachingAllocator<SimBackend>| -> Vec<u64> {
        // Oldest first: stream 0 and 1 are no longer in the thread's cache.
        streams.iter().map(|s| alloc_on(core, s)).collect()
    };
    assert_eq!(again(&core), first, "same shard, same cached block");
    assert_eq!(
        std::thread::scope(|scope| scope.spawn(|| again(&core)).join().unwrap()),
        first,
        "another thread finds the same shards"
    );
    assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 10);
    assert_eq!(source.counters().live_segments, segments);
}
