//! Review h87 (fresh eyes on the device caching allocator's public API: statistics against
//! snapshots, MemPools, record_stream, relocation, threads' freed-block caches). PoCL 3.1 on
//! the CPU, `POCL_DEVICES="pthread pthread"`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates (`xpu_event::Gate`), never a sleep.

mod common;

use common::{device_streams, MIB};
use xpu_alloc::MemPool;
use xpu_event::Gate;

/// The device-0 figures that a snapshot can give, from `memory_stats(0)` and from
/// `memory_snapshot()`: (reserved bytes, segments, active bytes, requested bytes).
fn stats_and_snapshot() -> ((i64, i64, i64, i64), (i64, i64, i64, i64)) {
    let st = xpu_alloc::memory_stats(0).unwrap();
    let snap = xpu_alloc::memory_snapshot();
    let segs: Vec<_> = snap.segments.iter().filter(|s| s.device == 0).collect();
    let sum = |f: fn(&&xpu_alloc::observe::SegmentDict) -> u64| -> i64 {
        i64::try_from(segs.iter().map(f).sum::<u64>()).unwrap()
    };
    (
        (
            st.reserved_bytes.all.current,
            st.segment.all.current,
            st.active_bytes.all.current,
            st.requested_bytes.all.current,
        ),
        (
            sum(|s| s.total_size),
            i64::try_from(segs.len()).unwrap(),
            sum(|s| s.active_size),
            sum(|s| s.requested_size),
        ),
    )
}

/// A MemPool whose only block was freed with a recorded use on a stream whose work is still
/// queued (behind a closed gate), then the pool's last handle dropped: the pool is torch's
/// "freeable" private pool, its segment still reserved with an `active_pending_free` block.
/// `memory_stats(0)` counts that segment (2 MiB reserved, 1 segment, 1 KiB active), but
/// `memory_snapshot()` no longer shows it: the dropped pool's shard was handed to the
/// `xpu-pool-release` thread (`Shard::drop` moves its state into the teardown job, which
/// waits for the gated marker), and the snapshot lists only live pools and the orphan shards
/// that still hold allocations (`PoolRegistry::dropped_pool_segments`). torch's
/// `memory_snapshot()` walks every block the allocator holds, private pools' included, so
/// the sum of its segments' `total_size` is `reserved_bytes.all.current` (and the same for
/// active and requested sizes), the invariant `_memory_viz.py` relies on (reference §4.15,
/// §4.19). Before the pool is dropped the two agree (checked first).
#[test]
fn a_dropped_pools_pending_free_segment_is_counted_but_missing_from_the_snapshot() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    let block = pool.allocate(1000, &s).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&t).unwrap();
    block.record_stream(&t).unwrap();
    drop(block);
    let (stats_alive, snap_alive) = stats_and_snapshot();
    drop(pool);
    let (stats_dropped, snap_dropped) = stats_and_snapshot();
    gate.open().unwrap();
    t.synchronize().unwrap();
    xpu_alloc::wait_pool_releases();
    xpu_alloc::empty_cache();
    assert_eq!(
        stats_alive, snap_alive,
        "control: the live pool's pending block, stats vs snapshot"
    );
    assert_eq!(stats_alive, (2 * MIB as i64, 1, 1024, 1000));
    assert_eq!(
        stats_dropped, snap_dropped,
        "dropped pool with a pending-free block: (reserved, segments, active, requested) in \
         memory_stats vs the sum over memory_snapshot's segments"
    );
}
