//! [`Allocation`]: a block handed out by a [`CachingAllocator`](super::CachingAllocator),
//! returned to its stream's cache when dropped.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::free_cache::count_free;
use super::place_cell::{FreeBy, PinGuard, PlaceCell};
use super::shard::Shard;
use super::stats_cell::NO_SLOT;
use super::stream_state::Handed;
use super::thread_cache::{with_local, ThreadCacheKey};
use crate::history::TraceAction;
use crate::source::SourceSegment;
use crate::stream::StreamKey;

/// A live block of a caching allocator over backend `B` (as the allocation behind
/// PyTorch's `DataPtr`); dropping it frees the block: reusable at once on its allocation
/// stream, and on other streams' behalf only after markers recorded on the streams named by
/// [`Allocation::record_stream`] complete.
pub struct Allocation<B: ThreadCacheKey> {
    pub(super) shard: Arc<Shard<B>>,
    handed: Handed,
    size: u64,
    /// The statistics slot of the cell that counted the hand-out (`stats_cell`): a drop on
    /// a thread whose cell has this slot may keep the block in that thread's cache. Any
    /// other drop frees through the stream's lock, where the block's owner slot takes the
    /// free's decreases. [`NO_SLOT`] once a `record_stream` named another stream (the free
    /// then waits for markers, never through a thread's cache).
    cache_slot: AtomicU32,
}

impl<B: ThreadCacheKey> Allocation<B> {
    #[inline]
    pub(super) fn new(shard: Arc<Shard<B>>, handed: Handed, size: u64, slot: u32) -> Self {
        Self {
            shard,
            handed,
            size,
            cache_slot: AtomicU32::new(slot),
        }
    }

    /// Device address of the first byte: unique on the device while the allocation lives.
    ///
    /// For an allocation that may move ([`Allocation::relocatable`]) this fixes its place
    /// for good (the block never moves again, and the address stays right for the
    /// allocation's life, as a PyTorch `data_ptr` is constant). It waits only for a move of
    /// the block in progress (a lock of its stream), never for the device: an address gives
    /// no access to the bytes. A block that has not moved since its address was read at its
    /// hand-out (the generation then and now are equal) needs no lock.
    #[must_use]
    #[inline]
    pub fn address(&self) -> u64 {
        if !self.handed.relocating {
            return self.handed.addr;
        }
        if let Some(cell) = self.cell() {
            // Every committed move raises the generation, and none commits once the place is
            // observed: the generation of the hand-out means the place read then. (A thread
            // cache's hand-out reuses the `Handed` of the shard's, whose generation the cell
            // keeps.)
            if cell
                .observe()
                .is_ok_and(|generation| cell.at_hand_out_place(generation))
            {
                return self.handed.addr;
            }
        }
        self.observed_address()
    }

    /// [`Allocation::address`] of a relocating block being moved now, or moved since its
    /// hand-out (kept out of the hot path's code): waits for the move, then reads the place
    /// under the stream's lock.
    #[cold]
    #[inline(never)]
    fn observed_address(&self) -> u64 {
        if let Some(cell) = self.cell() {
            // A live allocation is not being freed (its drop is the only free).
            let fixed = cell.observe_waiting(|| self.wait_for_move());
            debug_assert!(fixed.is_ok(), "a live allocation's cell was freeing");
            if fixed.is_ok_and(|generation| cell.at_hand_out_place(generation)) {
                return self.handed.addr;
            }
        }
        self.shard
            .address_of(self.handed.block)
            .unwrap_or(self.handed.addr)
    }

    /// Whether the block was handed out by an allocator that can relocate it (a
    /// configuration that [`relocates`](crate::config::AllocConfig::relocates), and not a
    /// private pool's): it may have moved, and it may move
    /// until its place is observed ([`Allocation::observe`]). Its place is then read under a
    /// pin ([`Allocation::pin`]).
    #[must_use]
    pub fn relocatable(&self) -> bool {
        self.handed.relocating
    }

    /// The place cell of a relocating allocation.
    fn cell(&self) -> Option<&PlaceCell> {
        if !self.handed.relocating || B::is_bad_fork() {
            return None;
        }
        self.shard.cells.get(self.handed.block)
    }

    /// Waits for a move of this stream's blocks in progress: the relocator holds the
    /// stream's lock from its claim to its commit.
    fn wait_for_move(&self) {
        drop(self.shard.lock());
    }

    /// Fixes the block's place for the rest of the allocation's life (the place is
    /// *observed*: its address, buffer and offset may be handed out for ever, to commands on
    /// any stream that the allocator does not see). Waits for a move of the block in
    /// progress, then, when relocation copies that wrote or read the block's bytes may still
    /// run (its own move, or the move out of the place it was handed out of), waits on the
    /// host for them (no allocator lock is held meanwhile). For the raw ways out of a place,
    /// whose commands may run on any queue: a caller that knows the stream of its commands
    /// uses [`Allocation::observe_pending`] instead and orders that stream after the copies
    /// without waiting on the host (an allocation stream held back by a user event that
    /// this thread sets later would make this wait last until the event is set). Nothing to
    /// do for an allocation that does not relocate.
    ///
    /// # Errors
    /// The [`MarkerError`](crate::MarkerError) of the wait for the copies.
    pub fn observe(&self) -> Result<(), crate::MarkerError> {
        match self.observe_pending() {
            Some(pending) => pending.wait(),
            None => Ok(()),
        }
    }

    /// [`Allocation::observe`] without the host wait: fixes the block's place for good
    /// (waiting only for a move in progress, a lock of its stream) and returns the
    /// relocation copies that may still read or write its bytes, if any. Every command that
    /// uses the place must be ordered after them: on the allocation stream it is (the copies
    /// run there, enqueued before); on another stream, [`PendingMove::order`] makes it wait
    /// for them on the device. `None` for an allocation that does not relocate, or whose
    /// copies completed.
    #[must_use]
    pub fn observe_pending(&self) -> Option<PendingMove<B>> {
        let cell = self.cell()?;
        // A live allocation is not being freed (its drop is the only free).
        let observed = cell.observe_waiting(|| self.wait_for_move());
        debug_assert!(observed.is_ok(), "a live allocation's cell was freeing");
        match self.shard.moved_marker(self.handed.block) {
            Some((_, marker)) if !B::marker_complete(&marker) => Some(PendingMove {
                marker,
                stream: self.shard.key,
            }),
            _ => None,
        }
    }

    /// A scoped pin: the block does not move until the pin drops, so the place read under
    /// it ([`Allocation::with_segment`]) stays right for the commands enqueued meanwhile.
    /// Waits for a move of the block in progress (no allocator lock is held meanwhile). For
    /// an allocation that does not relocate the pin is empty and costs nothing.
    pub fn pin(&self) -> PlacePin<'_, B> {
        let guard = self.cell().and_then(|cell| {
            let pinned = cell.pin_waiting(|| self.wait_for_move());
            debug_assert!(pinned.is_ok(), "a live allocation's cell was freeing");
            pinned.ok()
        });
        PlacePin {
            guard,
            block: self.handed.block,
            shard: &self.shard,
        }
    }

    /// Requested size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Size in bytes of the block backing the allocation (rounded; may exceed the request
    /// when the block was not split).
    #[must_use]
    pub fn allocated_size(&self) -> u64 {
        self.handed.size
    }

    /// The allocation stream.
    #[must_use]
    pub fn stream(&self) -> StreamKey {
        self.shard.key
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.shard.key.device
    }

    /// Id of the allocator that handed the block out
    /// ([`CachingAllocator::id`](super::CachingAllocator::id)).
    #[must_use]
    pub fn owner_id(&self) -> u64 {
        self.shard.shared.id
    }

    /// Runs `f` on the segment holding the allocation and the allocation's byte offset in
    /// it (under no allocator lock: `f` may call the allocator, on this stream too); `None`
    /// if the block is unknown (never for a live allocation), and in a bad fork child
    /// ([`Backend::is_bad_fork`](crate::Backend::is_bad_fork): the lock may have been held at the fork).
    /// The place of an allocation that may move is fixed first, for good, without waiting
    /// on the host for relocation copies that may still use its bytes
    /// ([`Allocation::observe_pending`]): what `f` sees stays right for the allocation's life,
    /// and a command through it must be ordered after those copies, as it is on the
    /// allocation stream, or after [`Allocation::observe`] (a host wait) or
    /// [`PendingMove::order`] (a device wait) on another stream.
    pub fn with_segment<R>(
        &self,
        f: impl FnOnce(&SourceSegment<B::Memory>, u64) -> R,
    ) -> Option<R> {
        if B::is_bad_fork() {
            return None;
        }
        if self.handed.relocating {
            drop(self.observe_pending());
        }
        self.read_segment(f)
    }

    /// [`Allocation::with_segment`] for commands enqueued while `pin` (of this allocation)
    /// lives: the place is right until the pin drops, and it is not fixed for good. The place
    /// read under a generation is cached (no lock of the stream after the first read).
    pub fn with_pinned_segment<R>(
        &self,
        pin: &PlacePin<'_, B>,
        f: impl FnOnce(&SourceSegment<B::Memory>, u64) -> R,
    ) -> Option<R> {
        if B::is_bad_fork()
            || pin.block != self.handed.block
            || !std::ptr::eq(pin.shard, &*self.shard)
        {
            return None;
        }
        let (Some(guard), Some(slot)) = (&pin.guard, self.shard.places.get(self.handed.block))
        else {
            return self.read_segment(f);
        };
        let generation = guard.generation();
        if let Some((segment, offset)) = slot.get(generation) {
            return Some(f(&segment, offset));
        }
        let (segment, address) = self.shard.segment_of(self.handed.block)?;
        let offset = address - segment.address;
        slot.set(generation, Arc::clone(&segment), offset);
        Some(f(&segment, offset))
    }

    fn read_segment<R>(&self, f: impl FnOnce(&SourceSegment<B::Memory>, u64) -> R) -> Option<R> {
        self.shard
            .with_segment(self.handed.block, |segment, address| {
                f(segment, address - segment.address)
            })
    }

    /// Waits on the host until every command enqueued on the allocation stream before this
    /// call completed (a marker recorded on the stream, then waited for; as
    /// `torch.cuda.Stream.synchronize` of the allocation stream). No allocator lock is held
    /// while waiting. For callers that must know the bytes of this block idle: the commands
    /// of the block's earlier owners on this stream are then complete (uses on other streams
    /// were already waited for before the block was handed out, through their markers).
    ///
    /// # Errors
    /// The marker's [`MarkerError`](crate::MarkerError): a failed marker or wait, a bad fork
    /// child.
    pub fn wait_for_stream(&self) -> Result<(), crate::MarkerError> {
        B::wait(&self.marker_now()?)
    }

    /// A marker recorded now on the allocation's stream (refused in a bad fork child).
    fn marker_now(&self) -> Result<B::Marker, crate::MarkerError> {
        if B::is_bad_fork() {
            return Err(crate::MarkerError::message("in a bad fork child"));
        }
        B::record_marker(&self.shard.stream())
    }

    /// Whether the work enqueued on the allocation's stream so far has completed, without
    /// waiting: a marker recorded now is queried once (a marker on a queue that still has
    /// work, or that the driver has not processed yet, answers `false`).
    ///
    /// # Errors
    /// The [`MarkerError`](crate::MarkerError) of recording the marker; in a bad fork child.
    pub fn stream_idle(&self) -> Result<bool, crate::MarkerError> {
        Ok(B::marker_complete(&self.marker_now()?))
    }

    /// Marks the allocation as used on `stream` (as `Tensor.record_stream`); ignored for
    /// the allocation stream and for a stream already recorded. Does nothing in a bad fork
    /// child.
    pub fn record_stream(&self, stream: &B::Stream) {
        if B::is_bad_fork() {
            return;
        }
        if B::stream_key(stream) != self.shard.key {
            self.cache_slot.store(NO_SLOT, Ordering::Relaxed);
        }
        self.shard.record_stream(self.handed.block, stream);
    }
}

/// A scoped pin of an allocation's place ([`Allocation::pin`]): while it lives, the block
/// does not move. Empty (no cost) for an allocation that does not relocate.
pub struct PlacePin<'a, B: ThreadCacheKey> {
    guard: Option<PinGuard<'a>>,
    block: u32,
    shard: &'a Shard<B>,
}

impl<B: ThreadCacheKey> PlacePin<'_, B> {
    /// The block's move count when the pin was taken (0 for a block that does not
    /// relocate): a place cached under another count is stale.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.guard.as_ref().map_or(0, |g| g.generation().get())
    }

    /// Prepares a command through the pinned place on `stream`. For a relocating block and
    /// a stream other than its allocation stream, the block never moves again (such a use is
    /// not ordered on the allocation stream, where the moves' copies run), and when
    /// relocation copies that wrote or read its bytes may still run (its own move, or the
    /// move out of the place it was handed out of), `stream` first waits for them
    /// ([`Backend::stream_wait`](crate::Backend::stream_wait) on the marker recorded after
    /// them). Nothing for the allocation stream or a block that does not relocate.
    ///
    /// # Errors
    /// The [`MarkerError`](crate::MarkerError) of the wait.
    pub fn prepare_use_on(&self, stream: &B::Stream) -> Result<(), crate::MarkerError> {
        let Some(guard) = &self.guard else {
            return Ok(());
        };
        if B::stream_key(stream) == self.shard.key {
            return Ok(());
        }
        guard.mark_off_stream();
        // The block's own move, or the move out of the place it was handed out of.
        let moved = self.shard.moved_marker(self.block);
        match moved {
            Some((_, marker)) if !B::marker_complete(&marker) => B::stream_wait(stream, &marker),
            _ => Ok(()),
        }
    }
}

/// Relocation copies that may still read or write an observed block's bytes
/// ([`Allocation::observe_pending`]): enqueued on the block's allocation stream, before a
/// marker that this holds.
pub struct PendingMove<B: crate::Backend> {
    marker: Arc<B::Marker>,
    stream: StreamKey,
}

impl<B: crate::Backend> PendingMove<B> {
    /// Whether the copies completed (a status query, no wait).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        B::marker_complete(&self.marker)
    }

    /// Makes `stream` wait for the copies on the device
    /// ([`Backend::stream_wait`](crate::Backend::stream_wait)): its commands enqueued after
    /// this run after them. Nothing for the allocation stream (the copies are in its order)
    /// or completed copies. Never waits on the host.
    ///
    /// # Errors
    /// The [`MarkerError`](crate::MarkerError) of the enqueued wait.
    pub fn order(&self, stream: &B::Stream) -> Result<(), crate::MarkerError> {
        if B::stream_key(stream) == self.stream || self.is_complete() {
            return Ok(());
        }
        B::stream_wait(stream, &self.marker)
    }

    /// Waits on the host for the copies.
    ///
    /// # Errors
    /// The [`MarkerError`](crate::MarkerError) of the wait.
    pub fn wait(&self) -> Result<(), crate::MarkerError> {
        if self.is_complete() {
            return Ok(());
        }
        B::wait(&self.marker)
    }
}

impl<B: crate::Backend> Clone for PendingMove<B> {
    fn clone(&self) -> Self {
        Self {
            marker: Arc::clone(&self.marker),
            stream: self.stream,
        }
    }
}

impl<B: crate::Backend> std::fmt::Debug for PendingMove<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingMove")
            .field("stream", &self.stream)
            .field("complete", &self.is_complete())
            .finish()
    }
}

impl<B: ThreadCacheKey> std::fmt::Debug for PlacePin<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacePin")
            .field("pinned", &self.guard.is_some())
            .field("generation", &self.generation())
            .finish()
    }
}

impl<B: ThreadCacheKey> std::fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("address", &format_args!("{:#x}", self.handed.addr))
            .field("size", &self.size)
            .field("stream", &self.shard.key)
            .finish()
    }
}

impl<B: ThreadCacheKey> Allocation<B> {
    /// The first step of the drop of an allocation handed out under a relocating
    /// configuration, through its place cell ([`PlaceCell::begin_free`]): whether this drop
    /// frees the block. A block being moved is freed by its mover at the commit (no wait
    /// here: `false`); otherwise the cell is now `FREEING`, so the relocator never claims the
    /// block again, and the drop goes on as any other: into this thread's cache (where the
    /// block stays unmovable until its hand-out resets the cell) or through the stream's
    /// lock.
    #[inline(always)]
    fn begin_free_relocating(&self) -> bool {
        match self.shard.cells.get(self.handed.block) {
            Some(cell) => cell.begin_free() == FreeBy::Caller,
            None => true,
        }
    }
}

impl<B: ThreadCacheKey> Drop for Allocation<B> {
    #[inline]
    fn drop(&mut self) {
        // In a bad fork child the block stays with the parent's copy of the allocator
        // (leaked, its shard kept alive): taking the shard's lock could hang.
        if B::is_bad_fork() {
            std::mem::forget(self.shard.clone());
            return;
        }
        let shard = &self.shard;
        let shared = &shard.shared;
        let (handed, size) = (&self.handed, self.size);
        if handed.relocating && !self.begin_free_relocating() {
            return;
        }
        // Traced at the block's current place (a relocating block may have moved since its
        // hand-out; now `FREEING`, it moves no more). Recording off: one load, as ever.
        let traced = if shared.history.is_enabled() {
            let addr = shard.traced_address(handed);
            shared
                .history
                .record(TraceAction::FreeRequested, addr, size, shard.key.id);
            addr
        } else {
            handed.addr
        };
        // Relaxed: whoever drops the allocation owns it, after every `record_stream` on it.
        let cache_slot = *self.cache_slot.get_mut();
        with_local(shared, |local| {
            // A block with no recorded use, freed by the thread whose cell counted its
            // hand-out, goes into this thread's cache when its bin has room (`free_cache`):
            // no lock. A block of another thread's goes through the stream's lock, which
            // gives the free's statistics to the allocating thread's cell.
            if cache_slot == local.cell.slot() {
                if let Some(bins) = local.bins {
                    if bins.put(shard, handed, size, (local.cell, local.gens)) {
                        let mut st = local.cell.write(local.gens);
                        if shared.history.is_enabled() {
                            shared.history.record(
                                TraceAction::FreeCompleted,
                                traced,
                                size,
                                shard.key.id,
                            );
                        }
                        count_free(&mut st, handed, size);
                        return;
                    }
                }
            }
            shard.free(handed.block, || local.cell.write(local.gens));
        });
    }
}
