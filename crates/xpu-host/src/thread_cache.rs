//! The threads' caches of freed pinned blocks (issue 26; the pattern of the device
//! allocator's `xpu-caching/src/allocator/free_cache.rs`): a block freed by thread T goes
//! into T's bin of its (device, size class), and T's next allocation of that class on that
//! device takes it back with no lock.
//!
//! # What is cached
//! A block freed through its [`HostPtr`](super::HostPtr)'s drop whose use recorded no stream
//! and whose buffer has no copy in flight: exactly the blocks that the slow path puts on
//! their free list at once (a block with a recorded stream or a copy in flight waits in the
//! pending queue, and from there rejoins the shared free list, never a thread's cache). No
//! use of a cached block is pending, so handing it out again, to any stream, is what the
//! slow path would do. A thread keeps at most [`BINS`] bins per allocator, each of
//! [`SLOTS`] blocks; a free that finds its bin full takes the slow path.
//!
//! # The slots
//! A bin's blocks live in its [`BinSlots`], shared between the owner thread and the free list
//! of the bin's (device, class), where the bin is registered. A slot is an
//! `AtomicCell<Option<Box<Block>>>` (one pointer word: lock-free): only the owner fills a
//! slot; the owner takes one back with one `swap`, and a flusher (any thread holding the
//! class's free-list lock) takes every slot with `swap`. Whoever's `swap` returns the block
//! owns it, so a block is never handed out twice, and a cached block is reachable by no
//! borrow at all until it is handed out again.
//!
//! # Who sees cached blocks
//! - An allocation that misses its thread's cache and finds its class's free list empty
//!   flushes every bin registered there before it asks the driver: a cached block never makes
//!   another thread allocate a new block (`num_host_alloc`, `segment` and `reserved_bytes`
//!   are the slow path's).
//! - `empty_cache` and the out-of-memory retry drain every free list with its bins.
//! - A thread that exits returns its blocks to their free lists and unregisters its bins
//!   (its entry's drop); a bin rebound to another class returns its blocks first.
//! - An allocator that is dropped takes the blocks still in its registered bins (its device
//!   caches' drop) and releases them with its free lists.
//! - In a bad fork child nothing is flushed: allocation refuses and a `HostPtr`'s drop leaks
//!   before reaching a cache, `empty_cache` does nothing, and an exiting thread leaks its bins.
//!
//! # Statistics: exact at every read, without a flush
//! The slow path's free of such a block decrements `allocation` and `allocated_bytes`
//! (current, and the accumulated `freed`), its hand-out increments them (current, peak, and
//! `allocated`). A cached free and hand-out make the same changes at the same instants, split
//! in two:
//! - the currents (and so the peaks) stay the shared atomics the slow path updates
//!   (`fetch_add` / `fetch_sub`, the peak with a load and, rarely, `fetch_max`): a peak is the
//!   maximum of the sum over all threads at the instants of the updates, which per-thread
//!   counters summed on read could not give;
//! - the accumulated totals (`allocated`, `freed`) go to the thread's own cell
//!   ([`ThreadCell`]), written by that thread only with plain
//!   loads and stores; a read sums the shared totals and every cell under the registry's
//!   lock, and a thread's exit folds its cell into the shared totals under the same lock, so
//!   a read counts every operation exactly once. `reset_accumulated_stats` records each
//!   cell's value as its base under that lock (it never writes the owner's words).
//!
//! Nothing else changes: cached blocks stay reserved (a segment each) as the slow path's
//! cached blocks do. So a read reports, at every instant, what the slow path reports after
//! the same frees and hand-outs; only which block a hand-out gets may differ (the thread's own
//! last freed block rather than the free list's top).
//!
//! # Cost
//! A hit: the thread-local lookup, the bin scan, one `swap` on the slot, the two currents'
//! `fetch_add`. A free: the same lookup, one `swap` into the slot, the two currents'
//! `fetch_sub`. The `HostPtr`'s allocator handle costs a reference count increment and
//! decrement for an allocator made with [`HostAllocator::new`](super::HostAllocator::new),
//! none for the process-wide one (a `'static` reference). No lock, no driver call.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crossbeam::atomic::AtomicCell;

use super::block::Block;
use super::stats::{Counters, ThreadCell};

/// What the threads' caches need of their allocator (its shared state implements it; the
/// caches reach nothing else of it).
pub(crate) trait CacheOwner: Send + Sync {
    /// Unique among the allocators of the process.
    fn id(&self) -> u64;
    /// The allocator's statistics.
    fn counters(&self) -> &Counters;
    /// Registers a thread's bin of (`device`, `class`) on its free list.
    fn bind(&self, device: usize, class: usize, slots: Arc<BinSlots>);
    /// Unregisters a thread's bin; its blocks join their free list.
    fn unbind(&self, device: usize, class: usize, slots: &Arc<BinSlots>);
}

/// Bins per thread and allocator.
pub(crate) const BINS: usize = 8;
/// Blocks per bin.
pub(crate) const SLOTS: usize = 4;

/// The shared half of one bin: its blocks (see the module docs).
#[derive(Default)]
pub(crate) struct BinSlots([AtomicCell<Option<Box<Block>>>; SLOTS]);

impl std::fmt::Debug for BinSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BinSlots")
    }
}

impl BinSlots {
    /// Takes every block the slots still hold (a flush).
    pub(crate) fn take_all(&self) -> impl Iterator<Item = Box<Block>> + '_ {
        self.0.iter().filter_map(AtomicCell::take)
    }
}

/// One bin: the owner's half.
struct Bin {
    device: usize,
    class: usize,
    slots: Arc<BinSlots>,
    /// Slots `0..len` were filled by this thread (a flush may have emptied them since);
    /// slots from `len` on are empty.
    len: usize,
}

impl Bin {
    /// The block of the highest filled slot, if a flush left one.
    #[inline]
    fn take(&mut self) -> Option<Box<Block>> {
        while self.len > 0 {
            self.len -= 1;
            if let Some(block) = self.slots.0[self.len].take() {
                return Some(block);
            }
        }
        None
    }
}

/// A thread's cache of one allocator.
struct Entry {
    id: u64,
    shared: Weak<dyn CacheOwner>,
    cell: Arc<ThreadCell>,
    bins: Vec<Bin>,
    victim: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // In a bad fork child the free lists' locks may have been held at the fork: leak.
        if xpu_device::fork::is_in_bad_fork() {
            std::mem::forget(std::mem::take(&mut self.bins));
            return;
        }
        // The allocator gone: its device caches' drop took the blocks of the bins.
        if let Some(shared) = self.shared.upgrade() {
            for bin in self.bins.drain(..) {
                shared.unbind(bin.device, bin.class, &bin.slots);
            }
            shared.counters().retire(&self.cell);
        }
    }
}

thread_local! {
    static CACHES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// A block of `(device, class)` that this thread freed into its cache, with the hand-out's
/// statistics counted; `None` on a miss (or at thread teardown).
#[inline]
pub(crate) fn take(shared: &impl CacheOwner, device: usize, class: usize) -> Option<Box<Block>> {
    CACHES
        .try_with(|caches| {
            let mut entries = caches.try_borrow_mut().ok()?;
            let entry = entries.iter_mut().find(|e| e.id == shared.id())?;
            let bin = entry
                .bins
                .iter_mut()
                .find(|b| b.class == class && b.device == device)?;
            let block = bin.take()?;
            shared
                .counters()
                .on_cached_hand_out(&entry.cell, block.size);
            Some(block)
        })
        .ok()
        .flatten()
}

/// Keeps a freed block (no recorded use, no copy in flight) in this thread's cache, with
/// the free's statistics counted; gives it back when it must take the slow path (its bin is
/// full, or the thread-local state is gone or in use).
#[inline]
pub(crate) fn put<S: CacheOwner + 'static>(
    shared: &Arc<S>,
    block: Box<Block>,
) -> Result<(), Box<Block>> {
    let mut slot = Some(block);
    let done = CACHES.try_with(|caches| {
        let Ok(mut entries) = caches.try_borrow_mut() else {
            return false;
        };
        let id = shared.id();
        let at = match entries.iter().position(|e| e.id == id) {
            Some(at) => at,
            None => new_entry(&mut entries, shared),
        };
        let entry = &mut entries[at];
        let Some(block) = slot.take() else {
            return false;
        };
        let (device, class, size) = (block.device, block.class(), block.size);
        let found = entry
            .bins
            .iter_mut()
            .find(|b| b.class == class && b.device == device);
        match found {
            Some(bin) if bin.len == SLOTS => {
                slot = Some(block);
                false
            }
            Some(bin) => {
                // Slots from `len` on are empty: only this thread fills a slot, and it
                // takes a slot's block before lowering `len` below it.
                let prev = bin.slots.0[bin.len].swap(Some(block));
                debug_assert!(prev.is_none(), "a thread cache slot above `len` was full");
                drop(prev);
                bin.len += 1;
                shared.counters().on_cached_return(&entry.cell, size);
                true
            }
            None => {
                bind(&**shared, entry, block);
                true
            }
        }
    });
    match (done, slot) {
        (Ok(true), _) => Ok(()),
        (_, Some(block)) => Err(block),
        // `slot` is emptied only when the block was kept.
        (_, None) => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn new_entry<S: CacheOwner + 'static>(entries: &mut Vec<Entry>, shared: &Arc<S>) -> usize {
    entries.retain(|e| e.shared.strong_count() > 0);
    let weak: Weak<dyn CacheOwner> = Arc::downgrade(shared) as Weak<S>;
    entries.push(Entry {
        id: shared.id(),
        shared: weak,
        cell: shared.counters().register(),
        bins: Vec::new(),
        victim: 0,
    });
    entries.len() - 1
}

/// [`put`] without a bin of the block's class: binds one (a new one, else an empty one, else
/// the next victim, whose blocks return to their free list) and keeps the block there.
#[cold]
#[inline(never)]
fn bind(shared: &impl CacheOwner, entry: &mut Entry, block: Box<Block>) {
    let (device, class, size) = (block.device, block.class(), block.size);
    let at = if entry.bins.len() < BINS {
        entry.bins.len()
    } else {
        entry
            .bins
            .iter()
            .position(|b| b.len == 0)
            .unwrap_or_else(|| {
                entry.victim = (entry.victim + 1) % BINS;
                entry.victim
            })
    };
    if let Some(old) = entry.bins.get(at) {
        shared.unbind(old.device, old.class, &old.slots);
    }
    let slots = Arc::new(BinSlots::default());
    drop(slots.0[0].swap(Some(block)));
    shared.counters().on_cached_return(&entry.cell, size);
    shared.bind(device, class, Arc::clone(&slots));
    let bin = Bin {
        device,
        class,
        slots,
        len: 1,
    };
    if at == entry.bins.len() {
        entry.bins.push(bin);
    } else {
        entry.bins[at] = bin;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_lock_free_word() {
        assert!(AtomicCell::<Option<Box<Block>>>::is_lock_free());
    }
}
