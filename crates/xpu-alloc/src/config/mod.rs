//! Allocator configuration: the `XPU_ALLOC_CONF` grammar of PyTorch's allocator config
//! (reference §4.18) plus this crate's own keys.
//!
//! | key | values | default |
//! |---|---|---|
//! | `max_split_size_mb` | integer MiB ≥ `large_segment_size_mb` (20) | unlimited |
//! | `max_non_split_rounding_mb` | integer MiB ≥ `large_segment_size_mb` | 20 |
//! | `large_segment_size_mb` | integer MiB > 10 | 20 |
//! | `roundup_power2_divisions` | power of two N, or `[MB:N,...,>:N]` (N power of two or 0) | 0 (off) |
//! | `garbage_collection_threshold` | real in (0, 1) | 0 (off) |
//! | `expandable_segments` | `False` (`True` is rejected as unsupported) | `False` |
//! | `pinned_use_background_threads` | `True`/`False`: validated, no effect (see below) | `False` |
//! | `pinned_num_register_threads` | power of two ≤ 128: validated, no effect | 1 |
//! | `pinned_reserve_segment_size_mb` | integer MiB > 0: validated, no effect | 0 |
//! | `memory_kind` | `buffer` (OpenCL buffers) or `svm` (coarse-grained SVM) | `buffer` |
//! | `release_policy` | `on_oom` (PyTorch's) or `before_grow` | `before_grow` |
//!
//! The `pinned_*` keys configure PyTorch's pinned-host allocator. They are accepted (and their
//! values checked) so that a PyTorch configuration string parses unchanged, but nothing reads
//! them: the pinned-host allocator (xpu-host) registers no memory (OpenCL pins at creation,
//! so there are no registration threads), frees on the caller's thread and reserves no
//! segment up front.
//!
//! Booleans are case-sensitive `True`/`False`; whitespace is ignored. Each parse starts
//! from the defaults, so a key not given again returns to its default.

mod error;
mod parse;

pub use error::ConfigError;

use crate::size::{LARGE_BUFFER, MIB, ROUNDUP_INTERVALS};

/// Which device memory segments are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// OpenCL buffers (`cl_mem`); block addresses are assigned by the allocator.
    #[default]
    Buffer,
    /// Coarse-grained shared virtual memory; block addresses are the SVM pointers.
    Svm,
}

/// What the allocator does with idle cached segments when it must grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReleasePolicy {
    /// PyTorch's behavior: cached segments are released only on the OOM path and by
    /// `empty_cache`.
    OnOom,
    /// Beyond PyTorch, lowers the peak reserved memory without more segment allocations:
    /// 1. **Consolidation (large pool).** When a new large segment of `S` bytes would raise
    ///    the device's reserved bytes above their highest value so far, and the stream's
    ///    idle cached whole large segments (none of which could serve the request) add up to
    ///    at least `S`, they are released and one segment of their total size is allocated
    ///    instead: the request is served without the reserved bytes growing, and the rest of
    ///    the new segment is one contiguous free block. Skipped when the merged segment
    ///    would exceed the device's largest allocation or could not serve the request as a
    ///    cached block under the oversize rule (an oversize block for a request below
    ///    `max_split_size`, or one exceeding an oversize request by `max_non_split_rounding`
    ///    or more).
    /// 2. **Small-pool growth.** A new small-pool segment is 2 MiB while the stream's small
    ///    pool holds less than 16 MiB, then `floor_pow2(small pool bytes / 4)`, at most
    ///    16 MiB: overhead stays within a quarter of the small pool's use while segment
    ///    allocations grow logarithmically instead of linearly.
    ///
    /// Releasing idle segments without consolidating (a plain "release before growing")
    /// also lowered the peaks on the traces but made up to 2.6x more segment allocations.
    #[default]
    BeforeGrow,
}

/// Parsed allocator configuration. Sizes are in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConfig {
    /// Blocks at least this large are never split; `u64::MAX` means unlimited.
    pub max_split_size: u64,
    /// An oversize request does not take a cached block this much larger than itself.
    pub max_non_split_rounding: u64,
    /// Segment size for large requests below 10 MiB.
    pub large_segment_size: u64,
    /// Division count per power-of-two interval (index 0: below 2 MiB, 15: 32 GiB and
    /// above); 0 or 1 disables rounding in that interval.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// Garbage collection threshold as a fraction of the allowed memory; 0 disables.
    pub garbage_collection_threshold: f64,
    /// Always `false`: expandable segments are not provided.
    pub expandable_segments: bool,
    /// Kind of device memory for new device allocators.
    pub memory_kind: MemoryKind,
    /// Release policy for idle cached segments.
    pub release_policy: ReleasePolicy,
}

impl Default for AllocConfig {
    fn default() -> Self {
        Self {
            max_split_size: u64::MAX,
            max_non_split_rounding: LARGE_BUFFER,
            large_segment_size: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            memory_kind: MemoryKind::Buffer,
            release_policy: ReleasePolicy::default(),
        }
    }
}

impl AllocConfig {
    /// The keys accepted by [`AllocConfig::parse`].
    pub const KEYS: &'static [&'static str] = &[
        "max_split_size_mb",
        "max_non_split_rounding_mb",
        "large_segment_size_mb",
        "roundup_power2_divisions",
        "garbage_collection_threshold",
        "expandable_segments",
        "pinned_use_background_threads",
        "pinned_num_register_threads",
        "pinned_reserve_segment_size_mb",
        "memory_kind",
        "release_policy",
    ];

    /// Parses a configuration string such as
    /// `max_split_size_mb:256,roundup_power2_divisions:[64:8,>:1]` on top of the defaults.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key and the allowed values for an unknown key, a bad
    /// value or an unsupported feature; [`ConfigError::Syntax`] for a malformed string.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        parse::parse(text)
    }

    /// `max_split_size` in MiB for display (`None` when unlimited).
    #[must_use]
    pub fn max_split_size_mb(&self) -> Option<u64> {
        (self.max_split_size != u64::MAX).then_some(self.max_split_size / MIB)
    }
}
