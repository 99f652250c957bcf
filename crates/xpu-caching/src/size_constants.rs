//! The constants of the size rules (PyTorch reference §4.2–§4.4), in bytes: a leaf below
//! both the configuration grammar ([`crate::config`], whose defaults and bounds use them)
//! and the size rules ([`crate::size`], which re-exports them).

/// One mebibyte (2^20 bytes).
pub const MIB: u64 = 1 << 20;
/// One gibibyte (2^30 bytes).
pub const GIB: u64 = 1 << 30;
/// Minimum block size and rounding granule, in bytes (PyTorch `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest rounded request served by the small pool, in bytes (PyTorch `kSmallSize`).
pub const SMALL_SIZE: u64 = MIB;
/// Segment size for small-pool requests, in bytes (PyTorch `kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// Default segment size for large requests below [`MIN_LARGE_ALLOC`], in bytes
/// (PyTorch `kLargeBuffer`; configurable by `large_segment_size_mb`).
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// Requests below this size get a `large_segment_size` segment, in bytes (PyTorch `kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// Larger requests get a segment rounded up to this multiple, in bytes (PyTorch `kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 * MIB;
/// Requests larger than this (1 EiB) are rejected outright, as CUDA's allocator does.
pub const MAX_REQUEST: u64 = 1 << 60;
/// Number of power-of-two intervals of `roundup_power2_divisions` (1 MiB .. 32 GiB and above).
pub const ROUNDUP_INTERVALS: usize = 16;

/// Largest size [`round_size`](crate::size::round_size) returns: the largest multiple of 512 (results that would
/// exceed `u64::MAX` saturate here; see [`checked_round_size`](crate::size::checked_round_size)).
pub const MAX_ROUNDED: u64 = u64::MAX - (MIN_BLOCK_SIZE - 1);
