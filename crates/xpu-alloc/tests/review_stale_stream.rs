//! An allocation stream whose external queue was released before the allocator first saw it
//! (a stale `Stream` handle of a dropped `ExternalStream`): no work can ever be enqueued on
//! it, so its cached segments are released by `empty_cache` like any other (they stayed
//! reserved for good: every release needs a marker on the stream, which failed).

mod common;

use xpu_alloc::{AllocConfig, DeviceAllocator};

use common::{fresh_stream, MIB};

#[test]
fn empty_cache_releases_the_segments_of_a_stream_released_before_its_first_allocation() {
    if !xpu_testing::devices(1) {
        return;
    }
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let stale = {
        let external = fresh_stream(0);
        external.stream()
    }; // unregistered: its queue is released
    assert!(stale.queue().is_err());
    let block = alloc.allocate(4 * MIB, &stale).unwrap();
    assert!(alloc.core().memory_reserved() >= 4 * MIB);
    drop(block);
    alloc.empty_cache();
    let stats = alloc.memory_stats();
    assert_eq!(
        (stats.reserved_bytes.all.current, stats.segment.all.current),
        (0, 0),
        "the stale stream's cached segment is released"
    );
    assert_eq!(stats.num_device_free, 1);
}
