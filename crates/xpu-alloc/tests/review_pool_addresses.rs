//! Block addresses stay unique on a device across its pools: a private pool's custom source
//! that hands out a segment overlapping a live segment of the default pool gets it refused
//! (freed again, a device error), instead of two live blocks at one address, where the raw
//! table of `raw_alloc` would silently drop (free) the first.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use xpu_alloc::{
    BufferSource, HookedSource, MemPool, SegmentSource, SourceError, SourceHooks, SourceSegment,
};

use common::device_stream;

/// Hooks handing out each of device 0's buffers at the address `at` holds (a source breaking
/// the documented rule that addresses are unique on the device).
struct At {
    at: Arc<AtomicU64>,
    real: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl SourceHooks<BufferSource> for At {
    fn allocate(&self, inner: &BufferSource, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = inner.allocate(size)?;
        let at = self.at.load(Ordering::SeqCst);
        self.real.lock().unwrap().push((at, segment.address));
        segment.address = at;
        Ok(segment)
    }
    fn free(&self, inner: &BufferSource, mut segment: SourceSegment) {
        let mut real = self.real.lock().unwrap();
        if let Some(i) = real.iter().position(|&(at, _)| at == segment.address) {
            segment.address = real.remove(i).1;
        }
        drop(real);
        inner.free(segment);
    }
}

#[test]
fn a_pool_segment_overlapping_a_live_default_pool_segment_is_refused() {
    let Some(s) = device_stream() else {
        return;
    };
    let a = xpu_alloc::raw_alloc_with_stream(4096, &s).unwrap();
    let segment = xpu_alloc::device_allocator(0)
        .unwrap()
        .core()
        .snapshot()
        .into_iter()
        .find(|seg| (seg.address..seg.address + seg.size).contains(&a.address()))
        .expect("a's segment");
    let at = Arc::new(AtomicU64::new(segment.address));
    let pool = MemPool::with_source(
        0,
        HookedSource::new(
            BufferSource::new(0).unwrap(),
            At {
                at: Arc::clone(&at),
                real: std::sync::Mutex::default(),
            },
        ),
    )
    .unwrap();
    let allocated_before = xpu_alloc::memory_allocated(0).unwrap();
    let b = {
        let _routed = xpu_alloc::use_mem_pool(&pool).unwrap();
        xpu_alloc::raw_alloc_with_stream(4096, &s)
    };
    let b_addr = b.as_ref().map(xpu_alloc::DevicePtr::address).ok();
    let b_err = b.as_ref().err().map(ToString::to_string);
    let allocated_after = xpu_alloc::memory_allocated(0).unwrap();
    // `a` must still be live, whatever happened to `b`.
    let a_deleted = xpu_alloc::raw_delete(a);
    if let Ok(b) = b {
        let _ = xpu_alloc::raw_delete(b);
    }
    assert!(
        a_deleted.is_ok(),
        "a was freed behind the caller's back (b at {b_addr:x?}, allocated {allocated_before} \
         -> {allocated_after}): {a_deleted:?}"
    );
    assert!(
        b_addr.is_none(),
        "the pool handed out a block at {b_addr:x?}, inside a live segment of the default pool"
    );
    assert_eq!(allocated_after, allocated_before, "nothing allocated for b");
    assert_eq!(
        pool.memory_reserved(),
        0,
        "the overlapping segment went back"
    );
    // The pool works again once its source hands out unique addresses.
    at.store(1 << 61, Ordering::SeqCst);
    let c = pool.allocate(4096, &s).unwrap();
    assert_eq!(c.address(), 1 << 61);
    let b_err = b_err.expect("b refused");
    assert!(b_err.contains("overlapping the live segment"), "{b_err}");
}
