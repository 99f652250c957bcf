//! User code handed to the allocator runs under no allocator lock: a closure may call the
//! allocator back, on the same stream too, without deadlocking.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::{AllocConfig, CachingAllocator, SimBackend, SimulatedSource, StreamKey};

/// Runs `f` on a thread and fails the test when it does not finish in `secs` (a deadlock).
fn finishes_within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the call deadlocked (no result within the time limit)")
}

/// An allocator over a simulated 1 GiB device 0, default configuration.
fn sim_cache() -> CachingAllocator<SimBackend> {
    let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
    CachingAllocator::new(Box::new(source), AllocConfig::default())
}

/// `Allocation::with_segment` hands its closure the segment; the closure may allocate,
/// free and record streams on the same stream (user code, not run under the stream's lock).
#[test]
fn with_segment_closure_may_call_the_allocator_on_the_same_stream() {
    let (offset, inner_size, stats_allocated) = finishes_within(20, || {
        let cache = sim_cache();
        let stream = SimStream::new(StreamKey::new(0, 1));
        let other = SimStream::new(StreamKey::new(0, 2));
        let a = cache.allocate(4096, &stream).unwrap().unwrap();
        let b = cache.allocate(4096, &stream).unwrap().unwrap();
        let (offset, inner_size) = a
            .with_segment(|segment, offset| {
                assert!(offset + 4096 <= segment.size);
                let inner = cache.allocate(1024, &stream).unwrap().unwrap();
                b.record_stream(&other);
                let size = inner.allocated_size();
                drop(inner);
                (offset, size)
            })
            .expect("a live allocation has a segment");
        drop(b);
        let allocated = cache.memory_stats().allocated_bytes.all.current;
        drop(a);
        (offset, inner_size, allocated)
    });
    assert_eq!(offset % 512, 0);
    assert_eq!(inner_size, 1024);
    assert_eq!(stats_allocated, 4096, "only `a` is live then");
}

/// A stream of another device gets no shard of a device's allocator: its allocation would
/// report the stream's device for memory of the allocator's device.
#[test]
fn allocate_refuses_a_stream_of_another_device() {
    let cache = sim_cache();
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
