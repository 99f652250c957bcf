//! Peaks across threads: torch's `max_memory_allocated` / `max_memory_reserved` are the
//! device's true peaks whatever thread allocates or frees (one `DeviceStats` under the
//! allocator's lock).

use std::sync::mpsc;

use super::{sim_core, stream, Allocation, CachingAllocator, GIB, MIB};
use crate::sim_stream::SimBackend;
use crate::stats::MemoryStats;

const MIB_I: i64 = MIB as i64;

/// Both configurations the cross-thread frees are tested under: relocation on for large
/// blocks (the default) and off.
const CONFS: [&str; 2] = ["", "relocation:off"];

/// (current, peak) of allocated bytes, active bytes, requested bytes, allocations and
/// active blocks.
fn figures(stats: &MemoryStats) -> [(i64, i64); 5] {
    [
        &stats.allocated_bytes.all,
        &stats.active_bytes.all,
        &stats.requested_bytes.all,
        &stats.allocation.all,
        &stats.active.all,
    ]
    .map(|s| (s.current, s.peak))
}

/// `figures` for `blocks` live 1 MiB blocks and a peak of `peak` of them.
fn of_blocks(blocks: i64, peak: i64) -> [(i64, i64); 5] {
    let bytes = (blocks * MIB_I, peak * MIB_I);
    [bytes, bytes, bytes, (blocks, peak), (blocks, peak)]
}

/// Statistics slots handed out so far, and free ones.
fn slots(core: &CachingAllocator<SimBackend>) -> (u32, usize) {
    core.inner.shared.stats.slots()
}

/// A producer thread allocates 1 MiB blocks one at a time and hands each to a consumer
/// thread, which frees it before the producer allocates the next: at most one block is ever
/// live, so the peak of allocated bytes is 1 MiB (and the active and requested peaks with
/// it), however many blocks pass.
#[test]
fn a_block_allocated_on_one_thread_and_freed_on_another_peaks_once() {
    for conf in ["", "relocation:off"] {
        let (core, _src) = sim_core(GIB, conf);
        let (s, _) = stream(1);
        core.reset_peak_stats();
        let (to_consumer, blocks) = mpsc::sync_channel(0);
        let (to_producer, freed) = mpsc::sync_channel::<()>(0);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                for block in blocks {
                    drop(block);
                    to_producer.send(()).unwrap();
                }
            });
            for _ in 0..100 {
                to_consumer.send(core.alloc(MIB, &s).unwrap()).unwrap();
                freed.recv().unwrap();
            }
            drop(to_consumer);
        });
        let stats = core.memory_stats();
        assert_eq!(stats.allocated_bytes.all.current, 0, "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 100, "{conf:?}");
        assert_eq!(
            stats.allocated_bytes.all.peak, MIB as i64,
            "{conf:?}: one block was ever live"
        );
        assert_eq!(stats.active_bytes.all.peak, MIB as i64, "{conf:?}");
        assert_eq!(stats.requested_bytes.all.peak, MIB as i64, "{conf:?}");
        assert_eq!(stats.allocation.all.peak, 1, "{conf:?}");
        assert_eq!(figures(&stats), of_blocks(0, 1), "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 100, "{conf:?}");
        assert_eq!(stats.allocated_bytes.all.freed, 100 * MIB_I, "{conf:?}");
        assert_eq!(stats.active.all.freed, 100, "{conf:?}");
        assert_eq!(stats.requested_bytes.all.allocated, 100 * MIB_I, "{conf:?}");
    }
}

/// A consumer thread frees the producer's blocks, then exits: what it freed stays counted
/// (the decreases were the producer's cell's), and its slot, which no block counts, is
/// free for the next thread.
#[test]
fn a_consumer_that_exits_leaves_the_blocks_it_freed_counted() {
    for conf in CONFS {
        let (core, _src) = sim_core(GIB, conf);
        let (s, _) = stream(1);
        let blocks: Vec<_> = (0..3).map(|_| core.alloc(MIB, &s).unwrap()).collect();
        std::thread::spawn(move || drop(blocks)).join().unwrap();
        let stats = core.memory_stats();
        assert_eq!(figures(&stats), of_blocks(0, 3), "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 3, "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 3, "{conf:?}");
        // Slots: this thread's, the consumer's (free now), the spare cell its exit used.
        assert_eq!(
            slots(&core),
            (3, 1),
            "{conf:?}: the consumer's slot is free"
        );
        let a = core.alloc(MIB, &s).unwrap();
        assert_eq!(figures(&core.memory_stats()), of_blocks(1, 3), "{conf:?}");
        drop(a);
        // Another thread takes the consumer's slot (its cell starts from zero).
        let core2 = core.clone();
        std::thread::spawn(move || drop(core2.alloc(MIB, &stream(1).0).unwrap()))
            .join()
            .unwrap();
        assert_eq!(
            slots(&core),
            (3, 1),
            "{conf:?}: the slot was reused, then freed"
        );
        let stats = core.memory_stats();
        // That thread's own hand-out peaks in its cell (folded into the exited threads'):
        // a peak is still the sum of the cells' peaks, here 3 + 1.
        assert_eq!(figures(&stats), of_blocks(0, 4), "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 5, "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 5, "{conf:?}");
    }
}

/// A producer thread exits with its blocks live: the blocks freed later (by this thread)
/// are owed to its retired cell, and its slot becomes free once the last one is freed.
#[test]
fn a_producer_that_exits_before_its_blocks_are_freed_keeps_its_slot_until_they_are() {
    for conf in CONFS {
        let (core, _src) = sim_core(GIB, conf);
        let producer = core.clone();
        let mut blocks = std::thread::spawn(move || {
            let s = stream(1).0;
            (0..3)
                .map(|_| producer.alloc(MIB, &s).unwrap())
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        assert_eq!(figures(&core.memory_stats()), of_blocks(3, 3), "{conf:?}");
        // Slots: the producer's (owed to), the spare cell its exit used, this thread's.
        assert_eq!(
            slots(&core),
            (3, 0),
            "{conf:?}: the producer's slot is owed to"
        );
        drop(blocks.pop());
        drop(blocks.pop());
        let stats = core.memory_stats();
        assert_eq!(figures(&stats), of_blocks(1, 3), "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 2, "{conf:?}");
        assert_eq!(slots(&core), (3, 0), "{conf:?}");
        core.reset_peak_stats();
        assert_eq!(figures(&core.memory_stats()), of_blocks(1, 1), "{conf:?}");
        drop(blocks.pop());
        let stats = core.memory_stats();
        assert_eq!(figures(&stats), of_blocks(0, 1), "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 3, "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 3, "{conf:?}");
        assert_eq!(
            slots(&core),
            (3, 1),
            "{conf:?}: no block counts the producer's slot"
        );
        // The next thread takes that slot; its cell starts from zero (after a reset, the
        // peak is that thread's alone).
        core.reset_peak_stats();
        let core2 = core.clone();
        std::thread::spawn(move || {
            let s = stream(1).0;
            let two = [core2.alloc(MIB, &s).unwrap(), core2.alloc(MIB, &s).unwrap()];
            drop(two);
        })
        .join()
        .unwrap();
        assert_eq!(slots(&core), (3, 1), "{conf:?}");
        let stats = core.memory_stats();
        assert_eq!(figures(&stats), of_blocks(0, 2), "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 5, "{conf:?}");
    }
}

/// A peak reset requested after another thread freed the producer's blocks, before the
/// producer wrote its cell again: the blocks freed before the reset are not live at it.
/// A block live at the reset is.
#[test]
fn a_peak_reset_after_another_thread_freed_the_producer_s_blocks_does_not_count_them() {
    for conf in CONFS {
        let (core, _src) = sim_core(GIB, conf);
        let (to_main, blocks) = mpsc::sync_channel::<Vec<Allocation<SimBackend>>>(0);
        let (go, wait) = mpsc::sync_channel::<usize>(0);
        let producer = core.clone();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let s = stream(1).0;
                for n in wait {
                    let v = (0..n).map(|_| producer.alloc(MIB, &s).unwrap()).collect();
                    to_main.send(v).unwrap();
                }
            });
            go.send(2).unwrap();
            drop(blocks.recv().unwrap());
            assert_eq!(figures(&core.memory_stats()), of_blocks(0, 2), "{conf:?}");
            core.reset_peak_stats();
            assert_eq!(figures(&core.memory_stats()), of_blocks(0, 0), "{conf:?}");
            go.send(1).unwrap();
            let one = blocks.recv().unwrap();
            assert_eq!(figures(&core.memory_stats()), of_blocks(1, 1), "{conf:?}");
            // One block stays live across the next reset, one is freed before it.
            go.send(1).unwrap();
            let two = blocks.recv().unwrap();
            assert_eq!(figures(&core.memory_stats()), of_blocks(2, 2), "{conf:?}");
            drop(one);
            core.reset_peak_stats();
            assert_eq!(figures(&core.memory_stats()), of_blocks(1, 1), "{conf:?}");
            drop(two);
            go.send(0).unwrap();
            drop(blocks.recv().unwrap());
            assert_eq!(figures(&core.memory_stats()), of_blocks(0, 1), "{conf:?}");
            drop(go);
        });
    }
}

/// Frees on the allocating thread go into its cache without the stream's lock and count as
/// before; a free on another thread takes the lock (never that thread's cache) and counts
/// in the allocating thread's cell: the consumer allocating the same size afterwards gets
/// a block from the stream's pool.
#[test]
fn a_free_on_the_allocating_thread_is_cached_and_one_on_another_takes_the_lock() {
    for conf in CONFS {
        let (core, _src) = sim_core(GIB, conf);
        let (s, _) = stream(1);
        drop(core.alloc(MIB, &s).unwrap());
        let shard = core.all_shards().pop().expect("the stream's shard");
        let before = shard.locks_taken();
        for _ in 0..10 {
            drop(core.alloc(MIB, &s).unwrap());
        }
        assert_eq!(shard.locks_taken(), before, "{conf:?}: the cached pairs");
        assert_eq!(figures(&core.memory_stats()), of_blocks(0, 1), "{conf:?}");
        let a = core.alloc(MIB, &s).unwrap();
        let core2 = core.clone();
        std::thread::spawn(move || {
            let before = core2.all_shards()[0].locks_taken();
            drop(a);
            assert_eq!(
                core2.all_shards()[0].locks_taken(),
                before + 1,
                "the locked free"
            );
            // This thread's cache holds no block: its allocation takes the lock.
            let b = core2.alloc(MIB, &stream(1).0).unwrap();
            assert_eq!(core2.all_shards()[0].locks_taken(), before + 2);
            drop(b);
        })
        .join()
        .unwrap();
        let stats = core.memory_stats();
        // Still approximate: the consumer's own hand-out peaks in its own cell, and the
        // device-wide peak is the sum of the two cells' (an upper bound of the true 1).
        assert_eq!(figures(&stats), of_blocks(0, 2), "{conf:?}");
        assert_eq!(stats.allocation.all.allocated, 13, "{conf:?}");
        assert_eq!(stats.allocation.all.freed, 13, "{conf:?}");
        assert_eq!(stats.oversize_allocations.current, 0, "{conf:?}");
    }
}

/// A block with a recorded use on another stream, freed by another thread: its allocation
/// ends at the free, it stays active until the use's marker completes and a later call
/// (on any thread) processes it, and both decreases are the allocating cell's: the peaks
/// stay those of one block, round after round.
#[test]
fn a_block_with_a_recorded_use_freed_on_another_thread_deactivates_in_its_allocating_cell() {
    for conf in CONFS {
        let (core, _src) = sim_core(GIB, conf);
        let (s, _) = stream(1);
        let (other, _) = stream(2);
        for round in 1..=5 {
            let gate = other.close_gate();
            let a = core.alloc(MIB, &s).unwrap();
            core.record_stream(&a, &other).unwrap();
            std::thread::spawn(move || drop(a)).join().unwrap();
            let stats = core.memory_stats();
            assert_eq!(stats.allocation.all.current, 0, "{conf:?}");
            assert_eq!(stats.active.all.current, 1, "{conf:?}: pending its marker");
            assert_eq!(stats.active_bytes.all.current, MIB_I, "{conf:?}");
            gate.open();
            // Another thread's `empty_cache` processes the completed marker.
            let core2 = core.clone();
            std::thread::spawn(move || core2.empty_cache())
                .join()
                .unwrap();
            let stats = core.memory_stats();
            assert_eq!(figures(&stats), of_blocks(0, 1), "{conf:?}, round {round}");
            assert_eq!(stats.requested_bytes.all.current, 0, "{conf:?}");
        }
    }
}
