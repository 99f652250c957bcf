//! Size rules of the caching allocator: rounding, pool choice and segment sizes
//! (PyTorch reference §4.2–§4.4), plus PyTorch's `format_size` for messages.

use crate::config::AllocConfig;
pub use crate::size_constants::*;

/// Which free pool a block belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// Rounded requests of at most 1 MiB, served from 2 MiB segments.
    Small,
    /// Everything else.
    Large,
}

impl PoolKind {
    /// The pool of a rounded request: small iff `rounded <= 1 MiB` (CUDA 2026 rule).
    #[must_use]
    #[inline]
    pub fn for_size(rounded: u64) -> Self {
        if rounded <= SMALL_SIZE {
            Self::Small
        } else {
            Self::Large
        }
    }

    /// The statistics key of this pool: `"small_pool"` or `"large_pool"`.
    #[must_use]
    pub fn stat_name(self) -> &'static str {
        match self {
            Self::Small => "small_pool",
            Self::Large => "large_pool",
        }
    }
}

/// Index of the `roundup_power2_divisions` interval of `size` bytes:
/// `clamp(floor(log2(size)) - 20, 0, 15)` (reference §4.3).
#[must_use]
#[inline]
pub fn roundup_interval(size: u64) -> usize {
    if size == 0 {
        return 0;
    }
    let log = 63 - u64::from(size.leading_zeros());
    (log.saturating_sub(20) as usize).min(ROUNDUP_INTERVALS - 1)
}

/// Rounds `size` up to the next of `divisions` equal steps between two powers of two
/// (PyTorch `roundup_power2_next_division`). An exact power of two is unchanged. A result
/// above `u64::MAX` saturates at the last step below it.
#[must_use]
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor / divisions.max(1);
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.checked_add(step).unwrap_or(down)
    }
}

/// Rounds a requested size in bytes as PyTorch's `round_size` does (reference §4.3):
/// below 512 bytes gives 512; with a division count `div > 1` for the size's interval and
/// `size > 512 * div`, rounds to the next power-of-two division; else to a multiple of 512.
/// The result is always a multiple of 512; a size whose rounding would exceed `u64::MAX`
/// gives [`MAX_ROUNDED`] (below the size: the allocator rejects such requests before
/// rounding, see [`MAX_REQUEST`]). [`checked_round_size`] tells these apart.
#[must_use]
#[inline]
pub fn round_size(size: u64, config: &AllocConfig) -> u64 {
    checked_round_size(size, config).unwrap_or(MAX_ROUNDED)
}

/// [`round_size`], or `None` when the rounded size would exceed `u64::MAX`.
#[must_use]
#[inline]
pub fn checked_round_size(size: u64, config: &AllocConfig) -> Option<u64> {
    if size < MIN_BLOCK_SIZE {
        return Some(MIN_BLOCK_SIZE);
    }
    let div = config.roundup_power2_divisions[roundup_interval(size)];
    if div > 1 && size > MIN_BLOCK_SIZE.saturating_mul(div) {
        let r = roundup_power2_next_division(size, div);
        (r >= size).then_some(r)
    } else {
        size.checked_next_multiple_of(MIN_BLOCK_SIZE)
    }
}

/// Size in bytes of a new segment for a rounded request (reference §4.4): 2 MiB for small
/// requests, `large_segment_size` (20 MiB by default) below 10 MiB, else the request
/// rounded up to a multiple of 2 MiB (saturating at the largest multiple of 2 MiB; the
/// allocator never asks beyond [`MAX_REQUEST`]). Exactly `rounded` when segments are not
/// split ([`AllocConfig::split_segments`]).
#[must_use]
#[inline]
pub fn segment_size(rounded: u64, config: &AllocConfig) -> u64 {
    if !config.splits_segments() {
        rounded
    } else if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        config.large_segment_size
    } else {
        rounded
            .checked_next_multiple_of(ROUND_LARGE)
            .unwrap_or(u64::MAX - (ROUND_LARGE - 1))
    }
}

/// Whether a free block of `block_size` bytes may serve a rounded request of `rounded` bytes
/// under the oversize rules (reference §4.5): a request below `max_split_size` never takes
/// an oversize block, and an oversize request never takes a block at least
/// `max_non_split_rounding` bytes larger than itself. When segments are not split
/// ([`AllocConfig::split_segments`]) every block is handed out whole, so a block serves a
/// request only when it exceeds it by less than the request itself and less than
/// `max_non_split_rounding`.
#[must_use]
#[inline]
pub fn oversize_allows(rounded: u64, block_size: u64, config: &AllocConfig) -> bool {
    if !config.splits_segments()
        && block_size.saturating_sub(rounded) >= rounded.min(config.max_non_split_rounding)
    {
        return false;
    }
    let max_split = config.max_split_size;
    if max_split != u64::MAX && rounded < max_split && block_size >= max_split {
        return false;
    }
    !(rounded >= max_split && block_size >= rounded.saturating_add(config.max_non_split_rounding))
}

/// Whether a block of `block_size` bytes in pool `pool` is split when it serves a rounded
/// request of `rounded` bytes (reference §4.6): small pool iff the remainder is at least
/// 512 bytes; large pool iff `rounded < max_split_size` and the remainder exceeds 1 MiB.
/// Never when segments are not split ([`AllocConfig::split_segments`]).
#[must_use]
#[inline]
pub fn should_split(pool: PoolKind, block_size: u64, rounded: u64, config: &AllocConfig) -> bool {
    if !config.splits_segments() {
        return false;
    }
    let remaining = block_size.saturating_sub(rounded);
    match pool {
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => rounded < config.max_split_size && remaining > SMALL_SIZE,
    }
}

/// Formats a byte count as PyTorch's `format_size`: "{n} bytes" up to 1024, then KiB up to
/// 1 MiB, MiB up to 1 GiB, else GiB, with two decimals.
#[must_use]
pub fn format_size(bytes: u64) -> String {
    // Precision loss above 2^53 bytes is irrelevant for a two-decimal message.
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if bytes <= 1024 {
        format!("{bytes} bytes")
    } else if bytes <= MIB {
        format!("{:.2} KiB", b / 1024.0)
    } else if bytes <= GIB {
        format!("{:.2} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}
