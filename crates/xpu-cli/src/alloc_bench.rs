//! Allocator micro-benchmarks for `xpu bench --json` (xpu-bench's criterion bench
//! `benches/alloc.rs` times the same pair and mixed loops).
//!
//! Figures (ns): `cached_alloc_free_ns` (4 KiB) and `cached_alloc_free_8m_ns` (8 MiB):
//! one allocate + free of the same size on one thread, served from the cache;
//! `mixed64_alloc_free_ns`: 64 live blocks of mixed sizes, then frees in interleaved order,
//! per allocate + free; `threads{1,2,4,8,16}_pair_ns`: N threads, each on its own stream,
//! 4 KiB allocate + free pairs, wall time per pair (all threads together), the fastest of
//! three runs; `threads{1,2,4,8,16}_malloc_pair_ns`: their floor, the same with `malloc` +
//! `free` at each thread count (how far the machine itself scales: `threads1 / threadsN` of
//! the two is the scaling).
//!
//! The floor, measured in the same run on the same thread: `malloc_free_ns`, the C library's
//! `malloc` + `free` of 4 KiB (Rust's system allocator, which calls them for these sizes and
//! alignments), `malloc_free_8m_ns`, the same of 8 MiB (glibc serves it by `mmap` unless its
//! dynamic threshold rose past it), and `mixed64_malloc_free_ns`, the mixed workload through
//! `malloc`/`free`; `cached_alloc_free_over_malloc`, `cached_alloc_free_8m_over_malloc` and
//! `mixed64_over_malloc` are the allocator's figures over them (1.0 would be a cached block
//! handed back as cheaply as a thread-local free-list pop).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use xpu_alloc::{AllocConfig, AllocError, ClStream, DeviceAllocator};
use xpu_bench::alloc::{mixed_round, Workload, MIXED_LIVE, THREADS};

/// Where the benchmark allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchTarget {
    /// A simulated 64 GiB device (the cached path makes no device call either way); used by
    /// the unit test, which needs no device.
    #[cfg_attr(not(test), allow(dead_code))]
    Simulated,
    /// OpenCL device `index`, with pool streams.
    Device(usize),
}

/// The workload (xpu-bench's, shared with its criterion bench) on `target`.
fn workload(target: BenchTarget, config: AllocConfig) -> Result<Workload, AllocError> {
    let index = match target {
        BenchTarget::Simulated => return Ok(Workload::simulated(config)),
        BenchTarget::Device(index) => index,
    };
    let allocator = DeviceAllocator::new(index, config)?;
    let mut streams = Vec::new();
    for _ in 0..THREADS[THREADS.len() - 1] {
        let s = xpu_stream::get_stream_from_pool(0, index)?;
        streams.push((xpu_alloc::stream_key(&s), ClStream::shared(s)));
    }
    Ok(Workload::new(allocator.core().clone(), streams))
}

/// Runs `body(iterations)` with growing iteration counts until it takes `budget`; returns
/// ns per iteration of the last run.
fn per_iteration(
    budget: Duration,
    body: impl FnMut(u64) -> Result<(), AllocError>,
) -> Result<f64, AllocError> {
    Ok(calibrate(budget, body)?.0)
}

/// As [`per_iteration`], also returning the iteration count of the last run.
fn calibrate(
    budget: Duration,
    mut body: impl FnMut(u64) -> Result<(), AllocError>,
) -> Result<(f64, u64), AllocError> {
    let mut n: u64 = 64;
    loop {
        let t = Instant::now();
        body(n)?;
        let elapsed = t.elapsed();
        if elapsed >= budget || n >= 1 << 30 {
            #[allow(clippy::cast_precision_loss)]
            return Ok((elapsed.as_nanos() as f64 / n as f64, n));
        }
        let grow = (budget.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)).clamp(2.0, 100.0);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let next = (n as f64 * grow) as u64;
        n = next;
    }
}

/// How many timed runs a thread-scaling figure is the fastest of. With as many threads as
/// cores, one thread descheduled by anything else on the machine (a driver thread, another
/// process) stretches the whole run's wall time, so a single run measures the machine's
/// noise as much as the allocator; the fastest of a few runs is the figure (the same for the
/// `malloc` floor's threads).
const SCALING_RUNS: usize = 3;

/// `threads` threads each running `pair(thread)` the same number of times, started together;
/// the fastest of [`SCALING_RUNS`] runs (after calibration to `budget`), as wall ns per pair
/// over all threads.
fn scaled(
    threads: usize,
    budget: Duration,
    pair: impl Fn(usize) -> Result<(), AllocError> + Sync,
) -> Result<f64, AllocError> {
    let pair = &pair;
    let run = |n: u64| -> Result<(), AllocError> {
        let results: Vec<Result<(), AllocError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| scope.spawn(move || (0..n).try_for_each(|_| pair(t))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results.into_iter().collect()
    };
    let (mut best, n) = calibrate(budget, run)?;
    for _ in 1..SCALING_RUNS {
        let t = Instant::now();
        run(n)?;
        #[allow(clippy::cast_precision_loss)]
        let per = t.elapsed().as_nanos() as f64 / n as f64;
        best = best.min(per);
    }
    #[allow(clippy::cast_precision_loss)]
    Ok(best / threads as f64)
}

/// One allocate + free of `size` bytes from the cache, ns.
fn cached(bench: &Workload, size: u64, budget: Duration) -> Result<f64, AllocError> {
    bench.pair(0, size)?;
    per_iteration(budget, |n| (0..n).try_for_each(|_| bench.pair(0, size)))
}

/// One `malloc` of `size` bytes (the system allocator; the pointer escapes, so the pair
/// with its `free` is not optimized away).
fn malloc_block(size: usize) -> Vec<u8> {
    let block: Vec<u8> = Vec::with_capacity(size);
    black_box(block.as_ptr());
    block
}

/// One `malloc` + `free` of `size` bytes.
fn malloc_pair(size: usize) {
    drop(malloc_block(size));
}

/// The mixed workload ([`mixed_round`]) through `malloc` / `free`.
fn malloc_mixed_round() {
    let Ok(()) = mixed_round(|size| {
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        Ok::<_, std::convert::Infallible>(malloc_block(size))
    });
}

/// ns per `malloc` + `free` of `size` bytes on this thread (`malloc_free_8m_ns` for 8 MiB:
/// the floor of `cached_alloc_free_8m_ns`).
fn malloc_pair_floor(size: usize, budget: Duration) -> Result<f64, AllocError> {
    malloc_pair(size);
    per_iteration(budget, |n| {
        (0..n).for_each(|_| malloc_pair(size));
        Ok(())
    })
}

/// `malloc_free_ns` and `mixed64_malloc_free_ns` (see the module docs).
fn malloc_floor(budget: Duration) -> Result<(f64, f64), AllocError> {
    malloc_pair(4096);
    let pair = per_iteration(budget, |n| {
        (0..n).for_each(|_| malloc_pair(4096));
        Ok(())
    })?;
    malloc_mixed_round();
    let round = per_iteration(budget, |n| {
        (0..n).for_each(|_| malloc_mixed_round());
        Ok(())
    })?;
    #[allow(clippy::cast_precision_loss)]
    Ok((pair, round / MIXED_LIVE as f64))
}

/// 64 live blocks of mixed sizes, freed in interleaved order; ns per allocate + free.
fn mixed64(bench: &Workload, budget: Duration) -> Result<f64, AllocError> {
    bench.mixed_round()?;
    let per_round = per_iteration(budget, |n| (0..n).try_for_each(|_| bench.mixed_round()))?;
    #[allow(clippy::cast_precision_loss)]
    Ok(per_round / MIXED_LIVE as f64)
}

/// `threads` threads on their own streams, 4 KiB pairs; wall ns per pair (see [`scaled`]).
fn threads(bench: &Workload, threads: usize, budget: Duration) -> Result<f64, AllocError> {
    for t in 0..threads {
        bench.pair(t, 4096)?;
    }
    scaled(threads, budget, |t| bench.pair(t, 4096))
}

/// The floor of [`threads`]: `threads` threads each making 4 KiB `malloc` + `free` pairs;
/// wall ns per pair (see [`scaled`]).
fn malloc_threads(threads: usize, budget: Duration) -> Result<f64, AllocError> {
    scaled(threads, budget, |_| {
        malloc_pair(4096);
        Ok(())
    })
}

/// Measures every figure with the allocator configured by `config` (`xpu bench` passes
/// `XPU_ALLOC_CONF`'s), spending about `budget` on each; keys as in the module docs.
///
/// # Errors
/// An allocator or device error (e.g. no such device).
pub fn run_with_config(
    target: BenchTarget,
    budget: Duration,
    config: AllocConfig,
) -> Result<BTreeMap<String, f64>, AllocError> {
    let bench = workload(target, config)?;
    let mut out = BTreeMap::new();
    out.insert(
        "cached_alloc_free_ns".to_owned(),
        cached(&bench, 4096, budget)?,
    );
    out.insert(
        "cached_alloc_free_8m_ns".to_owned(),
        cached(&bench, 8 << 20, budget)?,
    );
    out.insert("mixed64_alloc_free_ns".to_owned(), mixed64(&bench, budget)?);
    let (malloc_ns, mixed_malloc_ns) = malloc_floor(budget)?;
    let malloc_8m_ns = malloc_pair_floor(8 << 20, budget)?;
    out.insert("malloc_free_ns".to_owned(), malloc_ns);
    out.insert("malloc_free_8m_ns".to_owned(), malloc_8m_ns);
    out.insert(
        "cached_alloc_free_8m_over_malloc".to_owned(),
        out["cached_alloc_free_8m_ns"] / malloc_8m_ns,
    );
    out.insert("mixed64_malloc_free_ns".to_owned(), mixed_malloc_ns);
    out.insert(
        "cached_alloc_free_over_malloc".to_owned(),
        out["cached_alloc_free_ns"] / malloc_ns,
    );
    out.insert(
        "mixed64_over_malloc".to_owned(),
        out["mixed64_alloc_free_ns"] / mixed_malloc_ns,
    );
    for n in THREADS {
        out.insert(format!("threads{n}_pair_ns"), threads(&bench, n, budget)?);
    }
    for n in THREADS {
        out.insert(
            format!("threads{n}_malloc_pair_ns"),
            malloc_threads(n, budget)?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_reports_every_key() {
        let figures = run_with_config(
            BenchTarget::Simulated,
            Duration::from_millis(1),
            AllocConfig::default(),
        )
        .unwrap();
        let keys: Vec<&str> = figures.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "cached_alloc_free_8m_ns",
                "cached_alloc_free_8m_over_malloc",
                "cached_alloc_free_ns",
                "cached_alloc_free_over_malloc",
                "malloc_free_8m_ns",
                "malloc_free_ns",
                "mixed64_alloc_free_ns",
                "mixed64_malloc_free_ns",
                "mixed64_over_malloc",
                "threads16_malloc_pair_ns",
                "threads16_pair_ns",
                "threads1_malloc_pair_ns",
                "threads1_pair_ns",
                "threads2_malloc_pair_ns",
                "threads2_pair_ns",
                "threads4_malloc_pair_ns",
                "threads4_pair_ns",
                "threads8_malloc_pair_ns",
                "threads8_pair_ns"
            ]
        );
        assert!(figures.values().all(|v| v.is_finite() && *v > 0.0));
    }
}
