//! Criterion benches of the caching allocator (simulated segment source: the cached path
//! makes no device call). `xpu bench --json` (xpu-cli's `alloc_bench`) reports the same
//! figures, on a device as well.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource, StreamKey, StreamRef};

/// The thread counts of the `threads_pair` group.
const THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// Sizes of the mixed workload (bytes), cycled over 64 blocks.
const MIXED_SIZES: [u64; 8] = [
    512,
    4 << 10,
    96 << 10,
    1 << 20,
    3 << 20,
    700,
    12 << 20,
    256 << 10,
];

/// A simulated 64 GiB device and one stream per thread.
struct Bench {
    core: DeviceCore,
    streams: Vec<(StreamKey, StreamRef)>,
}

impl Bench {
    fn new() -> Self {
        let source = SimulatedSource::new(0, 64 << 30, 64 << 30);
        let core = DeviceCore::new(Box::new(source), AllocConfig::default());
        let streams = (0..THREADS[THREADS.len() - 1] as u64)
            .map(|i| {
                let key = StreamKey::new(0, i);
                (key, StreamRef::from(SimStream::new(key)))
            })
            .collect();
        Self { core, streams }
    }

    fn pair(&self, stream: usize, size: u64) {
        let (key, s) = &self.streams[stream];
        let p = self
            .core
            .allocate_with(size, *key, || s.clone())
            .expect("allocate");
        std::hint::black_box(p.address());
    }

    /// 64 allocations of mixed sizes, then frees of the even then the odd ones.
    fn mixed_round(&self) {
        let (key, s) = &self.streams[0];
        let mut live: Vec<_> = (0..64)
            .map(|i| {
                let size = MIXED_SIZES[i % MIXED_SIZES.len()];
                Some(
                    self.core
                        .allocate_with(size, *key, || s.clone())
                        .expect("allocate"),
                )
            })
            .collect();
        for start in [0, 1] {
            live.iter_mut()
                .skip(start)
                .step_by(2)
                .for_each(|slot| drop(slot.take()));
        }
    }
}

fn cached(c: &mut Criterion) {
    let bench = Bench::new();
    let mut group = c.benchmark_group("cached_alloc_free");
    for (name, size) in [("4KiB", 4096u64), ("8MiB", 8 << 20)] {
        group.bench_function(name, |b| b.iter(|| bench.pair(0, size)));
    }
    group.finish();
    // One round = 64 allocations and 64 frees.
    c.bench_function("mixed64_round", |b| b.iter(|| bench.mixed_round()));
}

fn threads(c: &mut Criterion) {
    let bench = Bench::new();
    let mut group = c.benchmark_group("threads_pair");
    for n in THREADS {
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for t in 0..n {
                        let bench = &bench;
                        scope.spawn(move || (0..iters).for_each(|_| bench.pair(t, 4096)));
                    }
                });
                // Wall time per pair across all threads.
                start.elapsed() / u32::try_from(n).unwrap_or(1)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, cached, threads);
criterion_main!(benches);
