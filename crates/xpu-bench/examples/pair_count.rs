//! Callgrind harness: `N` (env, default 100000) cached 4 KiB allocate + free pairs on one
//! simulated stream (`SIZE=<bytes>` for another size). Run under `valgrind --tool=callgrind` with N and N=0 and subtract to
//! get instructions per pair (the hot path makes no device call). With `MIXED=1`, `N`
//! rounds of the bench's mixed workload instead (64 blocks of mixed sizes, then frees of the
//! even then the odd ones).
//!
//! Measured (x86-64, release, `valgrind --tool=callgrind`, N=100000 minus N=0): 1432
//! instructions per 4 KiB pair at 203f93e and 1424 at 694071e, 6 atomic read-modify-write
//! instructions per pair at both, no cache or branch misses in the loop at either (`--cache-sim=yes
//! --branch-sim=yes`); the mixed workload (N=201 minus N=1 rounds) costs 1626 instructions per
//! allocate + free at 203f93e and 1596 at 694071e. The caching algorithm generic over its
//! backend (xpu-caching's `CachingAllocator<ClBackend>`, hot helpers `#[inline]` across the
//! crate boundary): 1374 per 4 KiB pair against 1396 at 405e8b4 on the same machine and
//! toolchain, mixed 1575 against 1595. Through this harness on one machine and toolchain:
//! 1396 per 4 KiB pair and 1582 per mixed allocate + free at a9d74da, 931 and 1140 after the
//! hot-path work (statistics cells laid out per pool with fused updates and wrapping
//! accumulators clamped when read, the last rounded request remembered per stream, the hit
//! path returning without an error-sized result, the cached allocate and free inlined end to
//! end with their cold parts out of line); 6 atomic read-modify-write instructions per pair
//! before and after (the shard lock twice, the shard reference count twice). With the
//! accumulated totals saturating again (exact past 16 EiB of traffic) and the rest of the
//! day's work merged: 977 and 1186 (a `DataPtr` drop that moved its allocation out before
//! dropping it had cost 66 more per pair). With a block remembering whether its hand-out
//! counted it as an oversize allocation (the statistic exact across `set_config`): 976 ->
//! 982 per pair and 1188 -> 1192 per mixed allocate + free (register allocation around one
//! more byte store). With the caching allocator's own bad-fork check
//! (`Backend::is_bad_fork`, one relaxed load on allocate and one in `Allocation`'s drop,
//! replacing `DataPtr`'s): 992 -> 1013 per pair and 1204 -> 1209 per mixed allocate + free
//! (the check itself is two instructions; the rest is inlining moved around it). With the
//! threads' freed-block caches (xpu-caching's `free_cache`, 2026-12-03): 1048 -> 637 per
//! pair and 1217 -> 669 per mixed allocate + free, 6 -> 3 atomic read-modify-write
//! instructions per pair and per mixed allocate + free (the shard handle's `Weak::upgrade`
//! and drop, the bin slot's `xchg`; counted from `--dump-instr=yes` against the
//! disassembly's `lock`-prefixed and memory `xchg` instructions). The workload is
//! [`xpu_bench::alloc`]'s (the bench's and `xpu bench`'s).
//!
//! With `CONF=<configuration>` (the `XPU_ALLOC_CONF` grammar, e.g. `relocation:merge`), the
//! device workload runs under that allocator configuration instead of the defaults.
//! Relocating blocks through the threads' caches (2026-12-04, the pair reads its address as
//! the bench does): with `CONF=relocation:merge`, see docs/performance.md's section of that
//! evening for the figures before and after. Since small blocks stay put under the default
//! `relocation:merge` (2026-12-05; `relocation:merge_all` moves them too): 645 instructions per
//! 4 KiB pair with relocation off and with `merge`, 745 with `merge_all`; per mixed allocate +
//! free 683, 700 and 751. A large block still relocates under `merge`: per cached 8 MiB pair
//! (`SIZE=8388608`) 645 instructions with relocation off, 745 with `merge` (2026-12-05).
//!
//! With `HOST=1`, `N` cached 4 KiB pinned-host allocate + free pairs through
//! `xpu_host::host_allocate_on` on OpenCL device 0 (a real device: run with PoCL), as
//! `xpu bench`'s `host_cached_alloc_free_ns`; the driver is called only by the warm-up
//! allocation, so N minus N=0 is the pair's own instructions. Measured (x86-64, release,
//! PoCL): 369 instructions and 14 atomic read-modify-writes per pinned pair at 8c407af, 368
//! and 6 with the threads' caches of freed pinned blocks (xpu-host's `thread_cache`,
//! 2026-12-03) and the pending check inline, counted as for the device pair.
use xpu_alloc::AllocConfig;
use xpu_bench::alloc::Workload;

fn main() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    if std::env::var_os("HOST").is_some() {
        drop(xpu_host::host_allocate_on(0, 4096).expect("warm-up pinned allocation"));
        for _ in 0..n {
            drop(std::hint::black_box(xpu_host::host_allocate_on(
                0,
                std::hint::black_box(4096),
            )));
        }
        return;
    }
    let config = std::env::var("CONF").map_or_else(
        |_| AllocConfig::default(),
        |text| AllocConfig::parse(&text).expect("CONF: an allocator configuration"),
    );
    let bench = Workload::simulated(config);
    let size: u64 = std::env::var("SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    // Warm the cache once so every counted pair is served from it.
    bench.pair(0, size).expect("warm-up allocation");
    if std::env::var_os("MIXED").is_some() {
        for _ in 0..n {
            bench.mixed_round().expect("mixed allocation");
        }
        return;
    }
    for _ in 0..n {
        bench.pair(0, size).expect("cached allocation");
    }
}
