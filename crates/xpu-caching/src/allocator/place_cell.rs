//! The relocation state of one block: [`PlaceCell`], one atomic word that says whether the
//! block's place (segment, offset, address) may change, and [`PlaceArena`], the cells of a
//! shard's blocks indexed by slab index and reachable without the shard lock.
//!
//! Stage 2 of `docs/relocation.md`. Its users: `Allocation` (pins, observations, the free
//! through `begin_free`), the relocator (`relocate`: claims under the stream's lock, which
//! is the move lock a pinner waits on, then commits or aborts), and the hand-out, which
//! resets a slot's cell. It is also tested alone: loom models of the word under
//! `--cfg loom` (`place_cell::loom_tests`) and a proptest against a sequential model
//! (`place_cell::tests`).
//!
//! # The state word
//! One `AtomicU64` per block (bit 0 is the least significant):
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0..=19 | pin count | scoped pins held now ([`PinGuard`]s that count) |
//! | 20 | `STICKY` | the place was observed ([`PlaceCell::observe`], or a pin count that would overflow): never moves again |
//! | 21 | `OFF_STREAM` | used on another stream through a view ([`PinGuard::mark_off_stream`]): never moves again |
//! | 22 | `MOVING` | claimed by the relocator ([`PlaceCell::try_claim_for_move`]) until commit or abort |
//! | 23 | `FREEING` | the owner freed the block ([`PlaceCell::begin_free`]): never pinned, observed or claimed again |
//! | 24 | `FREE_AFTER_MOVE` | freed while `MOVING`: the committer (or aborter) frees it |
//! | 25..=63 | generation | completed moves (39 bits), [`Generation`] |
//!
//! Beside the word, the cell keeps the generation at which the block's current allocation
//! was handed out by its shard ([`PlaceCell::note_hand_out`], under the shard's lock): while
//! the word's generation is still that one, the block is at the address its `Handed` names,
//! so `Allocation::address` needs no lock then.
//!
//! Invariants kept by every operation: `MOVING` is set only from the claimable state (no
//! pins, no other flag), so a set `MOVING` means no pin is held; `FREE_AFTER_MOVE` is set
//! only while `MOVING` is; `FREEING` and `MOVING` are never set together; `STICKY`,
//! `OFF_STREAM` and `FREEING` clear only in [`PlaceCell::reset`], when the slab slot gets a
//! new block, and in [`PlaceCell::reset_cached`], when a thread's cache hands the block out
//! again.
//!
//! # In a thread's cache
//! A block freed into a thread's cache (`free_cache`) is free to its owner thread but still
//! allocated in its shard. It enters the cache only after [`PlaceCell::begin_free`] made its
//! cell `FREEING` (a drop that finds the block `MOVING` leaves it to the mover instead, and
//! it never enters a cache), so the relocator never claims or moves it while it is there:
//! its slab index, place and generation stay as they were, and so does the place cached
//! for pinned readers. It leaves the cache in one of two ways:
//! - its thread hands it out again: [`PlaceCell::reset_cached`], a plain store (see there
//!   why no other party can write the word meanwhile), gives the new allocation a fresh
//!   block's state (no pin, not sticky, not off-stream, same generation) before the
//!   allocation exists;
//! - a flush frees it into its shard under the shard's lock (trim, `empty_cache`, thread
//!   exit, a bin rebound, an allocation that misses the caches): the cell stays `FREEING`
//!   until the shard's hand-out resets it, as for a block freed through the lock.
//!
//! # Memory ordering
//! Every decision (may this pin be taken, may this block be claimed, who frees it) is made by
//! a read-modify-write on the one word, and read-modify-writes always read the latest value in
//! the word's modification order: the exclusion and exactly-once arguments need no ordering
//! beyond that atomicity. The orderings below are for the data *around* the word: the place
//! the mover rewrites before [`PlaceCell::commit_move`] (stage 5), and the commands a pinner
//! enqueues through the place it read.
//! - Taking a pin or observing (`Acquire`, on success and on the failed compare-exchange whose
//!   value they act on) synchronizes with the commit's `Release`: a pinner that sees
//!   generation `g` also sees the place written by move `g`.
//! - Dropping a pin (`Release`) synchronizes with the claim (`Acquire`): everything the pinner
//!   did with the old place (reading it, enqueueing a command on it) happens before the mover
//!   starts.
//! - Commit and abort (`AcqRel`): `Release` publishes the new place; `Acquire` orders them
//!   after a `begin_free` that set `FREE_AFTER_MOVE`, so the committer frees a block whose
//!   owner's last accesses happen before that free.
//! - `begin_free` (`AcqRel`): `Release` for the committer above; `Acquire` so that a dropper
//!   that frees at once sees the place of the last commit. On a block that can never be
//!   claimed again it is an `Acquire` load and a `Release` store (no other party writes
//!   such a word then: see [`PlaceCell::begin_free`]); [`PlaceCell::reset_cached`] is a
//!   `Release` store for the same reason.
//! - `mark_off_stream` (`Relaxed`): it is called through a live pin, so no claim can succeed
//!   before that pin's `Release` drop, which follows the bit in the word's modification order;
//!   the claim's compare-exchange reads a later value and sees the bit.
//!
//! # Generation overflow
//! The generation saturates instead of wrapping: a cell whose generation reached
//! [`Generation::MAX`] (2^39 - 1) is never claimed again, so no block's generation ever repeats
//! and a place cache tagged with a generation can never be fooled by a wrap (no ABA). At one
//! move per microsecond (a move is a lock round trip and a device copy, far slower) one block
//! would need over six days of uninterrupted moves to get there. [`PlaceCell::reset`] keeps
//! the generation, so it also never repeats across the blocks a slab slot holds in turn.
//!
//! # Pin count overflow
//! The count has 20 bits. The pin that would overflow it sets `STICKY` instead and returns a
//! guard that does not count: a sticky block never moves, so it needs no count. For the same
//! reason any pin of a block already `STICKY` is a plain load, with no read-modify-write.

mod arena;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

pub(crate) use arena::{Arena, PlaceArena};

/// The cached places of one shard's blocks ([`PlaceSlot`]), by slab index.
pub(crate) type PlaceSlots<M> = Arena<PlaceSlot<M>>;

#[cfg(all(test, loom))]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(all(test, loom)))]
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// Bits of the pin count.
const PIN_BITS: u32 = 20;
/// The pin count's field; also the largest count.
const PIN_MASK: u64 = (1 << PIN_BITS) - 1;
/// One pin.
const PIN_ONE: u64 = 1;
/// The place was observed: never moves again.
const STICKY: u64 = 1 << PIN_BITS;
/// Used on another stream through a view: never moves again.
const OFF_STREAM: u64 = 1 << (PIN_BITS + 1);
/// Claimed by the relocator.
const MOVING: u64 = 1 << (PIN_BITS + 2);
/// Freed by its owner.
const FREEING: u64 = 1 << (PIN_BITS + 3);
/// Freed by its owner while moving: the committer frees it.
const FREE_AFTER_MOVE: u64 = 1 << (PIN_BITS + 4);
/// Every flag bit.
const FLAGS: u64 = STICKY | OFF_STREAM | MOVING | FREEING | FREE_AFTER_MOVE;
/// First bit of the generation.
const GEN_SHIFT: u32 = PIN_BITS + 5;
/// One completed move.
const GEN_ONE: u64 = 1 << GEN_SHIFT;

/// How many moves a block has completed: the tag of a cached place (39 bits, saturating at
/// [`Generation::MAX`], after which the block never moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct Generation(u64);

impl Generation {
    /// The last generation: a block there is never claimed again.
    pub(crate) const MAX: Generation = Generation(u64::MAX >> GEN_SHIFT);

    /// The count of completed moves.
    #[must_use]
    pub(crate) fn get(self) -> u64 {
        self.0
    }

    fn of(word: u64) -> Self {
        Self(word >> GEN_SHIFT)
    }
}

/// Why a pin or an observation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum Refused {
    /// The block is being moved: wait on the shard's move lock (holding no allocator lock)
    /// and retry; [`PlaceCell::pin_waiting`] and [`PlaceCell::observe_waiting`] do that.
    #[error("the block is being moved")]
    Moving,
    /// The block's owner freed it (`FREEING` or `FREE_AFTER_MOVE`): a use after free by the
    /// caller; retrying never helps.
    #[error("the block is being freed")]
    Freeing,
}

/// The block was freed: returned by the waiting forms, which retry [`Refused::Moving`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the block is being freed")]
pub(crate) struct BeingFreed;

/// Why [`PlaceCell::try_claim_for_move`] refused: the block stays where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum Unmovable {
    /// Scoped pins are held.
    #[error("the block is pinned")]
    Pinned,
    /// The place was observed.
    #[error("the block's place was observed")]
    Sticky,
    /// The block was used on another stream through a view.
    #[error("the block was used on another stream")]
    OffStream,
    /// Already claimed by a mover.
    #[error("the block is already being moved")]
    Moving,
    /// Its owner freed it.
    #[error("the block is being freed")]
    Freeing,
    /// The generation reached [`Generation::MAX`].
    #[error("the block's move generation is exhausted")]
    GenerationExhausted,
}

/// [`PlaceCell::commit_move`] or [`PlaceCell::abort_move`] on a cell that is not `MOVING`:
/// the caller did not claim it (a bug of the relocator); the cell is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the block is not being moved")]
pub(crate) struct NotMoving;

/// [`PlaceCell::reset`] on a cell still in use (`MOVING`, or pins held); the cell is
/// unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the block's cell is still in use")]
pub(crate) struct CellInUse;

/// What the end of a move leaves to its mover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a block freed during its move must be freed by the mover"]
pub(crate) enum MoveEnd {
    /// The block is live: nothing to do.
    Live,
    /// The owner freed the block during the move (`FREE_AFTER_MOVE`): the mover frees it now,
    /// at the place the move left it in. The cell is now `FREEING`, so this is reported once.
    FreeNow,
}

/// Who frees a block whose owner let go of it ([`PlaceCell::begin_free`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the block leaks unless the caller frees it when told to"]
pub(crate) enum FreeBy {
    /// The caller frees it now (the cell is `FREEING`).
    Caller,
    /// The block is being moved: its mover frees it at commit or abort (the cell has
    /// `FREE_AFTER_MOVE`); the caller does nothing.
    Mover,
    /// A free was already begun (a second call): nothing to do.
    AlreadyFreeing,
}

/// A decoded state word, for tests, assertions and snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CellState {
    /// Counted pins held.
    pub(crate) pins: u32,
    /// The place was observed.
    pub(crate) sticky: bool,
    /// Used on another stream through a view.
    pub(crate) off_stream: bool,
    /// Claimed by a mover.
    pub(crate) moving: bool,
    /// Freed by its owner.
    pub(crate) freeing: bool,
    /// Freed by its owner during a move.
    pub(crate) free_after_move: bool,
    /// Completed moves.
    pub(crate) generation: Generation,
}

impl CellState {
    fn of(word: u64) -> Self {
        Self {
            // The mask keeps 20 bits: the conversion cannot fail.
            pins: u32::try_from(word & PIN_MASK).unwrap_or(u32::MAX),
            sticky: word & STICKY != 0,
            off_stream: word & OFF_STREAM != 0,
            moving: word & MOVING != 0,
            freeing: word & FREEING != 0,
            free_after_move: word & FREE_AFTER_MOVE != 0,
            generation: Generation::of(word),
        }
    }
}

/// The relocation state of one block: one atomic word (layout and orderings in the module
/// docs). Lives in a [`PlaceArena`] at the block's slab index.
#[derive(Debug)]
pub(crate) struct PlaceCell {
    word: AtomicU64,
    /// The generation of the block's current allocation's hand-out place: the place its
    /// `Handed::addr` names ([`PlaceCell::note_hand_out`]). A thread cache's hand-out gives
    /// the same `Handed` again and leaves it as it is.
    handed_at: AtomicU64,
}

impl Default for PlaceCell {
    fn default() -> Self {
        Self::new()
    }
}

impl PlaceCell {
    /// A cell with no pin, no flag and generation 0.
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            handed_at: AtomicU64::new(0),
        }
    }

    /// A cell holding `word` as is (tests of the saturation paths).
    #[cfg(test)]
    fn from_word(word: u64) -> Self {
        Self {
            word: AtomicU64::new(word),
            handed_at: AtomicU64::new(0),
        }
    }

    /// The state now (`Acquire`, as a pin): a snapshot that may be stale at once unless the
    /// caller excludes the other parties.
    pub(crate) fn state(&self) -> CellState {
        CellState::of(self.word.load(Ordering::Acquire))
    }

    /// The generation now (`Acquire`).
    #[cfg_attr(not(test), allow(dead_code))] // tests and assertions read it
    pub(crate) fn generation(&self) -> Generation {
        Generation::of(self.word.load(Ordering::Acquire))
    }

    /// Notes that the block is handed out at the place it has now (call under the shard's
    /// lock, after [`PlaceCell::reset`], as the hand-out reads the block's address): while
    /// the generation stays the one noted, the block is at that address
    /// ([`PlaceCell::at_hand_out_place`]). `Relaxed`: it is read only through the allocation
    /// that this hand-out makes, which reaches its users after the lock's release; the next
    /// write is the slot's next hand-out by the shard, after that allocation's free.
    pub(crate) fn note_hand_out(&self) {
        let generation = Generation::of(self.word.load(Ordering::Relaxed)).get();
        self.handed_at.store(generation, Ordering::Relaxed);
    }

    /// Whether `generation` (of an observation or pin of the block's current allocation) is
    /// the one noted at its hand-out, so that the block is at its hand-out address: every
    /// completed move raises the generation.
    #[inline]
    pub(crate) fn at_hand_out_place(&self, generation: Generation) -> bool {
        self.handed_at.load(Ordering::Relaxed) == generation.get()
    }

    /// Takes a scoped pin: the block does not move until the guard drops. The guard carries
    /// the generation it observed, to compare with the one a cached place was filled under.
    /// A `STICKY` block is pinned by a plain load (its guard does not count); the pin that
    /// would overflow the count sets `STICKY` instead.
    ///
    /// # Errors
    /// [`Refused::Moving`] while a mover holds the block (wait on the move lock and retry, or
    /// use [`PlaceCell::pin_waiting`]); [`Refused::Freeing`] once the owner freed it.
    pub(crate) fn pin(&self) -> Result<PinGuard<'_>, Refused> {
        // Acquire on every path that returns a guard, including the failed compare-exchange
        // whose value the sticky path acts on: the pinner sees the committed place.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            refusal(cur)?;
            if cur & STICKY != 0 {
                return Ok(PinGuard::new(self, cur, false));
            }
            let counted = cur & PIN_MASK != PIN_MASK;
            let new = if counted { cur + PIN_ONE } else { cur | STICKY };
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Ok(PinGuard::new(self, cur, counted)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// [`PlaceCell::pin`], calling `wait_for_move` and retrying while the block is `MOVING`.
    /// `wait_for_move` must block until the current move ends or give the mover a chance to
    /// run (stage 5: lock and unlock the shard's move lock, holding no allocator lock); the
    /// mover never waits for a pinner, so this ends once the move does.
    ///
    /// # Errors
    /// [`BeingFreed`] once the owner freed the block.
    pub(crate) fn pin_waiting(
        &self,
        mut wait_for_move: impl FnMut(),
    ) -> Result<PinGuard<'_>, BeingFreed> {
        loop {
            match self.pin() {
                Ok(guard) => return Ok(guard),
                Err(Refused::Moving) => wait_for_move(),
                Err(Refused::Freeing) => return Err(BeingFreed),
            }
        }
    }

    /// Marks the place observed (`STICKY`): it never changes again, so the caller may read
    /// it now and hand it out for ever (`address()`, `cl_mem_and_offset`, sub-buffers). A
    /// block already `STICKY` costs a load. Returns the generation of the place to read.
    ///
    /// # Errors
    /// As [`PlaceCell::pin`]: [`Refused::Moving`] (wait and retry) or [`Refused::Freeing`].
    #[inline]
    pub(crate) fn observe(&self) -> Result<Generation, Refused> {
        // Acquire as in `pin`: the caller reads the place committed under the generation.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            refusal(cur)?;
            if cur & STICKY != 0 {
                return Ok(Generation::of(cur));
            }
            match self.word.compare_exchange_weak(
                cur,
                cur | STICKY,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Generation::of(cur)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// [`PlaceCell::observe`], calling `wait_for_move` and retrying while the block is
    /// `MOVING` (as [`PlaceCell::pin_waiting`]).
    ///
    /// # Errors
    /// [`BeingFreed`] once the owner freed the block.
    pub(crate) fn observe_waiting(
        &self,
        mut wait_for_move: impl FnMut(),
    ) -> Result<Generation, BeingFreed> {
        loop {
            match self.observe() {
                Ok(generation) => return Ok(generation),
                Err(Refused::Moving) => wait_for_move(),
                Err(Refused::Freeing) => return Err(BeingFreed),
            }
        }
    }

    /// Claims the block for a move (`MOVING`), from the only movable state: no pin, no flag,
    /// generation below [`Generation::MAX`]. Never waits: the relocator calls it under the
    /// shard lock and drops a refused block from its plan. `Acquire`: the last unpin's
    /// `Release` orders the pinners' uses of the old place before the move.
    ///
    /// # Errors
    /// [`Unmovable`], the first reason found (pins, then each flag, then the generation).
    pub(crate) fn try_claim_for_move(&self) -> Result<(), Unmovable> {
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            unmovable(cur)?;
            // A failure means another party changed the word (a pin, an observe, a free):
            // look again; each failure is another party's success, so this loop is lock-free.
            match self.word.compare_exchange_weak(
                cur,
                cur | MOVING,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Ends a move that took place: the generation goes up by one and `MOVING` clears. The
    /// mover must have written the new place before (`Release` publishes it to the next pin).
    /// If the owner freed the block during the move, the cell becomes `FREEING` and the
    /// result says [`MoveEnd::FreeNow`]: the mover frees the block, once.
    ///
    /// # Errors
    /// [`NotMoving`] if the cell is not `MOVING` (the caller claimed nothing); unchanged.
    pub(crate) fn commit_move(&self) -> Result<MoveEnd, NotMoving> {
        // A claimed generation is below MAX (try_claim_for_move), so the bump cannot overflow.
        self.end_move(GEN_ONE)
    }

    /// Rolls a claimed move back (the copy failed to enqueue, the plan was dropped): `MOVING`
    /// clears, the generation stays, and the block stays where it was. As
    /// [`PlaceCell::commit_move`], a block freed meanwhile is left to the caller to free
    /// ([`MoveEnd::FreeNow`]).
    ///
    /// # Errors
    /// [`NotMoving`] if the cell is not `MOVING`; unchanged.
    pub(crate) fn abort_move(&self) -> Result<MoveEnd, NotMoving> {
        self.end_move(0)
    }

    fn end_move(&self, generation_step: u64) -> Result<MoveEnd, NotMoving> {
        // While MOVING only `begin_free` changes the word (pins, observes and claims are
        // refused), so this loop retries at most once per free.
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            if cur & MOVING == 0 {
                return Err(NotMoving);
            }
            let freed = cur & FREE_AFTER_MOVE != 0;
            let mut new = (cur & !(MOVING | FREE_AFTER_MOVE)) + generation_step;
            if freed {
                new |= FREEING;
            }
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if freed => return Ok(MoveEnd::FreeNow),
                Ok(_) => return Ok(MoveEnd::Live),
                Err(actual) => cur = actual,
            }
        }
    }

    /// The owner lets go of the block (`Allocation`'s drop): if a mover holds it, it sets
    /// `FREE_AFTER_MOVE` and leaves the free to the mover ([`FreeBy::Mover`]); otherwise it
    /// sets `FREEING` and the caller frees it ([`FreeBy::Caller`]). Exactly one party is told
    /// to free. Never blocks and never panics; a second call reports
    /// [`FreeBy::AlreadyFreeing`] and changes nothing. Pins still held do not delay it (a pin
    /// borrows the allocation, so none outlives its drop).
    ///
    /// A block that can never be claimed again (`STICKY` or `OFF_STREAM`, not `MOVING`:
    /// neither bit clears before the slot's next block, and a claim refuses both without
    /// writing) is freed by a plain store: the owner's pins, observations and off-stream marks
    /// all happen before its drop, so the dropper is the only party that writes the word, and
    /// the load reads the latest value. (`MOVING` with one of them is a state the allocator
    /// never makes, as an off-stream mark through a pin that does not count, left from before
    /// a reset; the compare-exchange below handles it as any move.) (A cached pair that reads its address, as the benchmarks do, then pays
    /// one read-modify-write, the observation's, not two.)
    #[inline]
    pub(crate) fn begin_free(&self) -> FreeBy {
        let mut cur = self.word.load(Ordering::Acquire);
        if cur & (FREEING | FREE_AFTER_MOVE | MOVING) == 0 && cur & (STICKY | OFF_STREAM) != 0 {
            // Release, as the read-modify-write below.
            self.word.store(cur | FREEING, Ordering::Release);
            return FreeBy::Caller;
        }
        loop {
            let (new, by) = if cur & (FREEING | FREE_AFTER_MOVE) != 0 {
                return FreeBy::AlreadyFreeing;
            } else if cur & MOVING != 0 {
                (cur | FREE_AFTER_MOVE, FreeBy::Mover)
            } else {
                (cur | FREEING, FreeBy::Caller)
            };
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return by,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Readies the cell of a block that a thread's cache hands out again (`free_cache`), as
    /// [`PlaceCell::reset`] readies a slot's cell for the shard's hand-out: no pin, no flag,
    /// the generation kept. No lock is held: the caller is the thread whose cache held the
    /// block and won its slot ([`BinSlots::take`](super::bin_slots::BinSlots::take)). The block
    /// entered the cache through [`PlaceCell::begin_free`] that returned [`FreeBy::Caller`], so
    /// the cell is `FREEING` (and not `MOVING`): no pin, observation or claim succeeds on it,
    /// and its owner's drop is done, so nobody else writes the word until this store
    /// publishes the fresh state (a failed claim writes nothing). A plain store therefore
    /// suffices, and the cached pair pays no read-modify-write for it. `Release`: a claim
    /// that reads the fresh state (`Acquire`) is ordered after everything the previous owner
    /// did with the block (its last unpin and its free come before, on this thread or
    /// through them).
    ///
    /// Pins still counted are cleared with the flags: a guard borrows its allocation, which
    /// is freed, so a count left now belongs to a guard that was forgotten
    /// (`std::mem::forget`, a safe call) and will never be released. Refusing it would leave
    /// the cell `FREEING` and the block's next allocation born freed: its free lost and its
    /// segment never released.
    ///
    /// # Errors
    /// [`CellInUse`] unless the cell is `FREEING` and neither `MOVING` nor
    /// `FREE_AFTER_MOVE` (a block that did not enter the cache through
    /// [`PlaceCell::begin_free`]: a bug of the caller); unchanged.
    #[inline]
    pub(crate) fn reset_cached(&self) -> Result<(), CellInUse> {
        let cur = self.word.load(Ordering::Relaxed);
        if cur & (MOVING | FREE_AFTER_MOVE) != 0 || cur & FREEING == 0 {
            return Err(CellInUse);
        }
        self.word
            .store(cur & !(FLAGS | PIN_MASK), Ordering::Release);
        Ok(())
    }

    /// Readies the cell for the next block of its slab slot (under the shard lock, before
    /// that block is handed out): clears the pins and every flag and keeps the generation, so
    /// generations never repeat within a slot. The previous block must be freed and no mover
    /// may hold it.
    ///
    /// A plain store, as [`PlaceCell::reset_cached`]: nobody else writes the word of a free
    /// block. Pins and observations need a live allocation, whose free came before this
    /// hand-out; a claim is made under the same lock, which the caller holds. `Release`:
    /// a claim or pin that reads the fresh state (`Acquire`) is ordered after everything the
    /// previous owner did with the block (its unpins and its free came before this lock).
    /// Pins still counted belong to forgotten guards and are cleared, as in
    /// [`PlaceCell::reset_cached`].
    ///
    /// # Errors
    /// [`CellInUse`] while `MOVING` (a mover holds the block: a bug of the caller);
    /// unchanged.
    pub(crate) fn reset(&self) -> Result<(), CellInUse> {
        let cur = self.word.load(Ordering::Relaxed);
        if cur & MOVING != 0 {
            return Err(CellInUse);
        }
        self.word
            .store(cur & !(FLAGS | PIN_MASK), Ordering::Release);
        Ok(())
    }
}

/// Why `word` refuses a pin or an observation, if it does.
fn refusal(word: u64) -> Result<(), Refused> {
    if word & (FREEING | FREE_AFTER_MOVE) != 0 {
        Err(Refused::Freeing)
    } else if word & MOVING != 0 {
        Err(Refused::Moving)
    } else {
        Ok(())
    }
}

/// Why `word` cannot be claimed, if it cannot.
fn unmovable(word: u64) -> Result<(), Unmovable> {
    let reason = if word & PIN_MASK != 0 {
        Unmovable::Pinned
    } else if word & STICKY != 0 {
        Unmovable::Sticky
    } else if word & OFF_STREAM != 0 {
        Unmovable::OffStream
    } else if word & (FREEING | FREE_AFTER_MOVE) != 0 {
        Unmovable::Freeing
    } else if word & MOVING != 0 {
        Unmovable::Moving
    } else if Generation::of(word) >= Generation::MAX {
        Unmovable::GenerationExhausted
    } else {
        return Ok(());
    };
    Err(reason)
}

/// A scoped pin on a [`PlaceCell`]: the block does not move while it lives. Dropping it
/// unpins (`Release`: the uses of the place happen before any later move).
#[derive(Debug)]
#[must_use = "the pin ends when the guard drops"]
pub(crate) struct PinGuard<'a> {
    cell: &'a PlaceCell,
    generation: Generation,
    /// Whether the guard holds one unit of the count (false on a `STICKY` block).
    counted: bool,
}

impl<'a> PinGuard<'a> {
    fn new(cell: &'a PlaceCell, observed: u64, counted: bool) -> Self {
        Self {
            cell,
            generation: Generation::of(observed),
            counted,
        }
    }

    /// The generation the pin saw: the place the caller reads now belongs to it.
    #[must_use]
    pub(crate) fn generation(&self) -> Generation {
        self.generation
    }

    /// Marks the block used on another stream than its allocation stream (a command through
    /// a view): it never moves again. Taken through a pin, so no move is under way and none
    /// can start before this bit is in the word (`Relaxed` suffices: see the module docs).
    pub(crate) fn mark_off_stream(&self) {
        if self.cell.word.load(Ordering::Relaxed) & OFF_STREAM == 0 {
            self.cell.word.fetch_or(OFF_STREAM, Ordering::Relaxed);
        }
    }
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        if self.counted {
            // The count is at least 1 (this guard's unit), and no other operation lowers it,
            // so this cannot borrow from the flags.
            self.cell.word.fetch_sub(PIN_ONE, Ordering::Release);
        }
    }
}

/// The place last read for a pinned reader of one block ([`Arena`] by slab index, beside
/// the cells): its generation, its segment and its byte offset there. Cleared under the
/// stream's lock whenever the block's place or owner changes (hand-out, move, free), so
/// that a cached segment never outlives the block's use of it (a segment is released only
/// when nothing else holds it).
pub(crate) struct PlaceSlot<M> {
    cached: parking_lot::Mutex<Option<CachedPlace<M>>>,
    /// Whether `cached` may hold a place: set under its lock by [`PlaceSlot::set`], cleared
    /// under it by [`PlaceSlot::clear`], so a clear of an empty slot takes no lock. A `set`
    /// is made by a pinned reader of a live allocation; every clear runs under the stream's
    /// lock after that allocation's pins were released (a free, a hand-out, a committed
    /// move), so it reads the flag after the `set` that raised it.
    filled: std::sync::atomic::AtomicBool,
}

/// A cached place: the generation it was read under, the segment and the byte offset.
type CachedPlace<M> = (
    Generation,
    std::sync::Arc<crate::source::SourceSegment<M>>,
    u64,
);

impl<M> Default for PlaceSlot<M> {
    fn default() -> Self {
        Self {
            cached: parking_lot::Mutex::new(None),
            filled: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<M> PlaceSlot<M> {
    /// The cached place if it was read under `generation`.
    pub(crate) fn get(
        &self,
        generation: Generation,
    ) -> Option<(std::sync::Arc<crate::source::SourceSegment<M>>, u64)> {
        match &*self.cached.lock() {
            Some((g, segment, offset)) if *g == generation => {
                Some((std::sync::Arc::clone(segment), *offset))
            }
            _ => None,
        }
    }

    /// Caches the place read under `generation`.
    pub(crate) fn set(
        &self,
        generation: Generation,
        segment: std::sync::Arc<crate::source::SourceSegment<M>>,
        offset: u64,
    ) {
        let mut cached = self.cached.lock();
        *cached = Some((generation, segment, offset));
        self.filled
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Forgets the cached place (call under the stream's lock).
    pub(crate) fn clear(&self) {
        if self.filled.load(std::sync::atomic::Ordering::Acquire) {
            let mut cached = self.cached.lock();
            cached.take();
            self.filled
                .store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
