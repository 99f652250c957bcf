//! Unsplit segments (`split_segments:False`): every
//! block is a whole segment, passed to kernels and copies as its segment's own buffer, so no
//! sub-buffer is ever made. Simulated allocators for the rules; the device tests run on a real
//! OpenCL device (PoCL in CI), skipped without one unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::Arc;

use common::{sim_core, stream, MIB};
use xpu_alloc::size::{oversize_allows, segment_size, should_split, PoolKind};
use xpu_alloc::{
    sub_buffers_safe_on, AllocConfig, AllocError, BlockArgError, DeviceAllocator, DeviceCore,
    HostCopy, SimulatedSource,
};
use xpu_testing::devices;

#[test]
fn sub_buffers_are_unsafe_on_nvidia_opencl_only_and_every_device_splits_segments() {
    assert!(!sub_buffers_safe_on("NVIDIA CUDA"));
    assert!(sub_buffers_safe_on("Portable Computing Language"));
    assert!(sub_buffers_safe_on("Intel(R) OpenCL Graphics"));
    assert!(sub_buffers_safe_on("AMD Accelerated Parallel Processing"));
    if devices(1) {
        assert!(xpu_alloc::device_splits_segments(0).unwrap());
    }
}

#[test]
fn the_key_parses_and_unset_means_the_source_decides() {
    assert_eq!(AllocConfig::default().split_segments, None);
    assert!(AllocConfig::default().splits_segments());
    let off = AllocConfig::parse("split_segments:False").unwrap();
    assert_eq!(off.split_segments, Some(false));
    assert!(!off.splits_segments());
    let on = AllocConfig::parse("split_segments:True").unwrap();
    assert_eq!(on.split_segments, Some(true));
    assert!(AllocConfig::parse("split_segments:false").is_err());
    assert!(AllocConfig::KEYS.contains(&"split_segments"));
}

#[test]
fn unsplit_rules_segment_is_the_request_and_a_block_serves_at_most_double() {
    let off = AllocConfig::parse("split_segments:False").unwrap();
    let on = AllocConfig::default();
    // The segment is exactly the rounded request.
    assert_eq!(segment_size(512, &off), 512);
    assert_eq!(segment_size(512, &on), 2 * MIB);
    assert_eq!(segment_size(3 * MIB, &off), 3 * MIB);
    assert_eq!(segment_size(3 * MIB, &on), 20 * MIB);
    // Never split, in either pool.
    assert!(!should_split(PoolKind::Small, 2 * MIB, 512, &off));
    assert!(should_split(PoolKind::Small, 2 * MIB, 512, &on));
    assert!(!should_split(PoolKind::Large, 20 * MIB, 3 * MIB, &off));
    // A block serves a request when it exceeds it by less than the request itself...
    assert!(oversize_allows(2560, 4096, &off));
    assert!(!oversize_allows(2048, 4096, &off));
    assert!(oversize_allows(2048, 4096, &on));
    // ... and by less than max_non_split_rounding (20 MiB).
    assert!(oversize_allows(100 * MIB, 119 * MIB, &off));
    assert!(!oversize_allows(100 * MIB, 120 * MIB, &off));
}

#[test]
fn unsplit_allocator_gives_each_block_its_own_segment_and_reuses_within_double() {
    let (core, source) = sim_core(1 << 30, "split_segments:False");
    let (_, s) = stream(0);
    let a = core.allocate(1000, &s).unwrap();
    let b = core.allocate(3000, &s).unwrap();
    let sizes = |core: &DeviceCore| {
        let mut v: Vec<u64> = core.snapshot().iter().map(|seg| seg.size).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(sizes(&core), [1024, 3072]);
    assert_eq!(a.allocated_size(), 1024);
    assert_eq!(b.allocated_size(), 3072);
    drop((a, b));
    // 2000 B (2048 rounded) takes the cached 3072 B block whole; 600 B the 1024 B one.
    let c = core.allocate(2000, &s).unwrap();
    let d = core.allocate(600, &s).unwrap();
    assert_eq!((c.allocated_size(), d.allocated_size()), (3072, 1024));
    assert_eq!(source.counters().live_segments, 2);
    // 512 B would leave half of any cached block unused: a new 512 B segment, which would
    // raise reserved past its peak (4096 B), so the idle 1024 B segment is released first.
    drop(d);
    let e = core.allocate(512, &s).unwrap();
    assert_eq!(e.allocated_size(), 512);
    assert_eq!(sizes(&core), [512, 3072]);
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 3072 + 512);
    assert_eq!(stats.inactive_split_bytes.all.current, 0);
    drop((c, e));
    core.empty_cache();
    assert_eq!(source.counters().live_segments, 0);
}

#[test]
fn a_source_that_cannot_split_decides_unless_the_configuration_says() {
    // As a `BufferSource` on NVIDIA's OpenCL.
    let sim = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30).without_splitting());
    let core = DeviceCore::new(Box::new(sim.clone()), AllocConfig::default());
    assert_eq!(core.caching().config().split_segments, Some(false));
    let (_, s) = stream(0);
    let a = core.allocate(1000, &s).unwrap();
    assert_eq!(a.allocated_size(), 1024);
    assert_eq!(sim.counters().used, 1024);
    // A configuration set later that leaves the key out keeps the source's choice...
    core.set_config(AllocConfig::parse("garbage_collection_threshold:0.5").unwrap());
    assert_eq!(core.caching().config().split_segments, Some(false));
    // ... and one that gives it wins.
    core.set_config(AllocConfig::parse("split_segments:True").unwrap());
    assert_eq!(core.caching().config().split_segments, Some(true));
    let b = core.allocate(1000, &s).unwrap();
    assert_eq!(b.allocated_size(), 1024);
    assert_eq!(sim.counters().used, 1024 + 2 * MIB);
}

/// Allocates blocks of `sizes` bytes with `config` on device 0 and asks each for its kernel
/// `cl_mem`; returns how many sub-buffers that made and each block's (`cl_mem` size,
/// allocated size).
fn sub_buffers_made(config: &str, sizes: &[u64]) -> (usize, Vec<(usize, u64)>) {
    let stream = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let alloc = DeviceAllocator::new(0, AllocConfig::parse(config).unwrap()).unwrap();
    let blocks: Vec<_> = sizes
        .iter()
        .map(|&n| alloc.allocate(n, &stream).unwrap())
        .collect();
    let before = xpu_device::live_objects().sub_buffers;
    let mems: Vec<_> = blocks
        .iter()
        .map(|b| (b.block_cl_mem().unwrap(), b.allocated_size()))
        .collect();
    let made = xpu_device::live_objects().sub_buffers - before;
    let distinct: std::collections::HashSet<usize> =
        mems.iter().map(|((m, _), _)| *m as usize).collect();
    assert_eq!(
        distinct.len(),
        sizes.len(),
        "each block has a cl_mem of its own"
    );
    (made, mems.into_iter().map(|((_, n), a)| (n, a)).collect())
}

#[test]
fn an_unsplit_block_passes_its_segment_buffer_and_makes_no_sub_buffer() {
    if !devices(1) {
        return;
    }
    let sizes = [1000, 4096, 3 * MIB];
    let (made, mems) = sub_buffers_made("split_segments:False", &sizes);
    assert_eq!(made, 0);
    assert_eq!(mems, [(1024, 1024), (4096, 4096), (3 << 20, 3 << 20)]);
    let platform = xpu_device::device(0)
        .unwrap()
        .properties()
        .platform_name
        .clone();
    if sub_buffers_safe_on(&platform) {
        // Split segments make one sub-buffer per block.
        let (made, mems) = sub_buffers_made("split_segments:True", &sizes);
        assert_eq!(made, 3);
        assert_eq!(mems, [(1000, 1024), (4096, 4096), (3 << 20, 3 << 20)]);
    } else {
        // NVIDIA's: a block inside a split segment has no cl_mem of its own to give.
        let stream = xpu_stream::get_stream_from_pool(0, 0).unwrap();
        let alloc =
            DeviceAllocator::new(0, AllocConfig::parse("split_segments:True").unwrap()).unwrap();
        let b = alloc.allocate(1000, &stream).unwrap();
        let e = b.block_cl_mem().unwrap_err();
        assert!(
            matches!(e, BlockArgError::Alloc(AllocError::Unsupported(_))),
            "{e:?}"
        );
    }
}

#[test]
fn unsplit_blocks_carry_their_own_bytes_through_copies() {
    if !devices(1) {
        return;
    }
    let stream = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let alloc =
        DeviceAllocator::new(0, AllocConfig::parse("split_segments:False").unwrap()).unwrap();
    let blocks: Vec<_> = (0..4u8)
        .map(|i| {
            let b = alloc.allocate(4096, &stream).unwrap();
            let mut src = xpu_alloc::host_allocate_on(0, 4096).unwrap();
            src.fill(i + 1);
            stream.copy_from_host(&src, &b).unwrap();
            b
        })
        .collect();
    for (i, b) in blocks.iter().enumerate() {
        let mut back = xpu_alloc::host_allocate_on(0, 4096).unwrap();
        stream.copy_to_host(b, &mut back).unwrap();
        stream.synchronize().unwrap();
        assert!(back.iter().all(|&x| x == i as u8 + 1), "block {i}");
    }
    assert_eq!(alloc.core().snapshot().len(), 4);
}

#[test]
fn unsplit_growth_past_the_high_water_mark_first_releases_idle_segments() {
    let (_, s) = stream(0);
    // 3 MiB cached idle, then 8 MiB, which the 3 MiB block cannot serve.
    let run = |config: &str| {
        let (core, source) = sim_core(1 << 30, config);
        drop(core.allocate(3 * MIB, &s).unwrap());
        let big = core.allocate(8 * MIB, &s).unwrap();
        let st = core.memory_stats();
        let out = (
            core.memory_reserved(),
            source.counters().live_segments,
            st.num_device_free,
        );
        drop(big);
        out
    };
    // before_grow (the default): the idle 3 MiB is released before reserved passes its peak.
    assert_eq!(run("split_segments:False"), (8 * MIB, 1, 1));
    // PyTorch's on_oom keeps it cached.
    assert_eq!(
        run("split_segments:False,release_policy:on_oom"),
        (11 * MIB, 2, 0)
    );
}

#[test]
fn unsplit_growth_below_the_high_water_mark_keeps_idle_segments_cached() {
    let (core, source) = sim_core(1 << 30, "split_segments:False");
    let (_, s) = stream(0);
    drop(core.allocate(11 * MIB, &s).unwrap());
    core.empty_cache();
    // Reserved 0, its peak 11 MiB: 3 MiB cached, then 1 MiB (which 3 MiB cannot serve) stays
    // below the peak, so nothing is released.
    drop(core.allocate(3 * MIB, &s).unwrap());
    let one = core.allocate(MIB, &s).unwrap();
    assert_eq!(core.memory_reserved(), 4 * MIB);
    assert_eq!(source.counters().live_segments, 2);
    drop(one);
}

#[test]
fn an_unsplit_size_released_and_needed_again_grows_instead_of_releasing_again() {
    let (core, source) = sim_core(1 << 30, "split_segments:False");
    let (_, s) = stream(0);
    // A step of 3 MiB then 8 MiB: the idle 3 MiB is released to make room for the 8 MiB.
    drop(core.allocate(3 * MIB, &s).unwrap());
    drop(core.allocate(8 * MIB, &s).unwrap());
    assert_eq!(core.memory_reserved(), 8 * MIB);
    // The next step needs 3 MiB again: reserved grows past its peak (11 MiB) instead of
    // releasing the idle 8 MiB, which the step needs next...
    drop(core.allocate(3 * MIB, &s).unwrap());
    assert_eq!(core.memory_reserved(), 11 * MIB);
    // ... so from then on the step makes and releases no segment.
    let made = source.counters().attempts;
    for _ in 0..3 {
        drop(core.allocate(3 * MIB, &s).unwrap());
        drop(core.allocate(8 * MIB, &s).unwrap());
    }
    assert_eq!(source.counters().attempts, made);
    assert_eq!(core.memory_stats().num_device_free, 1);
}

#[test]
fn after_turning_splitting_off_a_cached_split_block_is_not_handed_out() {
    let (core, _source) = sim_core(1 << 30, "split_segments:True");
    let (_, s) = stream(0);
    // Two blocks of one split 2 MiB segment; the first, freed, stays a split block (its
    // neighbour is live).
    let a = core.allocate(1000, &s).unwrap();
    let b = core.allocate(1000, &s).unwrap();
    let a_addr = a.address();
    drop(a);
    core.set_config(AllocConfig::parse("split_segments:False").unwrap());
    let c = core.allocate(1000, &s).unwrap();
    // (address, size, blocks) of the segment holding `addr`.
    let holding = |addr: u64| {
        core.snapshot()
            .into_iter()
            .find(|seg| seg.address <= addr && addr < seg.address + seg.size)
            .map(|seg| (seg.address, seg.size, seg.blocks.len()))
            .unwrap()
    };
    assert_eq!(
        holding(c.address()),
        (c.address(), 1024, 1),
        "the block is its whole segment (not the cached split block at {a_addr:#x})"
    );
    // The split segment is still there, its free block cached; once its last block is
    // freed it is one whole free block again.
    assert_eq!(holding(b.address()), (a_addr, 2 * MIB, 3));
    drop(b);
    assert_eq!(holding(a_addr), (a_addr, 2 * MIB, 1));
    let stats = core.memory_stats();
    assert_eq!(stats.inactive_split.all.current, 0);
    assert_eq!(stats.segment.all.current, 2);
    assert_eq!(stats.allocated_bytes.all.current, 1024);
}
