//! Exact-value tests of PyTorch's allocator rules (reference §4.3–§4.7): rounding, pool and
//! segment sizes, split decisions, oversize rules, coalescing.

mod common;

use std::sync::Arc;

use common::{
    allocate_mib, cache_three_idle_segments, segment_sizes_mib, sim_core, stream, GIB, MIB,
};
use xpu_alloc::size::{self, format_size, round_size, roundup_interval, segment_size, PoolKind};
use xpu_alloc::{AllocConfig, BlockState, DeviceCore, SimulatedSource, StreamRef};

/// Allocates `size` bytes on `s` and frees the block at once; returns its address (the block
/// stays cached).
fn cached_block_address(core: &DeviceCore, size: u64, s: &StreamRef) -> u64 {
    core.allocate(size, s).unwrap().address()
}

/// A simulated 1 GiB allocator with `config`, stream 0, and the address of a block of `size`
/// bytes allocated on it and freed ([`cached_block_address`]).
fn with_cached_block(
    config: &str,
    size: u64,
) -> (DeviceCore, Arc<SimulatedSource>, StreamRef, u64) {
    let (core, source) = sim_core(GIB, config);
    let (_, s) = stream(0);
    let addr = cached_block_address(&core, size, &s);
    (core, source, s, addr)
}

/// A simulated 1 GiB allocator with `config` whose cache holds the three idle segments of
/// [`cache_three_idle_segments`], allocated on `s`.
fn with_three_idle_segments(config: &str, s: &StreamRef) -> (DeviceCore, Arc<SimulatedSource>) {
    let (core, source) = sim_core(GIB, config);
    cache_three_idle_segments(&core, s);
    (core, source)
}

fn divisions(interval_div: &[(usize, u64)]) -> AllocConfig {
    let mut c = AllocConfig::default();
    for &(i, d) in interval_div {
        c.roundup_power2_divisions[i] = d;
    }
    c
}

#[test]
fn rounding_vectors() {
    let plain = AllocConfig::default();
    assert_eq!(round_size(1, &plain), 512);
    assert_eq!(round_size(512, &plain), 512);
    assert_eq!(round_size(513, &plain), 1024);
    assert_eq!(round_size(9_000, &plain), 9_216);
    assert_eq!(round_size(1_200_000, &divisions(&[(0, 8)])), 1_310_720);
    assert_eq!(round_size(5_000_000, &divisions(&[(2, 4)])), 5_242_880);
    assert_eq!(round_size(9_000, &divisions(&[(0, 4)])), 10_240);
    assert_eq!(round_size(9_000, &divisions(&[(0, 1)])), 9_216);
    assert_eq!(round_size(4_194_304, &divisions(&[(2, 4)])), 4_194_304);
    // div > 1 but size <= 512 * div: plain 512 rounding.
    assert_eq!(round_size(2_000, &divisions(&[(0, 4)])), 2_048);
    assert_eq!(round_size(1_900, &divisions(&[(0, 4)])), 2_048);
}

#[test]
fn roundup_intervals() {
    assert_eq!(roundup_interval(1), 0);
    assert_eq!(roundup_interval(MIB - 1), 0);
    assert_eq!(roundup_interval(2 * MIB - 1), 0);
    assert_eq!(roundup_interval(2 * MIB), 1);
    assert_eq!(roundup_interval(64 * MIB), 6);
    assert_eq!(roundup_interval(32 * GIB), 15);
    assert_eq!(roundup_interval(1 << 50), 15);
}

#[test]
fn pool_and_segment_sizes() {
    let c = AllocConfig::default();
    assert_eq!(PoolKind::for_size(MIB), PoolKind::Small);
    assert_eq!(PoolKind::for_size(MIB + 512), PoolKind::Large);
    assert_eq!(segment_size(512, &c), 2 * MIB);
    assert_eq!(segment_size(MIB, &c), 2 * MIB);
    assert_eq!(segment_size(MIB + 512, &c), 20 * MIB);
    assert_eq!(segment_size(10 * MIB - 512, &c), 20 * MIB);
    assert_eq!(segment_size(10 * MIB, &c), 10 * MIB);
    assert_eq!(segment_size(12 * MIB + 512, &c), 14 * MIB);
    let c32 = AllocConfig::parse("large_segment_size_mb:32").unwrap();
    assert_eq!(segment_size(5 * MIB, &c32), 32 * MIB);
}

#[test]
fn split_predicate() {
    let c = AllocConfig::default();
    assert!(size::should_split(PoolKind::Small, 1024, 512, &c));
    assert!(!size::should_split(PoolKind::Small, 512, 512, &c));
    assert!(
        !size::should_split(PoolKind::Large, 20 * MIB, 19 * MIB, &c),
        "remainder of exactly 1 MiB"
    );
    assert!(size::should_split(
        PoolKind::Large,
        20 * MIB,
        19 * MIB - 512,
        &c
    ));
    let capped = AllocConfig::parse("max_split_size_mb:20").unwrap();
    assert!(
        !size::should_split(PoolKind::Large, 60 * MIB, 30 * MIB, &capped),
        "request >= max_split_size"
    );
}

/// (segment size, (block size, state) of its blocks), by address.
type Layout = Vec<(u64, Vec<(u64, BlockState)>)>;

/// The layout of every segment.
fn layout(core: &DeviceCore) -> Layout {
    core.snapshot()
        .into_iter()
        .map(|s| (s.size, s.blocks.iter().map(|b| (b.size, b.state)).collect()))
        .collect()
}

#[test]
fn split_vectors_on_a_fresh_allocator() {
    use BlockState::{Allocated as A, Inactive as I};
    let cases: [(u64, Layout); 5] = [
        (1, vec![(2 * MIB, vec![(512, A), (2 * MIB - 512, I)])]),
        (MIB, vec![(2 * MIB, vec![(MIB, A), (MIB, I)])]),
        (
            MIB + 1,
            vec![(20 * MIB, vec![(MIB + 512, A), (19 * MIB - 512, I)])],
        ),
        (10 * MIB, vec![(10 * MIB, vec![(10 * MIB, A)])]),
        (
            12 * MIB + 1,
            vec![(14 * MIB, vec![(12 * MIB + 512, A), (2 * MIB - 512, I)])],
        ),
    ];
    for (request, want) in cases {
        let (core, _) = sim_core(GIB, "");
        let (_, s) = stream(0);
        let p = core.allocate(request, &s).unwrap();
        assert_eq!(layout(&core), want, "request {request}");
        assert_eq!(p.size(), request);
    }
}

#[test]
fn unsplit_block_is_handed_out_whole() {
    let (core, _, s, addr) = with_cached_block("", 5 * MIB);
    let p = core.allocate(19 * MIB, &s).unwrap();
    assert_eq!(p.address(), addr);
    assert_eq!(p.allocated_size(), 20 * MIB);
    let st = core.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 20 * MIB as i64);
    assert_eq!(st.requested_bytes.all.current, 19 * MIB as i64);
    drop(p);
    // A remainder of 1 MiB + 512 bytes is split off.
    let p = core.allocate(19 * MIB - 512, &s).unwrap();
    assert_eq!(p.allocated_size(), 19 * MIB - 512);
}

#[test]
fn oversize_rules() {
    let config = "max_split_size_mb:20,release_policy:on_oom";
    let (core, source, s, big_addr) = with_cached_block(config, 40 * MIB);
    // Below max_split_size: never served by an oversize block.
    let small = core.allocate(5 * MIB, &s).unwrap();
    assert_ne!(small.address(), big_addr);
    assert_eq!(source.counters().live_segments, 2);
    // Oversize request within max_non_split_rounding: takes the block, unsplit.
    let p = core.allocate(30 * MIB, &s).unwrap();
    assert_eq!(p.address(), big_addr);
    assert_eq!(p.allocated_size(), 40 * MIB);
    assert_eq!(core.memory_stats().oversize_allocations.current, 1);
    // Segments of at least max_split_size: the 40 MiB one and the 20 MiB one.
    assert_eq!(core.memory_stats().oversize_segments.current, 2);
    drop(p);
    // 20 MiB + 20 MiB <= 40 MiB: the cached block is too large for an oversize request of
    // 20 MiB.
    let q = core.allocate(20 * MIB, &s).unwrap();
    assert_ne!(q.address(), big_addr);
    assert_eq!(source.counters().live_segments, 3);
    // With a larger max_non_split_rounding the same request takes it.
    core.set_config(
        AllocConfig::parse(
            "max_split_size_mb:20,max_non_split_rounding_mb:40,release_policy:on_oom",
        )
        .unwrap(),
    );
    let r = core.allocate(20 * MIB, &s).unwrap();
    assert_eq!((r.address(), r.allocated_size()), (big_addr, 40 * MIB));
    drop(q);
}

/// (inactive split blocks, their bytes) now.
fn inactive_splits(core: &DeviceCore) -> (i64, i64) {
    let st = core.memory_stats();
    (
        st.inactive_split.all.current,
        st.inactive_split_bytes.all.current,
    )
}

#[test]
fn coalescing_within_a_segment() {
    let (core, _) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let a = core.allocate(1000, &s).unwrap();
    let b = core.allocate(1000, &s).unwrap();
    let c = core.allocate(1000, &s).unwrap();
    assert_eq!(b.address(), a.address() + 1024);
    drop(b);
    assert_eq!(inactive_splits(&core), (2, 1024 + (2 * MIB as i64 - 3072)));
    drop(a);
    assert_eq!(inactive_splits(&core), (2, 2048 + (2 * MIB as i64 - 3072)));
    drop(c);
    assert_eq!(inactive_splits(&core), (0, 0));
    assert_eq!(
        layout(&core),
        vec![(2 * MIB, vec![(2 * MIB, BlockState::Inactive)])]
    );
}

#[test]
fn blocks_stay_with_their_stream() {
    let (core, _) = sim_core(GIB, "");
    let (_, s0) = stream(0);
    let (_, s1) = stream(1);
    let addr = cached_block_address(&core, 4096, &s0);
    let b = core.allocate(4096, &s1).unwrap();
    assert_ne!(
        b.address(),
        addr,
        "a cached block of another stream is not reused while memory is available"
    );
    let c = core.allocate(4096, &s0).unwrap();
    assert_eq!(c.address(), addr);
}

#[test]
fn format_size_vectors() {
    assert_eq!(format_size(0), "0 bytes");
    assert_eq!(format_size(1024), "1024 bytes");
    assert_eq!(format_size(1025), "1.00 KiB");
    assert_eq!(format_size(MIB), "1024.00 KiB");
    assert_eq!(format_size(MIB + 1), "1.00 MiB");
    assert_eq!(format_size(GIB), "1024.00 MiB");
    assert_eq!(format_size(3 * GIB / 2), "1.50 GiB");
}

#[test]
fn before_grow_consolidates_idle_segments_instead_of_growing() {
    let (_, s) = stream(0);
    let (core, source) = with_three_idle_segments("", &s);
    // 42 MiB cached in three idle segments; a 30 MiB request would raise the high-water mark.
    let p = core.allocate(30 * MIB, &s).unwrap();
    assert_eq!(
        layout(&core),
        vec![(
            42 * MIB,
            vec![
                (30 * MIB, BlockState::Allocated),
                (12 * MIB, BlockState::Inactive)
            ]
        )]
    );
    assert_eq!(core.max_memory_reserved(), 42 * MIB);
    let st = core.memory_stats();
    assert_eq!((st.num_device_alloc, st.num_device_free), (4, 3));
    assert_eq!(source.counters().used, 42 * MIB);
    drop(p);
    // PyTorch's policy grows instead.
    let (core, _) = with_three_idle_segments("release_policy:on_oom", &s);
    let _p = core.allocate(30 * MIB, &s).unwrap();
    assert_eq!(core.max_memory_reserved(), 72 * MIB);
}

#[test]
fn before_grow_small_segments_grow_with_use() {
    let (core, _) = sim_core(GIB, "");
    let (_, s) = stream(0);
    // Fill 2 MiB small segments with 1 MiB blocks: segments stay 2 MiB up to 32 MiB of small
    // pool (an eighth of it), then 4 MiB (the largest).
    let live: Vec<_> = (0..40).map(|_| core.allocate(MIB, &s).unwrap()).collect();
    let sizes = segment_sizes_mib(&core);
    let mut want = vec![2; 16];
    want.extend([4, 4]);
    assert_eq!(sizes, want);
    drop(live);
    let (core, _) = sim_core(GIB, "release_policy:on_oom");
    let _live: Vec<_> = (0..40).map(|_| core.allocate(MIB, &s).unwrap()).collect();
    assert!(core.snapshot().iter().all(|s| s.size == 2 * MIB));
}

/// `regrow_peak_fraction`: a regrowth that would raise the reserved high-water mark gets at
/// most the room below the mark, its own segment and that share of the mark.
#[test]
fn before_grow_regrowth_raises_the_peak_by_at_most_its_share() {
    let (_, s) = stream(0);
    // Idle 12, 14 and 16 MiB segments (a 42 MiB high-water mark); 30 and 12 MiB take one
    // consolidated 42 MiB segment.
    // (0.25 is the default: the empty configuration behaves the same.)
    let (core, _) = with_three_idle_segments("", &s);
    let _live = allocate_mib(&core, &s, &[30, 12]);
    assert_eq!(segment_sizes_mib(&core), vec![42]);
    // 14 MiB: a regrowth of the released 42 MiB would raise the mark from 42 to 84 MiB; it
    // gets 14 + 42 / 4 = 24.5, rounded down to 24 MiB.
    let _c = allocate_mib(&core, &s, &[14]);
    assert_eq!(segment_sizes_mib(&core), vec![42, 24]);
    // 16 MiB: the 24 MiB were taken from the largest released sizes (12 and 6 MiB are left
    // to regrow), so none reaches it: its own segment.
    let _d = allocate_mib(&core, &s, &[16]);
    assert_eq!(segment_sizes_mib(&core), vec![42, 24, 16]);
    assert_eq!(core.memory_stats().reserved_bytes.all.peak, 82 * MIB as i64);
    // Without the share one 42 MiB regrowth serves 14 and 16 MiB: a peak of 84 MiB in one
    // segment less (on traces whose shapes grow, that bet raised the peak by half at once:
    // xpu-replay's relocation tests).
    let (core, _) = with_three_idle_segments("regrow_peak_fraction:0", &s);
    let _live = allocate_mib(&core, &s, &[30, 12, 14, 16]);
    assert_eq!(core.memory_stats().reserved_bytes.all.peak, 84 * MIB as i64);
    assert_eq!(segment_sizes_mib(&core), vec![42, 42]);
}

#[test]
fn before_grow_regrows_consolidated_segments_as_one() {
    let (_, s) = stream(0);
    // Without the share of the high-water mark (`regrow_peak_fraction:0`; the default's share
    // is the test above).
    let (core, _) = with_three_idle_segments("regrow_peak_fraction:0", &s);
    // Consolidation: one 42 MiB segment replaces the three idle ones.
    let a = core.allocate(30 * MIB, &s).unwrap();
    let b = core.allocate(12 * MIB, &s).unwrap();
    // The 14 and 16 MiB requests come back: one segment of the released 42 MiB serves
    // both (a single driver call instead of two).
    let c = core.allocate(14 * MIB, &s).unwrap();
    let d = core.allocate(16 * MIB, &s).unwrap();
    let sizes = segment_sizes_mib(&core);
    assert_eq!(sizes, vec![42, 42]);
    let st = core.memory_stats();
    assert_eq!((st.num_device_alloc, st.num_device_free), (5, 3));
    drop((a, b, c, d));
    // regrow_factor:1 regrows one request's segment at a time.
    let (core, _) = with_three_idle_segments("regrow_factor:1,regrow_peak_fraction:0", &s);
    let _live = allocate_mib(&core, &s, &[30, 12, 14, 16]);
    let sizes = segment_sizes_mib(&core);
    assert_eq!(sizes, vec![42, 14, 16]);
}
