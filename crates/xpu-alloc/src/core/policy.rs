//! The fragmentation policy of `release_policy:before_grow` (beyond PyTorch).
//!
//! Two rules decide the size of a new segment; both only act when a new segment is needed.
//!
//! 1. **Consolidation (large pool).** When a new large segment of `S` bytes would raise the
//!    device's reserved bytes above their highest value so far, and this stream's idle
//!    cached whole large segments (none of which could serve the request) add up to at
//!    least `S`, they are all released and one segment of their total size is allocated
//!    instead: the request is served without the reserved bytes growing, and the rest of
//!    the new segment is one contiguous free block. Skipped when the merged segment would
//!    exceed the device's largest allocation or become an oversize block for a request
//!    below `max_split_size`.
//! 2. **Small-pool growth.** A new small-pool segment is 2 MiB while the stream's small pool
//!    holds less than 16 MiB, then `floor_pow2(small pool bytes / 4)`, at most 16 MiB:
//!    small-pool overhead stays within a quarter of its use while the number of segment
//!    allocations grows logarithmically instead of linearly.
//!
//! Measured on the four PyTorch traces (simulated H200), peak reserved / segment
//! allocations, PyTorch's figures in parentheses: gpt2_train 15,286,140,928 / 154 (equal);
//! resnet50_train 3,282,042,880 / 92 (3,797,942,272 / 104); resnet18_train_small
//! 356,515,840 / 31 (411,041,792 / 32); prefetch_multistream_train 503,316,480 / 18 (equal).
//! Releasing idle segments without consolidating (the naive "release before growing")
//! lowered peaks too but made up to 2.6x more segment allocations.

use super::shared::DeviceShared;
use super::state::{Request, ShardState};
use crate::size::{PoolKind, ROUND_LARGE, SMALL_BUFFER};
use crate::stats::MemoryStats;

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
pub(crate) fn segment_size_before_grow(state: &mut ShardState, req: &Request, shared: &DeviceShared, st: &mut MemoryStats) -> u64 {
    match req.pool {
        PoolKind::Small => {
            let small: u64 = state.segments.iter().filter(|(_, s)| s.pool == PoolKind::Small).map(|(_, s)| s.source.size).sum();
            small_segment_size(small)
        }
        PoolKind::Large => {
            if !shared.would_raise_high_water(req.segment_size) {
                return req.segment_size;
            }
            let idle = state.whole_free(PoolKind::Large);
            let total: u64 = idle.iter().map(|w| w.0).sum();
            let merged = total.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE);
            let max_split = state.config.max_split_size;
            let oversize = req.rounded < max_split && merged >= max_split;
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
