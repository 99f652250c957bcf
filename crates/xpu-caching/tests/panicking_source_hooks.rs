//! A segment source's hook (user code the allocator runs) that panics leaves the allocator
//! consistent: no leaked statistic, no lost free, the memory fraction and `mem_get_info` still
//! right.
//!
//! Review h10: user code the allocator runs (a segment source's hooks) may panic; the
//! allocator must stay consistent afterwards (no leaked statistic, no lost free).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::source::Simulated;
use xpu_caching::{
    AllocConfig, CachingAllocator, HookedSource, SegmentSource, SimulatedSource, SourceHooks,
    SourceSegment, StreamKey,
};

const MIB: u64 = 1 << 20;

/// Frees every segment it is given, and panics right after its first free (a user's hook
/// with a bug in its bookkeeping after the free).
#[derive(Default)]
struct PanicsAfterFirstFree {
    frees: AtomicU64,
}

impl SourceHooks<SimulatedSource> for PanicsAfterFirstFree {
    fn free(&self, inner: &SimulatedSource, segment: SourceSegment<Simulated>) {
        inner.free(segment);
        if self.frees.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a segment source free hook panicked (expected in this test)");
        }
    }
}

/// The allocate hook's panic is handled (`a_panicking_source_leaves_no_reserved_bytes_charged`
/// in the crate's unit tests), the free hook's is not: `release_segment_to` lowers the
/// device-wide reserved bytes only after `source.free` returned, and `free_segment` updates
/// the statistics after it, so a panicking free leaves the freed segment's bytes charged for
/// good (`reserved_bytes`, `memory_stats`, the memory fraction, `mem_get_info`), and the
/// other segments of the same release are dropped without ever reaching the source (a lost
/// free: the source still counts them live).
#[test]
fn a_panicking_free_hook_leaves_nothing_charged_and_loses_no_segment() {
    let source = Arc::new(HookedSource::new(
        SimulatedSource::new(0, 64 * MIB, 64 * MIB),
        PanicsAfterFirstFree::default(),
    ));
    let cache: CachingAllocator<xpu_caching::SimBackend> =
        CachingAllocator::new(Box::new(source.clone()), AllocConfig::default());
    let stream = SimStream::new(StreamKey::new(0, 1));
    let a = cache.allocate(20 * MIB, &stream).unwrap().unwrap();
    let b = cache.allocate(20 * MIB, &stream).unwrap().unwrap();
    drop((a, b));
    assert_eq!(source.inner().counters().live_segments, 2);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cache.empty_cache()));
    assert!(unwound.is_err(), "the hook's panic reaches the caller");
    // Whatever was left cached is released now (the hook forwards from here on).
    cache.empty_cache();
    let counters = source.inner().counters();
    let stats = cache.memory_stats();
    assert_eq!(
        (
            counters.live_segments,
            cache.reserved_bytes(),
            stats.reserved_bytes.all.current,
            stats.segment.all.current,
        ),
        (0, 0, 0, 0),
        "(segments the source still holds, reserved bytes, reserved-bytes stat, segment \
         stat) after a free hook's panic and a second empty_cache"
    );
    // The memory fraction sees the bytes: 40 MiB of the 48 MiB that 0.75 allows.
    cache.set_memory_fraction(0.75).unwrap();
    let c = cache.allocate(40 * MIB, &stream);
    assert!(
        matches!(c, Ok(Some(_))),
        "40 MiB under a 48 MiB fraction refused: {:?}",
        c.map(|a| a.map(|a| a.allocated_size()))
    );
}
