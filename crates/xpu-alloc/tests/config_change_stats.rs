//! The oversize statistics stay exact across runtime configuration changes
//! (`xpu_alloc::set_config`, as `torch.cuda.memory._set_allocator_settings`), in the device's
//! default pool and in a private pool (`MemPool`): `oversize_allocations` and
//! `oversize_segments` follow the `max_split_size` in effect when a block was handed out or
//! a segment obtained. On a real OpenCL device (PoCL in CI); skipped without one unless
//! `XPU_REQUIRE_DEVICE=1`. A test binary of its own: it changes the process-wide
//! configuration.

mod common;

use xpu_alloc::{MemPool, MemoryStats, Stat};

use common::{device_stream, MIB};

/// (oversize_allocations, oversize_segments).
fn oversize(stats: &MemoryStats) -> (Stat, Stat) {
    (stats.oversize_allocations, stats.oversize_segments)
}

fn device() -> MemoryStats {
    xpu_alloc::memory_stats(0).unwrap()
}

fn currents(stats: &MemoryStats) -> (i64, i64) {
    (
        stats.oversize_allocations.current,
        stats.oversize_segments.current,
    )
}

#[test]
fn oversize_counts_return_to_zero_across_max_split_size_changes_in_every_pool() {
    let Some(stream) = device_stream() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    assert_eq!(currents(&device()), (0, 0));

    // Counted under 64 MiB, freed with no limit.
    xpu_alloc::set_config("max_split_size_mb:64").unwrap();
    let in_default = xpu_alloc::allocate(100 * MIB, &stream).unwrap();
    let in_pool = pool.allocate(100 * MIB, &stream).unwrap();
    assert_eq!(currents(&pool.memory_stats()), (1, 1));
    assert_eq!(currents(&device()), (2, 2), "the device counts both pools");
    xpu_alloc::set_config("").unwrap();
    // Each stream picks up the new configuration at its next allocation.
    let small_default = xpu_alloc::allocate(4096, &stream).unwrap();
    let small_pool = pool.allocate(4096, &stream).unwrap();
    drop((in_default, in_pool));
    let st = pool.memory_stats();
    assert_eq!(
        st.oversize_allocations,
        Stat {
            current: 0,
            peak: 1,
            allocated: 1,
            freed: 1
        },
        "the pool subtracts the block it counted"
    );
    assert_eq!(currents(&device()), (0, 2));

    // Handed out with no limit (the cached 100 MiB blocks, not counted), freed under 64 MiB.
    let in_default = xpu_alloc::allocate(100 * MIB, &stream).unwrap();
    let in_pool = pool.allocate(100 * MIB, &stream).unwrap();
    assert_eq!(currents(&device()), (0, 2));
    xpu_alloc::set_config("max_split_size_mb:64").unwrap();
    let small_default2 = xpu_alloc::allocate(4096, &stream).unwrap();
    let small_pool2 = pool.allocate(4096, &stream).unwrap();
    drop((in_default, in_pool));
    assert_eq!(
        currents(&pool.memory_stats()),
        (0, 1),
        "a block not counted is not subtracted"
    );
    assert_eq!(currents(&device()), (0, 2));
    drop((small_default, small_pool, small_default2, small_pool2));

    // Released with no limit: the segments counted under 64 MiB are subtracted.
    xpu_alloc::set_config("").unwrap();
    drop(xpu_alloc::allocate(4096, &stream).unwrap());
    drop(pool.allocate(4096, &stream).unwrap());
    xpu_alloc::empty_cache();
    pool.empty_cache();
    let st = pool.memory_stats();
    assert_eq!(
        oversize(&st),
        (
            Stat {
                current: 0,
                peak: 1,
                allocated: 1,
                freed: 1
            },
            Stat {
                current: 0,
                peak: 1,
                allocated: 1,
                freed: 1
            }
        )
    );
    assert_eq!(st.reserved_bytes.all.current, 0);
    let st = device();
    assert_eq!(currents(&st), (0, 0));
    assert_eq!(
        st.oversize_allocations.allocated,
        st.oversize_allocations.freed
    );
    assert_eq!(st.oversize_segments.allocated, st.oversize_segments.freed);
}
