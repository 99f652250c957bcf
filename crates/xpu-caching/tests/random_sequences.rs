//! Random sequences of allocations, frees, `record_stream`, gates and `empty_cache` on three
//! streams, under several configurations, keep snapshots and statistics in step; odd user input is
//! a typed error.
//!
//! Review h66 probes (all pass on 466cacc): what was tried without a finding.
//!
//! - Random single-thread sequences (39 seeds x 400 steps per configuration: default,
//!   `relocation:off,release_policy:on_oom`, `relocation:merge_all,max_split_size_mb:20`,
//!   a 96 MiB device (OOM path, cross-stream reuse), fraction 0.5 with garbage collection,
//!   unsplit segments) of allocations on three streams, frees, `record_stream`, gates closed
//!   and opened, `empty_cache`, `reset_peak_stats`: after every step the snapshot agrees
//!   with the statistics (reserved, segments, allocated, allocations, active, active bytes,
//!   inactive split count and bytes; pools add up; current = allocated - freed), no block is
//!   handed out over a freed block whose recorded stream's gate is still closed, and at the
//!   end everything returns (reserved 0, no live segment, requested 0).
//! - Four threads freeing each other's blocks (debts) with thread caches, then
//!   `reset_peak_stats`: every peak equals its current; nothing left after empty_cache.
//! - Four threads on two shared streams under `relocation:merge_all`: observed places of
//!   live blocks never overlap; everything returns.
//! - PyTorch vectors: segment sizes and rounding, 19 MiB served whole from a cached 20 MiB
//!   block (allocated 20 MiB, requested 19 MiB), a fraction refusal (typed error with
//!   `fraction`, allowed 50 MiB, num_ooms 1, num_alloc_retries 1, one `oom` trace entry).
//! - Odd user input (huge sizes, other device's stream, fractions 0 / NaN / inf / tiny, a
//!   foreign allocation's record_stream, odd configuration strings then allocations): typed
//!   errors, no panic.

use std::sync::Arc;

use xpu_caching::sim_stream::{SimGate, SimStream};
use xpu_caching::{
    AllocConfig, Allocation, BlockState, CachingAllocator, MemoryStats, SimBackend,
    SimulatedSource, StreamKey,
};

const MIB: u64 = 1 << 20;

type Cache = CachingAllocator<SimBackend>;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Snapshot against statistics: every figure the snapshot can tell.
fn check(cache: &Cache, what: &str) -> MemoryStats {
    let stats = cache.memory_stats();
    let snap = cache.snapshot();
    let mut reserved = 0u64;
    let mut allocated = 0u64;
    let mut active = 0u64;
    let mut active_bytes = 0u64;
    let mut inactive_split = 0u64;
    let mut inactive_split_bytes = 0u64;
    let mut allocation = 0u64;
    for seg in &snap {
        let sum: u64 = seg.blocks.iter().map(|b| b.size).sum();
        assert_eq!(
            sum, seg.size,
            "{what}: block sizes of segment {:#x}",
            seg.address
        );
        reserved += seg.size;
        let split = seg.blocks.len() > 1;
        for b in &seg.blocks {
            match b.state {
                BlockState::Allocated => {
                    allocated += b.size;
                    allocation += 1;
                    active += 1;
                    active_bytes += b.size;
                }
                BlockState::PendingFree => {
                    active += 1;
                    active_bytes += b.size;
                }
                BlockState::Inactive => {
                    if split {
                        inactive_split += 1;
                        inactive_split_bytes += b.size;
                    }
                }
            }
        }
    }
    let got = (
        stats.reserved_bytes.all.current,
        stats.segment.all.current,
        stats.allocated_bytes.all.current,
        stats.allocation.all.current,
        stats.active.all.current,
        stats.active_bytes.all.current,
        stats.inactive_split.all.current,
        stats.inactive_split_bytes.all.current,
    );
    let want = (
        reserved as i64,
        snap.len() as i64,
        allocated as i64,
        allocation as i64,
        active as i64,
        active_bytes as i64,
        inactive_split as i64,
        inactive_split_bytes as i64,
    );
    assert_eq!(
        got, want,
        "{what}: stats (reserved, segments, allocated, allocations, active, active bytes, \
         inactive split, inactive split bytes) against the snapshot"
    );
    assert_eq!(
        cache.reserved_bytes() as i64,
        stats.reserved_bytes.all.current,
        "{what}"
    );
    for arr in [
        &stats.allocation,
        &stats.segment,
        &stats.active,
        &stats.inactive_split,
        &stats.allocated_bytes,
        &stats.reserved_bytes,
        &stats.active_bytes,
        &stats.inactive_split_bytes,
        &stats.requested_bytes,
    ] {
        assert_eq!(
            arr.all.current,
            arr.small_pool.current + arr.large_pool.current,
            "{what}"
        );
        assert!(
            arr.all.peak >= arr.all.current,
            "{what}: peak below current {arr:?}"
        );
        assert_eq!(
            arr.all.current,
            arr.all.allocated - arr.all.freed,
            "{what}: {arr:?}"
        );
    }
    stats
}

fn run_random(seed: u64, config: AllocConfig, steps: usize) {
    run_random_on(seed, config, steps, 512 * MIB, None);
}

#[allow(clippy::too_many_lines)]
fn run_random_on(
    seed: u64,
    config: AllocConfig,
    steps: usize,
    capacity: u64,
    fraction: Option<f64>,
) {
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let cache: Cache = CachingAllocator::new(Box::new(source.clone()), config);
    let streams: Vec<_> = (1..=3)
        .map(|i| SimStream::new(StreamKey::new(0, i)))
        .collect();
    if let Some(f) = fraction {
        cache.set_memory_fraction(f).unwrap();
    }
    let mut rng = Rng(seed | 1);
    let mut live: Vec<Allocation<SimBackend>> = Vec::new();
    // Recorded streams of each live allocation (index into `streams`).
    let mut recorded: Vec<Vec<usize>> = Vec::new();
    // The current closed gate of each stream, as the harness closed it.
    let mut gates: Vec<Option<Arc<SimGate>>> = vec![None, None, None];
    // Freed ranges whose recorded use's gate was closed at the free.
    let mut pending: Vec<(u64, u64, Arc<SimGate>)> = Vec::new();
    let sizes = [
        1,
        512,
        4000,
        MIB,
        MIB + 1,
        3 * MIB,
        9 * MIB,
        10 * MIB,
        12 * MIB + 1,
        21 * MIB,
        40 * MIB,
    ];
    for step in 0..steps {
        let what = format!("seed {seed} step {step}");
        match rng.below(12) {
            0..=4 => {
                let size = sizes[rng.below(sizes.len() as u64) as usize];
                let s = &streams[rng.below(3) as usize];
                match cache.allocate(size, s) {
                    Ok(Some(a)) => {
                        if rng.below(2) == 0 {
                            let addr = a.address();
                            let end = addr + a.allocated_size();
                            pending.retain(|(_, _, g)| !g.is_open());
                            for (pa, pe, _) in &pending {
                                assert!(
                                    end <= *pa || addr >= *pe,
                                    "{what}: [{addr:#x}, {end:#x}) handed out over a block \
                                     whose recorded use [{pa:#x}, {pe:#x}) is pending"
                                );
                            }
                        }
                        live.push(a);
                        recorded.push(Vec::new());
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = e;
                    }
                }
            }
            5..=7 => {
                if !live.is_empty() {
                    let i = rng.below(live.len() as u64) as usize;
                    let a = live.swap_remove(i);
                    let uses = recorded.swap_remove(i);
                    if !uses.is_empty() {
                        let addr = a.address();
                        for u in uses {
                            if let Some(g) = &gates[u] {
                                if !g.is_open() {
                                    pending.push((addr, addr + a.allocated_size(), g.clone()));
                                }
                            }
                        }
                    }
                    drop(a);
                }
            }
            8 => {
                if !live.is_empty() {
                    let i = rng.below(live.len() as u64) as usize;
                    let si = rng.below(3) as usize;
                    cache.record_stream(&live[i], &streams[si]).unwrap();
                    if live[i].stream() != streams[si].key() {
                        recorded[i].push(si);
                    }
                }
            }
            9 => {
                let si = rng.below(3) as usize;
                if rng.below(2) == 0 {
                    if gates[si].as_ref().is_none_or(|g| g.is_open()) {
                        gates[si] = Some(streams[si].close_gate());
                    }
                } else {
                    streams[si].open_gate();
                    gates[si] = None;
                }
            }
            10 => {
                if rng.below(4) == 0 {
                    cache.empty_cache();
                }
            }
            _ => {
                if rng.below(4) == 0 {
                    cache.reset_peak_stats();
                }
            }
        }
        check(&cache, &what);
    }
    drop(live);
    for s in &streams {
        s.open_gate();
    }
    cache.empty_cache();
    let stats = check(&cache, &format!("seed {seed} end"));
    assert_eq!(
        (
            stats.reserved_bytes.all.current,
            source.counters().live_segments
        ),
        (0, 0),
        "seed {seed}: reserved after everything freed and empty_cache"
    );
    assert_eq!(stats.requested_bytes.all.current, 0, "seed {seed}");
}

#[test]
fn random_sequences_keep_snapshot_and_statistics_in_step() {
    for seed in 1..40 {
        run_random(seed * 7919, AllocConfig::default(), 400);
    }
}

#[test]
fn random_sequences_relocation_off_on_oom() {
    for seed in 1..40 {
        run_random(
            seed * 104_729,
            AllocConfig::parse("relocation:off,release_policy:on_oom").unwrap(),
            400,
        );
    }
}

#[test]
fn random_sequences_max_split_and_merge_all() {
    for seed in 1..40 {
        run_random(
            seed * 15_485_863,
            AllocConfig::parse("relocation:merge_all,max_split_size_mb:20").unwrap(),
            400,
        );
    }
}

#[test]
fn random_sequences_small_device() {
    for seed in 1..40 {
        run_random_on(seed * 31, AllocConfig::default(), 400, 96 * MIB, None);
    }
}

#[test]
fn random_sequences_fraction_and_gc() {
    for seed in 1..40 {
        run_random_on(
            seed * 131,
            AllocConfig::parse("garbage_collection_threshold:0.5").unwrap(),
            400,
            256 * MIB,
            Some(0.5),
        );
    }
}

#[test]
fn random_sequences_unsplit() {
    for seed in 1..40 {
        run_random_on(
            seed * 577,
            AllocConfig::parse("split_segments:False").unwrap(),
            400,
            128 * MIB,
            None,
        );
    }
}

/// Every peak equals its current value right after `reset_peak_stats`.
fn peaks_at_current(stats: &MemoryStats, what: &str) {
    for (name, arr) in [
        ("allocation", &stats.allocation),
        ("segment", &stats.segment),
        ("active", &stats.active),
        ("inactive_split", &stats.inactive_split),
        ("allocated_bytes", &stats.allocated_bytes),
        ("reserved_bytes", &stats.reserved_bytes),
        ("active_bytes", &stats.active_bytes),
        ("inactive_split_bytes", &stats.inactive_split_bytes),
        ("requested_bytes", &stats.requested_bytes),
    ] {
        for s in [&arr.all, &arr.small_pool, &arr.large_pool] {
            assert_eq!(s.peak, s.current, "{what}: {name} {s:?}");
        }
    }
}

/// Blocks allocated on one thread and freed on another (debts), with thread caches, then
/// `reset_peak_stats`: peaks at the currents, the snapshot in step, nothing left.
#[test]
fn cross_thread_frees_then_reset_peak() {
    for round in 0..5u64 {
        let source = Arc::new(SimulatedSource::new(0, 1024 * MIB, 1024 * MIB));
        let cache: Arc<Cache> = Arc::new(CachingAllocator::new(
            Box::new(source.clone()),
            AllocConfig::default(),
        ));
        let (tx, rx) = std::sync::mpsc::channel::<Allocation<SimBackend>>();
        let rx = Arc::new(parking_lot::Mutex::new(rx));
        let mut handles = Vec::new();
        for t in 0..4u64 {
            let cache = cache.clone();
            let tx = tx.clone();
            let rx = rx.clone();
            handles.push(std::thread::spawn(move || {
                let s = SimStream::new(StreamKey::new(0, 1 + t % 2));
                let mut rng = Rng((round + 1) * 1_000_003 + t * 7 + 1);
                let mut mine = Vec::new();
                for _ in 0..2000 {
                    let size = [1000, 4096, MIB, 3 * MIB, 12 * MIB][rng.below(5) as usize];
                    if let Ok(Some(a)) = cache.allocate(size, &s) {
                        if rng.below(3) == 0 {
                            tx.send(a).unwrap();
                        } else {
                            mine.push(a);
                        }
                    }
                    if rng.below(2) == 0 && !mine.is_empty() {
                        let i = rng.below(mine.len() as u64) as usize;
                        drop(mine.swap_remove(i));
                    }
                    if rng.below(2) == 0 {
                        let got = rx.lock().try_recv();
                        drop(got);
                    }
                }
                mine
            }));
        }
        drop(tx);
        let kept: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let rest: Vec<_> = rx.lock().try_iter().collect();
        check(&cache, "threads joined");
        cache.reset_peak_stats();
        peaks_at_current(&cache.memory_stats(), "after reset_peak_stats");
        drop(rest);
        drop(kept);
        check(&cache, "all dropped");
        cache.empty_cache();
        let stats = check(&cache, "empty_cache");
        assert_eq!(stats.reserved_bytes.all.current, 0);
        assert_eq!(source.counters().live_segments, 0);
        cache.reset_peak_stats();
        peaks_at_current(&cache.memory_stats(), "end");
    }
}

/// PyTorch's vectors (reference §4.3, §4.6, §4.9, §4.12): segment sizes, the unsplit 19 MiB
/// from a cached 20 MiB block, and a fraction refusal's counters and history.
#[test]
fn pytorch_vectors_on_the_default_pool() {
    let conf = AllocConfig::parse("release_policy:on_oom,relocation:off").unwrap();
    let source = Arc::new(SimulatedSource::new(0, 100 * MIB, 100 * MIB));
    let cache: Cache = CachingAllocator::new(Box::new(source.clone()), conf);
    let s = SimStream::new(StreamKey::new(0, 1));
    for (req, seg, got) in [
        (1, 2 * MIB, 512),
        (MIB, 2 * MIB, MIB),
        (MIB + 1, 20 * MIB, MIB + 512),
        (10 * MIB, 10 * MIB, 10 * MIB),
        (12 * MIB + 1, 14 * MIB, 12 * MIB + 512),
    ] {
        let a = cache.allocate(req, &s).unwrap().unwrap();
        assert_eq!(a.allocated_size(), got, "{req}");
        let snap = cache.snapshot();
        let segment = snap
            .iter()
            .find(|g| g.address <= a.address() && a.address() < g.address + g.size)
            .unwrap();
        assert_eq!(segment.size, seg, "{req}");
        drop(a);
        cache.empty_cache();
    }
    // 19 MiB from a cached 20 MiB block: the whole block (remainder 1 MiB, not split).
    let a = cache.allocate(20 * MIB, &s).unwrap().unwrap();
    drop(a);
    let b = cache.allocate(19 * MIB, &s).unwrap().unwrap();
    assert_eq!(b.allocated_size(), 20 * MIB);
    let st = cache.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 20 * MIB as i64);
    assert_eq!(st.requested_bytes.all.current, 19 * MIB as i64);
    drop(b);
    cache.empty_cache();
    cache.reset_accumulated_stats();
    // Fraction 0.5 of 100 MiB: 40 MiB fits, a third 20 MiB segment is refused.
    cache.set_memory_fraction(0.5).unwrap();
    cache.memory_history().record_memory_history(true, 100);
    let x = cache.allocate(20 * MIB, &s).unwrap().unwrap();
    let y = cache.allocate(20 * MIB, &s).unwrap().unwrap();
    let z = cache.allocate(20 * MIB, &s);
    match z {
        Err(xpu_caching::CacheError::OutOfMemory { report, fraction }) => {
            assert!(fraction);
            assert_eq!(report.allowed, Some(50 * MIB));
            assert_eq!(report.segment_size, 20 * MIB);
        }
        other => panic!("{:?}", other.map(|a| a.map(|a| a.allocated_size()))),
    }
    let st = cache.memory_stats();
    assert_eq!((st.num_ooms, st.num_alloc_retries), (1, 1));
    let ooms: Vec<_> = cache
        .memory_history()
        .entries()
        .into_iter()
        .filter(|e| e.action == xpu_caching::TraceAction::Oom)
        .collect();
    assert_eq!(ooms.len(), 1);
    assert_eq!(ooms[0].size, 20 * MIB);
    drop((x, y));
    cache.empty_cache();
    assert_eq!(cache.memory_stats().reserved_bytes.all.current, 0);
}

/// User input that must give typed errors, never a panic: huge and odd sizes, fractions
/// outside (0, 1], a foreign allocation's `record_stream`, odd configuration strings.
#[test]
fn odd_user_input_gives_errors_not_panics() {
    let source = Arc::new(SimulatedSource::new(0, 64 * MIB, 64 * MIB));
    let cache: Cache = CachingAllocator::new(Box::new(source), AllocConfig::default());
    let other: Cache = CachingAllocator::new(
        Box::new(SimulatedSource::new(0, 64 * MIB, 64 * MIB)),
        AllocConfig::default(),
    );
    let s = SimStream::new(StreamKey::new(0, 1));
    for size in [u64::MAX, u64::MAX - 511, 1 << 60, 64 * MIB + 1, 65 * MIB] {
        assert!(cache.allocate(size, &s).is_err(), "{size}");
    }
    let wrong_device = SimStream::new(StreamKey::new(3, 1));
    assert!(cache.allocate(1, &wrong_device).is_err());
    for f in [
        0.0,
        -0.0,
        -1.0,
        1.5,
        f64::NAN,
        f64::INFINITY,
        f64::MIN_POSITIVE,
    ] {
        let r = cache.set_memory_fraction(f);
        assert_eq!(r.is_ok(), f > 0.0 && f <= 1.0, "{f}");
    }
    // The tiny fraction allows nothing: typed out of memory.
    assert!(matches!(
        cache.allocate(1, &s),
        Err(xpu_caching::CacheError::OutOfMemory { fraction: true, .. })
    ));
    cache.set_memory_fraction(1.0).unwrap();
    let a = other.allocate(1, &s).unwrap().unwrap();
    assert!(cache.record_stream(&a, &s).is_err());
    for text in [
        "max_split_size_mb:18446744073709551615",
        "large_segment_size_mb:18446744073709551615",
        "max_non_split_rounding_mb:99999999999999",
        "roundup_power2_divisions:[>:4]",
        "roundup_power2_divisions:[]",
        "roundup_power2_divisions:[1:0,>:0]",
        "roundup_power2_divisions:9223372036854775808",
        "roundup_power2_divisions:[9223372036854775808:2]",
        "garbage_collection_threshold:NaN",
        "garbage_collection_threshold:inf",
        "regrow_factor:18446744073709551615",
        "regrow_peak_fraction:NaN",
        "regrow_peak_fraction:1e308",
        ",,,:::[[[]]]",
        "max_split_size_mb",
        "max_split_size_mb:",
        "expandable_segments:True",
    ] {
        if let Ok(config) = AllocConfig::parse(text) {
            cache.set_config(config);
            for size in [1, MIB, 3 * MIB, 21 * MIB, 63 * MIB] {
                drop(cache.allocate(size, &s));
            }
            cache.empty_cache();
        }
    }
    cache.set_config(AllocConfig::parse("regrow_factor:18446744073709551615").unwrap());
    drop(a);
}

/// Four threads allocating and freeing on two shared streams under `relocation:merge_all`
/// with thread caches: the observed places of live blocks never overlap, and everything
/// comes back (5 rounds).
#[test]
fn threads_with_relocation_never_overlap_live_blocks() {
    for round in 0..5u64 {
        let source = Arc::new(SimulatedSource::new(0, 160 * MIB, 160 * MIB));
        let cache: Arc<Cache> = Arc::new(CachingAllocator::new(
            Box::new(source.clone()),
            AllocConfig::parse("relocation:merge_all").unwrap(),
        ));
        let live = Arc::new(parking_lot::Mutex::new(std::collections::BTreeMap::<
            u64,
            u64,
        >::new()));
        let streams: Vec<_> = (1..=2)
            .map(|i| SimStream::new(StreamKey::new(0, i)))
            .collect();
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (cache, live, s) = (
                    cache.clone(),
                    live.clone(),
                    streams[(t % 2) as usize].clone(),
                );
                std::thread::spawn(move || {
                    let mut rng = Rng((round + 3) * 7_368_787 + t * 13 + 1);
                    let mut mine: Vec<(Allocation<SimBackend>, Option<u64>)> = Vec::new();
                    for _ in 0..1500 {
                        let size =
                            [1000, 200_000, MIB + 1, 3 * MIB, 7 * MIB][rng.below(5) as usize];
                        if let Ok(Some(a)) = cache.allocate(size, &s) {
                            let addr = (rng.below(2) == 0).then(|| a.address());
                            if let Some(addr) = addr {
                                let end = addr + a.allocated_size();
                                let mut map = live.lock();
                                if let Some((&pa, &pe)) = map.range(..end).next_back() {
                                    assert!(
                                        pe <= addr,
                                        "[{addr:#x},{end:#x}) over [{pa:#x},{pe:#x})"
                                    );
                                }
                                map.insert(addr, end);
                            }
                            mine.push((a, addr));
                        }
                        if rng.below(2) == 0 && !mine.is_empty() {
                            let i = rng.below(mine.len() as u64) as usize;
                            let (a, addr) = mine.swap_remove(i);
                            if let Some(addr) = addr {
                                live.lock().remove(&addr);
                            }
                            drop(a);
                        }
                    }
                    for (a, addr) in mine {
                        if let Some(addr) = addr {
                            live.lock().remove(&addr);
                        }
                        drop(a);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        check(&cache, "threads done");
        cache.empty_cache();
        assert_eq!(check(&cache, "empty").reserved_bytes.all.current, 0);
        assert_eq!(source.counters().live_segments, 0);
    }
}
