//! The blocks, segments, free pools and pending frees of one stream (one shard), and the
//! PyTorch rules applied to them: best fit, split, coalescing, deferred frees, release.

use std::sync::Arc;

use super::bin_slots::BinSlots;
use super::block::{later, Block, Segment, NIL};
use super::device_wide::{DeviceShared, KeptRelease};
use super::pending::Pending;
use super::place_cell::{PlaceArena, PlaceSlots};
use super::policy_state::PolicyState;
use super::pool::FreePool;
use super::slab::Slab;
use super::stats_cell::{CellArray, StatsWriter};
use crate::backend::{Backend, MarkerStatus};
use crate::config::AllocConfig;
use crate::history::{History, TraceAction};
use crate::size::{self, PoolKind};
use crate::source::SourceSegment;
use crate::stream::StreamKey;

/// A request after rounding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    /// Requested bytes.
    pub size: u64,
    /// Rounded bytes.
    pub rounded: u64,
    /// Pool of the rounded size.
    pub pool: PoolKind,
    /// Size of a new segment for it.
    pub segment_size: u64,
}

impl Request {
    /// No request (the initial value of [`ShardState`]'s last request).
    const NONE: Self = Self {
        size: 0,
        rounded: 0,
        pool: PoolKind::Small,
        segment_size: 0,
    };
}

/// A free block found by a search, still in its pool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pooled {
    pub block: u32,
    pub size: u64,
    pub addr: u64,
    /// Position in a vector pool.
    pub hint: Option<usize>,
}

/// What [`ShardState::try_merge`] needs of a merged neighbour.
struct Merged {
    addr: u64,
    size: u64,
    prev: u32,
    next: u32,
}

/// A block handed out: index in the shard, address and rounded size, and what its free
/// needs to know without the shard's lock (a thread cache's free, `free_cache`): its pool,
/// whether its hand-out counted it as an oversize allocation, and the configuration epoch
/// of the hand-out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handed {
    pub block: u32,
    pub addr: u64,
    pub size: u64,
    pub pool: PoolKind,
    pub oversize: bool,
    /// The configuration epoch it was handed out under.
    pub epoch: u64,
    /// Handed out under a relocating configuration (see [`Block::relocating`]): freed
    /// through its place cell (`begin_free`) first, into a thread's cache (`free_cache`) or
    /// through the stream's lock.
    pub relocating: bool,
}

/// Everything one stream owns.
pub(crate) struct ShardState<B: Backend> {
    pub key: StreamKey,
    /// The stream, for synchronizing before freeing memory whose free does not wait.
    pub stream: B::Stream,
    pub blocks: Slab<Block<B>>,
    pub segments: Slab<Segment<B>>,
    small: FreePool,
    large: FreePool,
    pending: Pending<B>,
    pub config: Arc<AllocConfig>,
    config_epoch: u64,
    /// What the fragmentation policy learned about this stream (see [`super::policy_state`]).
    pub policy: PolicyState,
    /// The allocator's history (see [`crate::history`]).
    history: Arc<History>,
    /// The last request rounded under `config` (`size` 0 when none: no request is empty),
    /// so a repeated size skips the rounding rules.
    last_request: Request,
    /// Segments taken out by [`ShardState::release_block`], to be freed by
    /// [`ShardState::take_released`]'s caller once the stream's lock is released (a
    /// source's `free` is user code). Empty outside an allocation's grow path.
    released: Vec<Segment<B>>,
    /// The allocator's segments taken out for release and not freed yet
    /// ([`DeviceShared::releasing`]): each segment released here is noted there.
    releasing: Arc<super::device_wide::Releasing>,
    /// The slots of the threads' freed-block caches bound to this stream (see
    /// `free_cache`): their blocks are allocated here and free for the statistics until
    /// [`ShardState::flush_thread_caches`] frees them here.
    thread_bins: Vec<Arc<BinSlots>>,
    /// The blocks' relocation state, by slab index ([`PlaceArena`]: its cells are read
    /// without this lock, through the [`Shard`](super::shard::Shard)'s share).
    pub cells: Arc<PlaceArena>,
    /// The places cached for pinned readers, by slab index ([`PlaceSlots`]).
    pub places: Arc<PlaceSlots<B::Memory>>,
    /// Relocation markers recorded on this stream so far (their sequence numbers).
    pub moves_recorded: u64,
    /// Whether this allocator may relocate at all (not a private pool's): with
    /// [`AllocConfig::relocates`] it decides whether a hand-out is relocating.
    pub relocation_allowed: bool,
    /// A wait of the stream was known failed when an allocation last asked
    /// ([`Backend::stream_follows_failed_wait`], only on a stream with a
    /// [`Backend::stream_order_flag`]): its driver may run the work enqueued from now on
    /// ahead of work enqueued before that wait and still queued, the last uses of the
    /// stream's free blocks among it, so [`ShardState::search`] finds nothing until an
    /// allocation finds no failure any more (the stream synchronized with success): blocks
    /// come from new segments meanwhile.
    pub unordered: bool,
}

impl<B: Backend> ShardState<B> {
    pub(crate) fn new(key: StreamKey, stream: B::Stream, shared: &DeviceShared<B>) -> Self {
        Self {
            key,
            stream,
            blocks: Slab::default(),
            segments: Slab::default(),
            small: FreePool::default(),
            large: FreePool::default(),
            pending: Pending::default(),
            config: shared.config(),
            config_epoch: shared.config_epoch(),
            policy: PolicyState::default(),
            history: shared.history.clone(),
            last_request: Request::NONE,
            released: Vec::new(),
            releasing: shared.releasing.clone(),
            thread_bins: Vec::new(),
            cells: Arc::default(),
            places: Arc::default(),
            moves_recorded: 0,
            relocation_allowed: shared.relocation_allowed,
            unordered: false,
        }
    }

    /// Registers the slots of a thread's bin bound to this stream.
    pub(crate) fn register_bin(&mut self, slots: Arc<BinSlots>) {
        self.thread_bins.push(slots);
    }

    /// How many threads' bins are registered here.
    #[cfg(test)]
    pub(crate) fn registered_bins(&self) -> usize {
        self.thread_bins.len()
    }

    /// Forgets the slots of a thread's bin (emptied by its owner, who rebinds or exits).
    pub(crate) fn deregister_bin(&mut self, slots: &Arc<BinSlots>) {
        self.thread_bins.retain(|s| !Arc::ptr_eq(s, slots));
    }

    /// Frees here every block the threads' caches hold of this stream (coalescing them as
    /// the free of a block without recorded uses does), and forgets bins whose owner let
    /// go of them. Returns whether a block was freed.
    #[inline(always)]
    pub(crate) fn flush_thread_caches(&mut self, st: &mut StatsWriter<'_>) -> bool {
        if self.thread_bins.is_empty() {
            return false;
        }
        self.flush_registered(st)
    }

    #[inline(never)]
    fn flush_registered(&mut self, st: &mut StatsWriter<'_>) -> bool {
        let bins = std::mem::take(&mut self.thread_bins);
        let mut any = false;
        for slots in &bins {
            for block in slots.take_all() {
                self.free_cached(block, st);
                any = true;
            }
        }
        self.thread_bins = bins;
        // Only this list holds them: their owner rebound or exited.
        self.thread_bins.retain(|s| Arc::strong_count(s) > 1);
        any
    }

    /// Frees the blocks of a thread's bin here and forgets its slots (the owner rebinds the
    /// bin or exits).
    pub(crate) fn evict_bin(&mut self, slots: &Arc<BinSlots>, st: &mut StatsWriter<'_>) {
        for block in slots.take_all() {
            self.free_cached(block, st);
        }
        self.deregister_bin(slots);
    }

    /// Frees a block taken from a thread's cache: its statistics already count it as not
    /// allocated and inactive (see `free_cache`); it returns to the pool now.
    fn free_cached(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        match self.blocks.get(block) {
            Some(b) if b.allocated && b.stream_uses.is_empty() => {}
            // Unreachable: a cached block is allocated here with no recorded use.
            _ => {
                tracing::error!(block, "a thread-cached block is not allocated in its shard");
                return;
            }
        }
        self.blocks[block].allocated = false;
        if self.blocks[block].relocating {
            // As `free`: the block's owner changes (its cell is `FREEING` until then).
            self.forget_place(block);
        }
        self.free_block_as::<true>(block, st);
    }

    /// Forgets what this state holds of the device (blocks, segments, pending markers,
    /// released segments and a reference to its stream), so that dropping it afterwards calls
    /// neither the backend nor the segment source: a shard dropped in a bad fork child.
    pub(crate) fn leak(&mut self) {
        std::mem::forget(self.stream.clone());
        std::mem::forget(std::mem::take(&mut self.blocks));
        std::mem::forget(std::mem::take(&mut self.segments));
        std::mem::forget(std::mem::take(&mut self.pending));
        std::mem::forget(std::mem::take(&mut self.released));
    }

    fn pool_mut(&mut self, kind: PoolKind) -> &mut FreePool {
        match kind {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        }
    }

    pub(crate) fn pool(&self, kind: PoolKind) -> &FreePool {
        match kind {
            PoolKind::Small => &self.small,
            PoolKind::Large => &self.large,
        }
    }

    /// Picks up a configuration change (one atomic load when unchanged).
    pub(crate) fn refresh_config(&mut self, shared: &DeviceShared<B>) {
        let epoch = shared.config_epoch();
        if epoch != self.config_epoch {
            self.config = shared.config();
            self.config_epoch = epoch;
            self.last_request = Request::NONE;
        }
    }

    /// Rounds a request and sizes its segment (a segment never exceeds the device's
    /// largest allocation when the rounded request itself fits).
    #[inline]
    pub(crate) fn request(&mut self, size: u64, max_alloc: u64) -> Request {
        if self.last_request.size == size {
            return self.last_request;
        }
        let req = self.round_request(size, max_alloc);
        self.last_request = req;
        req
    }

    fn round_request(&self, size: u64, max_alloc: u64) -> Request {
        let rounded = size::round_size(size, &self.config);
        let mut segment_size = size::segment_size(rounded, &self.config);
        if segment_size > max_alloc {
            segment_size = rounded;
        }
        Request {
            size,
            rounded,
            pool: PoolKind::for_size(rounded),
            segment_size,
        }
    }

    fn remove_free(&mut self, block: u32) {
        let (size, addr, kind) = {
            let b = &self.blocks[block];
            (b.size, b.addr, b.pool)
        };
        self.pool_mut(kind).remove(size, addr, block);
    }

    /// Best fit in the request's pool under the oversize rules; the block stays in its pool
    /// until [`ShardState::alloc_pooled`] hands it out. Where segments are not split, a
    /// block of a segment split before (`split_segments` turned off at run time) is not
    /// handed out: every block handed out is its whole segment, the best fit among them.
    #[inline]
    pub(crate) fn search(&mut self, req: &Request, gc_enabled: bool) -> Option<Pooled> {
        if self.unordered {
            return None;
        }
        if gc_enabled {
            self.pool_mut(req.pool).searches += 1;
        }
        let ((size, addr, block), hint) = self.pool(req.pool).best_fit_at(req.rounded)?;
        if !size::oversize_allows(req.rounded, size, &self.config) {
            return None;
        }
        if !self.config.splits_segments() && self.blocks[block].is_split() {
            return self.search_whole(req);
        }
        Some(Pooled {
            block,
            size,
            addr,
            hint,
        })
    }

    /// [`ShardState::search`] where segments are not split and the best fit is a block of a
    /// segment split before: the smallest whole free block the oversize rules allow (they
    /// refuse every larger block once they refuse one, so the scan stops there).
    #[cold]
    #[inline(never)]
    fn search_whole(&self, req: &Request) -> Option<Pooled> {
        self.pool(req.pool)
            .iter_from(req.rounded)
            .take_while(|&(size, _, _)| size::oversize_allows(req.rounded, size, &self.config))
            .find(|&(_, _, block)| !self.blocks[block].is_split())
            .map(|(size, addr, block)| Pooled {
                block,
                size,
                addr,
                hint: None,
            })
    }

    /// Hands out a block found by [`ShardState::search`] (see
    /// [`ShardState::alloc_found_block`]).
    #[inline]
    pub(crate) fn alloc_pooled(
        &mut self,
        found: Pooled,
        req: &Request,
        st: &mut StatsWriter<'_>,
    ) -> Handed {
        self.alloc_block::<true>(found.block, Some(found), req, st)
    }

    /// [`ShardState::alloc_pooled`] for a relocation's target: the place changes hands, not
    /// the user's allocations, so only the pool's structure is counted (splits), not a
    /// hand-out ([`ShardState::free_moved_out`] frees the old place the same way).
    pub(crate) fn alloc_pooled_for_move(
        &mut self,
        found: Pooled,
        req: &Request,
        st: &mut StatsWriter<'_>,
    ) -> Handed {
        self.alloc_block::<false>(found.block, Some(found), req, st)
    }

    /// Frees a place that a relocation moved a block out of (or a target it gave back): back
    /// into its pool, counted as structure only (see [`ShardState::alloc_pooled_for_move`]).
    pub(crate) fn free_moved_out(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        let b = &mut self.blocks[block];
        b.allocated = false;
        debug_assert!(b.stream_uses.is_empty(), "a moved block had recorded uses");
        if b.relocating {
            self.forget_place(block);
        }
        self.free_block_as::<true>(block, st);
    }

    /// Hands out a block that is in no pool (a new or adopted segment), splitting it when
    /// the rules say so, and updates the statistics.
    pub(crate) fn alloc_found_block(
        &mut self,
        block: u32,
        req: &Request,
        st: &mut StatsWriter<'_>,
    ) -> Handed {
        self.alloc_block::<true>(block, None, req, st)
    }

    /// Hands out `block`; `COUNTED`: as a user's allocation in the statistics (false for a
    /// relocation's target, whose hand-out only moves a counted allocation).
    #[inline(always)]
    fn alloc_block<const COUNTED: bool>(
        &mut self,
        block: u32,
        pooled: Option<Pooled>,
        req: &Request,
        st: &mut StatsWriter<'_>,
    ) -> Handed {
        let kind = req.pool;
        let config = &*self.config;
        let b = &self.blocks[block];
        let (already_split, block_size, addr, segment, next) =
            (b.is_split(), b.size, b.addr, b.segment, b.next);
        let size = if size::should_split(kind, block_size, req.rounded, config) {
            let remaining = block_size - req.rounded;
            let mut rest = Block::whole(addr + req.rounded, remaining, segment, kind);
            rest.prev = block;
            rest.next = next;
            rest.moved.clone_from(&self.blocks[block].moved);
            let pool = match kind {
                PoolKind::Small => &mut self.small,
                PoolKind::Large => &mut self.large,
            };
            rest.gc_base = pool.searches;
            let rest_index = self.blocks.insert(rest);
            match pooled {
                Some(p) => pool.replace(
                    (p.size, p.addr),
                    p.hint,
                    remaining,
                    addr + req.rounded,
                    rest_index,
                ),
                None => pool.insert(remaining, addr + req.rounded, rest_index),
            }
            if next != NIL {
                self.blocks[next].prev = rest_index;
            }
            let b = &mut self.blocks[block];
            b.next = rest_index;
            b.size = req.rounded;
            if already_split {
                st.inactive_split_bytes().decrease(kind, req.rounded);
            } else {
                st.inactive_split().increase(kind, 1);
                st.inactive_split_bytes().increase(kind, remaining);
            }
            req.rounded
        } else {
            if let Some(p) = pooled {
                self.pool_mut(kind).remove(p.size, p.addr, p.block);
            }
            if already_split {
                st.inactive_split().decrease(kind, 1);
                st.inactive_split_bytes().decrease(kind, block_size);
            }
            block_size
        };
        // Counted under the configuration of the hand-out: the free subtracts what the block
        // remembers (a `set_config` in between changes nothing).
        let oversize = size >= self.config.max_split_size;
        // A block whose bytes a relocation copy may still read or write is handed out as
        // relocating under any configuration: its pins and observation then wait for that
        // copy (a vacated place after `set_config` turned relocation off).
        let relocating = self.relocation_allowed
            && (relocates_pool(&self.config, kind) || self.copy_pending(block));
        if relocating {
            // The slot's cell starts over for the new block (its generation goes on). A cell
            // of a free block is never claimed (claims take this lock), so this cannot fail;
            // a pin count left by a forgotten guard is cleared.
            let cell = self.cells.get_or_create(block);
            let reset = cell.reset();
            debug_assert!(reset.is_ok(), "a free block's cell was in use");
            // Under the lock: no move commits before the caller has the block at `addr`.
            cell.note_hand_out();
            self.places.get_or_create(block).clear();
            // A relocating block may move as soon as this lock is released: its `alloc` is
            // traced here, under the lock, so that it precedes any `move_from` of it
            // (`allocate_on` traces the others after the lock).
            if COUNTED && self.history.is_enabled() {
                self.history
                    .record(TraceAction::Alloc, addr, req.size, self.key.id);
            }
        }
        let b = &mut self.blocks[block];
        b.allocated = true;
        b.oversize = oversize;
        b.requested = req.size;
        b.relocating = relocating;
        if COUNTED {
            b.slot = st.slot();
            st.hand_out(kind, size, req.size);
            if oversize {
                st.oversize_allocations.increase(1);
            }
        }
        Handed {
            block,
            addr,
            size,
            pool: kind,
            oversize,
            epoch: self.config_epoch,
            relocating,
        }
    }

    /// Whether a relocation copy may still read or write `block`'s bytes: the marker recorded
    /// after the copies (`Block::moved`) is not complete. A complete one is forgotten, so
    /// the next hand-outs of these bytes ask no more.
    #[inline]
    fn copy_pending(&mut self, block: u32) -> bool {
        let b = &mut self.blocks[block];
        match &b.moved {
            None => false,
            Some((_, marker)) if B::marker_complete(marker) => {
                b.moved = None;
                false
            }
            Some(_) => true,
        }
    }

    /// Takes ownership of a new segment: returns its whole block (not in a pool).
    pub(crate) fn add_segment(
        &mut self,
        source: SourceSegment<B::Memory>,
        kind: PoolKind,
        st: &mut StatsWriter<'_>,
    ) -> u32 {
        let size = source.size;
        self.history
            .record(TraceAction::SegmentAlloc, source.address, size, self.key.id);
        st.segment().increase(kind, 1);
        st.reserved_bytes().increase(kind, size);
        st.num_device_alloc.bump();
        // Counted under the configuration in effect now; its release subtracts what the
        // segment remembers.
        let oversize = size >= self.config.max_split_size;
        if oversize {
            st.oversize_segments.increase(1);
        }
        self.adopt_segment(Segment {
            source: Arc::new(source),
            pool: kind,
            oversize,
            release_note: 0,
        })
    }

    /// Inserts a segment (new or moved from another shard) as one whole free block that is
    /// not yet in a pool; no statistics change.
    pub(crate) fn adopt_segment(&mut self, segment: Segment<B>) -> u32 {
        let (addr, size, kind) = (segment.source.address, segment.source.size, segment.pool);
        let index = self.segments.insert(segment);
        self.blocks.insert(Block::whole(addr, size, index, kind))
    }

    /// Removes a whole free segment from this shard without releasing it (cross-stream
    /// reuse); no statistics change.
    pub(crate) fn take_segment(&mut self, block: u32) -> Option<Segment<B>> {
        let b = self.blocks.get(block)?;
        if b.is_split() || !b.is_idle() {
            return None;
        }
        self.remove_free(block);
        let b = self.blocks.remove(block)?;
        self.segments.remove(b.segment)
    }

    /// The user frees a block: allocation stats drop now; the block is reusable now, or once
    /// markers on the streams it was used on complete.
    #[inline]
    pub(crate) fn free(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        let b = &mut self.blocks[block];
        b.allocated = false;
        if b.relocating {
            self.forget_place(block);
        }
        let b = &self.blocks[block];
        let (kind, size, unused) = (b.pool, b.size, b.stream_uses.is_empty());
        // In the cell that counted the hand-out (this one but for a block freed by another
        // thread than its allocating one).
        st.free_of(b.slot, kind, size);
        if unused {
            self.free_block(block, st);
        } else {
            self.insert_events(block, st);
        }
    }

    /// Traces the user's free of the relocating `block` (`free_requested` at its current
    /// address, its requested bytes) when recording is on. Called under the stream's lock, by
    /// whoever frees a relocating block (its owner, or the mover that the owner left it to),
    /// so the entry follows every move of the block and names its last place.
    pub(crate) fn trace_free_requested(&self, block: u32) {
        if self.history.is_enabled() {
            let b = &self.blocks[block];
            self.history
                .record(TraceAction::FreeRequested, b.addr, b.requested, self.key.id);
        }
    }

    /// Traces the move of a live block from the place `from` (now another slab index's) to
    /// `to` (its own after the move): `move_from` and `move_to`, under the stream's lock at
    /// the move's commit ([`History::record_move`]).
    pub(crate) fn trace_move(&self, from: u32, to: u32) {
        if self.history.is_enabled() {
            let (old, new) = (&self.blocks[from], &self.blocks[to]);
            self.history
                .record_move(old.addr, new.addr, new.requested, self.key.id);
        }
    }

    /// Forgets the place cached for pinned readers of `block` (its place or owner changes).
    #[cold]
    #[inline(never)]
    pub(crate) fn forget_place(&mut self, block: u32) {
        if let Some(slot) = self.places.get(block) {
            slot.clear();
        }
    }

    #[cold]
    #[inline(never)]
    fn insert_events(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        let uses = std::mem::take(&mut self.blocks[block].stream_uses);
        let mut failed = Vec::new();
        for stream in uses {
            match st.unlocked(|| B::record_marker(&stream)) {
                Ok(marker) => {
                    self.blocks[block].event_count += 1;
                    self.pending
                        .push(B::stream_key(&stream), Arc::new(marker), block);
                }
                Err(e) => {
                    // Without a marker nothing orders a reuse after that stream's work: the
                    // block stays out of the cache (never reused, merged or released).
                    tracing::error!(stream = ?B::stream_key(&stream), error = %e, "recording a free marker failed; the block is kept out of the cache");
                    failed.push(stream);
                }
            }
        }
        if failed.is_empty() {
            if self.blocks[block].event_count == 0 {
                self.free_block(block, st);
            }
        } else {
            self.blocks[block].stream_uses = failed;
        }
    }

    /// A free marker of `block` failed ([`Backend::marker_status`]): the work on `stream`
    /// before it may still be queued, so nothing orders a reuse after it. The block stays
    /// out of the cache (never reused, merged or released) while the marker reads failed
    /// (until its stream is synchronized, for xpu-alloc's markers).
    #[cold]
    fn marker_failed(block: u32, stream: StreamKey) {
        tracing::error!(
            ?stream,
            block,
            "a free marker failed; the block is kept out of the cache until its marker reads complete"
        );
    }

    fn marker_done(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        let b = &mut self.blocks[block];
        b.event_count -= 1;
        // A use whose marker could not be recorded stays in `stream_uses`: never free.
        if b.event_count == 0 && b.stream_uses.is_empty() {
            self.free_block(block, st);
        }
    }

    /// Frees the blocks whose markers completed (per stream, in order).
    #[inline]
    pub(crate) fn process_events(&mut self, st: &mut StatsWriter<'_>) {
        if !self.pending.is_empty() {
            self.process_events_slow(st);
        }
    }

    fn process_events_slow(&mut self, st: &mut StatsWriter<'_>) {
        // Querying markers is a driver call: statistics readers must not wait for it.
        let pending = &mut self.pending;
        let (done, failed) = st.unlocked(|| pending.pop_completed());
        for (stream, block) in failed {
            Self::marker_failed(block, stream);
        }
        for block in done {
            self.marker_done(block, st);
        }
    }

    /// Whether frees wait for markers on this stream.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Every pending marker, to be waited for without any allocator lock (then
    /// [`ShardState::process_events`] frees their blocks).
    pub(crate) fn pending_markers(&self) -> Vec<(StreamKey, Arc<B::Marker>)> {
        if self.pending.is_empty() {
            Vec::new()
        } else {
            self.pending.markers()
        }
    }

    /// Adds `stream` to the streams a live block is used on (ignored for the allocation
    /// stream and for a stream already recorded).
    pub(crate) fn record_stream(&mut self, block: u32, stream: &B::Stream) {
        let key = B::stream_key(stream);
        if key == self.key {
            return;
        }
        if let Some(b) = self.blocks.get(block) {
            if b.allocated && !b.stream_uses.iter().any(|s| B::stream_key(s) == key) {
                self.blocks[block].stream_uses.push(stream.clone());
            }
        }
    }

    /// Merges `src` into `dst` when `src` is an idle neighbour (removing it from the slab
    /// but not from its pool); returns its pool key (size, address, block).
    #[inline(always)]
    fn try_merge(&mut self, dst: u32, src: u32) -> Option<(u64, u64, u32)> {
        if src == NIL {
            return None;
        }
        let s = self.blocks.get(src)?;
        if !s.is_idle() {
            return None;
        }
        // A relocation marker of the merged bytes stays with the block (the later one).
        if s.moved.is_some() {
            let theirs = self.blocks[src].moved.take();
            let ours = self.blocks[dst].moved.take();
            self.blocks[dst].moved = later::<B>(ours, theirs);
        }
        let s = &self.blocks[src];
        // The fields merged, read in place (the block is not moved out of the slab).
        let s = Merged {
            addr: s.addr,
            size: s.size,
            prev: s.prev,
            next: s.next,
        };
        self.blocks.discard(src);
        let d = &mut self.blocks[dst];
        if d.prev == src {
            d.addr = s.addr;
            d.prev = s.prev;
            d.size += s.size;
            if s.prev != NIL {
                self.blocks[s.prev].next = dst;
            }
        } else {
            d.next = s.next;
            d.size += s.size;
            if s.next != NIL {
                self.blocks[s.next].prev = dst;
            }
        }
        Some((s.size, s.addr, src))
    }

    /// A block becomes reusable: merge with idle neighbours, back into its pool (in place of
    /// a merged neighbour's entry when there is one).
    #[inline(always)]
    fn free_block(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        self.free_block_as::<false>(block, st);
    }

    /// [`ShardState::free_block`]; `CACHED`: the block comes from a thread's cache, whose
    /// free already traced it and counted it as inactive: only the statistics of its return
    /// to the pool remain (inactive split blocks, coalescing).
    #[inline(always)]
    fn free_block_as<const CACHED: bool>(&mut self, block: u32, st: &mut StatsWriter<'_>) {
        if !CACHED && self.history.is_enabled() {
            let b = &self.blocks[block];
            self.history
                .record(TraceAction::FreeCompleted, b.addr, b.requested, self.key.id);
        }
        let b = &mut self.blocks[block];
        let (kind, original, requested, prev, next) = (b.pool, b.size, b.requested, b.prev, b.next);
        b.requested = 0;
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;

        let mut stale: Option<(u64, u64, u32)> = None;
        for neighbour in [prev, next] {
            if let Some(merged) = self.try_merge(block, neighbour) {
                net_blocks -= 1;
                net_bytes -= i64::try_from(merged.0).unwrap_or(i64::MAX);
                if let Some((s, a, b)) = stale.replace(merged) {
                    self.pool_mut(kind).remove(s, a, b);
                }
            }
        }
        let b = &self.blocks[block];
        let (size, addr, split) = (b.size, b.addr, b.is_split());
        let pool = match kind {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        };
        match stale {
            Some((s, a, _)) => pool.replace((s, a), None, size, addr, block),
            None => pool.insert(size, addr, block),
        }
        let searches = pool.searches;
        let b = &mut self.blocks[block];
        b.gc_base = searches;
        // What the hand-out counted (merging kept this block's flag), read late: one
        // register less across the merges.
        let (oversize, owner) = (b.oversize, b.slot);
        if split {
            net_blocks += 1;
            net_bytes += i64::try_from(size).unwrap_or(i64::MAX);
        }
        apply_net(st.inactive_split(), kind, net_blocks);
        apply_net(st.inactive_split_bytes(), kind, net_bytes);
        if !CACHED {
            st.deactivate_of(owner, kind, original, requested, oversize);
        }
    }

    /// Takes a whole free block's segment out of this shard for release (garbage
    /// collection, the release policy, oversize releases during an allocation); the caller
    /// frees it with [`ShardState::take_released`] and [`ReleasedSegments::free`] once the
    /// stream's lock is released. The statistics count the segment as reserved until it is
    /// freed.
    pub(crate) fn release_block(&mut self, block: u32) {
        if let Some(mut segment) = self.take_segment(block) {
            self.note_releasing(&mut segment);
            self.released.push(segment);
        }
    }

    /// Notes `segment`, taken out of this shard for release, in the allocator's releasing
    /// segments (snapshots show it until it is freed).
    fn note_releasing(&self, segment: &mut Segment<B>) {
        segment.release_note = self.releasing.note(
            self.key,
            segment.source.address,
            segment.source.size,
            segment.pool,
        );
    }

    /// The segments taken out by [`ShardState::release_block`] since the last call, to free
    /// without the stream's lock (`None` when there are none).
    pub(crate) fn take_released(&mut self) -> Option<ReleasedSegments<B>> {
        if self.released.is_empty() {
            return None;
        }
        Some(ReleasedSegments {
            key: self.key,
            stream: self.stream.clone(),
            segments: std::mem::take(&mut self.released),
        })
    }

    /// Takes every whole free segment out of this shard for release, after recording a
    /// marker on the stream (the only stream whose work may still use them: uses on other
    /// streams completed before their blocks became free). `None` when there is nothing to
    /// release, or when the marker cannot be recorded (the segments then stay cached).
    pub(crate) fn take_releasable(&mut self, st: &mut StatsWriter<'_>) -> Option<ReleaseBatch<B>> {
        let blocks: Vec<u32> = [PoolKind::Small, PoolKind::Large]
            .into_iter()
            .flat_map(|kind| self.whole_free(kind))
            .map(|(_, _, block)| block)
            .collect();
        if blocks.is_empty() {
            return None;
        }
        let marker = match st.unlocked(|| B::record_marker(&self.stream)) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(stream = ?self.key, error = %e, "cannot order a release after the stream's work; its cached segments stay cached");
                return None;
            }
        };
        let mut segments: Vec<Segment<B>> = blocks
            .into_iter()
            .filter_map(|block| self.take_segment(block))
            .collect();
        for segment in &mut segments {
            self.note_releasing(segment);
        }
        Some(ReleaseBatch {
            key: self.key,
            marker,
            segments,
            told_failed: false,
        })
    }

    /// The segments of this shard with their blocks (each sorted by address), as a snapshot
    /// shows them (the caller holds the shard's lock).
    pub(crate) fn segments_snapshot(&self) -> Vec<crate::SegmentSnapshot> {
        let state = self;
        let mut segments: Vec<crate::SegmentSnapshot> = Vec::new();
        let mut index_of = std::collections::HashMap::new();
        for (i, segment) in state.segments.iter() {
            index_of.insert(i, segments.len());
            segments.push(crate::SegmentSnapshot {
                stream: state.key,
                address: segment.source.address,
                size: segment.source.size,
                pool: segment.pool,
                blocks: Vec::new(),
            });
        }
        for (_, b) in state.blocks.iter() {
            let block_state = if b.allocated {
                crate::BlockState::Allocated
            } else if b.event_count > 0 || !b.stream_uses.is_empty() {
                crate::BlockState::PendingFree
            } else {
                crate::BlockState::Inactive
            };
            if let Some(&s) = index_of.get(&b.segment) {
                segments[s].blocks.push(crate::BlockSnapshot {
                    address: b.addr,
                    size: b.size,
                    requested: b.requested,
                    state: block_state,
                });
            }
        }
        for s in &mut segments {
            s.blocks.sort_by_key(|b| b.address);
        }
        segments
    }

    /// Whole free blocks of one pool, smallest first: (size, address, block).
    pub(crate) fn whole_free(&self, kind: PoolKind) -> Vec<(u64, u64, u32)> {
        self.pool(kind)
            .iter()
            .filter(|&(_, _, b)| !self.blocks[b].is_split())
            .collect()
    }

    /// PyTorch's `release_available_cached_blocks` (only with `max_split_size` set): release
    /// one whole oversize block of at least max(request, max_split_size), or else oversize
    /// whole blocks from the largest down until that many bytes are freed. The segments are
    /// taken out for release ([`ShardState::take_released`]).
    pub(crate) fn release_available_cached_blocks(&mut self, req: &Request) -> bool {
        let max_split = self.config.max_split_size;
        if max_split == u64::MAX {
            return false;
        }
        let key = req.rounded.max(max_split);
        let pool = self.pool(req.pool);
        let single = pool
            .iter_from(key)
            .find(|&(_, _, b)| !self.blocks[b].is_split());
        if let Some((_, _, block)) = single {
            self.release_block(block);
            return true;
        }
        let candidates: Vec<(u64, u32)> = pool
            .iter()
            .rev()
            .take_while(|&(size, _, _)| size >= max_split)
            .filter(|&(_, _, b)| !self.blocks[b].is_split())
            .map(|(size, _, b)| (size, b))
            .collect();
        let mut released = 0;
        for (size, block) in candidates {
            if released >= key {
                break;
            }
            self.release_block(block);
            released += size;
        }
        released >= key
    }

    /// PyTorch's garbage collection (§4.11) on this shard's large pool: release whole free
    /// blocks of at least the mean age until reserved drops below the threshold. The segments
    /// are taken out for release ([`ShardState::take_released`]).
    pub(crate) fn garbage_collect(&mut self, shared: &DeviceShared<B>) {
        let Some(allowed) = shared.allowed() else {
            return;
        };
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let threshold = (self.config.garbage_collection_threshold * allowed as f64) as u64;
        let reserved = shared.reserved();
        if reserved <= threshold {
            return;
        }
        let target = reserved - threshold;
        let now = self.large.searches;
        let mut candidates: Vec<(u32, u64, u64)> = self
            .whole_free(PoolKind::Large)
            .into_iter()
            .map(|(size, _, b)| (b, size, now - self.blocks[b].gc_base))
            .collect();
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && !candidates.is_empty() {
            let total_age: u64 = candidates.iter().map(|c| c.2).sum();
            #[allow(clippy::cast_precision_loss)]
            let mean = total_age as f64 / candidates.len() as f64;
            freed = false;
            let (old, young): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| {
                #[allow(clippy::cast_precision_loss)]
                let age = c.2 as f64;
                age >= mean
            });
            for (block, size, _) in old {
                self.release_block(block);
                reclaimed += size;
                freed = true;
            }
            candidates = young;
        }
    }
}

/// Whole free segments taken out of a shard, to be freed once the work enqueued on their
/// stream before the release has completed. A batch dropped without being freed keeps its
/// segments out (never freed, still counted as reserved): nothing then tells that the work
/// before its marker ran.
pub(crate) struct ReleaseBatch<B: Backend> {
    key: StreamKey,
    marker: B::Marker,
    segments: Vec<Segment<B>>,
    /// Whether its marker was seen failed (logged once).
    told_failed: bool,
}

impl<B: Backend> ReleaseBatch<B> {
    /// Waits for the work that may use the segments. Call without any allocator lock or
    /// open statistics write.
    pub(crate) fn wait(&self) {
        if let Err(e) = B::wait(&self.marker) {
            tracing::warn!(stream = ?self.key, error = %e, "waiting for a stream before releasing its segments failed");
        }
    }

    /// Frees the segments (after [`ReleaseBatch::wait`]); returns the bytes released. Only
    /// once the marker reads complete ([`Backend::marker_status`]): a wait may return while
    /// the marker is not complete in order. When it reads pending (on OpenCL: a wait of the
    /// stream numbered before the marker has not completed, as one whose enqueue call raced
    /// the marker's on another thread does, review h34) or failed (a failed command before
    /// it on the stream, whose earlier commands may stay queued: kept out, still counted as
    /// reserved, until the backend reads it complete, as xpu-alloc's does once the stream
    /// was synchronized after it; review h60), the batch is kept in `shared`
    /// ([`DeviceShared::keep_release`]) and freed by a later release once its marker reads
    /// complete ([`DeviceShared::take_kept_releases`]). 0 is returned for both.
    pub(crate) fn free(mut self, shared: &DeviceShared<B>, st: &mut StatsWriter<'_>) -> u64 {
        let status = st.unlocked(|| B::marker_status(&self.marker));
        match status {
            MarkerStatus::Complete => {
                let segments = std::mem::take(&mut self.segments);
                let released = segments.iter().map(|s| s.source.size).sum();
                free_segments(segments, self.key, shared, st);
                released
            }
            MarkerStatus::Pending => {
                Self::kept_pending(self.key, &self.segments);
                shared.keep_release(Box::new(self));
                0
            }
            MarkerStatus::Failed => {
                // Kept as a pending one is: a later release frees the segments once the
                // marker reads complete (a backend reads a failed marker complete once its
                // stream was synchronized after it; review h60: they stayed reserved for
                // good). Told once.
                if !self.told_failed {
                    self.told_failed = true;
                    Self::kept_out(self.key, &self.segments, status);
                }
                shared.keep_release(Box::new(self));
                0
            }
        }
    }

    #[cold]
    fn kept_pending(key: StreamKey, segments: &[Segment<B>]) {
        tracing::debug!(
            stream = ?key,
            segments = segments.len(),
            "the work before a release marker is not known complete yet; its segments wait for a later release"
        );
    }

    #[cold]
    fn kept_out(key: StreamKey, segments: &[Segment<B>], status: MarkerStatus) {
        tracing::error!(
            stream = ?key,
            segments = segments.len(),
            ?status,
            "the work before a release marker is not known complete (it failed); its segments are kept out until it reads complete"
        );
    }
}

impl<B: Backend> KeptRelease<B> for ReleaseBatch<B> {
    fn free_kept(self: Box<Self>, shared: &DeviceShared<B>, st: &mut StatsWriter<'_>) {
        (*self).free(shared, st);
    }
}

impl<B: Backend> Drop for ReleaseBatch<B> {
    fn drop(&mut self) {
        // Not freed (see the type's docs): the segments are kept out, their memory not
        // dropped (a source's memory may go back to the device when dropped).
        std::mem::forget(std::mem::take(&mut self.segments));
    }
}

/// Segments taken out of a shard during an allocation (see [`ShardState::release_block`]),
/// freed once its lock is released.
pub(crate) struct ReleasedSegments<B: Backend> {
    key: StreamKey,
    stream: B::Stream,
    segments: Vec<Segment<B>>,
}

impl<B: Backend> ReleasedSegments<B> {
    /// Frees the segments to the device, then updates the statistics (reserved bytes drop
    /// as each is freed). Call without the stream's lock: the source's `free` is user code
    /// and may call the allocator. Stream order: only this stream's work may still use them
    /// (uses on other streams completed before their blocks became free); an OpenCL buffer
    /// is deleted by the driver only once the commands using it have finished (OpenCL 3.0
    /// §5.5.1), and a source whose free does not wait has the stream synchronized first.
    pub(crate) fn free(self, shared: &DeviceShared<B>, st: &mut StatsWriter<'_>) {
        // The source's answer is user code too (it may read the statistics): asked, as the
        // synchronize runs, with the statistics write closed.
        let synced = st.unlocked(|| {
            shared
                .source
                .free_needs_sync()
                .then(|| B::synchronize(&self.stream))
        });
        if let Some(Err(e)) = synced {
            tracing::warn!(stream = ?self.key, error = %e, "synchronize before freeing a segment failed");
        }
        free_segments(self.segments, self.key, shared, st);
    }
}

/// Frees `segments` ([`free_segment`] each). The source's `free` is user code: when it
/// panics, the other segments are still freed and counted, and the first panic then goes on
/// to the caller.
fn free_segments<B: Backend>(
    segments: Vec<Segment<B>>,
    key: StreamKey,
    shared: &DeviceShared<B>,
    st: &mut StatsWriter<'_>,
) {
    for_each_then_resume(segments, |segment| free_segment(segment, key, shared, st));
}

/// Runs `f` on every item, even after one panicked (user code: a source's hook); the first
/// panic then goes on to the caller.
pub(super) fn for_each_then_resume<T>(items: impl IntoIterator<Item = T>, mut f: impl FnMut(T)) {
    let mut panic = None;
    for item in items {
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item)));
        if let Err(payload) = done {
            panic.get_or_insert(payload);
        }
    }
    if let Some(payload) = panic {
        std::panic::resume_unwind(payload);
    }
}

/// Returns a segment taken out of its shard to the device, then updates the statistics
/// (`oversize_segments` drops only for a segment counted when it was obtained).
fn free_segment<B: Backend>(
    segment: Segment<B>,
    key: StreamKey,
    shared: &DeviceShared<B>,
    st: &mut StatsWriter<'_>,
) {
    let (kind, size, address, oversize, note) = (
        segment.pool,
        segment.source.size,
        segment.source.address,
        segment.oversize,
        segment.release_note,
    );
    shared
        .history
        .record(TraceAction::SegmentFree, address, size, key.id);
    // The source's `free` is user code: when it panics the segment was handed over all the
    // same, so it is counted as freed before the panic goes on.
    let freed = match Arc::try_unwrap(segment.source) {
        Ok(source) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            st.unlocked(|| shared.release_segment(source));
        })),
        // Unreachable: the only other handle lives while `Allocation::with_segment` runs,
        // and a segment with a live allocation is never released. Leaked rather than freed
        // under a user's borrow.
        Err(_) => {
            tracing::error!(
                address,
                size,
                "a released segment is still borrowed; leaked"
            );
            Ok(())
        }
    };
    st.segment().decrease(kind, 1);
    st.reserved_bytes().decrease(kind, size);
    st.num_device_free.bump();
    if oversize {
        st.oversize_segments.decrease(1);
    }
    // No longer counted: no longer shown (by its own note: the source may have handed the
    // address out again already, and another release noted it; review h89).
    shared.releasing.forget(note);
    if let Err(payload) = freed {
        std::panic::resume_unwind(payload);
    }
}

#[inline]
fn apply_net(stat: CellArray<'_>, kind: PoolKind, net: i64) {
    match net.cmp(&0) {
        std::cmp::Ordering::Greater => stat.increase(kind, net.unsigned_abs()),
        std::cmp::Ordering::Less => stat.decrease(kind, net.unsigned_abs()),
        std::cmp::Ordering::Equal => {}
    }
}

/// Whether `config` moves live blocks of `pool` ([`AllocConfig::relocates`] for the large
/// pool, [`AllocConfig::relocates_small`] for the small one).
pub(crate) fn relocates_pool(config: &AllocConfig, pool: PoolKind) -> bool {
    match pool {
        PoolKind::Large => config.relocates(),
        PoolKind::Small => config.relocates_small(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::allocator::CachingAllocator;
    use crate::config::AllocConfig;
    use crate::sim_stream::{SimBackend, SimStream};
    use crate::source::SimulatedSource;
    use crate::stream::StreamKey;

    /// The shard's cached rounding of the last request size is dropped when the
    /// configuration changes: the same size is rounded by the new rules.
    #[test]
    fn a_repeated_size_is_rounded_again_after_a_config_change() {
        let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
        let cache: CachingAllocator<SimBackend> =
            CachingAllocator::new(Box::new(source), AllocConfig::default());
        let stream = SimStream::new(StreamKey::new(0, 1));
        let size = 1_153_434; // 1.1 MiB: large pool
        let first = cache.allocate(size, &stream).unwrap().unwrap();
        assert_eq!(first.allocated_size(), 1_153_536, "512-byte rounding");
        drop(first);
        let again = cache.allocate(size, &stream).unwrap().unwrap();
        assert_eq!(
            again.allocated_size(),
            1_153_536,
            "cached rounding, same rules"
        );
        drop(again);
        cache.set_config(AllocConfig::parse("roundup_power2_divisions:4").unwrap());
        let after = cache.allocate(size, &stream).unwrap().unwrap();
        assert_eq!(
            after.allocated_size(),
            1_310_720,
            "1.25 MiB: a quarter step"
        );
        drop(after);
        let stats = cache.memory_stats();
        assert_eq!(stats.allocated_bytes.all.current, 0);
        assert_eq!(stats.requested_bytes.all.allocated, 3 * 1_153_434);
    }

    /// The accumulated totals saturate at `i64::MAX`: past 16 EiB of traffic through one
    /// thread's cell (17 cached 1 EiB allocations) they still read `i64::MAX`, never
    /// wrapping back to a small figure.
    #[test]
    fn accumulated_totals_stay_saturated_past_16_eib_of_traffic() {
        const EIB: u64 = 1 << 60;
        let source = Arc::new(SimulatedSource::new(0, 2 * EIB, 2 * EIB));
        let cache: CachingAllocator<SimBackend> =
            CachingAllocator::new(Box::new(source), AllocConfig::default());
        let stream = SimStream::new(StreamKey::new(0, 1));
        for _ in 0..17 {
            let a = cache.allocate(EIB, &stream).unwrap().unwrap();
            assert_eq!(a.allocated_size(), EIB);
        }
        let stats = cache.memory_stats();
        for (what, stat) in [
            ("allocated_bytes", stats.allocated_bytes),
            ("active_bytes", stats.active_bytes),
            ("requested_bytes", stats.requested_bytes),
        ] {
            for (pool, s) in [("all", stat.all), ("large_pool", stat.large_pool)] {
                assert_eq!(
                    (s.allocated, s.freed, s.current),
                    (i64::MAX, i64::MAX, 0),
                    "{what}.{pool}"
                );
            }
        }
        assert_eq!(stats.allocation.all.allocated, 17);
        assert_eq!(stats.reserved_bytes.all.current, 1 << 60);
    }
}
