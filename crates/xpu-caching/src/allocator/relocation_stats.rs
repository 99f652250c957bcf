//! What relocation ([`crate::config::Relocation`]) did in one allocator: [`RelocationStats`]
//! and the counters the allocator keeps them in (a leaf below the device-wide state and the
//! relocator).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// What relocation did in one allocator since it was made (xpu's own figures, beyond
/// PyTorch's statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocationStats {
    /// Requests served from a run of one segment cleared by moving its live blocks.
    pub relocations: u64,
    /// Live blocks moved, for either purpose.
    pub moves: u64,
    /// Bytes of the live blocks moved (their rounded block sizes).
    pub moved_bytes: u64,
    /// Segments emptied so that the release policy's consolidation merges them instead of
    /// growing (their moves are counted in `moves` and `moved_bytes`).
    pub emptied_segments: u64,
    /// Bytes of the segments emptied.
    pub emptied_bytes: u64,
}

/// [`RelocationStats`] as the allocator updates them (under a shard's lock; read
/// without one).
#[derive(Debug, Default)]
pub(crate) struct RelocationCounters {
    relocations: AtomicU64,
    moves: AtomicU64,
    moved_bytes: AtomicU64,
    emptied_segments: AtomicU64,
    emptied_bytes: AtomicU64,
}

impl RelocationCounters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn note_relocation(&self, moves: u64, bytes: u64) {
        Self::add(&self.relocations, 1);
        Self::add(&self.moves, moves);
        Self::add(&self.moved_bytes, bytes);
    }

    pub(super) fn note_emptied(&self, segments: u64, segment_bytes: u64, moves: u64, bytes: u64) {
        Self::add(&self.emptied_segments, segments);
        Self::add(&self.emptied_bytes, segment_bytes);
        Self::add(&self.moves, moves);
        Self::add(&self.moved_bytes, bytes);
    }

    /// The figures so far (each read on its own: a read concurrent with a relocation may
    /// see part of it).
    pub(crate) fn read(&self) -> RelocationStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RelocationStats {
            relocations: get(&self.relocations),
            moves: get(&self.moves),
            moved_bytes: get(&self.moved_bytes),
            emptied_segments: get(&self.emptied_segments),
            emptied_bytes: get(&self.emptied_bytes),
        }
    }
}
