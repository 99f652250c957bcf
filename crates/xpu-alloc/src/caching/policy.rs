//! The fragmentation policy of `release_policy:before_grow` (beyond PyTorch); the rules
//! are documented on [`crate::config::ReleasePolicy::BeforeGrow`].

use super::cell::StatsWriter;
use super::device_wide::DeviceShared;
use super::state::{Request, ShardState};
use crate::size::{self, PoolKind, ROUND_LARGE, SMALL_BUFFER};

/// Largest small-pool segment, in bytes.
pub(crate) const SMALL_SEGMENT_MAX: u64 = 16 << 20;

/// Size in bytes of the small-pool segment to allocate for a shard whose small pool holds
/// `small_reserved` bytes.
pub(crate) fn small_segment_size(small_reserved: u64) -> u64 {
    let target = small_reserved / 4;
    if target < SMALL_BUFFER {
        SMALL_BUFFER
    } else {
        (1u64 << (63 - target.leading_zeros())).min(SMALL_SEGMENT_MAX)
    }
}

/// The segment size to allocate for `req` under `before_grow`; may release idle segments
/// of this shard (consolidation).
pub(crate) fn segment_size_before_grow(
    state: &mut ShardState,
    req: &Request,
    shared: &DeviceShared,
    st: &mut StatsWriter<'_>,
) -> u64 {
    match req.pool {
        PoolKind::Small => {
            let small: u64 = state
                .segments
                .iter()
                .filter(|(_, s)| s.pool == PoolKind::Small)
                .map(|(_, s)| s.source.size)
                .sum();
            small_segment_size(small)
        }
        PoolKind::Large => {
            if !shared.would_raise_high_water(req.segment_size) {
                return req.segment_size;
            }
            let idle = state.whole_free(PoolKind::Large);
            let total: u64 = idle.iter().map(|w| w.0).sum();
            let merged = total.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE);
            // The merged segment must obey the oversize rule of a cached block serving
            // this request (reference §4.5), or it would be handed out whole to a request
            // it exceeds by the tolerance or more, and re-created every round.
            let oversize = !size::oversize_allows(req.rounded, merged, &state.config);
            if total < req.segment_size || merged > shared.max_alloc || oversize {
                return req.segment_size;
            }
            for (_, _, block) in idle {
                state.release_block(block, shared, st);
            }
            merged.max(req.segment_size)
        }
    }
}
