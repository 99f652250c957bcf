//! [`BinSlots`]: the shared half of one bin of a thread's freed-block cache (see
//! `free_cache`): the block indices it holds, one atomic word each, so that the owner thread
//! fills and empties its slots without a lock and any thread can flush them.
//!
//! Protocol: a slot is `0` when empty, `block + 1` when it holds `block` of the bin's shard.
//! Only the owner thread fills a slot (a plain release store into a slot it knows is empty:
//! nobody else fills it); the owner takes a slot back with one `swap(0)`, and a flusher (any
//! thread holding the shard's lock, or the shard's drop) takes every slot with `swap(0)`.
//! Whoever's swap returns the block owns it: the owner hands it out again, a flusher frees it
//! into the shard. A `BinSlots` holds blocks of one shard for its whole life (a bin bound to
//! another stream or size gets new slots), so a flusher never frees a block into the wrong
//! shard.

use std::sync::atomic::{AtomicU32, Ordering};

/// Slots per bin: the blocks of one (stream, size) a thread keeps at most.
pub(crate) const SLOTS: usize = 8;

/// The slots of one bin (see the module docs).
#[derive(Default)]
pub(crate) struct BinSlots([AtomicU32; SLOTS]);

impl BinSlots {
    /// The owner puts `block` into slot `i`, which it knows is empty.
    #[inline(always)]
    pub(crate) fn put(&self, i: usize, block: u32) {
        self.0[i].store(block.wrapping_add(1), Ordering::Release);
    }

    /// Takes the block of slot `i`, if it still holds one.
    #[inline(always)]
    pub(crate) fn take(&self, i: usize) -> Option<u32> {
        match self.0[i].swap(0, Ordering::Acquire) {
            0 => None,
            v => Some(v - 1),
        }
    }

    /// Takes every block the slots still hold (a flush).
    pub(crate) fn take_all(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().filter_map(|slot| {
            // A plain load first: empty slots cost no read-modify-write.
            if slot.load(Ordering::Relaxed) == 0 {
                return None;
            }
            match slot.swap(0, Ordering::Acquire) {
                0 => None,
                v => Some(v - 1),
            }
        })
    }
}
