//! Relocation (`relocation:merge`) and pinned-host copies of a moved block (on its gated stream and
//! on another stream), and concurrent allocations, views and cache calls keeping every block's
//! bytes.
//!
//! Review h13 of `relocation:merge` as the default (branch `default-merge`), by a helper with
//! fresh eyes: attempts to break the contract through safe calls only. Device tests run on
//! PoCL: `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`. Each test says whether it
//! found a defect (it failed until the fix, and now guards it) or probes a risk found sound.

mod common;

use std::time::Duration;

use common::relocation::{holds, layout, pattern, relocating_core, write};
use common::{device_streams, MIB};
use xpu_alloc::{ClStream, HostCopy};
use xpu_event::{Gate, StreamExt};

/// DEFECT, fixed (failed 6 of 6 before the fix: `device_region` no longer waits on the host;
/// `record_use` orders another stream after the move on the device). A pinned-host copy (`HostCopy::copy_to_host`, documented non-blocking)
/// of a block that the allocator moved, issued on the block's own allocation stream S while
/// S is held by a user-event gate, waits on the host for the move's copy: `device_region`
/// observes the place (`DataPtr::observe_place` -> `Allocation::observe`), and an
/// observation of a moved block waits on the host for the move's marker `M`, which runs on
/// S behind the gate. The thread that would open the gate never gets to it: a hang from safe
/// calls. The wait is not even needed here: the copy is on S, in order after the move's copy.
/// Same hazard the review of `address()` found (fixed there only).
#[test]
fn a_pinned_copy_of_a_moved_block_on_its_gated_stream_does_not_wait_for_the_gate() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    // The 8 MiB request moves q: its copy is enqueued on S, behind the gate.
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    let len = usize::try_from(q.size()).unwrap();
    let mut host = xpu_alloc::host_allocate_on(0, len).unwrap();
    let (returned, host) = returns_before_gate_opens(&gate, Duration::from_secs(10), || {
        s.copy_to_host(&q, &mut host).expect("copy");
        host
    });
    s.synchronize().expect("synchronize");
    assert!(
        returned,
        "a non-blocking pinned copy on S waited on the host for S's gated relocation copy"
    );
    assert!(host[..] == pattern(1, len)[..], "the copy read q's bytes");
    drop(big);
}

/// Passing probe. Same layout, but the pinned copy from the moved block goes on another
/// stream T, ordered after S only by an event from before the move: the bytes T copies are
/// the moved block's (the observation waits for the move's copy, so this is only checked
/// with the gate open before the copy).
#[test]
fn a_pinned_copy_of_a_moved_block_on_another_stream_reads_its_bytes() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, rest) = layout(&core, &sr, Some(&s));
    let ready = s.record_event().expect("event");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    // The new owner of q's old place writes it at once on S.
    big.view()
        .unwrap()
        .fill(&s, &[0xEE], 0, usize::try_from(big.size()).unwrap())
        .unwrap();
    t.wait_event(&ready).expect("wait");
    let len = usize::try_from(q.size()).unwrap();
    let mut host = xpu_alloc::host_allocate_on(0, len).unwrap();
    t.copy_to_host(&q, &mut host).expect("copy");
    t.synchronize().expect("synchronize");
    assert!(host[..] == pattern(1, len)[..], "T read q's bytes");
    for (seed, ptr) in rest.iter().enumerate() {
        assert!(holds(ptr, &s, u8::try_from(seed).unwrap() + 2));
    }
    write(&q, &s, 5);
    assert!(holds(&q, &s, 5));
}

/// A small deterministic generator (xorshift), one per thread.
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

/// Passing probe (focus: moves racing views on other streams, `record_stream`, thread
/// caches, `empty_cache`, statistics reads and `set_config`). Two threads allocate, write
/// (blocking, on the allocation stream S), read back and free blocks of 64 KiB to 7 MiB on
/// one relocating allocator and stream S, so that requests that fit no free block move live
/// blocks; some blocks are read on another stream T (a blocking read: the block becomes
/// off-stream, and T waits for the copies of its last move) or `record_stream`ed on T. A
/// third thread reads the statistics (flushing threads' caches) and now and then switches
/// `relocation` off and on again; the workers sometimes empty the cache. Every block must keep its own bytes throughout.
#[test]
fn concurrent_allocations_views_and_cache_calls_keep_every_block_s_bytes() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let (sr, tr) = (ClStream::shared(s), ClStream::shared(t));
    let core = relocating_core();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let before = core.relocation_stats().moves;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2u64)
            .map(|w| {
                let (core, sr, tr, s, t) = (&core, &sr, &tr, s, t);
                scope.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
                    let mut live: Vec<(xpu_alloc::DataPtr, u8)> = Vec::new();
                    for step in 0..150u32 {
                        if rng.below(25) == 0 {
                            core.empty_cache();
                        }
                        let size = if rng.below(4) == 0 {
                            (1 + rng.below(15)) * 64 * 1024
                        } else {
                            (1 + rng.below(14)) * MIB / 2
                        };
                        if live.len() > 6 || (!live.is_empty() && rng.below(3) == 0) {
                            let k = usize::try_from(rng.below(live.len() as u64)).unwrap();
                            let (p, seed) = live.swap_remove(k);
                            assert!(holds(&p, &s, seed), "w{w} step {step}: block freed");
                        }
                        let p = core.allocate(size, sr).unwrap();
                        let seed = (step as u8).wrapping_mul(7) ^ (w as u8 * 101);
                        write(&p, &s, seed);
                        match rng.below(8) {
                            0 => {
                                let len = usize::try_from(p.size()).unwrap();
                                let mut out = vec![0; len];
                                p.view().unwrap().read(&t, 0, &mut out).unwrap();
                                assert!(out == pattern(seed, len), "w{w} step {step}: read on T");
                            }
                            1 => core.record_stream(&p, tr).unwrap(),
                            _ => {}
                        }
                        live.push((p, seed));
                        let k = usize::try_from(rng.below(live.len() as u64)).unwrap();
                        let (p, seed) = &live[k];
                        assert!(holds(p, &s, *seed), "w{w} step {step}: a live block");
                    }
                    for (p, seed) in &live {
                        assert!(holds(p, &s, *seed), "w{w}: at the end");
                    }
                })
            })
            .collect();
        let churn = scope.spawn(|| {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                match n % 512 {
                    0 => core.set_config(xpu_alloc::AllocConfig::parse("relocation:off").unwrap()),
                    1 => {
                        core.set_config(xpu_alloc::AllocConfig::parse("relocation:merge").unwrap())
                    }
                    _ => drop(core.memory_stats()),
                }
                std::thread::yield_now();
            }
        });
        for w in workers {
            w.join().expect("worker");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().expect("churn");
    });
    eprintln!("moves: {}", core.relocation_stats().moves - before);
}

/// Runs `f` on another thread and reports whether it returned within `limit`; `gate` is
/// opened either way afterwards (the limit only detects a hang: it orders nothing).
fn returns_before_gate_opens<R: Send>(
    gate: &Gate,
    limit: Duration,
    f: impl FnOnce() -> R + Send,
) -> (bool, R) {
    xpu_testing::returns_within(limit, f, || gate.open().expect("open"))
}
