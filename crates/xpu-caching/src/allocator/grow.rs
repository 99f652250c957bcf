//! Device-wide segment steps shared by the per-stream path (`CachingAllocator`'s
//! allocation) and the OOM path: obtain a segment, classify a failure, release segments.

use parking_lot::MutexGuard;

use super::device_wide::{DeviceShared, KeptRelease, SegmentFailure};
use super::stats_cell::StatsWriter;
use super::stream_state::{for_each_then_resume, Handed, ReleaseBatch, Request, ShardState};
use super::thread_cache::Local;
use crate::backend::Backend;
use crate::error::CacheError;
use crate::size::MAX_REQUEST;

/// Waits for the work that may use the segments of `batches` (without any allocator lock),
/// then frees them, and the releases kept earlier because their marker read pending whose
/// marker now reads complete (those still pending are kept again; see
/// [`KeptRelease::free_kept`]).
pub(super) fn release_batches<B: Backend>(
    batches: Vec<ReleaseBatch<B>>,
    shared: &DeviceShared<B>,
    local: &Local<'_, B>,
) {
    let kept = shared.take_kept_releases();
    if batches.is_empty() && kept.is_empty() {
        return;
    }
    for batch in &batches {
        batch.wait();
    }
    let mut st = local.stats();
    // Every batch is freed even when a source's `free` (user code) panics in one; the first
    // panic then goes on.
    let batches = batches
        .into_iter()
        .map(|batch| Box::new(batch) as Box<dyn KeptRelease<B>>);
    for_each_then_resume(kept.into_iter().chain(batches), |batch| {
        batch.free_kept(shared, &mut st);
    });
}

/// Frees the segments that garbage collection, the release policy or an oversize release
/// took out of the stream (`state` is its guard) with the stream's lock released, and the
/// statistics write closed during the source's `free`: the source (user code, e.g.
/// `SourceHooks`) may call the allocator, on this stream too. A driver wait (the
/// synchronize of a source whose free does not wait) then runs under no allocator lock.
pub(super) fn free_released<B: Backend>(
    state: &mut MutexGuard<'_, ShardState<B>>,
    shared: &DeviceShared<B>,
    st: &mut StatsWriter<'_>,
) {
    if let Some(released) = state.take_released() {
        MutexGuard::unlocked(state, || released.free(shared, st));
    }
}

/// Obtains a new segment for `req` and hands out its first block. The source is called
/// with the statistics write closed and the stream's lock released (`state` is its guard):
/// the source (user code, e.g. `SourceHooks`) may call the allocator, on this stream too;
/// the new segment joins the stream's state as it is when the lock is taken back.
pub(super) fn new_segment<B: Backend>(
    state: &mut MutexGuard<'_, ShardState<B>>,
    req: &Request,
    shared: &DeviceShared<B>,
    st: &mut StatsWriter<'_>,
) -> Result<Handed, SegmentFailure> {
    let segment =
        st.unlocked(|| MutexGuard::unlocked(state, || shared.allocate_segment(req.segment_size)))?;
    let block = state.add_segment(segment, req.pool, st);
    Ok(state.alloc_found_block(block, req, st))
}

/// The error of a segment failure that no release of cached memory can cure (a device
/// error, or a size the device can never allocate); `Ok` for a failure worth a retry.
pub(super) fn hard_error<B: Backend>(
    failure: SegmentFailure,
    shared: &DeviceShared<B>,
    size: u64,
) -> Result<(), CacheError> {
    match failure {
        SegmentFailure::Device(msg) => Err(CacheError::Device(msg)),
        SegmentFailure::TooLarge => Err(CacheError::TooLarge {
            device: shared.device(),
            requested: size,
            max: shared.max_alloc.min(MAX_REQUEST),
        }),
        SegmentFailure::OutOfMemory | SegmentFailure::Fraction => Ok(()),
    }
}
