//! A device's allocator serves only streams of its device: the allocation's device is the
//! memory's device.

use std::sync::Arc;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::{AllocConfig, CachingAllocator, SimBackend, SimulatedSource, StreamKey};

/// A stream of another device gets no shard of a device's allocator: its allocation would
/// report the stream's device for memory of the allocator's device.
#[test]
fn allocate_refuses_a_stream_of_another_device() {
    let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
    let cache = CachingAllocator::<SimBackend>::new(Box::new(source), AllocConfig::default());
    let foreign = SimStream::new(StreamKey::new(1, 1));
    let err = cache.allocate(4096, &foreign).unwrap_err();
    assert_eq!(
        err,
        xpu_caching::CacheError::StreamDevice {
            stream: 1,
            device: 0
        }
    );
    assert_eq!(cache.memory_stats().reserved_bytes.all.current, 0);
    assert_eq!(cache.memory_stats().num_alloc_retries, 0);
    let own = SimStream::new(StreamKey::new(0, 1));
    let a = cache.allocate(4096, &own).unwrap().unwrap();
    assert_eq!(a.device(), 0);
}
