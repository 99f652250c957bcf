//! Criterion benches of the caching allocator (simulated segment source: the cached path
//! makes no device call), on the workload of [`xpu_bench::alloc`]. `xpu bench --json`
//! (xpu-cli's `alloc_bench`) reports the same figures, on a device as well.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use xpu_alloc::AllocConfig;
use xpu_bench::alloc::{Workload, THREADS};

fn cached(c: &mut Criterion) {
    let bench = Workload::simulated(AllocConfig::default());
    let mut group = c.benchmark_group("cached_alloc_free");
    for (name, size) in [("4KiB", 4096u64), ("8MiB", 8 << 20)] {
        group.bench_function(name, |b| b.iter(|| bench.pair(0, size).expect("allocate")));
    }
    group.finish();
    // One round = 64 allocations and 64 frees.
    c.bench_function("mixed64_round", |b| {
        b.iter(|| bench.mixed_round().expect("allocate"));
    });
}

fn threads(c: &mut Criterion) {
    let bench = Workload::simulated(AllocConfig::default());
    let mut group = c.benchmark_group("threads_pair");
    for n in THREADS {
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for t in 0..n {
                        let bench = &bench;
                        scope.spawn(move || {
                            (0..iters).for_each(|_| bench.pair(t, 4096).expect("allocate"));
                        });
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
