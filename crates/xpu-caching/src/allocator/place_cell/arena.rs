//! [`PlaceArena`]: the [`PlaceCell`]s of one shard's blocks, indexed by slab index, at
//! addresses that never change, readable without the shard lock. The generic [`Arena`] also
//! holds a device allocator's statistics cells by slot (`stats_cell::CellsShared`).
//!
//! Chunks double in size: chunk `k` holds `64 << k` cells and covers the indices
//! `64 * (2^k - 1) .. 64 * (2^(k+1) - 1)`, so 27 chunks cover every `u32` index and the cells
//! allocated are at most about twice the highest index used (slab indices are dense: freed
//! slots are reused). Each chunk is allocated once, behind a [`OnceLock`] in a fixed
//! top-level array, and never moved or freed before the arena: a reader that holds only an
//! index reaches its cell with two loads and no lock, and the `OnceLock`'s `Acquire` read makes
//! the chunk's initialization visible to it.

use std::fmt;
use std::sync::OnceLock;

use super::PlaceCell;

/// Cells in chunk 0, as a power of two.
const FIRST_CHUNK_BITS: u32 = 6;
/// Chunks needed to cover every `u32` index (the last one is chunk 26).
const CHUNKS: usize = (u32::BITS + 1 - FIRST_CHUNK_BITS) as usize;

/// The cells of one shard's blocks, indexed by slab index (see the module docs).
pub(crate) type PlaceArena = Arena<PlaceCell>;

/// Values of type `T` indexed by slab index, at addresses that never change (see the module
/// docs): the [`PlaceCell`]s, and the places cached for pinned readers.
pub(crate) struct Arena<T> {
    chunks: [OnceLock<Box<[T]>>; CHUNKS],
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Self {
            chunks: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl<T> fmt::Debug for Arena<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("cells", &self.capacity())
            .finish()
    }
}

impl<T> Arena<T> {
    /// Values allocated so far (all chunks).
    pub(crate) fn capacity(&self) -> usize {
        self.chunks
            .iter()
            .filter_map(OnceLock::get)
            .map(|cells| cells.len())
            .sum()
    }

    /// The value of slab index `index` if its chunk exists: lock-free, for a reader holding an
    /// index that [`Arena::get_or_create`] handed out (then always `Some`).
    pub(crate) fn get(&self, index: u32) -> Option<&T> {
        let (chunk, offset) = locate(index);
        self.chunks.get(chunk)?.get()?.get(offset)
    }
}

impl<T: Default> Arena<T> {
    /// The cell of slab index `index`, allocating its chunk on first use (call it under the
    /// shard lock when the index is handed out, before any reader can hold the index). A new
    /// chunk's values start as `T::default()` ([`PlaceCell::new`] for cells).
    pub(crate) fn get_or_create(&self, index: u32) -> &T {
        let (chunk, offset) = locate(index);
        let cells = self.chunks[chunk].get_or_init(|| {
            (0..chunk_len(chunk))
                .map(|_| T::default())
                .collect::<Box<[T]>>()
        });
        // `offset < chunk_len(chunk)` by construction of `locate` (tested for every chunk's
        // ends), and the chunk was allocated with that length.
        &cells[offset]
    }
}

/// Cells in chunk `chunk`.
fn chunk_len(chunk: usize) -> usize {
    1usize << (chunk as u32 + FIRST_CHUNK_BITS)
}

/// The chunk and offset of `index`: with `i = index + 64`, the chunk is `log2(i) - 6` and the
/// offset is `i` without its top bit.
fn locate(index: u32) -> (usize, usize) {
    let shifted = u64::from(index) + (1 << FIRST_CHUNK_BITS);
    let top = u64::BITS - 1 - shifted.leading_zeros();
    let chunk = (top - FIRST_CHUNK_BITS) as usize;
    // Below 2^top <= 2^32: fits a usize on the 64-bit targets xpu builds for.
    let offset = (shifted - (1 << top)) as usize;
    (chunk, offset)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn locate_covers_every_index_once() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        // u32::MAX + 64 = 2^32 + 63: the last chunk, offset 63.
        assert_eq!(locate(u32::MAX), (CHUNKS - 1, 63));
        // The ends of every chunk: consecutive indices, offsets within the chunk's length.
        let mut first = 0u64;
        for chunk in 0..CHUNKS {
            let len = chunk_len(chunk) as u64;
            let last = (first + len - 1).min(u64::from(u32::MAX));
            let lo = u32::try_from(first).unwrap();
            let hi = u32::try_from(last).unwrap();
            assert_eq!(locate(lo), (chunk, 0), "chunk {chunk} starts at {first}");
            assert_eq!(locate(hi), (chunk, (last - first) as usize));
            assert!(((last - first) as usize) < chunk_len(chunk));
            first += len;
            if first > u64::from(u32::MAX) {
                assert_eq!(chunk, CHUNKS - 1);
                break;
            }
        }
    }

    #[test]
    fn cells_keep_their_address_as_the_arena_grows() {
        let arena = PlaceArena::default();
        assert!(arena.get(0).is_none());
        let first: *const PlaceCell = arena.get_or_create(0);
        assert!(arena.get_or_create(0).try_claim_for_move().is_ok());
        for index in 0..5_000 {
            arena.get_or_create(index);
        }
        assert!(std::ptr::eq(first, arena.get(0).unwrap()));
        assert!(arena.get(0).unwrap().state().moving);
        assert!(arena.get(4_999).is_some());
        // 5,000 cells need chunks 0..=6 (64 * (2^7 - 1) = 8,128 cells).
        assert_eq!(arena.capacity(), 8_128);
        assert!(arena.get(8_128).is_none());
    }

    #[test]
    fn readers_reach_cells_without_a_lock_while_a_writer_grows_it() {
        let arena = PlaceArena::default();
        let handed = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for index in 0..20_000 {
                    arena.get_or_create(index);
                    handed.store(index + 1, std::sync::atomic::Ordering::Release);
                }
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let n = handed.load(std::sync::atomic::Ordering::Acquire);
                    if let Some(last) = n.checked_sub(1) {
                        let guard = arena.get(last).expect("handed-out index").pin();
                        assert!(guard.is_ok());
                    }
                    if n == 20_000 {
                        break;
                    }
                });
            }
        });
        assert_eq!(arena.get(19_999).unwrap().state().pins, 0);
    }
}
