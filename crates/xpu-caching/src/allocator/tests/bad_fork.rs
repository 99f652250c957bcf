//! The bad-fork hook ([`Backend::is_bad_fork`]): while it is true, every entry point refuses,
//! does nothing or answers a neutral value before taking any allocator lock or calling the
//! backend or the segment source, and drops leak. The allocator's locks are held by this
//! thread while the calls run on another (as a thread of the parent may hold them at a
//! fork), so a call that took one would hang, bounded by `HANG`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{returns, MIB};
use crate::allocator::CachingAllocator;
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::error::{CacheError, CopyError};
use crate::sim_stream::{SimBackend, SimMarker, SimStream};
use crate::source::{Simulated, SimulatedSource, SourceError};
use crate::stats::MemoryStats;
use crate::stream::{MarkerError, StreamKey};

/// The "fork" of the one test using [`Forked`].
static FORKED: AtomicBool = AtomicBool::new(false);
/// Backend calls made while [`FORKED`] is set.
static CALLS_IN_CHILD: AtomicU64 = AtomicU64::new(0);

fn note() {
    if FORKED.load(Ordering::SeqCst) {
        CALLS_IN_CHILD.fetch_add(1, Ordering::SeqCst);
    }
}

/// The simulated backend, counting its calls and answering [`FORKED`] as its bad fork.
#[derive(Clone)]
struct Forked;

impl Backend for Forked {
    type Memory = Simulated;
    type Stream = Arc<SimStream>;
    type Marker = SimMarker;

    fn stream_key(stream: &Arc<SimStream>) -> StreamKey {
        SimBackend::stream_key(stream)
    }
    fn record_marker(stream: &Arc<SimStream>) -> Result<SimMarker, MarkerError> {
        note();
        SimBackend::record_marker(stream)
    }
    fn marker_complete(marker: &SimMarker) -> bool {
        note();
        SimBackend::marker_complete(marker)
    }
    fn wait(marker: &SimMarker) -> Result<(), MarkerError> {
        note();
        SimBackend::wait(marker)
    }
    fn stream_wait(stream: &Arc<SimStream>, marker: &SimMarker) -> Result<(), MarkerError> {
        note();
        SimBackend::stream_wait(stream, marker)
    }
    fn synchronize(stream: &Arc<SimStream>) -> Result<(), MarkerError> {
        note();
        SimBackend::synchronize(stream)
    }
    fn enqueue_copy(
        stream: &Arc<SimStream>,
        src: &Simulated,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        note();
        SimBackend::enqueue_copy(stream, src, src_offset, dst, dst_offset, len)
    }
    fn is_bad_fork() -> bool {
        FORKED.load(Ordering::Relaxed)
    }
}

crate::thread_caches!(Forked);

#[test]
#[allow(clippy::too_many_lines)]
fn with_the_bad_fork_hook_set_no_entry_point_takes_a_lock_or_calls_the_backend() {
    let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
    let config =
        AllocConfig::parse("garbage_collection_threshold:0.5,split_segments:True").expect("config");
    let core = CachingAllocator::<Forked>::new(Box::new(source.clone()), config.clone());
    let (s, o) = (
        SimStream::new(StreamKey::new(0, 1)),
        SimStream::new(StreamKey::new(0, 2)),
    );
    core.set_memory_fraction(0.75).expect("fraction");
    core.memory_history().record_memory_history(true, 100);
    let live = core.alloc(MIB, &s).expect("allocation");
    drop(core.alloc(8 * MIB, &s).expect("allocation")); // a cached segment
    let idle = CachingAllocator::<Forked>::new(Box::new(source.clone()), AllocConfig::default());
    drop(idle.alloc(8 * MIB, &s).expect("allocation")); // its last handle drops below
    let stats = core.memory_stats();
    let weak = core.weak_shards();
    let counters = source.counters();
    assert!(counters.live_segments >= 3);

    FORKED.store(true, Ordering::SeqCst);
    let shard = live.shard.clone();
    let (map, oom, state) = (
        core.inner.shards.lock(),
        core.inner.oom_lock.lock(),
        shard.lock(),
    );
    let c = core.clone();
    let results = returns(move || {
        let refused = (
            c.allocate(4096, &s).map(|a| a.is_some()),
            c.allocate(0, &s).map(|a| a.is_some()),
            c.record_stream(&live, &o),
            c.set_memory_fraction(0.5),
        );
        c.empty_cache();
        c.reset_peak_stats();
        c.reset_accumulated_stats();
        c.set_config(AllocConfig::default());
        for w in &weak {
            w.release_cached();
        }
        let reads = (
            c.memory_stats() == MemoryStats::default(),
            c.memory_fraction(),
            c.mem_get_info(),
            c.reserved_bytes(),
            c.memory_allocated(),
            c.snapshot().len(),
            c.weak_shards().len(),
            c.memory_history().entries().len(),
            c.memory_history().is_enabled(),
            *c.config() == AllocConfig::default(),
            c.given_config() == AllocConfig::default(),
        );
        let shared = c.shared();
        let segment = shared
            .allocate_segment_from(shared.source(), 4096)
            .map(|s| s.size);
        shared.reset_peak_stats();
        shared.reset_accumulated_stats();
        shared.set_config(AllocConfig::default());
        let shared_reads = (
            shared.memory_stats() == MemoryStats::default(),
            shared.reserved(),
            shared.allowed(),
            shared.history().entries().len(),
        );
        let segment_of_live = live.with_segment(|s, _| s.size);
        live.record_stream(&o);
        drop(live);
        drop(idle);
        drop(c);
        (refused, reads, segment, shared_reads, segment_of_live)
    })
    .expect("an entry point took a lock held at the fork (hung)");
    drop((map, oom, state));
    let (refused, reads, segment, shared_reads, segment_of_live) = results;
    assert_eq!(
        refused,
        (
            Err(CacheError::BadFork),
            Err(CacheError::BadFork),
            Err(CacheError::BadFork),
            Err(CacheError::BadFork)
        )
    );
    assert_eq!(
        reads,
        (true, 1.0, (0, 0), 0, 0, 0, 0, 0, false, true, true),
        "(stats zero, fraction, mem_get_info, reserved, allocated, snapshot, weak shards, \
         history, history on, default config, default given config)"
    );
    assert!(
        matches!(&segment, Err(SourceError::Device(f)) if f.downcast_ref::<CacheError>() == Some(&CacheError::BadFork)),
        "allocate_segment_from: {segment:?}"
    );
    assert_eq!(shared_reads, (true, 0, None, 0));
    assert_eq!(segment_of_live, None);
    assert_eq!(CALLS_IN_CHILD.load(Ordering::SeqCst), 0, "backend calls");
    assert_eq!(source.counters(), counters, "segment source calls");

    // What the calls left, read with the hook off again.
    FORKED.store(false, Ordering::SeqCst);
    assert_eq!(core.memory_stats(), stats, "statistics changed");
    assert_eq!(*core.config(), config, "set_config ran");
    assert!((core.memory_fraction() - 0.75).abs() < f64::EPSILON);
    assert_eq!(source.counters(), counters, "a segment was released");
}
