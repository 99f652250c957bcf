//! 16 threads allocating and freeing concurrently, each on its own stream, some sharing a
//! stream, some freeing blocks allocated by others, with and without memory pressure.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Barrier};

use common::{assert_empty_cache_releases_everything, sim_core, stream, GIB, MIB};
use xpu_alloc::{AllocError, DataPtr, DeviceCore, SimulatedSource};

fn sizes(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Some(match x % 10 {
            0..=5 => 1 + x % 8192,
            6..=8 => 8192 + x % MIB,
            _ => MIB + x % (24 * MIB),
        })
    })
}

/// Configurations thread 0 switches between while the others allocate (`toggle` on):
/// splitting and the release policy toggled with blocks live and cached everywhere.
const TOGGLED: [&str; 4] = [
    "split_segments:False",
    "",
    "split_segments:False,release_policy:on_oom,max_split_size_mb:24",
    "release_policy:on_oom,garbage_collection_threshold:0.5",
];

/// The live blocks' address ranges: a block handed out twice (or overlapping a live one)
/// is an assertion failure at its hand-out.
#[derive(Default)]
struct LiveRanges(parking_lot::Mutex<std::collections::BTreeMap<u64, u64>>);

impl LiveRanges {
    fn add(&self, p: &DataPtr) {
        let (start, end) = (p.address(), p.address() + p.allocated_size());
        let mut live = self.0.lock();
        if let Some((&s, &e)) = live.range(..end).next_back() {
            assert!(
                e <= start,
                "live blocks overlap: {s:#x}..{e:#x} and {start:#x}..{end:#x}"
            );
        }
        live.insert(start, end);
    }
    fn remove(&self, p: &DataPtr) {
        self.0.lock().remove(&p.address());
    }
}

fn hammer(core: &DeviceCore, source: &Arc<SimulatedSource>, threads: u64, ops: usize) {
    hammer_toggling(core, source, threads, ops, false);
}

fn hammer_toggling(
    core: &DeviceCore,
    source: &Arc<SimulatedSource>,
    threads: u64,
    ops: usize,
    toggle: bool,
) {
    let ranges = Arc::new(LiveRanges::default());
    let (tx, rx) = mpsc::channel::<DataPtr>();
    let rx = Arc::new(parking_lot::Mutex::new(rx));
    // Every thread stops halfway while holding its live blocks, so all threads' memory is
    // live at once whatever the scheduler does (on 2 cores the threads could otherwise run one
    // after another and never meet memory pressure).
    let halfway = Arc::new(Barrier::new(threads as usize));
    std::thread::scope(|scope| {
        for t in 0..threads {
            let core = core.clone();
            let tx = tx.clone();
            let rx = rx.clone();
            let halfway = halfway.clone();
            let ranges = ranges.clone();
            scope.spawn(move || {
                let (_, other) = stream(13);
                // Threads 12..16 share stream 12; the others have their own.
                let (_, s) = stream(t.min(12));
                let mut live: Vec<DataPtr> = Vec::new();
                for (i, size) in sizes(t).take(ops).enumerate() {
                    if i == ops / 2 {
                        halfway.wait();
                    }
                    match core.allocate(size, &s) {
                        Ok(p) => {
                            assert!(p.allocated_size() >= size);
                            ranges.add(&p);
                            if toggle && i % 11 == 0 {
                                core.record_stream(&p, &other).unwrap();
                            }
                            live.push(p);
                        }
                        Err(AllocError::OutOfMemory(_) | AllocError::MemoryFractionExceeded(_)) => {
                        }
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                    if !live.is_empty() && (live.len() > 24 || i % 3 == 0) {
                        let victim = live.swap_remove(i % live.len());
                        ranges.remove(&victim);
                        if i % 5 == 0 {
                            tx.send(victim).unwrap(); // freed by another thread
                        }
                    }
                    if i % 7 == 0 {
                        while let Ok(p) = rx.lock().try_recv() {
                            drop(p);
                        }
                    }
                    if i % 500 == 499 && t == 0 {
                        core.empty_cache();
                    }
                    if toggle && t == 0 && i % 37 == 0 {
                        let text = TOGGLED[(i / 37) % TOGGLED.len()];
                        core.set_config(xpu_alloc::AllocConfig::parse(text).unwrap());
                        let fraction = if (i / 37) % 3 == 0 { 0.5 } else { 1.0 };
                        core.set_memory_fraction(fraction).unwrap();
                    }
                }
                for p in live.drain(..) {
                    ranges.remove(&p);
                }
            });
        }
    });
    drop(tx);
    while let Ok(p) = rx.lock().try_recv() {
        drop(p);
    }
    core.set_memory_fraction(1.0).unwrap();
    if toggle {
        // Blocks recorded on stream 13 stay active until their markers are processed.
        core.empty_cache();
    }
    let st = core.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.allocation.all.current, 0);
    assert_eq!(st.active.all.current, 0);
    assert_eq!(st.requested_bytes.all.current, 0);
    assert_eq!(st.allocation.all.allocated, st.allocation.all.freed);
    assert!(st.allocated_bytes.all.peak as u64 >= 24 * MIB);
    let reserved: u64 = core.snapshot().iter().map(|s| s.size).sum();
    assert_eq!(reserved, source.counters().used);
    assert_eq!(core.memory_reserved(), source.counters().used);
    assert_empty_cache_releases_everything(core, source);
}

#[test]
fn sixteen_threads_without_pressure() {
    let (core, source) = sim_core(256 * GIB, "");
    hammer(&core, &source, 16, 3000);
    assert_eq!(core.memory_stats().num_ooms, 0);
}

#[test]
fn sixteen_threads_under_memory_pressure() {
    let (core, source) = sim_core(768 * MIB, "");
    hammer(&core, &source, 16, 1500);
    let st = core.memory_stats();
    assert!(st.num_alloc_retries > 0, "the OOM path ran: {st:?}");
}

/// As [`sixteen_threads_under_memory_pressure`], with thread 0 switching the configuration
/// (splitting, release policy, `max_split_size`, garbage collection) and the memory fraction
/// every 37 operations while the others allocate, free and record streams: no block is
/// handed out twice, and the statistics return to zero.
#[test]
fn sixteen_threads_while_the_configuration_and_fraction_change() {
    let (core, source) = sim_core(768 * MIB, "");
    hammer_toggling(&core, &source, 16, 1500, true);
}
