//! Private memory pools (`MemPool`) against torch's freeable pools and the device-wide figures:
//! allocations under a memory fraction release freeable pools' caches, dropped pools' live segments
//! in the snapshot and statistics, the device peak across pools.
//!
//! Review h20: private memory pools (`MemPool`) against torch's freeable pools and the
//! device-wide figures. Each test here failed on the reviewed commit (6cebd7b). Four pass
//! since the out-of-memory retry releases dropped pools' caches (as torch's
//! `release_cached_blocks`) and the device snapshot shows dropped pools' live segments; the
//! device peak across pools is a known deviation, its test ignored with the reason. Tests that set device 0's memory fraction run in a child
//! process (this test binary re-run), so they hold under `cargo test` and nextest alike.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::time::Duration;

use xpu_alloc::MemPool;

use common::{device_stream, fresh_stream, MIB};

/// Runs `body` as scenario `scenario` of test `test` in a child process (60 s at most),
/// which must print `done` at its end.
fn in_child(test: &str, scenario: &str, body: fn()) {
    xpu_testing::scenario_test(test, scenario, Duration::from_secs(60), "done", body);
}

/// [`freeable_pool_with_a_cached_40_mib_segment`] on `s`, then device 0's memory fraction set
/// so that reserved memory may grow 64 MiB above what it was before the pool: with the
/// pool's 52 MiB reserved, a new 40 MiB segment fits only once the freeable pool's cached
/// 40 MiB are released. Returns the pool's live block.
fn freeable_pool_under_a_fraction(s: &xpu_stream::Stream) -> xpu_alloc::DataPtr {
    let live = freeable_pool_with_a_cached_40_mib_segment(s);
    let base = xpu_alloc::memory_reserved(0).unwrap() - 52 * MIB;
    let (_, total) = xpu_alloc::mem_get_info(0).unwrap();
    #[allow(clippy::cast_precision_loss)]
    let fraction = ((base + 64 * MIB) as f64 + 0.5) / total as f64;
    xpu_alloc::set_memory_fraction(fraction, 0).unwrap();
    live
}

/// A dropped pool (torch's freeable pool, `use_count` 0) whose stream's shard lives on through
/// a live 12 MiB block, with a 40 MiB segment cached unused: returns the live block.
fn freeable_pool_with_a_cached_40_mib_segment(s: &xpu_stream::Stream) -> xpu_alloc::DataPtr {
    let pool = MemPool::new(0).unwrap();
    let live = pool.allocate(12 * MIB, s).unwrap();
    let cached = pool.allocate(40 * MIB, s).unwrap();
    assert_eq!(pool.segments().len(), 2, "two segments");
    drop(pool);
    drop(cached);
    xpu_alloc::wait_pool_releases();
    live
}

/// torch's OOM sequence (reference §4.9 step 6d, §4.10): before failing, a device
/// allocation runs `release_cached_blocks`, which releases the cached segments of every
/// freeable private pool too. Here the default pool's retry only waits for pending pool
/// releases: the dropped pool's unused 40 MiB segment (which the device's `empty_cache`
/// would release) stays, and the allocation fails under the memory fraction.
#[test]
fn a_default_pool_allocation_under_a_fraction_releases_a_freeable_pools_cache() {
    in_child(
        "a_default_pool_allocation_under_a_fraction_releases_a_freeable_pools_cache",
        "h20-default-freeable",
        || {
            let s = fresh_stream(0).leak();
            let live = freeable_pool_under_a_fraction(&s);
            let got = xpu_alloc::allocate(40 * MIB, &s);
            assert!(
                got.is_ok(),
                "torch releases freeable pools' cache before failing: {:?}",
                got.err().map(|e| e.to_string())
            );
            drop(got);
            drop(live);
            println!("done");
        },
    );
}

/// The same through a live pool's allocation: `MemPool::allocate`'s retry releases the
/// default pool's cache (`parent.empty_cache()`) but not the freeable pools' cache, which
/// torch's `release_cached_blocks` releases.
#[test]
fn a_pool_allocation_under_a_fraction_releases_a_freeable_pools_cache() {
    in_child(
        "a_pool_allocation_under_a_fraction_releases_a_freeable_pools_cache",
        "h20-pool-freeable",
        || {
            let s = fresh_stream(0).leak();
            let live = freeable_pool_under_a_fraction(&s);
            let other = MemPool::new(0).unwrap();
            let got = other.allocate(40 * MIB, &s);
            assert!(
                got.is_ok(),
                "torch releases freeable pools' cache before failing: {:?}",
                got.err().map(|e| e.to_string())
            );
            drop(got);
            drop(live);
            println!("done");
        },
    );
}

/// `memory_snapshot()` must show every segment `memory_reserved` counts (torch's snapshot
/// lists the segments of freeable private pools, tagged with their pool id). A pool dropped
/// while one of its blocks lives keeps its segment reserved (and counted in the device's
/// statistics), but the device snapshot lists only pools with a live handle: the segment
/// disappears from the snapshot while it is still reserved and its block still allocated.
#[test]
fn a_dropped_pools_live_segment_stays_in_the_device_snapshot() {
    let Some(stream) = device_stream() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    let id = pool.id();
    let x = pool.allocate(12 * MIB, &stream).unwrap();
    let segment = pool.segments()[0].address;
    let listed = || {
        xpu_alloc::memory_snapshot()
            .segments
            .iter()
            .any(|s| s.device == 0 && s.address == segment)
    };
    assert!(listed(), "listed while the pool has a handle");
    drop(pool);
    xpu_alloc::wait_pool_releases();
    // The segment is still reserved: the block lives.
    let mut seen = [0u8; 16];
    x.view().unwrap().read(&stream, 0, &mut seen).unwrap();
    let snap = xpu_alloc::memory_snapshot();
    let seg = snap
        .segments
        .iter()
        .find(|s| s.device == 0 && s.address == segment);
    assert!(
        seg.is_some(),
        "the dropped pool's segment holding a live 12 MiB block is missing from \
         memory_snapshot() while memory_reserved counts it"
    );
    assert_eq!(seg.unwrap().segment_pool_id, id);
    drop(x);
}

/// Same, stated as torch's invariant on the device's figures: in a fresh process, the sum
/// of the snapshot's segment sizes equals `reserved_bytes.all.current` and the sum of its
/// allocated sizes equals `allocated_bytes.all.current`, also after a pool is dropped while
/// its block lives.
#[test]
fn device_stats_equal_the_snapshot_after_a_pool_is_dropped_with_a_live_block() {
    in_child(
        "device_stats_equal_the_snapshot_after_a_pool_is_dropped_with_a_live_block",
        "h20-stats-snapshot",
        || {
            let s = fresh_stream(0).leak();
            let pool = MemPool::new(0).unwrap();
            let x = pool.allocate(12 * MIB, &s).unwrap();
            let d = xpu_alloc::allocate(3 * MIB, &s).unwrap();
            let check = |when: &str| {
                let st = xpu_alloc::memory_stats(0).unwrap();
                let snap = xpu_alloc::memory_snapshot();
                let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
                let allocated: u64 = snap.segments.iter().map(|s| s.allocated_size).sum();
                assert_eq!(
                    (reserved, allocated),
                    (
                        u64::try_from(st.reserved_bytes.all.current).unwrap(),
                        u64::try_from(st.allocated_bytes.all.current).unwrap()
                    ),
                    "snapshot (reserved, allocated) vs memory_stats {when}"
                );
            };
            check("with the pool's handle");
            drop(pool);
            xpu_alloc::wait_pool_releases();
            check("after the pool's handle dropped, its block live");
            drop((x, d));
            println!("done");
        },
    );
}

/// torch keeps one `DeviceStats` per device, private pools included, so
/// `max_memory_allocated` is the true peak. Here the device's peak is the sum of the
/// pools' peaks: a 1 MiB block freed in the default pool, then a 1 MiB block in a pool,
/// never live together, read as a 2 MiB peak (documented as "an upper bound", but torch's
/// `max_memory_allocated` / `max_memory_reserved` are exact).
#[test]
#[ignore = "known deviation, not fixed: the device's peaks are the sum of its pools' peaks (an upper bound, documented on DeviceAllocator::memory_stats); an exact device-wide peak needs a shared counter on every pool's hand-out"]
fn the_device_peak_counts_blocks_of_two_pools_never_live_together_once() {
    in_child(
        "the_device_peak_counts_blocks_of_two_pools_never_live_together_once",
        "h20-peak",
        || {
            let s = fresh_stream(0).leak();
            let pool = MemPool::new(0).unwrap();
            xpu_alloc::reset_peak_stats(0).unwrap();
            let base = xpu_alloc::memory_allocated(0).unwrap();
            drop(xpu_alloc::allocate(MIB, &s).unwrap());
            drop(pool.allocate(MIB, &s).unwrap());
            assert_eq!(
                xpu_alloc::max_memory_allocated(0).unwrap() - base,
                MIB,
                "the two blocks were never live together"
            );
            println!("done");
        },
    );
}
