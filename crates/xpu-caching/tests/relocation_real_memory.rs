//! `relocation:merge` moves blocks only over a source that holds no memory
//! (`SegmentSource::holds_no_memory`): a move copies nothing, so an allocator over real
//! memory never relocates, whatever its configuration says.

use std::sync::Arc;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::{
    AllocConfig, CachingAllocator, RelocationStats, SegmentSource, SimBackend, SimulatedSource,
    SourceError, SourceSegment, StreamKey,
};

const MIB: u64 = 1 << 20;

type Memory = <SimBackend as xpu_caching::Backend>::Memory;

/// The simulated source, answering as a source of real memory does (the trait's default).
struct RealMemory(SimulatedSource<Memory>);

impl SegmentSource for RealMemory {
    type Memory = Memory;
    fn device(&self) -> usize {
        self.0.device()
    }
    fn name(&self) -> String {
        self.0.name()
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
    fn allocate(&self, size: u64) -> Result<SourceSegment<Memory>, SourceError> {
        self.0.allocate(size)
    }
    fn free(&self, segment: SourceSegment<Memory>) {
        self.0.free(segment);
    }
}

/// Segment A holds p 6, q 2, r 6, s 6 MiB, segment B t 6 and u 8 MiB (a 6 MiB free tail);
/// p and r freed; then an 8 MiB request: (segments allocated, relocation figures).
fn after_the_8_mib_request(
    source: Box<dyn SegmentSource<Memory = Memory>>,
) -> (u64, RelocationStats) {
    let config = AllocConfig::parse("relocation:merge").unwrap();
    let cache = CachingAllocator::<SimBackend>::new(source, config);
    let stream = SimStream::new(StreamKey::new(0, 1));
    let a = |mib: u64| cache.allocate(mib * MIB, &stream).unwrap().unwrap();
    let (p, q, r, s, t, u) = (a(6), a(2), a(6), a(6), a(6), a(8));
    drop((p, r));
    let big = a(8);
    let figures = (
        cache.memory_stats().num_device_alloc,
        cache.relocation_stats(),
    );
    drop((q, s, t, u, big));
    figures
}

#[test]
fn relocation_moves_blocks_only_where_the_source_holds_no_memory() {
    let real = after_the_8_mib_request(Box::new(RealMemory(SimulatedSource::new(
        0,
        1 << 30,
        1 << 30,
    ))));
    assert_eq!(real, (3, RelocationStats::default()));
    let simulated = after_the_8_mib_request(Box::new(Arc::new(SimulatedSource::new(
        0,
        1 << 30,
        1 << 30,
    ))));
    assert_eq!((simulated.0, simulated.1.moves), (2, 1));
}
