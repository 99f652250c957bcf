//! Blocks (pieces of a segment) and segments of one shard.

use std::sync::Arc;

use crate::backend::Backend;
use crate::size::PoolKind;
use crate::source::SourceSegment;

/// "No neighbour" in `prev`/`next`.
pub(crate) const NIL: u32 = u32::MAX;

/// A relocation's marker and its sequence number ([`Block::moved`]).
pub(crate) type Moved<B> = (u64, std::sync::Arc<<B as Backend>::Marker>);

/// The later of two relocation markers of one stream.
pub(crate) fn later<B: Backend>(a: Option<Moved<B>>, b: Option<Moved<B>>) -> Option<Moved<B>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.0 >= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// A contiguous piece of a segment: allocated, free in a pool, or pending (freed by the
/// user, waiting for stream markers).
pub(crate) struct Block<B: Backend> {
    /// Device address of the first byte.
    pub addr: u64,
    /// Size in bytes (rounded).
    pub size: u64,
    /// Requested size in bytes of the current allocation.
    pub requested: u64,
    /// Index of the segment in the shard.
    pub segment: u32,
    /// Lower-address neighbour in the segment.
    pub prev: u32,
    /// Higher-address neighbour in the segment.
    pub next: u32,
    /// The pool of the segment.
    pub pool: PoolKind,
    /// Handed out and not freed by the user.
    pub allocated: bool,
    /// Counted in `oversize_allocations` when handed out (at least the `max_split_size` in
    /// effect then): its free subtracts exactly that, whatever the configuration is by then.
    /// Written at every hand-out, read at the free (stale while the block is free).
    pub oversize: bool,
    /// The statistics slot of the cell that counted the block's current allocation
    /// (`stats_cell`): the free's decreases go to that cell. Written at every counted
    /// hand-out under the lock (a thread cache hands a block out again only to the thread
    /// whose cell counted it, see `free_cache`), read at the free (stale while free).
    pub slot: u32,
    /// Outstanding stream markers (pending free).
    pub event_count: u32,
    /// Streams other than the allocation stream that used the block (record_stream).
    pub stream_uses: Vec<B::Stream>,
    /// Pool search count when the block entered the pool (garbage collection age).
    pub gc_base: u64,
    /// Handed out under a relocating configuration (`relocation` not `off`): its
    /// [`PlaceCell`](super::place_cell::PlaceCell) is live and it may move.
    pub relocating: bool,
    /// The marker recorded on the allocation stream after the last relocation copies that
    /// wrote or read these bytes (`relocate`), with its sequence number in the shard (the
    /// later of two markers of one stream completes last): a command on another stream
    /// through the block waits for it. It stays with the bytes: a block freed, merged or
    /// split, and the blocks handed out of them, keep the latest one.
    pub moved: Option<Moved<B>>,
}

impl<B: Backend> Block<B> {
    /// A block covering a whole segment.
    pub(crate) fn whole(addr: u64, size: u64, segment: u32, pool: PoolKind) -> Self {
        Self {
            addr,
            size,
            requested: 0,
            segment,
            prev: NIL,
            next: NIL,
            pool,
            allocated: false,
            oversize: false,
            slot: super::stats_cell::NO_SLOT,
            event_count: 0,
            stream_uses: Vec::new(),
            gc_base: 0,
            relocating: false,
            moved: None,
        }
    }

    /// Whether the block is part of a split segment.
    pub(crate) fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }

    /// Whether the block can merge with a neighbour / be reused: free with no pending uses.
    pub(crate) fn is_idle(&self) -> bool {
        !self.allocated && self.event_count == 0 && self.stream_uses.is_empty()
    }
}

/// One device allocation owned by a shard.
pub(crate) struct Segment<B: Backend> {
    /// The memory as the source handed it out; shared only while
    /// [`Allocation::with_segment`](super::Allocation::with_segment) runs its closure (under
    /// no lock, the allocation live: the segment cannot be released meanwhile).
    pub source: Arc<SourceSegment<B::Memory>>,
    /// The pool its blocks belong to.
    pub pool: PoolKind,
    /// Counted in `oversize_segments` when obtained (at least the `max_split_size` in effect
    /// then): its release subtracts exactly that, whatever the configuration is by then.
    pub oversize: bool,
    /// Its note in the allocator's releasing segments once taken out for release
    /// ([`super::device_wide::Releasing`]; 0: none).
    pub release_note: u64,
}
