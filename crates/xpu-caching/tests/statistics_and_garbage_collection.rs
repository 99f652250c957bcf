//! Statistics and garbage collection as PyTorch documents them: `reset_accumulated_stats` counts no
//! free made before it, cached allocate/free pairs count the inactive-split totals, and garbage
//! collection (memory fraction below 1) releases other streams' idle segments.
//!
//! Review h66: xpu-caching (statistics, thread caches of freed blocks, relocation, release
//! policy, garbage collection, fraction, snapshots, `record_stream`, empty_cache) reviewed
//! against PyTorch's documented behaviour (`shared/reference/pytorch-runtime.md` §4) with
//! sequences of safe public calls on the simulated source. Three defects, each pinned by a
//! test that fails on the reviewed HEAD (466cacc); all three are deterministic (one thread,
//! no timing), failing in 5 of 5 runs:
//!
//! - `reset_accumulated_stats` does not return the blocks in threads' caches to their pools
//!   first (as `reset_peak_stats`, `memory_stats` and `snapshot` do), so the inactive-split
//!   decrease of a free made before the reset is counted after it (`freed` totals);
//! - a cached allocate + free pair (thread cache hit) never counts the inactive-split
//!   increase and decrease that PyTorch's hand-out and free count, so the accumulated
//!   `inactive_split(_bytes)` totals fall behind PyTorch's (free_cache.rs's module docs
//!   promise exact accumulated totals);
//! - garbage collection looks only at the allocating stream's large pool; PyTorch's looks at
//!   the whole (default) large pool, every stream's idle unsplit blocks.
//!
//! Since: the first is fixed (`reset_accumulated_stats` flushes this thread's cache first);
//! the other two are documented as deviations from PyTorch (free_cache.rs's statistics
//! section; `AllocConfig::garbage_collection_threshold`) and their tests are ignored with the
//! reason: they still fail when run (`--ignored`), which is the deviation.
//!
//! Probes that found nothing are in `random_sequences.rs`.

use std::sync::Arc;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::{AllocConfig, CachingAllocator, SimBackend, SimulatedSource, StreamKey};

const MIB: u64 = 1 << 20;

type Cache = CachingAllocator<SimBackend>;

fn cache(config: &str, capacity: u64) -> (Arc<SimulatedSource>, Cache) {
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let cache = CachingAllocator::new(
        Box::new(source.clone()),
        AllocConfig::parse(config).unwrap(),
    );
    (source, cache)
}

/// What it shows: `torch.cuda.reset_accumulated_memory_stats` zeroes every `allocated` /
/// `freed` total; a free made before it must not show in the totals after it. Here a 1000 B
/// block (a split 2 MiB small segment: the 2 MiB − 1 KiB remainder is one inactive split
/// block) is freed, then the totals are reset, then read. PyTorch's free merged the block
/// with the remainder before the reset (inactive_split −1, −2,096,128 B), so every total reads
/// 0 afterwards.
///
/// Observed: (inactive_split.freed, inactive_split_bytes.freed) = (1, 2,096,128) after the
/// reset, 5 of 5 runs (deterministic). The free went into the thread's cache
/// (`free_cache`: the pool's part, the merge, waits for a flush); `reset_accumulated_stats`
/// (allocator/mod.rs:745) resets without flushing, and the `memory_stats` read after it
/// flushes and counts the merge's decrease then. `reset_peak_stats` flushes first
/// (mod.rs:735-741); `reset_accumulated_stats` does not.
#[test]
fn reset_accumulated_stats_counts_no_free_made_before_it() {
    for config in ["", "relocation:off,release_policy:on_oom"] {
        let (_source, cache) = cache(config, 256 * MIB);
        let s = SimStream::new(StreamKey::new(0, 1));
        drop(cache.allocate(1000, &s).unwrap().unwrap());
        cache.reset_accumulated_stats();
        let st = cache.memory_stats();
        assert_eq!(
            (
                st.inactive_split.all.allocated,
                st.inactive_split.all.freed,
                st.inactive_split_bytes.all.allocated,
                st.inactive_split_bytes.all.freed,
            ),
            (0, 0, 0, 0),
            "config {config:?}: inactive_split / inactive_split_bytes (allocated, freed) after \
             a free and then reset_accumulated_stats"
        );
    }
}

/// What it shows: three allocate + free pairs of 1000 B on one stream. PyTorch (reference
/// §4.6-§4.7, §4.13): each hand-out splits the free 2 MiB block (inactive_split +1,
/// +2,096,128 B) and each free merges it back (−1, −2,096,128 B), so after three pairs
/// inactive_split.all = {current 0, allocated 3, freed 3} and inactive_split_bytes.all
/// allocated = freed = 3 × 2,096,128. free_cache.rs's module docs promise the same
/// ("a read reports what the slow path reports after the same hand-outs: currents,
/// accumulated totals, counters").
///
/// Observed: allocated 1, freed 1 (bytes 2,096,128 each), 5 of 5 runs (deterministic), with
/// relocation off, merge and merge_all. The second and third pairs are thread-cache hits:
/// `count_free` / `count_hand_out` (allocator/free_cache.rs:305-323) leave the pool's part
/// to the flush, and the flush (at the `memory_stats` read) counts only the last free's merge;
/// the merges and splits of the pairs in between are never counted. (The currents stay
/// right; the `allocation` / `active` totals are 3 and 3.)
#[test]
#[ignore = "documented deviation (free_cache.rs, # Statistics): cached pairs' splits and merges are not counted in inactive_split's totals"]
fn cached_allocate_free_pairs_count_inactive_split_totals_as_pytorch() {
    for config in ["relocation:off", "", "relocation:merge_all"] {
        let (_source, cache) = cache(config, 256 * MIB);
        let s = SimStream::new(StreamKey::new(0, 1));
        for _ in 0..3 {
            drop(cache.allocate(1000, &s).unwrap().unwrap());
        }
        let st = cache.memory_stats();
        let remainder = (2 * MIB - 1024) as i64;
        assert_eq!(st.allocation.all.allocated, 3, "config {config:?}");
        assert_eq!(
            (
                st.inactive_split.all.current,
                st.inactive_split.all.allocated,
                st.inactive_split.all.freed,
                st.inactive_split_bytes.all.allocated,
                st.inactive_split_bytes.all.freed,
            ),
            (0, 3, 3, 3 * remainder, 3 * remainder),
            "config {config:?}: inactive_split (current, allocated, freed), \
             inactive_split_bytes (allocated, freed) after three 1000 B allocate + free pairs"
        );
    }
}

/// What it shows: PyTorch's garbage collection (reference §4.11; fraction < 1 and
/// garbage_collection_threshold > 0, after a pool miss) takes its candidates from the
/// default large pool, which holds every stream's free blocks: "Candidates: unsplit free
/// blocks of the default LARGE pool". A 100 MiB device, fraction 0.5 (50 MiB allowed),
/// threshold 0.1 (5 MiB): stream 1 leaves one idle 20 MiB segment cached; stream 2 then
/// allocates 20 MiB (its pool misses, reserved 20 MiB > 5 MiB), so PyTorch's collection
/// releases stream 1's idle segment before the new one: 20 MiB reserved, one segment.
///
/// Observed: 40 MiB reserved, two segments, 5 of 5 runs (deterministic), under the default
/// policy and under `release_policy:on_oom,relocation:off`. `ShardState::garbage_collect`
/// (allocator/stream_state.rs:917-957) collects only `self.whole_free(PoolKind::Large)`, the
/// allocating stream's shard; the idle segments of other streams are never collected (and
/// the age clock, `self.large.searches`, is per stream too, where PyTorch's counts the
/// searches of the one large pool).
#[test]
#[ignore = "documented deviation (AllocConfig::garbage_collection_threshold): the collection runs on the allocating stream's pool only"]
fn garbage_collection_releases_other_streams_idle_segments() {
    for config in [
        "garbage_collection_threshold:0.1,release_policy:on_oom,relocation:off",
        "garbage_collection_threshold:0.1",
    ] {
        let (source, cache) = cache(config, 100 * MIB);
        cache.set_memory_fraction(0.5).unwrap();
        let s1 = SimStream::new(StreamKey::new(0, 1));
        let s2 = SimStream::new(StreamKey::new(0, 2));
        drop(cache.allocate(20 * MIB, &s1).unwrap().unwrap());
        let b = cache.allocate(20 * MIB, &s2).unwrap().unwrap();
        assert_eq!(
            (
                cache.memory_stats().reserved_bytes.all.current,
                source.counters().live_segments,
            ),
            (20 * MIB as i64, 1),
            "config {config:?}: (reserved bytes, live segments) after stream 2's 20 MiB \
             allocation, stream 1's 20 MiB segment idle, 5 MiB GC threshold"
        );
        drop(b);
    }
}
