//! The observability functions over the process's device allocators (one per device,
//! [`crate::device_allocator()`]), as `torch.cuda.memory_summary(device)`,
//! `torch.cuda.memory._snapshot()` and `torch.cuda.memory._record_memory_history`.

use super::history::TraceEntry;
use super::snapshot::MemorySnapshot;
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::global::{device_allocator, existing};

/// The summary table of `device`'s allocator, private pools included (see
/// [`super::memory_summary`]); all zeros
/// when the allocator does not exist yet (it is not created).
///
/// # Errors
/// [`AllocError::InvalidDevice`] for a bad index.
pub fn memory_summary(device: usize, abbreviated: bool) -> Result<String, AllocError> {
    Ok(match existing(device)? {
        Some(a) => super::memory_summary(&a.memory_stats(), device, abbreviated),
        None => super::memory_summary(&crate::MemoryStats::default(), device, abbreviated),
    })
}

/// The snapshot of every existing device allocator, private pools included, those dropped
/// while their allocations live too (their segments carry the pool's `segment_pool_id`; segments sorted by device
/// and address; one trace list per device). Allocators are not created. Devices above
/// [`super::MAX_SNAPSHOT_DEVICE`] are left out.
#[must_use]
pub fn memory_snapshot() -> MemorySnapshot {
    let mut out = MemorySnapshot::empty(&AllocConfig::default());
    let mut first = true;
    for device in 0..xpu_device::device_count() {
        if let Ok(Some(a)) = existing(device) {
            let Ok(mut snap) = a.core().memory_snapshot() else {
                continue;
            };
            // Private pools' segments, tagged with their ids (the history is the device's,
            // already in `snap`). The handles drop after the loop, under no lock.
            let pools = a.mem_pools().unwrap_or_default();
            for pool in &pools {
                if let Ok(mut segments) = pool.snapshot() {
                    segments.device_traces.clear();
                    snap.merge(segments);
                }
            }
            // Dropped pools that live on through their allocations (counted in the device's
            // statistics). Read while the live pools' handles are held, so no pool moves
            // from one list to the other meanwhile.
            for (id, segments) in a.dropped_pool_segments() {
                if let Ok(mut part) =
                    MemorySnapshot::new(device, &segments, &[], &AllocConfig::default())
                {
                    for s in &mut part.segments {
                        s.segment_pool_id = id;
                    }
                    part.device_traces.clear();
                    snap.merge(part);
                }
            }
            if first {
                out.allocator_settings = snap.allocator_settings.clone();
                first = false;
            }
            out.merge(snap);
        }
    }
    out
}

/// Turns history recording on or off for every device's allocator, creating those that do
/// not exist yet (see [`super::History::record_memory_history`]).
///
/// # Errors
/// The first allocator that could not be created.
pub fn record_memory_history(enabled: bool, max_entries: usize) -> Result<(), AllocError> {
    for device in 0..xpu_device::device_count() {
        device_allocator(device)?
            .core()
            .memory_history()
            .record_memory_history(enabled, max_entries);
    }
    Ok(())
}

/// The recorded history of `device`'s allocator, oldest first (empty when it does not exist
/// yet or recording is off).
///
/// # Errors
/// [`AllocError::InvalidDevice`] for a bad index.
pub fn memory_history(device: usize) -> Result<Vec<TraceEntry>, AllocError> {
    Ok(existing(device)?
        .map(|a| a.core().memory_history().entries())
        .unwrap_or_default())
}
