//! Statistics that a block or segment adds when it is handed out or obtained and takes back
//! when it is freed or released stay exact when the configuration changes in between
//! (`set_config`, as `torch.cuda.memory._set_allocator_settings`): the oversize counters
//! follow the `max_split_size` in effect when the block was handed out / the segment was
//! obtained, whatever it is when they are freed.

use super::{lcg, sim_core, stream, GIB, MIB};
use crate::allocator::CachingAllocator;
use crate::config::AllocConfig;
use crate::sim_stream::SimBackend;
use crate::stats::Stat;

fn config(text: &str) -> AllocConfig {
    AllocConfig::parse(text).expect("valid config")
}

/// (oversize_allocations, oversize_segments).
fn oversize(cache: &CachingAllocator<SimBackend>) -> (Stat, Stat) {
    let st = cache.memory_stats();
    (st.oversize_allocations, st.oversize_segments)
}

/// Asserts that nothing is allocated nor reserved any more and that the allocation and
/// segment statistics balance.
fn assert_all_returned(cache: &CachingAllocator<SimBackend>) {
    let st = cache.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.active.all.current, 0);
    assert_eq!(st.allocation.all.allocated, st.allocation.all.freed);
    assert_eq!(st.reserved_bytes.all.current, 0);
    assert_eq!(st.segment.all.current, 0);
    assert_eq!(st.segment.all.allocated, st.segment.all.freed);
    assert_eq!(st.num_device_alloc, st.num_device_free);
}

/// The oversize counters `(oversize_allocations, oversize_segments)` read at each step of:
/// a 100 MiB block handed out under the configuration `before`, the configuration changed
/// to `after` (picked up by the stream at its next, small, allocation), the block freed,
/// then everything freed and released. Checks that everything returned at the end.
fn oversize_across_a_change_before_the_free(before: &str, after: &str) -> [(Stat, Stat); 4] {
    let (cache, _) = sim_core(GIB, before);
    let (s, _) = stream(1);
    let big = cache.alloc(100 * MIB, &s).unwrap();
    let handed_out = oversize(&cache);
    cache.set_config(config(after));
    let small = cache.alloc(4096, &s).unwrap();
    let changed = oversize(&cache);
    drop(big);
    let freed = oversize(&cache);
    drop(small);
    cache.empty_cache();
    let released = oversize(&cache);
    assert_all_returned(&cache);
    [handed_out, changed, freed, released]
}

/// A 100 MiB block handed out under `max_split_size_mb:64` counts as an oversize
/// allocation in an oversize segment; lifting the limit (unlimited) before the free still
/// subtracts exactly what was added: both counters return to 0 (the block's at its free,
/// the segment's at its release).
#[test]
fn oversize_counts_return_to_zero_when_max_split_size_is_lifted_before_the_free() {
    let counted = Stat::new(1, 1, 1, 0);
    let returned = Stat::new(0, 1, 1, 1);
    assert_eq!(
        oversize_across_a_change_before_the_free("max_split_size_mb:64", ""),
        [
            (counted, counted),
            (counted, counted),
            (returned, counted),
            (returned, returned),
        ]
    );
}

/// A 100 MiB block handed out with no `max_split_size` (unlimited) is no oversize
/// allocation; setting `max_split_size_mb:64` before the free subtracts nothing: both
/// counters stay exactly 0 (never -1) at every step.
#[test]
fn oversize_counts_stay_zero_when_max_split_size_is_set_before_the_free() {
    let zero = (Stat::default(), Stat::default());
    assert_eq!(
        oversize_across_a_change_before_the_free("", "max_split_size_mb:64"),
        [zero; 4]
    );
}

/// Between two limits, down then up: a 100 MiB block under `max_split_size_mb:128` is not
/// oversize, a second one under 64 is; freeing the first under 64 and the second under 128
/// leaves exactly what each added, and a block reused from the cache after a change counts
/// under the configuration of its hand-out.
#[test]
fn oversize_counts_follow_the_limit_of_each_hand_out_when_it_moves_down_and_up() {
    let (cache, _) = sim_core(GIB, "max_split_size_mb:128");
    let (s, _) = stream(1);
    let first = cache.alloc(100 * MIB, &s).unwrap();
    assert_eq!(oversize(&cache), (Stat::default(), Stat::default()));
    cache.set_config(config("max_split_size_mb:64"));
    let second = cache.alloc(100 * MIB, &s).unwrap();
    assert_eq!(
        oversize(&cache),
        (Stat::new(1, 1, 1, 0), Stat::new(1, 1, 1, 0))
    );
    drop(first);
    assert_eq!(
        oversize(&cache).0,
        Stat::new(1, 1, 1, 0),
        "the first block was not counted: its free under 64 MiB subtracts nothing"
    );
    // The first block, cached, is handed out again: now under 64 MiB, an oversize one.
    let again = cache.alloc(100 * MIB, &s).unwrap();
    assert_eq!(again.allocated_size(), 100 * MIB);
    assert_eq!(oversize(&cache).0, Stat::new(2, 2, 2, 0));
    cache.set_config(config("max_split_size_mb:128"));
    let small = cache.alloc(4096, &s).unwrap();
    drop(second);
    drop(again);
    assert_eq!(
        oversize(&cache).0,
        Stat::new(0, 2, 2, 2),
        "both blocks counted under 64 MiB are subtracted under 128 MiB"
    );
    drop(small);
    cache.empty_cache();
    assert_eq!(
        oversize(&cache).1,
        Stat::new(0, 1, 1, 1),
        "only the second segment, obtained under 64 MiB, was counted and is subtracted"
    );
    assert_all_returned(&cache);
}

/// The release of a cached oversize segment during an allocation (PyTorch's
/// `release_available_cached_blocks`, reached once `max_split_size` is set) subtracts only
/// a segment that was counted: a 100 MiB segment obtained with no limit, released under
/// `max_split_size_mb:64` to make room for a 200 MiB one (256 MiB device), leaves exactly
/// the new segment counted.
#[test]
fn an_oversize_release_during_an_allocation_subtracts_only_counted_segments() {
    let (cache, source) = sim_core(256 * MIB, "release_policy:on_oom");
    let (s, _) = stream(1);
    drop(cache.alloc(100 * MIB, &s).unwrap());
    assert_eq!(cache.memory_reserved(), 100 * MIB);
    cache.set_config(config("max_split_size_mb:64,release_policy:on_oom"));
    let big = cache.alloc(200 * MIB, &s).unwrap();
    assert_eq!(
        cache.memory_reserved(),
        200 * MIB,
        "the cached segment was released"
    );
    assert_eq!(
        oversize(&cache),
        (Stat::new(1, 1, 1, 0), Stat::new(1, 1, 1, 0)),
        "only the 200 MiB block and segment count; the uncounted release subtracts nothing"
    );
    drop(big);
    cache.empty_cache();
    assert_eq!(
        oversize(&cache),
        (Stat::new(0, 1, 1, 1), Stat::new(0, 1, 1, 1))
    );
    assert_all_returned(&cache);
    assert_eq!(source.counters().used, 0);
}

/// A cached segment that another stream takes under memory pressure (cross-stream reuse)
/// keeps what was counted when it was obtained: a 100 MiB segment obtained with no limit on
/// one stream, moved to another under `max_split_size_mb:64` and released there, subtracts
/// nothing from `oversize_segments`.
#[test]
fn a_segment_moved_to_another_stream_keeps_what_was_counted() {
    let (cache, _) = sim_core(150 * MIB, "release_policy:on_oom");
    let (s1, _) = stream(1);
    let (s2, _) = stream(2);
    drop(cache.alloc(100 * MIB, &s1).unwrap());
    cache.set_config(config("max_split_size_mb:64,release_policy:on_oom"));
    drop(cache.alloc(4096, &s1).unwrap());
    // No room for a 90 MiB segment: stream 2 takes stream 1's cached 100 MiB segment.
    let moved = cache.alloc(90 * MIB, &s2).unwrap();
    assert_eq!(moved.allocated_size(), 100 * MIB, "the whole moved segment");
    assert_eq!(moved.stream(), s2.key());
    assert_eq!(
        oversize(&cache),
        (Stat::new(1, 1, 1, 0), Stat::default()),
        "handed out under 64 MiB; the segment was obtained with no limit"
    );
    drop(moved);
    cache.empty_cache();
    assert_eq!(oversize(&cache), (Stat::new(0, 1, 1, 1), Stat::default()));
    assert_all_returned(&cache);
}

/// A block freed while still in use on another stream (`record_stream`) becomes reusable
/// only once that stream's marker completes, here after the configuration changed: the
/// oversize count still subtracts exactly what the hand-out added.
#[test]
fn a_deferred_free_subtracts_what_the_hand_out_counted() {
    let (cache, _) = sim_core(GIB, "max_split_size_mb:64");
    let (s, _) = stream(1);
    let (other, _) = stream(2);
    let big = cache.alloc(100 * MIB, &s).unwrap();
    big.record_stream(&other);
    let gate = other.close_gate();
    drop(big);
    cache.set_config(AllocConfig::default());
    // The next allocation on `s` picks up the new configuration; the block still waits for
    // `other`'s marker.
    let small = cache.alloc(4096, &s).unwrap();
    assert_eq!(
        oversize(&cache).0,
        Stat::new(1, 1, 1, 0),
        "the free is pending"
    );
    gate.open();
    // The next allocation on `s` frees the block whose marker completed.
    let small2 = cache.alloc(4096, &s).unwrap();
    assert_eq!(oversize(&cache).0, Stat::new(0, 1, 1, 1));
    drop((small, small2));
    cache.empty_cache();
    assert_eq!(oversize(&cache).1, Stat::new(0, 1, 1, 1));
    assert_all_returned(&cache);
}

/// A seeded random sequence on two streams of allocations (up to 160 MiB), frees,
/// `max_split_size` changes between unlimited, 40, 64 and 128 MiB, and `empty_cache`: after
/// each step `oversize_allocations` equals the live blocks that were at least
/// `max_split_size` when handed out, and `oversize_segments` the segments that were at least
/// `max_split_size` when obtained (both as the test tracks them); at the end, with
/// everything freed and released, both are 0 with as many decreases as increases.
#[test]
fn oversize_counts_match_what_was_counted_through_random_config_changes() {
    use std::collections::HashMap;

    use crate::allocator::Allocation;

    let (cache, _) = sim_core(8 * GIB, "");
    let streams = [stream(1).0, stream(2).0];
    let limits = [u64::MAX, 40 * MIB, 64 * MIB, 128 * MIB];
    let mut limit = u64::MAX;
    let mut live: Vec<(Allocation<SimBackend>, bool)> = Vec::new();
    // Segment address -> counted as oversize when obtained.
    let mut segments: HashMap<u64, bool> = HashMap::new();
    let mut rnd = lcg(0x9e37_79b9);
    for step in 0..3000 {
        let r = rnd() % 100;
        if r < 45 || live.is_empty() {
            let size = match rnd() % 3 {
                0 => 1 + rnd() % (1 << 20),
                1 => 1 + rnd() % (32 << 20),
                _ => (32 << 20) + rnd() % (128 << 20),
            };
            let s = &streams[(rnd() % 2) as usize];
            let a = cache.alloc(size, s).unwrap();
            let counted = a.allocated_size() >= limit;
            live.push((a, counted));
        } else if r < 90 {
            let i = (rnd() as usize) % live.len();
            live.swap_remove(i);
        } else if r < 97 {
            limit = limits[(rnd() % 4) as usize];
            let text = if limit == u64::MAX {
                String::new()
            } else {
                format!("max_split_size_mb:{}", limit / MIB)
            };
            cache.set_config(config(&text));
        } else {
            cache.empty_cache();
        }
        // Segments appear only in allocations, under the limit then in effect.
        let snap = cache.snapshot();
        segments.retain(|address, _| snap.iter().any(|s| s.address == *address));
        for s in &snap {
            segments.entry(s.address).or_insert(s.size >= limit);
        }
        let (allocations, segs) = oversize(&cache);
        let expected = live.iter().filter(|(_, counted)| *counted).count();
        assert_eq!(
            allocations.current,
            i64::try_from(expected).unwrap(),
            "step {step}: oversize allocations"
        );
        let expected = segments.values().filter(|&&counted| counted).count();
        assert_eq!(
            segs.current,
            i64::try_from(expected).unwrap(),
            "step {step}: oversize segments"
        );
    }
    live.clear();
    cache.empty_cache();
    let (allocations, segs) = oversize(&cache);
    assert!(
        allocations.allocated > 0 && segs.allocated > 0,
        "the sequence counted some"
    );
    assert_eq!(
        (allocations.current, allocations.freed),
        (0, allocations.allocated)
    );
    assert_eq!((segs.current, segs.freed), (0, segs.allocated));
    assert_all_returned(&cache);
}

/// After `split_segments:False` at run time, a free block of a segment split before is not
/// handed out, but a cached whole segment that serves the request is, also when the split
/// block is the closer fit: the request takes the idle 12 MiB segment, no segment is
/// released for it and none is made (before, the search stopped at the 11.5 MiB split block,
/// and `before_grow` released the 12 MiB segment to make a new 11 MiB one).
#[test]
fn a_cached_whole_segment_serves_a_request_past_a_closer_split_block_once_splitting_is_off() {
    let (cache, _) = sim_core(GIB, "");
    let (s, _) = stream(1);
    // 8.5 MiB: a 20 MiB segment, split; its 11.5 MiB rest stays free.
    let a = cache.alloc(8 * MIB + 512 * 1024, &s).unwrap();
    // 12 MiB: a segment of its own, then idle.
    let d = cache.alloc(12 * MIB, &s).unwrap();
    let whole = d.address();
    drop(d);
    cache.set_config(config("split_segments:False"));
    let before = cache.memory_stats();
    let r = cache.alloc(11 * MIB, &s).unwrap();
    let after = cache.memory_stats();
    assert_eq!(
        (r.address(), r.allocated_size()),
        (whole, 12 * MIB),
        "the idle whole segment"
    );
    assert_eq!(
        (after.num_device_alloc, after.num_device_free),
        (before.num_device_alloc, before.num_device_free),
        "no segment made or released"
    );
    assert_eq!(after.reserved_bytes.all.current, (20 + 12) * MIB as i64);
    drop((a, r));
    cache.empty_cache();
    assert_all_returned(&cache);
}
