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
//! | `memory_kind` | `buffer` (OpenCL buffers); `svm` is rejected (`ConfigError::Unsupported`: removed, SVM blocks had no copy or kernel-argument path) | `buffer` |
//! | `release_policy` | `on_oom` (PyTorch's) or `before_grow` | `before_grow` |
//! | `regrow_factor` | integer ≥ 1 (`before_grow` only) | 4 |
//! | `regrow_peak_fraction` | real in (0, 1], or 0 for none: how far one regrowth may raise the reserved high-water mark beyond its own segment, as a share of the mark (`before_grow` only; see [`AllocConfig::regrow_peak_fraction`]) | 0.25 |
//! | `split_segments` | `True`/`False`: whether a segment is split into blocks handed out at once (see [`AllocConfig::split_segments`]) | the segment source's choice ([`SegmentSource::splits_segments`](crate::source::SegmentSource::splits_segments)) |
//! | `relocation` | `off`, `merge` or `merge_all`: moving live blocks before a growth (xpu's own, see [`Relocation`]) | `merge` |
//! | `consolidate_live` | `True`/`False`: a consolidation may count in segments whose live blocks then move into the merged segment (see [`AllocConfig::consolidate_live`]) | `True` |
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

use crate::size_constants::{LARGE_BUFFER, MIB, ROUNDUP_INTERVALS};

/// Which device memory segments are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// OpenCL buffers (`cl_mem`); block addresses are assigned by the allocator.
    #[default]
    Buffer,
}

/// Whether the allocator moves live blocks to avoid growing (xpu's own key `relocation`,
/// beyond PyTorch, whose blocks never move; design, figures and the contract change:
/// docs/relocation.md).
///
/// A move copies the block's bytes on its allocation stream
/// ([`Backend::enqueue_copy`](crate::Backend::enqueue_copy)) and changes its place (segment,
/// offset, address) while the allocation lives, **until the place is first observed**:
/// [`Allocation::address`](crate::Allocation::address) and
/// [`Allocation::observe`](crate::Allocation::observe) (raw handles in the layers above) fix
/// it for good. Scoped uses ([`Allocation::pin`](crate::Allocation::pin): kernel launches,
/// views, copies) hold it in place only while they enqueue. A block recorded on another
/// stream (`record_stream`), or used on one through a view, never moves. Private pools never
/// relocate. The runtime's device allocators accept the key from `XPU_ALLOC_CONF` and
/// `xpu_alloc::set_config`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Relocation {
    /// Blocks stay where they were handed out (PyTorch's behaviour).
    Off,
    /// Before a large segment of a stream is allocated under [`ReleasePolicy::BeforeGrow`]
    /// with split segments: first, the live blocks of one run of neighbouring blocks that
    /// spans the request (live blocks without recorded stream uses or pending markers, and
    /// idle free blocks) move into idle free blocks of the stream's other large segments,
    /// the run with the fewest live bytes first, and the cleared run serves the request.
    /// Where no run can be cleared and the growth would raise the device's reserved
    /// high-water mark, whole segments (fewest live bytes first) are emptied into the other
    /// segments' idle free blocks until the idle whole segments add up to the new segment,
    /// so that the release policy's consolidation merges them into one instead of growing.
    /// The default.
    ///
    /// Only the large pool's blocks (requests above 1 MiB, PyTorch's large pool) move.
    /// Small-pool blocks are handed out as with [`Relocation::Off`], so the cached
    /// allocate + free of a small block, the allocator's hottest path, costs what it costs
    /// without relocation; moving them too ([`Relocation::MergeAll`]) saved one or two 2 MiB
    /// small segments on 18 of the 65 recorded traces (simulated; one more on one trace)
    /// and costs one atomic read-modify-write and about 100 instructions per cached pair
    /// whose address is read (docs/performance.md, 2026-12-05, "small blocks stay put").
    #[default]
    Merge,
    /// As [`Relocation::Merge`], in the small pool as well (small segments are 2 MiB or
    /// 4 MiB): slightly less memory, at the cost above on every small hand-out.
    MergeAll,
}

/// What the allocator does with idle cached segments when it must grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReleasePolicy {
    /// PyTorch's behavior: cached segments are released only on the OOM path and by
    /// `empty_cache`.
    OnOom,
    /// Beyond PyTorch, lowers the peak reserved memory, usually without more segment
    /// allocations where segments are split (steps 1-3; unsplit segments get step 4 alone).
    /// On 49 of the 51 recorded traces that `policy_must_hold` replays (simulated) it makes
    /// no more segment allocations than PyTorch's default; on two variable-shape traces a
    /// consolidation released idle segments that later requests needed again, and it makes
    /// up to 7% more (docs/performance.md, 2026-12-04, "a fifth round"):
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
    /// 2. **Regrowth.** The sizes a consolidation released are remembered. A later large
    ///    request that one of them would have served (the workload needs those sizes again)
    ///    gets one segment of the released bytes not regrown yet, at most `regrow_factor`
    ///    (default 4) times its own segment size, instead of one segment per request: the
    ///    segments a consolidation gave up come back in few driver calls. Where it would raise
    ///    the reserved high-water mark, `regrow_peak_fraction` limits it further
    ///    ([`AllocConfig::regrow_peak_fraction`]). The segment so limited (not the released
    ///    total) must fit the device's largest allocation and obey the oversize rule as a
    ///    cached block serving the request (as in step 1), or there is no regrowth. With
    ///    `max_split_size_mb:24`, 40 MiB released and reserved at its 40 MiB mark, an 11 MiB
    ///    request (a 12 MiB segment of its own) gets a 22 MiB segment (0 + 12 + 10 MiB), which
    ///    may serve it; the uncapped 40 MiB would be oversize for it.
    /// 3. **Small-pool growth.** A new small-pool segment is 2 MiB while the stream's small
    ///    pool holds less than 32 MiB, then 4 MiB (`floor_pow2(small pool bytes / 8)`, at
    ///    most 4 MiB): fewer driver calls than PyTorch's 2 MiB segments, with little memory
    ///    held in partly used segments.
    /// 4. **Unsplit segments** ([`AllocConfig::split_segments`] false; steps 1-3 do not
    ///    apply). When a new segment would raise the reserved high-water mark, the stream's
    ///    idle cached segments are released first, largest first, until they add up to the
    ///    new segment, unless a segment of the requested size was released so before (the
    ///    workload still uses that size: growing lets a repeating mix such as a training
    ///    step settle with no segment made per step). A block that cannot be split serves
    ///    only requests near its size, so without this the cache keeps bytes the current
    ///    requests cannot use: on the 18 traces the repository had then (simulated) peak reserved goes
    ///    from 1.05-7.39x PyTorch's default without it to 0.49-3.12x with it.
    ///
    /// Releasing idle segments without consolidating (a plain "release before growing")
    /// also lowered the peaks on the traces but made up to 2.6x more segment allocations;
    /// consolidating without regrowth made up to 36% more segment allocations than PyTorch
    /// on a multi-resolution training trace (released segments re-created one by one), and
    /// 16 MiB small-pool segments raised the peak above PyTorch's on generation traces.
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
    /// Deviation from PyTorch (reference §4.11, which collects every stream's idle whole
    /// large blocks of its one large pool): the collection runs on the allocating stream's
    /// own pool only, with that pool's age clock, since pools are per stream here (review
    /// h66: another stream's idle 20 MiB segment stayed while a second one was grown).
    pub garbage_collection_threshold: f64,
    /// Always `false`: expandable segments are not provided.
    pub expandable_segments: bool,
    /// Kind of device memory for new device allocators.
    pub memory_kind: MemoryKind,
    /// Release policy for idle cached segments.
    pub release_policy: ReleasePolicy,
    /// `before_grow` regrowth: the largest segment regrown after a consolidation, as a
    /// multiple of the request's own segment size (see [`ReleasePolicy::BeforeGrow`]).
    pub regrow_factor: u64,
    /// `before_grow` regrowth that would raise the device's reserved high-water mark: the
    /// regrown segment is at most the bytes left below the mark, plus the request's own
    /// segment size, plus this share of the mark (0: no such limit; 0.25 by default). A
    /// regrowth bets that the sizes a consolidation released come back; on inference whose
    /// shapes grow, an unlimited bet raised the mark by half at once (r3d18_varclip_infer,
    /// modernbert_varlen_infer). The default since it was judged on traces recorded after
    /// it (`data/traces/varshape/heldout11/README.md`: the same figures as without it there,
    /// which the test fixed in advance accepts; lower on five of the 79 traces before).
    pub regrow_peak_fraction: f64,
    /// Whether segments are split into blocks that are handed out at once (`None`: the
    /// segment source decides, [`SegmentSource::splits_segments`](crate::source::SegmentSource::splits_segments)).
    /// With `Some(false)` every block is a whole segment: a new segment is exactly the
    /// rounded request, a block is never split, and a cached block serves a request only when
    /// it exceeds the rounded request by less than the request itself and less than
    /// `max_non_split_rounding` (PyTorch's bound for blocks it never splits): at most half of
    /// a block is unused. [`ReleasePolicy::BeforeGrow`] then sizes no segment; it releases
    /// idle segments before growing past the high-water mark (its step 4). For drivers that break when several
    /// sub-buffers of one buffer are in use at once (NVIDIA's OpenCL, see `xpu-alloc`'s
    /// `BufferSource`).
    pub split_segments: Option<bool>,
    /// Whether live blocks move before a growth ([`Relocation`]; simulated segments only).
    pub relocation: Relocation,
    /// Whether a `before_grow` consolidation that would raise the reserved high-water mark,
    /// and whose idle segments fall short of the new segment, may count in segments that
    /// hold live blocks, all of which may move ([`Relocation`]): the merged segment (the
    /// idle segments' bytes and theirs) is allocated, their live blocks move into it beside
    /// the request, and they are released. The segments counted in add up to less than the
    /// request's segment, so reserved bytes, which hold them and the merged segment for a
    /// moment, stay below a plain growth's; after it they are the same as before the
    /// growth. For large idle segments that smaller live blocks split, which no other step
    /// can release (nystromformer_varlen_infer: 1.60x to 1.15x PyTorch's expandable
    /// segments). The default since it was judged on traces recorded after it
    /// (`data/traces/varshape/heldout12/README.md`: the same figures as without it there,
    /// which the test fixed in advance accepts; on the 75 variable-shape traces before, a
    /// geometric mean over expandable of 1.023 against 1.027, seven traces changed, one of
    /// them higher: wav2vec2_varlen_infer 1.106 to 1.247).
    pub consolidate_live: bool,
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
            regrow_factor: 4,
            regrow_peak_fraction: 0.25,
            split_segments: None,
            relocation: Relocation::Merge,
            consolidate_live: true,
        }
    }
}

impl AllocConfig {
    /// Whether this configuration moves live large blocks (requests above 1 MiB):
    /// [`Relocation::Merge`] or [`Relocation::MergeAll`] under [`ReleasePolicy::BeforeGrow`]
    /// with split segments (anything else never relocates, so its blocks are handed out as
    /// without relocation). Small blocks move too where [`AllocConfig::relocates_small`].
    #[must_use]
    pub fn relocates(&self) -> bool {
        self.relocation != Relocation::Off
            && self.release_policy == ReleasePolicy::BeforeGrow
            && self.splits_segments()
    }

    /// Whether this configuration moves live blocks of the small pool too (requests up to
    /// 1 MiB): [`AllocConfig::relocates`] with [`Relocation::MergeAll`]. Where it relocates
    /// at all, it moves large blocks.
    #[must_use]
    pub fn relocates_small(&self) -> bool {
        self.relocates() && self.relocation == Relocation::MergeAll
    }

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
        "regrow_factor",
        "regrow_peak_fraction",
        "split_segments",
        "relocation",
        "consolidate_live",
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

    /// Whether segments are split into blocks ([`AllocConfig::split_segments`], `true` when
    /// the source has not decided yet).
    #[must_use]
    #[inline]
    pub fn splits_segments(&self) -> bool {
        self.split_segments.unwrap_or(true)
    }

    /// `max_split_size` in MiB for display (`None` when unlimited).
    #[must_use]
    pub fn max_split_size_mb(&self) -> Option<u64> {
        (self.max_split_size != u64::MAX).then_some(self.max_split_size / MIB)
    }
}
