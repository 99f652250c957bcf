//! The device-wide part of an allocation: every shard locked, cross-stream reuse, full
//! release and retry, and the out-of-memory error.

use std::cell::Cell;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::device_wide::SegmentFailure;
use super::grow::{hard_error, new_segment, release_batches};
use super::pending::wait_markers;
use super::shard::Shard;
use super::stats_cell::StatsWriter;
use super::stream_state::{Handed, Request, ShardState};
use super::thread_cache::{Local, ThreadCacheKey};
use super::CachingAllocator;
use crate::backend::Backend;
use crate::error::{CacheError, OomReport};
use crate::history::TraceAction;
use crate::size;

/// The `oom` history entry of a failed attempt that a caller may still retry: device free
/// bytes and rounded request size, recorded only if the caller returns the error.
pub(super) type DeferredOom = Cell<Option<(u64, u64)>>;

/// What an out-of-memory failure of an attempt does besides returning the error. PyTorch
/// counts `num_ooms` and traces `oom` where `malloc` raises `OutOfMemoryError`, so an
/// attempt that a retry may still serve does neither.
#[derive(Clone, Copy)]
pub(super) enum OnOom<'a> {
    /// The error goes to the caller: counted in `num_ooms` and traced in the history.
    Raise,
    /// The caller may retry: nothing counted nor traced; the trace's figures are left in
    /// the cell for the caller to record if it returns the error.
    Defer(&'a DeferredOom),
}

impl<B: ThreadCacheKey> CachingAllocator<B> {
    /// Called when the stream's own cache and a new segment both failed. `on_oom`: whether
    /// a failure is counted in `num_ooms` and traced now, or deferred to a caller that may
    /// retry it.
    pub(super) fn oom_path(
        &self,
        shard: &Arc<Shard<B>>,
        req: Request,
        local: &Local<'_, B>,
        on_oom: OnOom<'_>,
    ) -> Result<Handed, CacheError> {
        let shared = &*self.inner.shared;
        let me = shard.rank;
        let gc = shared.gc_enabled();
        // 1. Frees completed on every stream, this stream's pool (another thread may have
        //    freed blocks since the first search), then another stream's whole segment.
        let markers = match self.with_all(|gs| {
            let mut st = local.stats();
            // Blocks in threads' caches count as free here (`free_cache`).
            for g in gs.iter_mut() {
                g.flush_thread_caches(&mut st);
            }
            if let Some(handed) = drain_and_search(gs, me, &req, gc, &mut st) {
                return Ok(handed);
            }
            Err(gs
                .iter()
                .flat_map(|g| g.pending_markers())
                .collect::<Vec<_>>())
        }) {
            Ok(handed) => return Ok(handed),
            Err(markers) => markers,
        };
        // 2. Wait for every pending free (no allocator lock held), as PyTorch's
        //    synchronize_and_free_events; 3. search again before releasing anything: a
        //    block that was only waiting for another stream is reused as it is.
        local.stats().num_sync_all_streams.bump();
        wait_markers::<B>(&markers);
        let batches = match self.with_all(|gs| {
            let mut st = local.stats();
            if !markers.is_empty() {
                if let Some(handed) = drain_and_search(gs, me, &req, gc, &mut st) {
                    return Ok(handed);
                }
            }
            // 4. Release every cached whole segment (once its stream's work is done).
            Err(gs
                .iter_mut()
                .filter_map(|g| g.take_releasable(&mut st))
                .collect::<Vec<_>>())
        }) {
            Ok(handed) => return Ok(handed),
            Err(batches) => batches,
        };
        release_batches(batches, shared, local);
        // 5. Allocate again.
        let failure = {
            let mut state = shard.lock();
            let mut st = local.stats();
            if let Some(found) = state.search(&req, gc) {
                return Ok(state.alloc_pooled(found, &req, &mut st));
            }
            st.num_alloc_retries.bump();
            match new_segment(&mut state, &req, shared, &mut st) {
                Ok(handed) => return Ok(handed),
                Err(failure) => {
                    hard_error(failure.clone(), shared, req.size)?;
                    if matches!(on_oom, OnOom::Raise) {
                        st.num_ooms.bump();
                    }
                    failure
                }
            }
        };
        let stats = self.memory_stats();
        let total = shared.source.total_memory();
        let reserved = u64::try_from(stats.reserved_bytes.all.current).unwrap_or(0);
        let report = OomReport {
            device: shared.device(),
            requested: req.size,
            segment_size: req.segment_size,
            total,
            free: shared
                .source
                .free_memory()
                .unwrap_or_else(|| total.saturating_sub(shared.reserved())),
            allocated: u64::try_from(stats.allocated_bytes.all.current).unwrap_or(0),
            reserved,
            allowed: shared.allowed(),
        };
        tracing::debug!(%report, "allocation failed");
        match on_oom {
            OnOom::Raise => {
                shared
                    .history
                    .record(TraceAction::Oom, report.free, req.rounded, shard.key.id);
            }
            OnOom::Defer(trace) => trace.set(Some((report.free, req.rounded))),
        }
        Err(CacheError::OutOfMemory {
            report,
            fraction: failure == SegmentFailure::Fraction,
        })
    }
}

/// Frees the blocks whose markers completed on every stream, then serves `req` from stream
/// `me`'s pool, else from another stream's whole cached segment ([`steal`]).
fn drain_and_search<B: Backend>(
    guards: &mut [MutexGuard<'_, ShardState<B>>],
    me: usize,
    req: &Request,
    gc: bool,
    st: &mut StatsWriter<'_>,
) -> Option<Handed> {
    for g in guards.iter_mut() {
        g.process_events(st);
    }
    if let Some(found) = guards[me].search(req, gc) {
        return Some(guards[me].alloc_pooled(found, req, st));
    }
    steal(guards, me, req, st)
}

/// Moves the best-fitting cached whole free segment of another stream to stream `me`,
/// ordered after the owner stream's work by a marker, and hands out a block from it.
fn steal<B: Backend>(
    guards: &mut [MutexGuard<'_, ShardState<B>>],
    me: usize,
    req: &Request,
    st: &mut StatsWriter<'_>,
) -> Option<Handed> {
    let config = guards[me].config.clone();
    let mut best: Option<(u64, u64, usize, u32)> = None;
    for (i, g) in guards.iter().enumerate() {
        if i == me {
            continue;
        }
        let found = g.whole_free(req.pool).into_iter().find(|&(size, _, _)| {
            size >= req.rounded && size::oversize_allows(req.rounded, size, &config)
        });
        if let Some((size, addr, block)) = found {
            if best.is_none_or(|(s, a, _, _)| (size, addr) < (s, a)) {
                best = Some((size, addr, i, block));
            }
        }
    }
    let (_, _, owner, block) = best?;
    let marker = match st.unlocked(|| B::record_marker(&guards[owner].stream)) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "cross-stream reuse: recording a marker failed");
            return None;
        }
    };
    // A device-side wait is trusted only while every wait before the marker on the owner's
    // stream completed with success (one pending may still fail, and then the marker no
    // longer orders anything); else the segment stays, for the release below (a host wait).
    if !st.unlocked(|| B::marker_orders_waiters(&marker)) {
        tracing::debug!("cross-stream reuse: the owner stream's earlier waits are unfinished");
        return None;
    }
    if let Err(e) = st.unlocked(|| B::stream_wait(&guards[me].stream, &marker)) {
        tracing::warn!(error = %e, "cross-stream reuse: waiting for a marker failed");
        return None;
    }
    let segment = guards[owner].take_segment(block)?;
    let adopted = guards[me].adopt_segment(segment);
    Some(guards[me].alloc_found_block(adopted, req, st))
}
