//! Exact statistics after known sequences (each test uses its own allocator).

mod host_common;

use host_common::{allocator, gated_stream, TestResult};
use xpu_host::Stat;
use xpu_host::{HostAllocator, HostError, HostMemoryStats};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

/// The statistics checks of these tests.
trait AssertCounts {
    /// The statistics, after asserting that the allocations and segments (in blocks) and the
    /// allocated and reserved bytes (in KiB) are `want`, each as
    /// `[current, peak, allocated, freed]`. A failure names the caller's line: the step.
    fn assert_counts(&self, want: [[i64; 4]; 4]) -> HostMemoryStats;
}

impl AssertCounts for HostAllocator {
    #[track_caller]
    fn assert_counts(&self, want: [[i64; 4]; 4]) -> HostMemoryStats {
        let s = self.memory_stats();
        let [allocations, allocated_kib, segments, reserved_kib] = want;
        let bytes = |kib: [i64; 4]| kib.map(|k| k * 1024);
        let want = [
            allocations,
            bytes(allocated_kib),
            segments,
            bytes(reserved_kib),
        ];
        let got = [s.allocation, s.allocated_bytes, s.segment, s.reserved_bytes];
        assert_eq!(got, want.map(|[c, p, a, f]| Stat::new(c, p, a, f)));
        s
    }
}

#[test]
fn stats_follow_a_known_sequence() -> Result<(), HostError> {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    assert_eq!(alloc.memory_stats(), HostMemoryStats::default());

    let p1 = alloc.allocate_on(0, 1000)?; // new 1024-byte block
    let s = alloc.assert_counts([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0]]);
    assert_eq!((s.num_host_alloc, s.num_host_free), (1, 0));
    assert_eq!((s.host_alloc_time.count, s.host_free_time.count), (1, 0));

    let p2 = alloc.allocate_on(0, 3000)?; // new 4096-byte block
    alloc.assert_counts([[2, 2, 2, 0], [5, 5, 5, 0], [2, 2, 2, 0], [5, 5, 5, 0]]);

    drop(p1);
    alloc.assert_counts([[1, 2, 2, 1], [4, 5, 5, 1], [2, 2, 2, 0], [5, 5, 5, 0]]);

    let p3 = alloc.allocate_on(0, 600)?; // the cached 1024-byte block
    let s = alloc.assert_counts([[2, 2, 3, 1], [5, 5, 6, 1], [2, 2, 2, 0], [5, 5, 5, 0]]);
    assert_eq!(s.num_host_alloc, 2);
    let t = s.host_alloc_time;
    assert_eq!(t.count, 2);
    assert!(t.min <= t.avg && t.avg <= t.max && t.max <= t.total);

    drop(p2);
    drop(p3);
    alloc.assert_counts([[0, 2, 3, 3], [0, 5, 6, 6], [2, 2, 2, 0], [5, 5, 5, 0]]);

    alloc.reset_peak_stats();
    alloc.assert_counts([[0, 0, 3, 3], [0, 0, 6, 6], [2, 2, 2, 0], [5, 5, 5, 0]]);

    alloc.empty_cache();
    let s = alloc.assert_counts([[0, 0, 3, 3], [0, 0, 6, 6], [0, 2, 2, 2], [0, 5, 5, 5]]);
    assert_eq!((s.num_host_alloc, s.num_host_free), (2, 2));
    assert_eq!((s.host_alloc_time.count, s.host_free_time.count), (2, 2));
    let t = s.host_free_time;
    assert!(t.min <= t.avg && t.avg <= t.max && t.max <= t.total);
    // Peaks of the allocation durations were reset above, before any new allocation.
    assert_eq!((s.host_alloc_time.max, s.host_alloc_time.min), (0, 0));

    alloc.reset_accumulated_stats();
    let s = alloc.assert_counts([[0; 4], [0; 4], [0, 2, 0, 0], [0, 5, 0, 0]]);
    assert_eq!((s.num_host_alloc, s.num_host_free), (0, 0));
    assert_eq!((s.host_alloc_time.count, s.host_alloc_time.total), (0, 0));
    assert_eq!((s.host_free_time.count, s.host_free_time.avg), (0, 0));

    alloc.reset_peak_stats();
    let s = alloc.assert_counts([[0; 4]; 4]);
    assert_eq!((s.host_alloc_time.max, s.host_alloc_time.min), (0, 0));

    // Zero size touches nothing.
    let z = alloc.allocate_on(0, 0)?;
    assert!(z.is_empty());
    assert_eq!(z.address(), 0);
    drop(z);
    assert_eq!(alloc.memory_stats(), s);
    Ok(())
}

#[test]
fn pending_blocks_stay_allocated_until_their_markers_complete() -> TestResult {
    let Some((alloc, s1, gate)) = gated_stream()? else {
        return Ok(());
    };
    let s2 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    gate.block(&s2)?;
    let p = alloc.allocate_on(0, 100)?; // 128-byte block
    p.record_stream(&s1)?;
    p.record_stream(&s2)?;
    p.record_stream(&s1)?;
    drop(p);
    let s = alloc.memory_stats();
    // As PyTorch: the block counts as allocated until it rejoins its free list.
    assert_eq!(s.allocation, Stat::new(1, 1, 1, 0));
    assert_eq!(s.allocated_bytes, Stat::new(128, 128, 128, 0));
    assert_eq!((s.pending_blocks, s.pending_markers), (1, 2));
    // Reading statistics does not process markers; empty_cache keeps the pending block.
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!(
        (s.pending_blocks, s.segment.current, s.num_host_free),
        (1, 1, 0)
    );

    gate.open()?;
    s1.synchronize()?;
    s2.synchronize()?;
    alloc.process_events();
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.pending_markers), (0, 0));
    assert_eq!(s.allocation, Stat::new(0, 1, 1, 1));
    assert_eq!(s.allocated_bytes, Stat::new(0, 128, 128, 128));
    assert_eq!(s.segment, Stat::new(1, 1, 1, 0));
    Ok(())
}
