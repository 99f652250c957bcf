//! The threads' freed-block caches (`free_cache`): what they hand out, when, and that the
//! statistics stay the slow path's.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use proptest::prelude::*;

use super::{sim_core, stream, GIB, MIB};
use crate::allocator::{Allocation, CachingAllocator};
use crate::config::AllocConfig;
use crate::history::History;
use crate::sim_stream::{SimBackend, SimStream};
use crate::source::SimulatedSource;
use crate::stats::MemoryStats;

/// A freed block goes into the freeing thread's cache and comes back to its next allocation
/// of that size on that stream: the last one freed (the stream pool's best fit would be the
/// lowest address, with both blocks coalesced into the segment's rest).
#[test]
fn a_same_size_allocation_gets_the_block_this_thread_freed_last() {
    let (core, _src) = sim_core(GIB, "");
    let (s, _) = stream(1);
    let low = core.alloc(4096, &s).unwrap();
    let high = core.alloc(4096, &s).unwrap();
    let (low_addr, high_addr) = (low.address(), high.address());
    assert!(low_addr < high_addr);
    drop(low);
    drop(high);
    let again = core.alloc(4096, &s).unwrap();
    assert_eq!(
        again.address(),
        high_addr,
        "the block freed last, from the cache"
    );
    let next = core.alloc(4096, &s).unwrap();
    assert_eq!(next.address(), low_addr);
    drop((again, next));
    let stats = core.memory_stats();
    assert_eq!(stats.allocation.all.allocated, 4);
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(
        stats.inactive_split.all.current, 0,
        "coalesced by the read's flush"
    );
}

/// The current address of a relocating allocation, read under a pin (an observation would
/// fix its place for good).
fn pinned_address(a: &Allocation<SimBackend>) -> u64 {
    let pin = a.pin();
    a.with_pinned_segment(&pin, |segment, offset| segment.address + offset)
        .expect("a live allocation's place")
}

/// A pinned reader's cached place (it holds the segment) is forgotten when the block is
/// freed, on the locked path as through a thread's cache, so that `empty_cache` gives the
/// segment back to its source rather than leaking it as still borrowed.
#[test]
fn a_place_cached_by_a_pinned_reader_does_not_outlive_its_block() {
    for flush_first in [false, true] {
        let (core, src) = sim_core(GIB, "relocation:merge_all");
        let (s, _) = stream(1);
        let a = core.alloc(4096, &s).unwrap();
        assert!(a.relocatable());
        let first = pinned_address(&a);
        // The second read comes from the cached place.
        assert_eq!(pinned_address(&a), first);
        assert_eq!(src.counters().live_segments, 1);
        if flush_first {
            // Freed into this thread's cache, then to the stream by the read's flush.
            drop(a);
            assert_eq!(core.memory_stats().allocated_bytes.all.current, 0);
        } else {
            // Another thread frees it: the locked path.
            std::thread::spawn(move || drop(a)).join().unwrap();
        }
        core.empty_cache();
        let counters = src.counters();
        assert_eq!(
            counters.live_segments, 0,
            "the segment went back to its source"
        );
        assert_eq!(counters.used, 0);
        assert_eq!(core.memory_stats().reserved_bytes.all.current, 0);
    }
}

/// A pin that is never dropped (`std::mem::forget`, a safe call) keeps its unit in the
/// cell's count, and neither the free (`begin_free` ignores pins: none is supposed to
/// outlive its allocation) nor the block's next hand-out clears it: `reset_cached` (through
/// this thread's cache) and `reset` (through the stream's pool) refuse a cell with pins and
/// leave it `FREEING`, so the block's next allocation is born freed (a debug assertion
/// fires at the hand-out; without it, that allocation's drop finds `FREEING` and frees
/// nothing, and `empty_cache` can never give the segment back).
#[test]
fn a_forgotten_pin_does_not_leak_the_block_s_next_allocation() {
    for through_cache in [true, false] {
        let (core, src) = sim_core(GIB, "relocation:merge_all");
        let (s, _) = stream(1);
        let a = core.alloc(4096, &s).unwrap();
        assert!(a.relocatable());
        std::mem::forget(a.pin());
        if through_cache {
            // Into this thread's cache; the next allocation of that size takes it back.
            drop(a);
        } else {
            // Another thread frees it (into its cache, flushed to the stream at its exit).
            std::thread::spawn(move || drop(a)).join().unwrap();
        }
        // The slab slot of the freed block is handed out again within two allocations
        // (the block itself, or the rest of the split that took its slot).
        let b = core.alloc(4096, &s).unwrap();
        let c = core.alloc(4096, &s).unwrap();
        drop((b, c));
        core.empty_cache();
        assert_eq!(
            core.memory_stats().allocated_bytes.all.current,
            0,
            "every allocation was freed (through_cache: {through_cache})"
        );
        assert_eq!(
            src.counters().live_segments,
            0,
            "the segment went back to its source (through_cache: {through_cache})"
        );
    }
}

/// With relocation of small blocks too (`relocation:merge_all`), a freed block goes into the
/// freeing thread's cache and comes
/// back to its next allocation of that size on that stream (the block freed last, where the
/// stream pool's best fit would be the lowest address).
#[test]
fn with_relocation_a_same_size_allocation_gets_the_block_this_thread_freed_last() {
    let (core, _src) = sim_core(GIB, "relocation:merge_all");
    let (s, _) = stream(1);
    let low = core.alloc(4096, &s).unwrap();
    let high = core.alloc(4096, &s).unwrap();
    assert!(low.relocatable());
    let (low_addr, high_addr) = (pinned_address(&low), pinned_address(&high));
    assert!(low_addr < high_addr);
    drop(low);
    drop(high);
    let again = core.alloc(4096, &s).unwrap();
    assert_eq!(
        pinned_address(&again),
        high_addr,
        "the block freed last, from the cache"
    );
    let next = core.alloc(4096, &s).unwrap();
    assert_eq!(pinned_address(&next), low_addr);
    drop((again, next));
    let stats = core.memory_stats();
    assert_eq!(stats.allocation.all.allocated, 4);
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(
        stats.inactive_split.all.current, 0,
        "coalesced by the read's flush"
    );
}

/// A cached pair (allocate, read the address as the benchmarks do, free) takes no lock of
/// its stream, with relocation off as with it on: a relocating block's place cell is reset
/// and freed without it, and the address of a block that never moved is the hand-out's.
/// Under `relocation:merge` (the default) a small block is handed out as with relocation
/// off, and a large one as relocating; under `merge_all` both relocate.
#[test]
fn a_cached_pair_takes_no_stream_lock_with_relocation_off_or_on() {
    for (conf, size, relocating) in [
        ("relocation:off", 4096, false),
        ("relocation:off", 8 << 20, false),
        ("relocation:merge", 4096, false),
        ("relocation:merge", 8 << 20, true),
        ("relocation:merge_all", 4096, true),
        ("relocation:merge_all", 8 << 20, true),
    ] {
        let (core, _src) = sim_core(GIB, conf);
        let (s, _) = stream(1);
        // The first pair binds this thread's bin (and takes the lock); the second hands out
        // the first's block from the cache.
        drop(core.alloc(size, &s).unwrap());
        let first = core.alloc(size, &s).unwrap();
        let address = first.address();
        drop(first);
        let shard = core.all_shards().pop().expect("the stream's shard");
        let before = shard.locks_taken();
        for _ in 0..100 {
            let a = core.alloc(size, &s).unwrap();
            assert_eq!(a.relocatable(), relocating, "{conf:?}, {size} B");
            assert_eq!(a.address(), address, "{conf:?}, {size} B: the cached block");
            drop(a);
        }
        assert_eq!(
            shard.locks_taken(),
            before,
            "{conf:?}, {size} B: cached pairs took the stream's lock"
        );
        let stats = core.memory_stats();
        assert_eq!(stats.allocation.all.allocated, 102, "{conf:?}, {size} B");
        assert_eq!(stats.allocated_bytes.all.current, 0, "{conf:?}, {size} B");
    }
}

/// A relocating block handed out again from a thread's cache starts with a fresh place cell,
/// as one handed out by the shard: its previous owner fixed its place (`address()`), its new
/// owner did not, so a request that needs its run moves it. Layout (20 MiB segments): A = p 6,
/// q 2, r 6, x 6 MiB, B = y 6, z 8 MiB and a 6 MiB tail; p and r freed, then q freed into the
/// cache and taken back. An 8 MiB request moves it into B's tail and takes p|q.
#[test]
fn a_block_handed_out_from_a_thread_cache_may_move_again() {
    let (core, _src) = sim_core(GIB, "relocation:merge");
    let (s, _) = stream(1);
    let a = |mib: u64| core.alloc(mib * MIB, &s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    assert_eq!(core.memory_stats().num_device_alloc, 2);
    let q_addr = q.address();
    drop((p, r));
    drop(q);
    let again = a(2);
    assert_eq!(
        pinned_address(&again),
        q_addr,
        "q's block, from this thread's cache (the pool's best fit is B's tail)"
    );
    let big = a(8);
    assert_eq!(core.relocation_stats().moves, 1, "the cached block moved");
    let moved_to = pinned_address(&again);
    assert_ne!(moved_to, q_addr);
    // Its `Handed` still names the hand-out place: `address()` reads the place it moved to.
    assert_eq!(again.address(), moved_to);
    assert_eq!(big.address(), q_addr - 6 * MIB, "p|q's run");
    assert_eq!(core.memory_stats().num_device_alloc, 2, "no growth");
    drop((again, big, x, y, z));
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
}

/// A block freed with a use recorded on another stream whose work is still held is not
/// handed out again (from the thread's cache or otherwise) before that work completes; once
/// it completes, it is.
#[test]
fn a_block_freed_with_a_pending_record_stream_use_is_not_reused_before_the_use_completes() {
    let (core, _src) = sim_core(GIB, "");
    let (a, _) = stream(1);
    let (b, _) = stream(2);
    // A pair first, so the thread's cache has a bin for (stream 1, 4096).
    drop(core.alloc(4096, &a).unwrap());
    let x = core.alloc(4096, &a).unwrap();
    let x_addr = x.address();
    let gate = b.close_gate();
    core.record_stream(&x, &b).unwrap();
    drop(x);
    for _ in 0..3 {
        let y = core.alloc(4096, &a).unwrap();
        assert_ne!(y.address(), x_addr, "reused while stream 2 still uses it");
        drop(y);
    }
    gate.open();
    let held: Vec<Allocation<SimBackend>> = (0..3).map(|_| core.alloc(4096, &a).unwrap()).collect();
    assert!(
        held.iter().any(|y| y.address() == x_addr),
        "reusable once the use completed"
    );
}

/// A block handed out before a configuration change and freed after it is not handed out
/// again under the new rounding rules: the next allocation of its size gets the block the
/// new rules size (1.25 MiB with power-of-two divisions), as the slow path would.
#[test]
fn a_block_of_the_old_configuration_is_not_reused_under_the_new_rounding() {
    let (core, _src) = sim_core(GIB, "");
    let (s, _) = stream(1);
    let size = 1_153_434; // 1.1 MiB
    drop(core.alloc(size, &s).unwrap());
    let old = core.alloc(size, &s).unwrap();
    assert_eq!(old.allocated_size(), 1_153_536, "512-byte rounding");
    core.set_config(AllocConfig::parse("roundup_power2_divisions:4").unwrap());
    drop(old);
    let new = core.alloc(size, &s).unwrap();
    assert_eq!(new.allocated_size(), 1_310_720, "a quarter step of 1 MiB");
}

/// An allocation that a thread's cache could serve still completes the stream's finished
/// deferred frees first, as the slow path does at every allocation: a block freed with a
/// use on another stream is inactive right after that use completed and the stream
/// allocated again.
#[test]
fn an_allocation_after_a_recorded_use_completed_still_frees_the_block_that_waited() {
    let (core, _src) = sim_core(GIB, "");
    let (a, _) = stream(1);
    let (b, _) = stream(2);
    let used = core.alloc(8192, &a).unwrap();
    let gate = b.close_gate();
    core.record_stream(&used, &b).unwrap();
    drop(used);
    assert_eq!(
        core.memory_stats().active_bytes.all.current,
        8192,
        "pending"
    );
    drop(core.alloc(4096, &a).unwrap()); // cached: a hit is possible below
    gate.open();
    let next = core.alloc(4096, &a).unwrap();
    let stats = core.memory_stats();
    assert_eq!(
        stats.active_bytes.all.current, 4096,
        "the waiting block was freed"
    );
    assert_eq!(stats.allocated_bytes.all.current, 4096);
    drop(next);
}

/// Blocks cached by threads that exited return to the pool: after the threads join and
/// `empty_cache`, nothing is reserved and every segment is back at the source.
#[test]
fn reserved_returns_to_baseline_after_threads_that_cached_blocks_exit() {
    let (core, src) = sim_core(16 * GIB, "");
    assert_eq!(core.memory_reserved(), 0);
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let core = core.clone();
            std::thread::spawn(move || {
                let own = stream(10 + t).0;
                let common = stream(1).0;
                for size in [512, 4096, 4096, 100_000, 3 * MIB, 700] {
                    let kept: Vec<_> = (0..3)
                        .map(|_| core.alloc(size, &own).unwrap())
                        .chain((0..2).map(|_| core.alloc(size, &common).unwrap()))
                        .collect();
                    drop(kept);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    core.empty_cache();
    assert_eq!(core.memory_reserved(), 0);
    assert_eq!(src.counters().live_segments, 0);
    let stats = core.memory_stats();
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(stats.inactive_split.all.current, 0);
}

/// A thread that exits frees its cached blocks into their shards itself (its cache's
/// drop): its bins are no longer registered with the stream, and the segment is whole
/// again in the pool without any flush by another thread.
#[test]
fn a_thread_that_exits_returns_its_cached_blocks_to_their_stream() {
    let (core, _src) = sim_core(GIB, "");
    let s = stream(1).0;
    let worker = {
        let (core, s) = (core.clone(), s.clone());
        std::thread::spawn(move || drop(core.alloc(4096, &s).unwrap()))
    };
    worker.join().unwrap();
    let shard = core.all_shards().pop().expect("the stream's shard");
    let state = shard.lock();
    assert_eq!(state.registered_bins(), 0, "the exited thread's bin");
    let whole = state.whole_free(crate::size::PoolKind::Small);
    assert_eq!(whole.len(), 1, "the segment is whole again: {whole:?}");
}

/// Threads making cached pairs on a shared and their own streams while other threads flush
/// their caches (statistics reads, `empty_cache`, configuration and fraction changes): no
/// block is handed out twice, and at the end everything is free and released.
#[test]
fn cached_pairs_racing_flushes_never_hand_a_block_out_twice() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let (core, src) = sim_core(16 * GIB, "");
    let live: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let (core, live) = (core.clone(), live.clone());
            std::thread::spawn(move || {
                let streams = [stream(1).0, stream(10 + t).0];
                for i in 0..20_000u64 {
                    let s = &streams[(i % 2) as usize];
                    let size = [512, 4096, 65_536][(i % 3) as usize];
                    let held: Vec<_> = (0..1 + i % 3)
                        .map(|_| core.alloc(size, s).unwrap())
                        .collect();
                    for a in &held {
                        assert!(live.lock().unwrap().insert(a.address()), "handed out twice");
                    }
                    for a in held {
                        live.lock().unwrap().remove(&a.address());
                        drop(a);
                    }
                }
            })
        })
        .collect();
    let flusher = {
        let (core, stop) = (core.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                match i % 4 {
                    0 => drop(core.memory_stats()),
                    1 => core.empty_cache(),
                    2 => core
                        .set_memory_fraction(if i % 8 == 2 { 0.9 } else { 1.0 })
                        .unwrap(),
                    _ => core.set_config(AllocConfig::default()),
                }
                i = i.wrapping_add(1);
            }
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flusher.join().unwrap();
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(stats.requested_bytes.all.current, 0);
    assert_eq!(stats.allocation.all.allocated, stats.allocation.all.freed);
    core.empty_cache();
    assert_eq!(core.memory_reserved(), 0);
    assert_eq!(src.counters().live_segments, 0);
    assert_eq!(core.memory_stats().inactive_split.all.current, 0);
}

/// With `relocation:merge`, threads make cached pairs of 2 MiB blocks (pinned while live,
/// then freed into their caches) on a stream that another thread makes relocate again and
/// again (the clearing layout: p 6, q 2, r 6, x 6, y 6, z 8 MiB, p and r freed, then an 8 MiB
/// request), while a third flushes the caches: no block is handed out twice (a pinned block
/// does not move, so two pinned blocks at one address would be one block handed out twice),
/// the cells' hand-outs and frees stay consistent (their debug assertions), and everything
/// returns at the end.
#[test]
fn relocating_cached_pairs_racing_relocations_and_flushes_never_hand_a_block_out_twice() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let (core, src) = sim_core(16 * GIB, "relocation:merge");
    let shared = stream(1).0;
    let live: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let relocate_round = |core: &CachingAllocator<SimBackend>| {
        let a = |mib: u64| core.alloc(mib * MIB, &shared).unwrap();
        let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
        drop((p, r));
        let big = a(8);
        drop((q, x, y, z, big));
    };
    // Once alone: the round moves a block.
    relocate_round(&core);
    assert_eq!(core.relocation_stats().moves, 1);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (core, live, s) = (core.clone(), live.clone(), shared.clone());
            std::thread::spawn(move || {
                for i in 0..3_000u64 {
                    let held: Vec<_> = (0..1 + i % 3)
                        .map(|_| core.alloc(2 * MIB, &s).unwrap())
                        .collect();
                    let pins: Vec<_> = held.iter().map(Allocation::pin).collect();
                    let addresses: Vec<u64> = held
                        .iter()
                        .zip(&pins)
                        .map(|(a, pin)| {
                            a.with_pinned_segment(pin, |segment, offset| segment.address + offset)
                                .unwrap()
                        })
                        .collect();
                    for &address in &addresses {
                        assert!(live.lock().unwrap().insert(address), "handed out twice");
                    }
                    for address in addresses {
                        live.lock().unwrap().remove(&address);
                    }
                    drop(pins);
                    drop(held);
                }
            })
        })
        .collect();
    let flusher = {
        let (core, stop) = (core.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if i % 2 == 0 {
                    let _ = core.memory_stats();
                } else {
                    core.empty_cache();
                }
                i = i.wrapping_add(1);
                std::thread::yield_now();
            }
        })
    };
    let mut rounds = 0;
    while !workers.iter().all(JoinHandle::is_finished) {
        relocate_round(&core);
        rounds += 1;
    }
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flusher.join().unwrap();
    assert!(rounds > 0);
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    assert_eq!(stats.requested_bytes.all.current, 0);
    assert_eq!(stats.allocation.all.allocated, stats.allocation.all.freed);
    core.empty_cache();
    assert_eq!(core.memory_reserved(), 0);
    assert_eq!(src.counters().live_segments, 0);
}

/// An operation of the property test, run by worker thread `thread` (ops are sequential:
/// each waits for the previous one).
#[derive(Clone, Debug)]
enum Op {
    /// Allocate and free at once (a cached pair after the first).
    Pair {
        thread: usize,
        stream: usize,
        size: u64,
    },
    Alloc {
        thread: usize,
        stream: usize,
        size: u64,
    },
    /// Free a live block on a thread (often not the allocating one).
    Free {
        thread: usize,
        pick: usize,
    },
    RecordStream {
        pick: usize,
        stream: usize,
    },
    CloseGate {
        stream: usize,
    },
    OpenGate {
        stream: usize,
    },
    EmptyCache,
    Fraction {
        percent: u8,
    },
    SetConfig {
        power2: bool,
    },
    /// The worker exits (its cache returns its blocks) and a new thread takes its place.
    Exit {
        thread: usize,
    },
    Check,
}

const THREADS: usize = 3;
const STREAMS: usize = 3;

fn op_strategy() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => prop::sample::select(vec![512u64, 4096, 700, 65_536]),
        1 => 1u64..=(1 << 20),
    ];
    prop_oneof![
        8 => (0..THREADS, 0..STREAMS, size.clone()).prop_map(|(thread, stream, size)| Op::Pair { thread, stream, size }),
        6 => (0..THREADS, 0..STREAMS, size).prop_map(|(thread, stream, size)| Op::Alloc { thread, stream, size }),
        6 => (0..THREADS, any::<usize>()).prop_map(|(thread, pick)| Op::Free { thread, pick }),
        2 => (any::<usize>(), 0..STREAMS).prop_map(|(pick, stream)| Op::RecordStream { pick, stream }),
        1 => (0..STREAMS).prop_map(|stream| Op::CloseGate { stream }),
        2 => (0..STREAMS).prop_map(|stream| Op::OpenGate { stream }),
        1 => Just(Op::EmptyCache),
        1 => (30u8..=100).prop_map(|percent| Op::Fraction { percent }),
        1 => any::<bool>().prop_map(|power2| Op::SetConfig { power2 }),
        1 => (0..THREADS).prop_map(|thread| Op::Exit { thread }),
        3 => Just(Op::Check),
    ]
}

/// A block of both allocators: the one under test and the reference.
type Pair = (Allocation<SimBackend>, Allocation<SimBackend>);

/// A worker thread running jobs one at a time.
struct Worker {
    jobs: mpsc::Sender<Box<dyn FnOnce() + Send>>,
    handle: JoinHandle<()>,
}

impl Worker {
    fn new() -> Self {
        let (jobs, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let handle = std::thread::spawn(move || rx.into_iter().for_each(|job| job()));
        Self { jobs, handle }
    }

    /// Runs `f` on the worker and returns its result.
    fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .expect("worker alive");
        rx.recv().expect("job ran")
    }

    /// Ends the worker and waits for its exit (thread-local destructors included).
    fn exit(self) {
        drop(self.jobs);
        self.handle.join().expect("worker");
    }
}

/// The statistics a thread cache must leave exactly as the slow path's, for small-pool
/// blocks (always split to the rounded size, so the same sizes whatever block is chosen):
/// every figure of these arrays, peaks included.
fn choice_free(s: &MemoryStats) -> impl PartialEq + std::fmt::Debug {
    (
        s.allocation,
        s.allocated_bytes,
        s.active,
        s.active_bytes,
        s.requested_bytes,
        s.oversize_allocations,
        s.num_ooms,
    )
}

/// Runs `ops` on an allocator with threads' caches and, in the same threads and order, on
/// the reference (a private-pool-style allocator: no thread cache), and compares them.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let src = Arc::new(SimulatedSource::new(0, 4 * GIB, 4 * GIB));
    let reference_src = Arc::new(SimulatedSource::new(0, 4 * GIB, 4 * GIB));
    let cached: CachingAllocator<SimBackend> =
        CachingAllocator::new(Box::new(src.clone()), AllocConfig::default());
    let reference: CachingAllocator<SimBackend> = CachingAllocator::with_setup(
        Box::new(reference_src),
        AllocConfig::default(),
        Arc::new(History::new()),
        None,
    );
    let streams: Vec<Arc<SimStream>> = (0..STREAMS as u64).map(|i| stream(i + 1).0).collect();
    let mut workers: Vec<Worker> = (0..THREADS).map(|_| Worker::new()).collect();
    let mut live: Vec<Pair> = Vec::new();
    for op in ops {
        match *op {
            Op::Pair {
                thread,
                stream,
                size,
            } => {
                let (c, r, s) = (cached.clone(), reference.clone(), streams[stream].clone());
                workers[thread].run(move || {
                    drop(c.alloc(size, &s).unwrap());
                    drop(r.alloc(size, &s).unwrap());
                });
            }
            Op::Alloc {
                thread,
                stream,
                size,
            } => {
                let (c, r, s) = (cached.clone(), reference.clone(), streams[stream].clone());
                let pair = workers[thread]
                    .run(move || (c.alloc(size, &s).unwrap(), r.alloc(size, &s).unwrap()));
                prop_assert_eq!(pair.0.allocated_size(), pair.1.allocated_size());
                live.push(pair);
            }
            Op::Free { thread, pick } => {
                if !live.is_empty() {
                    let pair = live.swap_remove(pick % live.len());
                    workers[thread].run(move || drop(pair));
                }
            }
            Op::RecordStream { pick, stream } => {
                if !live.is_empty() {
                    let (c, r) = &live[pick % live.len()];
                    cached.record_stream(c, &streams[stream]).unwrap();
                    reference.record_stream(r, &streams[stream]).unwrap();
                }
            }
            Op::CloseGate { stream } => drop(streams[stream].close_gate()),
            Op::OpenGate { stream } => streams[stream].open_gate(),
            Op::EmptyCache => {
                cached.empty_cache();
                reference.empty_cache();
            }
            Op::Fraction { percent } => {
                let f = f64::from(percent) / 100.0;
                cached.set_memory_fraction(f).unwrap();
                reference.set_memory_fraction(f).unwrap();
            }
            Op::SetConfig { power2 } => {
                let text = if power2 {
                    "roundup_power2_divisions:4"
                } else {
                    ""
                };
                cached.set_config(AllocConfig::parse(text).unwrap());
                reference.set_config(AllocConfig::parse(text).unwrap());
            }
            Op::Exit { thread } => {
                let fresh = Worker::new();
                std::mem::replace(&mut workers[thread], fresh).exit();
            }
            Op::Check => check(&cached, &reference, &src, &live)?,
        }
    }
    check(&cached, &reference, &src, &live)?;
    for pair in live.drain(..) {
        drop(pair);
    }
    for w in workers {
        w.exit();
    }
    for s in &streams {
        s.open_gate();
    }
    cached.empty_cache();
    reference.empty_cache();
    prop_assert_eq!(
        choice_free(&cached.memory_stats()),
        choice_free(&reference.memory_stats())
    );
    prop_assert_eq!(cached.memory_reserved(), 0);
    prop_assert_eq!(src.counters().live_segments, 0);
    Ok(())
}

fn check(
    cached: &CachingAllocator<SimBackend>,
    reference: &CachingAllocator<SimBackend>,
    src: &SimulatedSource,
    live: &[Pair],
) -> Result<(), TestCaseError> {
    let stats = cached.memory_stats();
    prop_assert_eq!(choice_free(&stats), choice_free(&reference.memory_stats()));
    // The rest against the cached allocator's own blocks (read after the flush).
    let snapshot = cached.snapshot();
    let reserved: u64 = snapshot.iter().map(|s| s.size).sum();
    prop_assert_eq!(reserved, cached.memory_reserved());
    prop_assert_eq!(reserved, src.counters().used);
    let (mut split_n, mut split_b) = (0i64, 0i64);
    for seg in &snapshot {
        for b in &seg.blocks {
            if b.state == crate::allocator::BlockState::Inactive && seg.blocks.len() > 1 {
                split_n += 1;
                split_b += i64::try_from(b.size).unwrap();
            }
        }
    }
    prop_assert_eq!(stats.inactive_split.all.current, split_n);
    prop_assert_eq!(stats.inactive_split_bytes.all.current, split_b);
    let mut ranges: Vec<(u64, u64)> = live
        .iter()
        .map(|(c, _)| (c.address(), c.address() + c.allocated_size()))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        prop_assert!(w[0].1 <= w[1].0, "live blocks overlap: {:?}", w);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Cached pairs, cross-thread frees, record_stream with held streams, empty_cache,
    /// memory fraction and configuration changes and thread exits: the statistics equal
    /// the slow path's (a reference allocator without thread caches, same threads, same
    /// order), the snapshot agrees with them, and everything returns at the end.
    #[test]
    fn thread_caches_leave_the_statistics_of_the_slow_path(ops in prop::collection::vec(op_strategy(), 1..120)) {
        run(&ops)?;
    }
}

/// A block is handed out as relocating only where the allocator can move it
/// (`AllocConfig::relocates`, `AllocConfig::relocates_small`): `relocation:merge` (large
/// blocks) or `merge_all` (small ones too) under `before_grow` with split segments, on an allocator that is not a private
/// pool's. Elsewhere its drop and its `address()` take the paths of a block that never
/// moves.
#[test]
fn only_an_allocator_that_can_relocate_hands_out_relocating_blocks() {
    let (s, _) = stream(1);
    for (conf, small, large) in [
        ("relocation:merge", false, true),
        ("relocation:merge_all", true, true),
        ("relocation:off", false, false),
        ("relocation:merge,release_policy:on_oom", false, false),
        ("relocation:merge_all,release_policy:on_oom", false, false),
        ("relocation:merge,split_segments:False", false, false),
    ] {
        let (core, _src) = sim_core(GIB, conf);
        let a = core.alloc(4096, &s).unwrap();
        assert_eq!(a.relocatable(), small, "{conf}: a small block");
        // Just above the small pool's bound: a large-pool request.
        let b = core.alloc((1 << 20) + 1, &s).unwrap();
        assert_eq!(b.relocatable(), large, "{conf}: a large block");
    }
    // A private pool's allocator never relocates, whatever its configuration.
    let pool: CachingAllocator<SimBackend> = CachingAllocator::with_setup(
        Box::new(Arc::new(SimulatedSource::new(0, GIB, GIB))),
        AllocConfig::parse("relocation:merge_all").unwrap(),
        Arc::new(History::new()),
        None,
    );
    assert!(!pool.alloc(4096, &s).unwrap().relocatable());
    assert!(!pool.alloc(8 << 20, &s).unwrap().relocatable());
}
