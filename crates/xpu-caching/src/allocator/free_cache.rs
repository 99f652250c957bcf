//! [`FreeCache`]: a thread's cache of freed blocks (as glibc's tcache or mimalloc's local free
//! lists), per allocator: a block handed out to thread T (counted in T's statistics cell)
//! and freed by T on stream S with no recorded use goes into T's bin of (S, requested size)
//! and the next allocation of that size on S by T takes it back, without the stream's lock.
//! A block freed by another thread than its allocating one takes the stream's lock, which
//! gives the free's statistics to the allocating thread's cell (`stats_cell`'s debts).
//!
//! # What is cached
//! A block freed through its [`Allocation`](super::Allocation)'s drop when
//! - no `record_stream` named another stream (a block with uses waits for markers: the slow
//!   path), so no recorded use is pending and the block was used on its stream only;
//! - the allocator is not a private pool's (built with `CachingAllocator::with_setup`:
//!   their shards' teardown and `WeakShard::release_cached` stay as they are);
//! - the thread's bin of (stream, requested size, configuration epoch) has room
//!   ([`SLOTS`]); a thread has at most [`BINS`] bins per allocator, the oldest rebound first.
//!
//! A block handed out under a relocating configuration is cached on the same terms, once its
//! place cell is `FREEING` (`Allocation`'s drop calls `PlaceCell::begin_free` first; a block
//! being moved is left to its mover and never cached). While cached it is unmovable: the
//! relocator claims no `FREEING` cell, so its slab index, place, generation and relocation
//! marker stay as they were. Its hand-out resets the cell ([`reset_cell`]) before the new
//! allocation exists; a flush frees it into its shard with the cell still `FREEING` (see
//! `place_cell`'s module docs).
//!
//! It is handed out again only to the same thread, on the same stream, for the same
//! requested size, under the configuration it was handed out under (the epoch), only
//! while the stream has no pending frees (the shard's hint: the slow path processes them
//! first), and, on a driver that breaks a stream's order after a failed wait (PoCL before
//! 4.0: [`Backend::stream_order_flag`]), only while no wait of the stream is known failed
//! (`Shard::follows_failed_wait`: one relaxed load of the stream's flag, status queries of
//! its waits only while one is logged; nothing but a field read elsewhere). The block's last
//! use may be queued before the failed wait, which such a driver runs after the new owner's
//! work; the slow path then hands out nothing of the stream's pool either. Stream order: the block's only use was on its allocation stream (no recorded use),
//! so work enqueued on that stream after the new allocation runs after the old use, as for
//! a block reused from the stream's pool.
//!
//! # Cost
//! The hit is the thread's bin scan, one `Weak::upgrade` of the bin's shard (that handle is
//! what the new allocation holds) and one `swap` on the slot; the free is the scan, one
//! plain store into the slot and the drop of the allocation's shard handle: three atomic
//! read-modify-writes per allocate + free pair instead of six (no shard lock), and no shared
//! write besides the slot, which only this thread fills. A relocating block adds one
//! compare-exchange (the free's `begin_free`; a plain store for a block whose address was
//! read, which no relocation can claim any more) and one plain store (the hand-out's
//! reset).
//!
//! # Statistics
//! A cached block counts as the slow path's free counts a block without recorded uses: not
//! allocated and inactive at once (`allocation`, `allocated_bytes`, `active`,
//! `active_bytes`, `requested_bytes`, `oversize_allocations` drop in the freeing thread's
//! cell, which counted the hand-out, plain stores); its hand-out reverses exactly that, as the slow path's hand-out.
//! What the slow path does in the pool (the block's place among the inactive split blocks,
//! coalescing with free neighbours) waits for the flush, which counts it as the slow path's
//! free would have at that point. Every reader flushes first (`memory_stats`, `snapshot`,
//! `reset_peak_stats`, `reset_accumulated_stats`), so a read reports what the slow path
//! reports after the same hand-outs: currents, counters, the accumulated totals of every
//! figure except `inactive_split(_bytes)`, and the peaks of every figure but that one. Its
//! accumulated totals and its peak miss the splits and merges that the slow path would have
//! counted for a block that a cached pair took back before any flush (review h66: three
//! cached pairs of 1,000 B count one split and one merge where PyTorch counts three of each) (the tcache block is
//! in no pool, as a block in glibc's tcache is in no bin). The hand-outs may differ: a
//! same-size allocation gets the block its thread freed last, where the stream pool's best
//! fit takes the lowest address. `SharedState::memory_stats` (another allocator reading this
//! one's figures) does not flush, and `memory_stats` skips a shard whose lock another
//! thread holds (a read never waits for an allocation in progress): what such a read
//! reports is exact but for the inactive split blocks of the blocks still cached there, as
//! a read concurrent with allocations sees each thread's cell at some instant anyway.
//!
//! # Flushes
//! A flush frees a cached block into its shard under the shard's lock (coalescing, the
//! statistics of the merge). Shards keep the slots of every bin bound to them
//! ([`BinSlots`]), so any thread holding a shard's lock flushes every thread's blocks of it:
//! `memory_stats`, `snapshot`, `reset_peak_stats`, `empty_cache`, `set_config`,
//! `set_memory_fraction` and the OOM path flush every shard first; an allocation that is not
//! a thread-cache hit flushes its stream before its search (the slow path sees every free
//! block of the stream, on any thread; cached blocks never make it take a new segment); a
//! shard's teardown flushes it; a thread that exits
//! returns its blocks (its cache's drop); a bin rebound to another (stream, size) returns
//! its blocks. In a bad fork child nothing is flushed: the allocator refuses or leaks before
//! reaching its caches.

use std::sync::{Arc, Weak};

use super::bin_slots::{BinSlots, SLOTS};
use super::shard::Shard;
use super::stats_cell::{CellsShared, StatsCell, StatsWriter};
use super::stream_state::Handed;
use crate::backend::Backend;
use crate::stream::StreamKey;

/// Bins per thread and allocator.
pub(crate) const BINS: usize = 8;

/// One bin: the owner's half (the shared half is `slots`).
struct Bin<B: Backend> {
    key: StreamKey,
    requested: u64,
    /// The configuration epoch its blocks were handed out under.
    epoch: u64,
    shard: Weak<Shard<B>>,
    slots: Arc<BinSlots>,
    /// Slots `0..len` were filled by this thread (a flush may have emptied them since);
    /// slots from `len` on are empty.
    len: usize,
    /// What slot `i` was filled with.
    handed: [Handed; SLOTS],
}

impl<B: Backend> Bin<B> {
    /// Keeps `handed` in the next slot; `false` when the bin is full (the block then takes
    /// the slow path).
    #[inline(always)]
    fn keep(&mut self, handed: &Handed) -> bool {
        if self.len == SLOTS {
            return false;
        }
        self.slots.put(self.len, handed.block);
        self.handed[self.len] = *handed;
        self.len += 1;
        true
    }
}

/// A thread's freed-block cache of one allocator (see the module docs).
pub(crate) struct FreeCache<B: Backend> {
    bins: Vec<Bin<B>>,
    victim: usize,
}

impl<B: Backend> FreeCache<B> {
    /// An empty cache (allocates nothing).
    pub(crate) const fn new() -> Self {
        Self {
            bins: Vec::new(),
            victim: 0,
        }
    }

    /// A cached block for `requested` bytes on stream `key` under configuration `epoch`,
    /// with its shard.
    #[inline(always)]
    pub(crate) fn take(
        &mut self,
        key: StreamKey,
        requested: u64,
        epoch: u64,
    ) -> Option<(Arc<Shard<B>>, Handed)> {
        let bin = self
            .bins
            .iter_mut()
            .find(|b| b.requested == requested && b.key == key)?;
        if bin.len == 0 || bin.epoch != epoch {
            return None;
        }
        let shard = bin.shard.upgrade()?;
        // A wait of the stream known failed: the block's last use may still be queued before
        // it while the new owner's work runs at once (`Shard::follows_failed_wait`).
        if shard.pending_hint() || shard.follows_failed_wait() {
            return None;
        }
        bin.len -= 1;
        if let Some(block) = bin.slots.take(bin.len) {
            let handed = bin.handed[bin.len];
            debug_assert_eq!(handed.block, block);
            return Some((shard, handed));
        }
        take_flushed(bin).map(|handed| (shard, handed))
    }

    /// Keeps `handed` (freed, `requested` bytes asked for, of `shard`); `false` when it
    /// must take the slow path (its bin is full). `cell`, `gens`: the caller's statistics,
    /// for the blocks of a bin rebound here (a write is opened only under the shard's lock).
    #[inline(always)]
    pub(crate) fn put(
        &mut self,
        shard: &Arc<Shard<B>>,
        handed: &Handed,
        requested: u64,
        stats: (&StatsCell, &CellsShared),
    ) -> bool {
        let key = shard.key;
        let found = self
            .bins
            .iter_mut()
            .find(|b| b.requested == requested && b.key == key && b.epoch == handed.epoch);
        match found {
            Some(bin) if std::ptr::eq(bin.shard.as_ptr(), Arc::as_ptr(shard)) => bin.keep(handed),
            _ => self.bind(shard, handed, requested, stats).keep(handed),
        }
    }

    /// [`FreeCache::put`] without a bin of its own: binds an empty one for `handed`'s
    /// (stream, `requested`, epoch), registered with `shard` (a new one, else an empty one,
    /// else the next victim, whose blocks return to their shard).
    #[cold]
    #[inline(never)]
    fn bind(
        &mut self,
        shard: &Arc<Shard<B>>,
        handed: &Handed,
        requested: u64,
        stats: (&StatsCell, &CellsShared),
    ) -> &mut Bin<B> {
        let slots = Arc::new(BinSlots::default());
        shard.lock().register_bin(slots.clone());
        let mut fresh = Bin {
            key: shard.key,
            requested,
            epoch: handed.epoch,
            shard: Arc::downgrade(shard),
            slots,
            len: 0,
            // Placeholders: only slots `0..len` are read.
            handed: [*handed; SLOTS],
        };
        // A stale bin of the same key (another configuration epoch) is rebound first.
        let same_key = self
            .bins
            .iter()
            .position(|b| b.requested == requested && b.key == shard.key);
        let at = same_key
            .or_else(|| (self.bins.len() < BINS).then_some(self.bins.len()))
            .or_else(|| self.bins.iter().position(|b| b.len == 0))
            .unwrap_or_else(|| {
                self.victim = (self.victim + 1) % BINS;
                self.victim
            });
        if at == self.bins.len() {
            self.bins.push(fresh);
        } else {
            std::mem::swap(&mut self.bins[at], &mut fresh);
            evict(fresh, |state| state.evict_bin_with(stats));
        }
        &mut self.bins[at]
    }

    /// Returns every cached block to its shard (the thread exits, or the allocator's
    /// thread state is dropped).
    pub(crate) fn flush(&mut self, stats: (&StatsCell, &CellsShared)) {
        for bin in self.bins.drain(..) {
            evict(bin, |state| state.evict_bin_with(stats));
        }
    }
}

/// [`FreeCache::take`] when the top slot was emptied by a flush: the lower slots the flush
/// has not reached yet (it goes up from slot 0, so normally none).
#[cold]
#[inline(never)]
fn take_flushed(bin: &mut Bin<impl Backend>) -> Option<Handed> {
    while bin.len > 0 {
        bin.len -= 1;
        if let Some(block) = bin.slots.take(bin.len) {
            let handed = bin.handed[bin.len];
            debug_assert_eq!(handed.block, block);
            return Some(handed);
        }
    }
    None
}

/// Returns a bin's blocks to its shard and unregisters its slots there. When the shard is
/// gone, its teardown flushed (or flushes) the slots itself.
fn evict<B: Backend>(bin: Bin<B>, with: impl FnOnce(Evict<'_, B>)) {
    if let Some(shard) = bin.shard.upgrade() {
        let mut state = shard.lock();
        with(Evict {
            state: &mut state,
            slots: &bin.slots,
        });
    }
}

/// A bin being evicted, its shard locked.
struct Evict<'s, B: Backend> {
    state: &'s mut super::stream_state::ShardState<B>,
    slots: &'s Arc<BinSlots>,
}

impl<B: Backend> Evict<'_, B> {
    /// Frees the bin's blocks with a statistics write on `stats` opened now (the lock held).
    fn evict_bin_with(self, (cell, gens): (&StatsCell, &CellsShared)) {
        let mut st = cell.write(gens);
        self.state.evict_bin(self.slots, &mut st);
    }
}

/// Readies the place cell of a relocating block that this thread's cache hands out again
/// (see the module docs), before its new allocation exists: a fresh block's state, as the
/// shard's hand-out leaves it ([`PlaceCell::reset_cached`](super::place_cell::PlaceCell::reset_cached)).
/// The place cached for pinned readers stays: the block did not move and kept its slab
/// index while cached, and its generation is the same, so that place is still its place.
#[inline(always)]
pub(crate) fn reset_cell<B: Backend>(shard: &Shard<B>, handed: &Handed) {
    if let Some(cell) = shard.cells.get(handed.block) {
        let reset = cell.reset_cached();
        debug_assert!(
            reset.is_ok(),
            "a thread-cached block's cell was not freeing"
        );
    }
}

/// The statistics of a cached block's hand-out (see the module docs): the slow path's
/// hand-out of the block, less the pool's part (the block was in no pool).
#[inline(always)]
pub(crate) fn count_hand_out(st: &mut StatsWriter<'_>, handed: &Handed, requested: u64) {
    st.hand_out(handed.pool, handed.size, requested);
    if handed.oversize {
        st.oversize_allocations.increase(1);
    }
}

/// The statistics of a block's free into a thread's cache (see the module docs): the slow
/// path's free, less the pool's part (inactive split blocks), which its flush counts.
#[inline(always)]
pub(crate) fn count_free(st: &mut StatsWriter<'_>, handed: &Handed, requested: u64) {
    let (pool, size) = (handed.pool, handed.size);
    st.allocation().decrease(pool, 1);
    st.allocated_bytes().decrease(pool, size);
    st.deactivate(pool, size, requested);
    if handed.oversize {
        st.oversize_allocations.decrease(1);
    }
}
