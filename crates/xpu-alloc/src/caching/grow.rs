//! Device-wide segment steps shared by the per-stream path (`DeviceCore`'s
//! allocation) and the OOM path: obtain a segment, classify a failure, release segments.

use super::cell::StatsWriter;
use super::device_wide::{DeviceShared, SegmentFailure};
use super::state::{Handed, ReleaseBatch, Request, ShardState};
use super::thread_cache::Local;
use crate::error::AllocError;
use crate::size::MAX_REQUEST;

/// Waits for the work that may use the segments of `batches` (without any allocator lock),
/// then frees them.
pub(super) fn release_batches(
    batches: Vec<ReleaseBatch>,
    shared: &DeviceShared,
    local: &Local<'_>,
) {
    if batches.is_empty() {
        return;
    }
    for batch in &batches {
        batch.wait();
    }
    let mut st = local.stats();
    for batch in batches {
        batch.free(shared, &mut st);
    }
}

/// Obtains a new segment for `req` and hands out its first block.
pub(super) fn new_segment(
    state: &mut ShardState,
    req: &Request,
    shared: &DeviceShared,
    st: &mut StatsWriter<'_>,
) -> Result<Handed, SegmentFailure> {
    let segment = st.unlocked(|| shared.allocate_segment(req.segment_size))?;
    let block = state.add_segment(segment, req.pool, st);
    Ok(state.alloc_found_block(block, req, st))
}

/// The error of a segment failure that no release of cached memory can cure (a device
/// error, or a size the device can never allocate); `Ok` for a failure worth a retry.
pub(super) fn hard_error(
    failure: SegmentFailure,
    shared: &DeviceShared,
    size: u64,
) -> Result<(), AllocError> {
    match failure {
        SegmentFailure::Device(msg) => Err(AllocError::Device(msg)),
        SegmentFailure::TooLarge => Err(AllocError::TooLarge {
            device: shared.device(),
            requested: size,
            max: shared.max_alloc.min(MAX_REQUEST),
        }),
        SegmentFailure::OutOfMemory | SegmentFailure::Fraction => Ok(()),
    }
}
