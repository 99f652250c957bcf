//! The device-wide part of an allocation: every shard locked, cross-stream reuse, full
//! release and retry, and the out-of-memory error.

use std::sync::Arc;

use parking_lot::MutexGuard;

use super::cell::StatsWriter;
use super::local::Local;
use super::shard::Shard;
use super::shared::SegmentFailure;
use super::state::{Handed, Request, ShardState};
use super::{hard_error, new_segment, release_everything, DeviceCore};
use crate::error::{AllocError, OomReport};
use crate::size;

impl DeviceCore {
    /// Called when the stream's own cache and a new segment both failed.
    pub(super) fn oom_path(
        &self,
        shard: &Arc<Shard>,
        req: Request,
        local: &Local<'_>,
    ) -> Result<Handed, AllocError> {
        let shared = &*self.inner.shared;
        let failure = {
            let _oom = self.inner.oom_lock.lock();
            let shards = self.all_shards();
            let mut guards: Vec<MutexGuard<'_, ShardState>> =
                shards.iter().map(|s| s.lock()).collect();
            let me = shard.rank;
            let mut st = local.stats();
            for g in &mut guards {
                g.process_events(&mut st);
            }
            // Another thread may have freed blocks of this stream since the first search.
            if let Some(found) = guards[me].search(&req, shared.gc_enabled()) {
                return Ok(guards[me].alloc_pooled(found, &req, &mut st));
            }
            if let Some(handed) = steal(&mut guards, me, &req, &mut st) {
                return Ok(handed);
            }
            release_everything(&mut guards, shared, &mut st);
            st.num_alloc_retries.bump();
            match new_segment(&mut guards[me], &req, shared, &mut st) {
                Ok(handed) => return Ok(handed),
                Err(failure) => {
                    hard_error(failure.clone(), shared, req.size)?;
                    st.num_ooms.bump();
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
        shared.history.record(
            crate::observe::TraceAction::Oom,
            report.free,
            req.rounded,
            shard.key.id,
        );
        Err(match failure {
            SegmentFailure::Fraction => AllocError::MemoryFractionExceeded(report),
            _ => AllocError::OutOfMemory(report),
        })
    }
}

/// Moves the best-fitting cached whole free segment of another stream to stream `me`,
/// ordered after the owner stream's work by a marker, and hands out a block from it.
fn steal(
    guards: &mut [MutexGuard<'_, ShardState>],
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
    let marker = match guards[owner].stream.record_marker() {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "cross-stream reuse: recording a marker failed");
            return None;
        }
    };
    if let Err(e) = guards[me].stream.wait_marker(marker.as_ref()) {
        tracing::warn!(error = %e, "cross-stream reuse: waiting for a marker failed");
        return None;
    }
    let segment = guards[owner].take_segment(block)?;
    let adopted = guards[me].adopt_segment(segment);
    Some(guards[me].alloc_found_block(adopted, req, st))
}
