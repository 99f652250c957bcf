//! A custom segment source (`MemPool::with_source`) is checked, not trusted: a segment smaller than
//! its size is refused; a stale routing guard does not end a later routing to the same pool.
//!
//! Review h11: a custom segment source (a safe trait, `MemPool::with_source`) is user code,
//! and the memory behind its segments is checked, not trusted.
//!
//! Aliasing is ruled out by the types: a segment's buffer is made only from an
//! `ExclusiveBuffer` (fresh, or vouched for in `unsafe` code), and no safe call hands a
//! segment's buffer back out. What the allocator checks is the rest: a segment whose memory
//! holds fewer bytes than its size.

mod common;

use xpu_alloc::{BufferSource, MemPool, SegmentMemory, SegmentSource, SourceError, SourceSegment};

use common::MIB;

/// Takes an honest 2 MiB segment from device 0's buffer source and reports it as the size
/// asked for (the fields are public: safe code can).
struct Inflating(BufferSource);

impl SegmentSource for Inflating {
    type Memory = SegmentMemory;
    fn device(&self) -> usize {
        self.0.device()
    }
    fn name(&self) -> String {
        "inflating".into()
    }
    fn total_memory(&self) -> u64 {
        self.0.total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.0.max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.0.base_addr_align()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = self.0.allocate(2 * MIB)?;
        segment.size = size;
        Ok(segment)
    }
    fn free(&self, mut segment: SourceSegment) {
        segment.size = 2 * MIB;
        self.0.free(segment);
    }
}

/// Before: the 20 MiB allocation was handed out over a 2 MiB buffer, and every command on
/// its last 18 MiB (a fill, a kernel through the segment's buffer and an offset) reached
/// past the `cl_mem`. Now the segment is refused with a device error and goes back.
#[test]
fn a_segment_whose_memory_is_smaller_than_its_size_is_refused() {
    if !xpu_testing::devices(1) {
        return;
    }
    let source = Inflating(BufferSource::new(0).unwrap());
    let pool = MemPool::with_source(0, source).unwrap();
    let stream = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let refused = pool.allocate(20 * MIB, &stream);
    let message = refused.expect_err("an undersized segment").to_string();
    assert!(
        message.contains("whose memory holds 2097152 bytes"),
        "{message}"
    );
    assert_eq!(pool.memory_reserved(), 0, "nothing kept");
}

/// A `MemPoolGuard` whose routing was ended explicitly (`end_allocate_to_pool`) ended, when
/// it dropped, the routing a later `use_mem_pool` of the same pool started
/// (`end_allocate_to_pool` removes the innermost routing to that pool, whoever started it):
/// the live guard `g2` then routed nothing. Now a guard ends its own routing only.
#[test]
fn a_stale_guard_does_not_end_a_later_routing_to_the_same_pool() {
    let Some(stream) = common::device_stream() else {
        return;
    };
    let pool = MemPool::new(0).unwrap();
    let g1 = xpu_alloc::use_mem_pool(&pool).unwrap();
    xpu_alloc::end_allocate_to_pool(&pool).unwrap();
    let g2 = xpu_alloc::use_mem_pool(&pool).unwrap();
    drop(g1); // its routing ended above: it must leave g2's alone
    let p = xpu_alloc::allocate(1 << 20, &stream).unwrap();
    let (routing, owned) = (pool.routing_threads(), pool.owns(&p));
    drop(p);
    drop(g2);
    assert_eq!(
        (routing, owned, pool.routing_threads()),
        (1, true, 0),
        "(threads routing to the pool, allocation from the pool) while g2 lives, then routing \
         after g2"
    );
}
