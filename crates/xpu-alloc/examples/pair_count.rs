//! Callgrind harness: `N` (env, default 100000) cached 4 KiB allocate + free pairs on one
//! simulated stream. Run under `valgrind --tool=callgrind` with N and N=0 and subtract to
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
//! toolchain, mixed 1575 against 1595.
use std::hint::black_box;

use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::StreamRef;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource, StreamKey};

fn main() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let source = SimulatedSource::new(0, 64 << 30, 64 << 30);
    let core = DeviceCore::new(Box::new(source), AllocConfig::default());
    let key = StreamKey::new(0, 0);
    let stream = StreamRef::from(SimStream::new(key));
    // Warm the cache once so every counted pair is served from it.
    let p = core
        .allocate_with(4096, key, || stream.clone())
        .expect("warm-up allocation");
    drop(p);
    if std::env::var_os("MIXED").is_some() {
        const SIZES: [u64; 8] = [
            512,
            4 << 10,
            96 << 10,
            1 << 20,
            3 << 20,
            700,
            12 << 20,
            256 << 10,
        ];
        for _ in 0..n {
            let mut live = Vec::with_capacity(64);
            for i in 0..64 {
                let size = SIZES[i % SIZES.len()];
                live.push(Some(
                    core.allocate_with(size, key, || stream.clone())
                        .expect("mixed allocation"),
                ));
            }
            for start in [0, 1] {
                for slot in live.iter_mut().skip(start).step_by(2) {
                    drop(slot.take());
                }
            }
        }
        return;
    }
    for _ in 0..n {
        let p = core
            .allocate_with(4096, key, || stream.clone())
            .expect("cached allocation");
        black_box(p.address());
        drop(p);
    }
}
