//! History recording: a ring buffer of allocator events (as
//! `torch.cuda.memory._record_memory_history`, reference §4.16), exported in the trace text
//! format of the shared PyTorch traces ([`write_trace`]), which the `xpu-replay` tool crate
//! reads back and replays.
//!
//! Recording is off by default. While off, [`History::record`] costs one relaxed atomic
//! load and a branch; the entry is built and stored only while on.
//!
//! # Moves
//! PyTorch's allocator never moves a block; xpu's does under `relocation:merge`
//! (`allocator/relocate.rs`). A move is recorded as two adjacent entries of the moved block,
//! [`TraceAction::MoveFrom`] at its old address then [`TraceAction::MoveTo`] at its new one
//! (both with the block's requested size and stream), pushed together
//! ([`History::record_move`]) under the stream's lock at the move's commit. The history then
//! stays a consistent trace: the block's later entries (its `free_requested` and
//! `free_completed`) name its new address, and the old place is free from the `move_from`
//! on, so a later `alloc` there overlaps no live block. Every line keeps the four fields
//! `ACTION ADDR SIZE STREAM`, so a reader that does not know the two names can skip them.
//! A ring that dropped its oldest entries may start with a lone `move_to`.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// What a trace entry records (PyTorch's trace-entry actions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// A block was handed out (size: the requested bytes).
    Alloc,
    /// The user freed a block (size: the requested bytes).
    FreeRequested,
    /// A freed block became reusable, after the markers of its other streams completed.
    FreeCompleted,
    /// A segment was obtained from the device (size: the segment's bytes).
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// An allocation failed for lack of memory (address: free device bytes; size: the
    /// rounded request).
    Oom,
    /// A snapshot was taken (size: the active bytes).
    Snapshot,
    /// A live block moved out of its place (`relocation:merge`; address: the old place;
    /// size: the requested bytes). Always followed at once by the same block's
    /// [`TraceAction::MoveTo`]. Neither a free nor an allocation: the block stays live, and
    /// the old place is free from here on.
    MoveFrom,
    /// The block of the [`TraceAction::MoveFrom`] just before took its new place (address:
    /// the new place; size: the requested bytes). Its later entries name this address.
    MoveTo,
}

impl TraceAction {
    /// Every action, in declaration order.
    pub const ALL: [TraceAction; 9] = [
        TraceAction::Alloc,
        TraceAction::FreeRequested,
        TraceAction::FreeCompleted,
        TraceAction::SegmentAlloc,
        TraceAction::SegmentFree,
        TraceAction::Oom,
        TraceAction::Snapshot,
        TraceAction::MoveFrom,
        TraceAction::MoveTo,
    ];

    /// The action's name in traces (`alloc`, `free_requested`, ..., `move_from`, `move_to`).
    /// Snapshots use PyTorch's names only: see `xpu_alloc::observe::snapshot` for how a move
    /// appears there.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
            TraceAction::MoveFrom => "move_from",
            TraceAction::MoveTo => "move_to",
        }
    }

    /// The action of a name produced by [`TraceAction::name`].
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether a trace replay acts on (or reports) this action: the block and segment
    /// events, moves included; `oom` and `snapshot` lines are skipped (the `xpu-replay` tool
    /// crate's reader counts them in its `Trace::skipped`).
    #[must_use]
    pub const fn replayed(self) -> bool {
        !matches!(self, TraceAction::Oom | TraceAction::Snapshot)
    }
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Device address of the block or segment (free device bytes for [`TraceAction::Oom`]).
    pub addr: u64,
    /// Bytes: see [`TraceAction`] for which size each action records.
    pub size: u64,
    /// Id of the stream the block or segment belongs to.
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
}

#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<TraceEntry>,
    capacity: usize,
}

/// The history of one device allocator: a ring buffer of [`TraceEntry`] that keeps the
/// newest `max_entries` entries.
#[derive(Debug, Default)]
pub struct History {
    enabled: AtomicBool,
    ring: Mutex<Ring>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl History {
    /// A history with recording off.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns recording on or off (as `_record_memory_history(enabled, max_entries)`).
    /// Off clears the buffer. On keeps the newest `max(1, max_entries)` entries: entries
    /// already recorded stay, the oldest dropped when the new limit is smaller.
    pub fn record_memory_history(&self, enabled: bool, max_entries: usize) {
        let mut ring = self.ring.lock();
        if enabled {
            ring.capacity = max_entries.max(1);
            while ring.entries.len() > ring.capacity {
                ring.entries.pop_front();
            }
        } else {
            ring.entries = VecDeque::new();
            ring.capacity = 0;
        }
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether recording is on.
    #[inline]
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Records an event when recording is on; otherwise returns after one relaxed load.
    #[inline]
    pub fn record(&self, action: TraceAction, addr: u64, size: u64, stream: u64) {
        if self.enabled.load(Ordering::Relaxed) {
            self.push(action, addr, size, stream);
        }
    }

    /// Records a move of a live block of `size` requested bytes on stream `stream` from the
    /// place at `from` to the place at `to` when recording is on: a
    /// [`TraceAction::MoveFrom`] entry then a [`TraceAction::MoveTo`] entry, adjacent (no
    /// other entry comes between them) and with the same time. The caller records it under
    /// the stream's lock, where the move commits, so that the entries around it are in a
    /// valid order.
    pub fn record_move(&self, from: u64, to: u64, size: u64, stream: u64) {
        if self.enabled.load(Ordering::Relaxed) {
            let time_us = now_us();
            let entry = |action, addr| TraceEntry {
                action,
                addr,
                size,
                stream,
                time_us,
            };
            self.push_entries(&[
                entry(TraceAction::MoveFrom, from),
                entry(TraceAction::MoveTo, to),
            ]);
        }
    }

    #[cold]
    #[inline(never)]
    fn push(&self, action: TraceAction, addr: u64, size: u64, stream: u64) {
        self.push_entries(&[TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us: now_us(),
        }]);
    }

    /// Appends `entries` in order under one lock of the ring, dropping the oldest entries
    /// beyond the capacity.
    fn push_entries(&self, entries: &[TraceEntry]) {
        let mut ring = self.ring.lock();
        if ring.capacity == 0 {
            // Turned off between the check and the lock.
            return;
        }
        for &entry in entries {
            if ring.entries.len() == ring.capacity {
                ring.entries.pop_front();
            }
            ring.entries.push_back(entry);
        }
    }

    /// The recorded entries, oldest first.
    #[must_use]
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.ring.lock().entries.iter().copied().collect()
    }

    /// Number of entries held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ring.lock().entries.len()
    }

    /// Whether no entry is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Largest number of entries kept (0 while recording is off).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.ring.lock().capacity
    }

    /// Drops every entry; recording stays as it is.
    pub fn clear(&self) {
        self.ring.lock().entries.clear();
    }
}

/// Writes `entries` in the trace text format of the shared traces (a `#` header line, then
/// `ACTION ADDR SIZE STREAM` per entry), so that a recorded run can be replayed (by the
/// `xpu-replay` tool crate). Stream ids are renumbered as small integers in order of first
/// appearance (the first stream seen is 0).
///
/// # Errors
/// Any write error of `out`.
pub fn write_trace(entries: &[TraceEntry], device: usize, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "# xpu-alloc memory history, device {device}, {} entries",
        entries.len()
    )?;
    let mut numbers: HashMap<u64, usize> = HashMap::new();
    for e in entries {
        let next = numbers.len();
        let stream = *numbers.entry(e.stream).or_insert(next);
        writeln!(out, "{} {} {} {stream}", e.action.name(), e.addr, e.size)?;
    }
    Ok(())
}

/// [`write_trace`] into a string.
#[must_use]
pub fn trace_text(entries: &[TraceEntry], device: usize) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_trace(entries, device, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_records_nothing() {
        let h = History::new();
        assert!(!h.is_enabled());
        h.record(TraceAction::Alloc, 1, 2, 3);
        assert!(h.is_empty());
        assert_eq!(h.capacity(), 0);
    }

    #[test]
    fn names_round_trip() {
        for a in TraceAction::ALL {
            assert_eq!(TraceAction::from_name(a.name()), Some(a));
        }
        assert_eq!(TraceAction::from_name("segment_map"), None);
        assert_eq!(TraceAction::MoveFrom.name(), "move_from");
        assert_eq!(TraceAction::MoveTo.name(), "move_to");
        assert!(TraceAction::MoveFrom.replayed() && TraceAction::MoveTo.replayed());
    }

    #[test]
    fn a_move_is_two_adjacent_entries_of_one_time_and_nothing_while_off() {
        let h = History::new();
        h.record_move(4096, 8192, 100, 3);
        assert!(h.is_empty());
        h.record_memory_history(true, 10);
        h.record(TraceAction::Alloc, 4096, 100, 3);
        h.record_move(4096, 8192, 100, 3);
        let e = h.entries();
        let seen: Vec<(TraceAction, u64, u64, u64)> = e
            .iter()
            .map(|e| (e.action, e.addr, e.size, e.stream))
            .collect();
        assert_eq!(
            seen,
            [
                (TraceAction::Alloc, 4096, 100, 3),
                (TraceAction::MoveFrom, 4096, 100, 3),
                (TraceAction::MoveTo, 8192, 100, 3),
            ]
        );
        assert_eq!(e[1].time_us, e[2].time_us);
        assert_eq!(
            trace_text(&e, 0).lines().skip(1).collect::<Vec<_>>(),
            [
                "alloc 4096 100 0",
                "move_from 4096 100 0",
                "move_to 8192 100 0"
            ]
        );
        // A ring of one keeps the newest half.
        h.record_memory_history(true, 1);
        h.record_move(8192, 4096, 100, 3);
        assert_eq!(h.entries()[0].action, TraceAction::MoveTo);
    }

    #[test]
    fn shrinking_keeps_the_newest_and_off_clears() {
        let h = History::new();
        h.record_memory_history(true, 10);
        for i in 0..5 {
            h.record(TraceAction::Alloc, i, 1, 0);
        }
        h.record_memory_history(true, 2);
        let addrs: Vec<u64> = h.entries().iter().map(|e| e.addr).collect();
        assert_eq!(addrs, [3, 4]);
        h.record_memory_history(false, 2);
        assert!(h.is_empty());
        h.record(TraceAction::Alloc, 9, 1, 0);
        assert!(h.is_empty());
    }

    #[test]
    fn text_renumbers_streams_by_first_appearance() {
        let e = |action, addr, stream| TraceEntry {
            action,
            addr,
            size: 512,
            stream,
            time_us: 0,
        };
        let text = trace_text(
            &[
                e(TraceAction::Alloc, 16, 77),
                e(TraceAction::Alloc, 32, 5),
                e(TraceAction::FreeRequested, 16, 77),
            ],
            2,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("# "));
        assert_eq!(
            &lines[1..],
            [
                "alloc 16 512 0",
                "alloc 32 512 1",
                "free_requested 16 512 0"
            ]
        );
    }
}
