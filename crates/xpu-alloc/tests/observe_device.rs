//! The observability functions over the process's device allocators, on a real device.

use xpu_alloc::TraceAction;
use xpu_testing::devices;

#[test]
fn history_snapshot_and_summary_of_the_device_allocator() {
    if !devices(1) {
        return;
    }
    xpu_alloc::record_memory_history(true, 64).unwrap();
    let stream = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let ptr = xpu_alloc::allocate(3 << 20, &stream).unwrap();

    let history = xpu_alloc::memory_history(0).unwrap();
    let alloc = history
        .iter()
        .rev()
        .find(|e| e.action == TraceAction::Alloc)
        .expect("alloc recorded");
    assert_eq!((alloc.addr, alloc.size), (ptr.address(), 3 << 20));
    assert_eq!(alloc.stream, stream.id());
    // A 20 MiB large-pool segment, or exactly the block where segments are not split.
    let segment = if xpu_alloc::device_splits_segments(0).unwrap() {
        20 << 20
    } else {
        3 << 20
    };
    assert!(history
        .iter()
        .any(|e| e.action == TraceAction::SegmentAlloc && e.size == segment));

    let snap = xpu_alloc::memory_snapshot();
    let block = snap
        .segments
        .iter()
        .filter(|s| s.device == 0)
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == ptr.address())
        .expect("the live block is in the snapshot");
    assert_eq!(
        (block.size, block.requested_size, block.state.as_str()),
        (3 << 20, 3 << 20, "active_allocated")
    );
    assert_eq!(snap.device_traces[0].last().unwrap().action, "snapshot");

    let summary = xpu_alloc::memory_summary(0, true).unwrap();
    let allocated = xpu_alloc::memory_allocated(0).unwrap();
    assert!(allocated >= 3 << 20);
    let row = summary
        .lines()
        .find(|l| l.starts_with("| Allocated memory"))
        .unwrap();
    assert!(
        row.contains(&format!("{:6} KiB", allocated / 1024)),
        "{row} vs {allocated}"
    );

    drop(ptr);
    let history = xpu_alloc::memory_history(0).unwrap();
    let tail: Vec<TraceAction> = history.iter().rev().take(2).map(|e| e.action).collect();
    assert_eq!(
        tail,
        [TraceAction::FreeCompleted, TraceAction::FreeRequested]
    );
    xpu_alloc::record_memory_history(false, 0).unwrap();
    assert!(xpu_alloc::memory_history(0).unwrap().is_empty());
}
