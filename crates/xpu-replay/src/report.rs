//! The JSON report of a replay and the per-event series.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Figures of one replay (`xpu replay --json`). Bytes, nanoseconds and seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Trace name (file name).
    pub trace: String,
    /// Device description.
    pub device: String,
    /// `"device"` or `"simulate"`.
    pub mode: String,
    /// Event lines in the trace (every action, including skipped ones).
    pub events: u64,
    /// Allocations replayed.
    pub allocs: u64,
    /// Lines of actions the replay does not need (`oom`, `snapshot`, ...), skipped:
    /// action name -> count.
    pub skipped: BTreeMap<String, u64>,
    /// `free_requested` lines whose address had no live allocation (not replayed), but for
    /// the frees of allocations that failed (counted in `ooms`).
    pub unmatched_frees: u64,
    /// `alloc` lines at an address whose allocation was still live in the replay (the
    /// trace lost its free line): the earlier allocation was freed first.
    #[serde(default)]
    pub live_address_reused: u64,
    /// Moves replayed (a `move_from` line and the `move_to` line right after it, recorded by
    /// `relocation:merge`): the live block allocated at the first address is known by the
    /// second from then on. A move is neither an allocation nor a free: it calls no
    /// allocator and changes no figure (the replaying allocator moves blocks by its own
    /// configuration).
    #[serde(default)]
    pub moves: u64,
    /// Lines of moves not replayed, each counted: a `move_from` whose address has no live
    /// allocation or that no `move_to` of the same size and stream follows at once, and a
    /// `move_to` that follows no replayed `move_from` (as in a history whose ring dropped
    /// the move's first line).
    #[serde(default)]
    pub unmatched_moves: u64,
    /// Highest sum of live requested sizes.
    pub peak_requested: u64,
    /// Highest allocated bytes seen after any event.
    pub peak_allocated: u64,
    /// Highest reserved bytes seen after any event.
    pub peak_reserved: u64,
    /// `peak_reserved / peak_requested`.
    pub reserved_over_requested: f64,
    /// Segments obtained from the device.
    pub segment_allocs: u64,
    /// Segments released to the device.
    pub segment_frees: u64,
    /// Segments placed at the recording's address (a simulated replay following the
    /// trace's `segment_alloc` addresses while the segment sequences agree): equal to
    /// `segment_allocs` when the replay's segment sequence never parted from the
    /// recording's. `None` for a replay that does not follow them (on a device, or with
    /// fresh addresses).
    #[serde(default)]
    pub segments_at_recorded_address: Option<u64>,
    /// What relocation did (`relocation:merge`, simulated segments only); `None` when the
    /// replay's configuration left it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relocation: Option<xpu_caching::RelocationStats>,
    /// Allocations that succeeded only after releasing every cached segment.
    pub alloc_retries: u64,
    /// Allocations that failed for lack of memory.
    pub ooms: u64,
    /// Mean time of one allocation call.
    pub alloc_ns_mean: f64,
    /// 99th percentile time of one allocation call.
    pub alloc_ns_p99: f64,
    /// Mean time of one free (drop of the allocation).
    pub free_ns_mean: f64,
    /// Wall time of the whole replay.
    pub wall_s: f64,
}

/// Allocator totals after every trace event of a known action (for plotting).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaySeries {
    /// Allocated bytes after each event.
    pub allocated: Vec<u64>,
    /// Reserved bytes after each event.
    pub reserved: Vec<u64>,
    /// Sum of live requested sizes after each event.
    pub requested: Vec<u64>,
}
