//! Release batches whose marker reads pending after its wait returned (review h34, the race
//! of a wait numbered before a release marker but enqueued after it, on OpenCL): the
//! segments stay out while the marker is not known complete, and go back to the source
//! once it is (a later `empty_cache`, or the OOM path), never while it is pending or
//! after it failed.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{CachingAllocator, MIB};
use crate::backend::{Backend, MarkerStatus};
use crate::config::AllocConfig;
use crate::error::CopyError;
use crate::source::{Simulated, SimulatedSource};
use crate::stream::{MarkerError, StreamKey};

/// A stream whose markers' status is what the test sets: the status an ordered marker
/// reads from its stream's earlier waits (the driver completed the marker; a wait may be
/// judged pending or failed). Waits return at once.
struct Lagging {
    key: StreamKey,
    earlier: Arc<Mutex<MarkerStatus>>,
}

#[derive(Clone)]
struct LagBackend;

impl Backend for LagBackend {
    type Memory = Simulated;
    type Stream = Arc<Lagging>;
    type Marker = Arc<Mutex<MarkerStatus>>;

    fn stream_key(stream: &Arc<Lagging>) -> StreamKey {
        stream.key
    }
    fn record_marker(stream: &Arc<Lagging>) -> Result<Self::Marker, MarkerError> {
        Ok(stream.earlier.clone())
    }
    fn marker_complete(marker: &Self::Marker) -> bool {
        *marker.lock() == MarkerStatus::Complete
    }
    fn marker_status(marker: &Self::Marker) -> MarkerStatus {
        *marker.lock()
    }
    fn wait(_: &Self::Marker) -> Result<(), MarkerError> {
        Ok(())
    }
    fn stream_wait(_: &Arc<Lagging>, _: &Self::Marker) -> Result<(), MarkerError> {
        Ok(())
    }
    fn synchronize(_: &Arc<Lagging>) -> Result<(), MarkerError> {
        Ok(())
    }
    fn enqueue_copy(
        _: &Arc<Lagging>,
        src: &Simulated,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        src.check_copy_to(src_offset, dst, dst_offset, len)
    }
}

crate::thread_caches!(LagBackend);

/// An allocator over a simulated device of `capacity` bytes, its source, and a stream whose
/// markers read `earlier`'s status.
fn setup(
    capacity: u64,
) -> (
    CachingAllocator<LagBackend>,
    Arc<SimulatedSource>,
    Arc<Lagging>,
) {
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let core = CachingAllocator::new(Box::new(source.clone()), AllocConfig::default());
    let s = Arc::new(Lagging {
        key: StreamKey::new(0, 1),
        earlier: Arc::new(Mutex::new(MarkerStatus::Complete)),
    });
    (core, source, s)
}

/// A 4 MiB block allocated and freed on `s` (one 20 MiB segment cached), then an
/// `empty_cache` whose release marker reads pending: the segment stays out, reserved.
fn keep_one_out(core: &CachingAllocator<LagBackend>, source: &SimulatedSource, s: &Arc<Lagging>) {
    drop(core.allocate(4 * MIB, s).unwrap());
    assert_eq!(core.memory_reserved(), 20 * MIB);
    *s.earlier.lock() = MarkerStatus::Pending;
    core.empty_cache();
    assert_eq!(
        (core.memory_reserved(), source.counters().live_segments),
        (20 * MIB, 1),
        "a segment whose release marker reads pending stays reserved, not freed"
    );
}

#[test]
fn a_release_whose_marker_read_pending_is_freed_by_a_later_empty_cache_once_complete() {
    let (core, source, s) = setup(1 << 30);
    keep_one_out(&core, &source, &s);
    // Still pending: another `empty_cache` frees nothing.
    core.empty_cache();
    assert_eq!(
        (core.memory_reserved(), source.counters().live_segments),
        (20 * MIB, 1)
    );
    // The earlier wait completed with success: the marker reads complete.
    *s.earlier.lock() = MarkerStatus::Complete;
    core.empty_cache();
    assert_eq!(
        (core.memory_reserved(), source.counters().live_segments),
        (0, 0),
        "the kept segment goes back once its marker reads complete (reserved, live segments)"
    );
    assert_eq!(core.memory_stats().num_device_free, 1);
}

#[test]
fn the_oom_path_frees_a_kept_release_whose_marker_completed() {
    // 40 MiB: the kept 20 MiB segment and a new 30 MiB one do not fit together.
    let (core, source, s) = setup(40 * MIB);
    keep_one_out(&core, &source, &s);
    *s.earlier.lock() = MarkerStatus::Complete;
    let big = core.allocate(30 * MIB, &s);
    assert!(
        matches!(big, Ok(Some(_))),
        "30 MiB after the kept segment's marker completed: {:?}",
        big.as_ref().err()
    );
    assert_eq!(
        (core.memory_reserved(), source.counters().live_segments),
        (30 * MIB, 1)
    );
}

#[test]
fn a_kept_release_whose_marker_then_reads_failed_stays_out_for_good() {
    let (core, source, s) = setup(1 << 30);
    keep_one_out(&core, &source, &s);
    *s.earlier.lock() = MarkerStatus::Failed;
    core.empty_cache();
    core.empty_cache();
    assert_eq!(
        (core.memory_reserved(), source.counters().live_segments),
        (20 * MIB, 1),
        "a segment whose release marker failed is never freed"
    );
}

#[test]
fn an_allocator_dropped_with_a_kept_release_does_not_free_its_segment() {
    let (core, source, s) = setup(1 << 30);
    keep_one_out(&core, &source, &s);
    drop(core);
    assert_eq!(
        source.counters().live_segments,
        1,
        "a segment whose release marker still reads pending is not given back to the source"
    );
}
