//! The device caching allocator's figures: a dropped pool's segment pending its free is counted in
//! the statistics and the snapshot alike, and `max_memory_allocated` of sequential short-lived
//! threads.
//!
//! Review h87 (fresh eyes on the device caching allocator's public API: statistics against
//! snapshots, MemPools, record_stream, relocation, threads' freed-block caches). PoCL 3.1 on
//! the CPU, `POCL_DEVICES="pthread pthread"`; skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates (`xpu_event::Gate`), never a sleep.

mod common;

use common::{device_streams, stats_and_snapshot, MIB};
use xpu_alloc::MemPool;
use xpu_event::Gate;

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
/// §4.19). Before the pool is dropped the two agree (checked first). Failed 5 of 5 runs
/// before the fix; fixed: a dropped shard is noted device-wide while its teardown waits
/// (`DeviceShared::begin_teardown`), and a dropped pool's snapshot includes those shards and
/// its kept releases (`SharedState::detached_snapshot`).
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

/// Four worker threads, one after the other (each joined before the next starts), each
/// allocate an 8 MiB block on one stream and free it. At no instant was more than 8 MiB
/// allocated, and torch's `max_memory_allocated` (`allocated_bytes.all.peak`, one
/// device-wide `Stat` updated under the device lock, reference §4.13) is 8 MiB. Here each
/// thread's statistics cell keeps its own peak, an exited thread's cell is folded into one
/// whose peaks add up (`stats_registry`'s retire, "peaks keep adding up"), and the device's
/// peak is the sum: 32 MiB, four times the real high-water mark, growing with every
/// short-lived thread (a thread-per-request server, a pool of workers that get recycled).
/// The crate documents the peak as an upper bound when several threads allocate; this shows
/// it is not tight even when the threads never overlap. Simulated device (no OpenCL needed).
/// Failed 5 of 5 runs before the fix (32 MiB); fixed: a thread that exits when no other
/// exited while it lived adds to the retired peaks only what it reached above their currents.
#[test]
fn max_memory_allocated_of_sequential_short_lived_threads_is_their_sum() {
    let (core, _source) = common::sim_core(256 * MIB, "");
    let (_s, r) = common::stream(1);
    for _ in 0..4 {
        let (core, r) = (core.clone(), r.clone());
        std::thread::spawn(move || drop(core.allocate(8 * MIB, &r).unwrap()))
            .join()
            .unwrap();
    }
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(
        stats.allocated_bytes.all.peak,
        8 * MIB as i64,
        "max_memory_allocated after four non-overlapping 8 MiB allocations"
    );
}
