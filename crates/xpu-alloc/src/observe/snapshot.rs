//! [`MemorySnapshot`]: every segment with its blocks, and the recorded history, in the
//! dictionary shape of `torch.cuda.memory._snapshot()` (reference §4.15), so that the same
//! value serializes to JSON (here) and to the pickle PyTorch's memory visualizer reads
//! ([`super::pickle`]).
//!
//! # Moves in the trace
//! The trace lists (`device_traces`) use PyTorch's action names only, since the visualizer
//! knows no other. A move of `relocation:merge` (the history's `move_from` and `move_to`,
//! see [`super::history`]) appears as what it is to the visualizer: the block's
//! `free_requested` and `free_completed` at its old address, then an `alloc` at its new
//! address, each of the three with the requested size and the extra key `relocation` naming
//! the history action it stands for (`move_from` on the two frees, `move_to` on the
//! `alloc`; PyTorch's visualizer ignores the key). So the visualizer's timeline ends the
//! old place's block and starts the new one at the same point (the total is unchanged after
//! it, and a free before an alloc adds no peak, as a move adds none to the statistics), and
//! its segment view, which walks the trace back from the snapshot's blocks, finds every
//! block where the trace says it is. [`TraceEntryDict::to_entry`] reads the history's
//! entries back from the key. The segments' blocks are listed at their current places.

use serde::{Deserialize, Serialize};

use super::history::{TraceAction, TraceEntry};
use super::ObserveError;
use crate::config::AllocConfig;
use crate::device_core::DeviceCore;
use crate::size::PoolKind;
use xpu_caching::{BlockState, SegmentSnapshot};

/// A stack frame (`filename`, `line`, `name`). The allocator records no stacks, so every
/// `frames` list is empty; the type keeps the visualizer's schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameDict {
    /// Source file.
    pub filename: String,
    /// Line number.
    pub line: u64,
    /// Function name.
    pub name: String,
}

/// One block of a segment. Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDict {
    /// Device address.
    pub address: u64,
    /// Size (rounded).
    pub size: u64,
    /// Requested size (0 for a free block).
    pub requested_size: u64,
    /// `"active_allocated"`, `"active_pending_free"` or `"inactive"`.
    pub state: String,
    /// Stack of the allocation (always empty).
    pub frames: Vec<FrameDict>,
}

/// One segment (one device allocation). Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentDict {
    /// Device index.
    pub device: usize,
    /// Device address of the first byte.
    pub address: u64,
    /// Sum of the block sizes.
    pub total_size: u64,
    /// Sum of the sizes of allocated blocks.
    pub allocated_size: u64,
    /// Sum of the sizes of active blocks (allocated or pending free).
    pub active_size: u64,
    /// Sum of the requested sizes of active blocks.
    pub requested_size: u64,
    /// Id of the stream owning the segment.
    pub stream: u64,
    /// `"small"` or `"large"`.
    pub segment_type: String,
    /// Memory pool id; `(0, 0)` for the default pools.
    pub segment_pool_id: (u64, u64),
    /// Whether the segment is expandable (never, here).
    pub is_expandable: bool,
    /// Stack of the segment allocation (always empty).
    pub frames: Vec<FrameDict>,
    /// Blocks by address.
    pub blocks: Vec<BlockDict>,
}

/// One history entry as the visualizer reads it. An `oom` entry carries `device_free`
/// (free device bytes) instead of `addr`, as PyTorch's does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntryDict {
    /// Action name (`alloc`, `free_requested`, ...).
    pub action: String,
    /// Device address (absent for `oom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    /// Free device bytes (only for `oom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// Bytes.
    pub size: u64,
    /// Stream id.
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// Stack (always empty).
    pub frames: Vec<FrameDict>,
    /// Only on the entries of a move (xpu's own key, see the module docs): the history
    /// action the entry stands for, `move_from` (on the old place's `free_requested` and
    /// `free_completed`) or `move_to` (on the new place's `alloc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relocation: Option<String>,
}

/// The PyTorch action a history action is written as, and the `relocation` key it carries.
fn pytorch_action(action: TraceAction) -> (&'static str, Option<&'static str>) {
    match action {
        TraceAction::MoveFrom => (TraceAction::FreeCompleted.name(), Some(action.name())),
        TraceAction::MoveTo => (TraceAction::Alloc.name(), Some(action.name())),
        other => (other.name(), None),
    }
}

impl From<&TraceEntry> for TraceEntryDict {
    /// The dictionary of one history entry, in PyTorch's vocabulary: a `move_from` is its
    /// `free_completed` (with `relocation`), a `move_to` its `alloc` (with `relocation`).
    /// [`TraceEntryDict::from_history`] also writes the `free_requested` that precedes a
    /// `move_from`'s `free_completed`.
    fn from(e: &TraceEntry) -> Self {
        let oom = e.action == TraceAction::Oom;
        let (action, relocation) = pytorch_action(e.action);
        Self {
            action: action.to_owned(),
            addr: (!oom).then_some(e.addr),
            device_free: oom.then_some(e.addr),
            size: e.size,
            stream: e.stream,
            time_us: e.time_us,
            frames: Vec::new(),
            relocation: relocation.map(str::to_owned),
        }
    }
}

impl TraceEntryDict {
    /// The trace list of `history` (oldest first) as PyTorch's visualizer reads it: one
    /// dictionary per entry, and for a `move_from` two, its `free_requested` then its
    /// `free_completed` (see the module docs).
    #[must_use]
    pub fn from_history(history: &[TraceEntry]) -> Vec<Self> {
        let mut out = Vec::with_capacity(history.len());
        for e in history {
            let dict = Self::from(e);
            if e.action == TraceAction::MoveFrom {
                out.push(Self {
                    action: TraceAction::FreeRequested.name().to_owned(),
                    ..dict.clone()
                });
            }
            out.push(dict);
        }
        out
    }

    /// The history entry this dictionary stands for: `None` for an action name this crate
    /// does not record, and for the `free_requested` of a move (its `free_completed` stands
    /// for the `move_from`); an entry with a `relocation` key gives that action (`move_from`
    /// from a `free_completed`, `move_to` from an `alloc`; `None` for another pairing).
    #[must_use]
    pub fn to_entry(&self) -> Option<TraceEntry> {
        let written = TraceAction::from_name(&self.action)?;
        let action = match self.relocation.as_deref() {
            None => written,
            Some(name) => {
                let moved = TraceAction::from_name(name)?;
                if pytorch_action(moved).0 != written.name() {
                    return None;
                }
                moved
            }
        };
        Some(TraceEntry {
            action,
            addr: self.addr.or(self.device_free).unwrap_or(0),
            size: self.size,
            stream: self.stream,
            time_us: self.time_us,
        })
    }
}

/// The allocator settings shown beside the snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocatorSettings {
    /// `max_split_size` in bytes, −1 when unlimited.
    pub max_split_size: i64,
    /// `garbage_collection_threshold` (0: off).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
}

impl From<&AllocConfig> for AllocatorSettings {
    fn from(c: &AllocConfig) -> Self {
        Self {
            max_split_size: i64::try_from(c.max_split_size).unwrap_or(-1),
            garbage_collection_threshold: c.garbage_collection_threshold,
            expandable_segments: c.expandable_segments,
        }
    }
}

/// Segments and history of one or more devices, as `torch.cuda.memory._snapshot()`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// Every segment, sorted by (device, address).
    pub segments: Vec<SegmentDict>,
    /// Per device index, the recorded history, oldest first (empty while recording is off),
    /// in PyTorch's action names ([`TraceEntryDict::from_history`]: a move is three entries).
    pub device_traces: Vec<Vec<TraceEntryDict>>,
    /// The allocator settings.
    pub allocator_settings: AllocatorSettings,
}

fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::Allocated => "active_allocated",
        BlockState::PendingFree => "active_pending_free",
        BlockState::Inactive => "inactive",
    }
}

fn segment_dict(device: usize, s: &SegmentSnapshot) -> SegmentDict {
    let (mut allocated, mut active, mut requested) = (0, 0, 0);
    for b in &s.blocks {
        if b.state == BlockState::Allocated {
            allocated += b.size;
        }
        if b.state != BlockState::Inactive {
            active += b.size;
            requested += b.requested;
        }
    }
    SegmentDict {
        device,
        address: s.address,
        total_size: s.blocks.iter().map(|b| b.size).sum(),
        allocated_size: allocated,
        active_size: active,
        requested_size: requested,
        stream: s.stream.id,
        segment_type: match s.pool {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
        .to_owned(),
        segment_pool_id: (0, 0),
        is_expandable: false,
        frames: Vec::new(),
        blocks: s
            .blocks
            .iter()
            .map(|b| BlockDict {
                address: b.address,
                size: b.size,
                requested_size: b.requested,
                state: state_name(b.state).to_owned(),
                frames: Vec::new(),
            })
            .collect(),
    }
}

/// Largest device index a [`MemorySnapshot`] describes: `device_traces` holds one list per
/// index up to the device's, so the index bounds the snapshot's size.
pub const MAX_SNAPSHOT_DEVICE: usize = 1023;

impl MemorySnapshot {
    /// The snapshot of device `device` from its segments, its history (oldest first) and its
    /// configuration. `device_traces` gets one list per device index up to `device`.
    ///
    /// # Errors
    /// [`ObserveError::DeviceIndex`] when `device` exceeds [`MAX_SNAPSHOT_DEVICE`].
    pub fn new(
        device: usize,
        segments: &[SegmentSnapshot],
        history: &[TraceEntry],
        config: &AllocConfig,
    ) -> Result<Self, ObserveError> {
        if device > MAX_SNAPSHOT_DEVICE {
            return Err(ObserveError::DeviceIndex {
                device,
                max: MAX_SNAPSHOT_DEVICE,
            });
        }
        let mut out = Self::empty(config);
        out.segments = segments.iter().map(|s| segment_dict(device, s)).collect();
        out.segments.sort_by_key(|s| s.address);
        let index = device;
        out.device_traces.resize(index + 1, Vec::new());
        out.device_traces[index] = TraceEntryDict::from_history(history);
        Ok(out)
    }

    /// A snapshot with no segment and one empty trace list (device 0).
    pub fn empty(config: &AllocConfig) -> Self {
        Self {
            segments: Vec::new(),
            device_traces: vec![Vec::new()],
            allocator_settings: AllocatorSettings::from(config),
        }
    }

    /// Adds the segments and history of another device's snapshot (its settings are
    /// dropped).
    pub fn merge(&mut self, other: MemorySnapshot) {
        self.segments.extend(other.segments);
        self.segments.sort_by_key(|s| (s.device, s.address));
        if self.device_traces.len() < other.device_traces.len() {
            self.device_traces
                .resize(other.device_traces.len(), Vec::new());
        }
        for (mine, theirs) in self.device_traces.iter_mut().zip(other.device_traces) {
            mine.extend(theirs);
        }
    }

    /// Sum of the segment sizes (the reserved bytes), in bytes.
    #[must_use]
    pub fn reserved_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.total_size).sum()
    }

    /// Sum of the allocated block sizes, in bytes.
    #[must_use]
    pub fn allocated_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.allocated_size).sum()
    }

    /// Sum of the active block sizes, in bytes.
    #[must_use]
    pub fn active_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.active_size).sum()
    }

    /// The snapshot as pretty-printed JSON (the same keys as the pickle).
    ///
    /// # Errors
    /// [`ObserveError::Json`] when encoding fails.
    pub fn to_json(&self) -> Result<String, ObserveError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// A snapshot read from [`MemorySnapshot::to_json`]'s output.
    ///
    /// # Errors
    /// [`ObserveError::Json`] when the text is not such a snapshot.
    pub fn from_json(text: &str) -> Result<Self, ObserveError> {
        Ok(serde_json::from_str(text)?)
    }
}

/// The snapshot of `core`: its segments and blocks, its recorded history and its settings
/// (as `torch.cuda.memory._snapshot()`). While history recording is on, a `snapshot` entry
/// (size: the active bytes) is recorded first.
///
/// # Errors
/// [`ObserveError::DeviceIndex`] for a device index above [`MAX_SNAPSHOT_DEVICE`] (a
/// simulated device can have any index).
pub fn memory_snapshot(core: &DeviceCore) -> Result<MemorySnapshot, ObserveError> {
    let segments = core.snapshot();
    let history = core.memory_history();
    if history.is_enabled() {
        let active: u64 = segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.size)
            .sum();
        history.record(TraceAction::Snapshot, 0, active, 0);
    }
    MemorySnapshot::new(core.device(), &segments, &history.entries(), &core.config())
}

impl DeviceCore {
    /// [`memory_snapshot`] of this allocator.
    ///
    /// # Errors
    /// As [`memory_snapshot`].
    pub fn memory_snapshot(&self) -> Result<MemorySnapshot, ObserveError> {
        memory_snapshot(self)
    }
}
