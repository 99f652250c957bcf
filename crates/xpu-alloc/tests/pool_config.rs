//! A private pool (`MemPool`) created while the configuration changes ends up with the new
//! configuration, as the device's default pool does: here `xpu_alloc::set_config` runs from
//! inside the pool's construction (its custom source's `max_alloc_size`, user code that runs
//! after the pool read the device allocator's configuration and before the device allocator
//! knows the pool). On a real OpenCL device (PoCL in CI); skipped without one unless
//! `XPU_REQUIRE_DEVICE=1`. A test binary of its own: it changes the process-wide
//! configuration.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use xpu_alloc::{BufferSource, HookedSource, MemPool, SegmentSource, SourceHooks};

use common::{device_stream, MIB};

/// Hooks on device 0's buffers: the first `max_alloc_size` query sets
/// `max_split_size_mb:64`.
struct ChangesConfig {
    changed: AtomicBool,
}

impl SourceHooks<BufferSource> for ChangesConfig {
    fn max_alloc_size(&self, inner: &BufferSource) -> u64 {
        if !self.changed.swap(true, Ordering::SeqCst) {
            xpu_alloc::set_config("max_split_size_mb:64").unwrap();
        }
        inner.max_alloc_size()
    }
}

#[test]
fn a_pool_created_during_a_config_change_gets_the_new_config() {
    let Some(stream) = device_stream() else {
        return;
    };
    xpu_alloc::set_config("").unwrap();
    let source = HookedSource::new(
        BufferSource::new(0).unwrap(),
        ChangesConfig {
            changed: AtomicBool::new(false),
        },
    );
    let pool = MemPool::with_source(0, source).unwrap();
    let max_split = i64::try_from(64 * MIB).unwrap();
    assert_eq!(
        xpu_alloc::memory_stats(0).unwrap().max_split_size,
        max_split,
        "the device's allocator has the new configuration"
    );
    assert_eq!(
        pool.memory_stats().max_split_size,
        max_split,
        "so does the pool created meanwhile"
    );
    // And it applies it: a 100 MiB block is an oversize allocation in the pool.
    let big = pool.allocate(100 * MIB, &stream).unwrap();
    assert_eq!(pool.memory_stats().oversize_allocations.current, 1);
    drop(big);
    pool.empty_cache();
    assert_eq!(pool.memory_stats().oversize_segments.current, 0);
    xpu_alloc::set_config("").unwrap();
}
