//! Peaks across threads: torch's `max_memory_allocated` / `max_memory_reserved` are the
//! device's true peaks whatever thread allocates or frees (one `DeviceStats` under the
//! allocator's lock).

use std::sync::mpsc;

use super::{sim_core, stream, GIB, MIB};

/// A producer thread allocates 1 MiB blocks one at a time and hands each to a consumer
/// thread, which frees it before the producer allocates the next: at most one block is ever
/// live, so the peak of allocated bytes is 1 MiB (and the active and requested peaks with
/// it), however many blocks pass.
///
/// Not fixed: each thread's cell counts what its thread does, so the producer's cell
/// counts 100 hand-outs and no free, its current and peak climbing to 100 MiB, while the
/// consumer's current falls to -100 MiB; the sum of currents is exact, the sum of peaks is
/// 100 MiB and grows with every block that passes. Attributing a free to the allocating
/// thread's cell (a slot index in the allocation, debts its thread folds in at its next
/// write) would make it exact for this pattern; see docs/performance.md.
#[test]
#[ignore = "known deviation, not fixed: a peak is the sum of per-thread peaks, and a thread that only allocates (another frees) sees its current, and so its peak, grow without bound"]
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
    }
}
