//! `reset_accumulated_stats` and the threads' caches of freed blocks: frees made on other threads
//! (alive or exited) before a reset are not counted after it; a reset between a free and a cached
//! pair.
//!
//! Review h68 of xpu-caching, probes that found nothing (they pass on c61c9e7): f9f8a95's
//! `reset_accumulated_stats`, which flushes the threads' caches of freed blocks before it
//! zeroes the totals. Probed: a free made on another thread that is still alive (its cache
//! not flushed by any read) and on one that exited, before the reset; a reset between a free
//! and a re-allocation of the same size on one thread (the cached pair afterwards counts from
//! zero); a second reset in a row. Deterministic (one order, no timing), on the simulated
//! source.

use std::sync::mpsc;
use std::sync::Arc;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::{AllocConfig, CachingAllocator, SimBackend, SimulatedSource, StreamKey};

const MIB: u64 = 1 << 20;

type Cache = CachingAllocator<SimBackend>;

fn cache(config: &str) -> Cache {
    let source = Arc::new(SimulatedSource::new(0, 256 * MIB, 256 * MIB));
    CachingAllocator::new(Box::new(source), AllocConfig::parse(config).unwrap())
}

/// (inactive_split allocated, freed, inactive_split_bytes allocated, freed, allocation freed).
fn totals(cache: &Cache) -> (i64, i64, i64, i64, i64) {
    let st = cache.memory_stats();
    (
        st.inactive_split.all.allocated,
        st.inactive_split.all.freed,
        st.inactive_split_bytes.all.allocated,
        st.inactive_split_bytes.all.freed,
        st.allocation.all.freed,
    )
}

/// A free made on another thread, which stays alive (its cache holds the block) while this
/// thread resets the totals: nothing of it is counted after the reset.
#[test]
fn a_free_on_another_live_thread_before_the_reset_is_not_counted_after_it() {
    for config in ["", "relocation:off,release_policy:on_oom"] {
        let cache = cache(config);
        let (freed_tx, freed_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let c = &cache;
            scope.spawn(move || {
                let s = SimStream::new(StreamKey::new(0, 1));
                drop(c.allocate(1000, &s).unwrap().unwrap());
                freed_tx.send(()).unwrap();
                // Alive until the main thread read the totals.
                go_rx.recv().unwrap();
            });
            freed_rx.recv().unwrap();
            cache.reset_accumulated_stats();
            let t = totals(&cache);
            go_tx.send(()).unwrap();
            assert_eq!(t, (0, 0, 0, 0, 0), "config {config:?}");
        });
        assert_eq!(
            totals(&cache),
            (0, 0, 0, 0, 0),
            "config {config:?}, thread exited"
        );
    }
}

/// A free on this thread, a reset, then the same size allocated and freed again (a cached
/// pair): the totals after it count only what followed the reset, and a second reset zeroes
/// them again.
#[test]
fn a_reset_between_a_free_and_a_cached_pair() {
    for config in ["", "relocation:off,release_policy:on_oom"] {
        let cache = cache(config);
        let s = SimStream::new(StreamKey::new(0, 1));
        drop(cache.allocate(1000, &s).unwrap().unwrap());
        cache.reset_accumulated_stats();
        assert_eq!(totals(&cache), (0, 0, 0, 0, 0), "config {config:?}");
        drop(cache.allocate(1000, &s).unwrap().unwrap());
        let (_, _, _, _, freed) = totals(&cache);
        assert_eq!(
            freed, 1,
            "config {config:?}: one allocation freed after the reset"
        );
        cache.reset_accumulated_stats();
        cache.reset_accumulated_stats();
        assert_eq!(totals(&cache), (0, 0, 0, 0, 0), "config {config:?}");
    }
}
