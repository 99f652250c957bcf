//! Loom models of the state word (built only under `--cfg loom`):
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p xpu-caching --lib
//! --release allocator::place_cell -- --test-threads=1` (`cargo xtask test` runs them).
//!
//! The "place" of a block is modelled by a `Relaxed` atomic that the mover writes between
//! claim and commit, so loom also checks the orderings: a reader that reads it through a pin
//! or an observation must see the place of the generation it was given.

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use super::*;

/// A cell and its modelled place (the generation whose place is written there).
struct Block {
    cell: PlaceCell,
    place: AtomicU64,
}

impl Block {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            cell: PlaceCell::new(),
            place: AtomicU64::new(0),
        })
    }

    /// Claim, write the next place, commit: the mover. Returns whether it moved, and what the
    /// commit left to do.
    fn try_move(&self) -> Option<MoveEnd> {
        self.cell.try_claim_for_move().ok()?;
        let next = self.cell.generation().get() + 1;
        self.place.store(next, Ordering::Relaxed);
        Some(self.cell.commit_move().expect("claimed"))
    }
}

/// No pin is held while `MOVING` is set: a pinner (waiting and retrying on `MOVING`) and a
/// mover race; the mover never sees the pinner inside, and the pinner always reads the place
/// of the generation its guard carries.
#[test]
fn no_pin_is_taken_while_moving() {
    loom::model(|| {
        let block = Block::new();
        let inside = Arc::new(AtomicBool::new(false));
        let pinner = {
            let (block, inside) = (block.clone(), inside.clone());
            thread::spawn(move || {
                let guard = block.cell.pin_waiting(thread::yield_now).expect("live");
                inside.store(true, Ordering::Relaxed);
                assert_eq!(
                    block.place.load(Ordering::Relaxed),
                    guard.generation().get()
                );
                assert!(!block.cell.state().moving);
                inside.store(false, Ordering::Relaxed);
                guard.generation().get()
            })
        };
        let moved = if block.cell.try_claim_for_move().is_ok() {
            assert!(
                !inside.load(Ordering::Relaxed),
                "a pin is held while MOVING"
            );
            block.place.store(1, Ordering::Relaxed);
            assert_eq!(block.cell.commit_move(), Ok(MoveEnd::Live));
            true
        } else {
            false
        };
        let seen = pinner.join().unwrap();
        // A failed claim means the pin was held then: it saw generation 0.
        if !moved {
            assert_eq!(seen, 0);
        }
        assert_eq!(block.cell.state().pins, 0);
    });
}

/// A drop (`begin_free`) racing a claim and a commit (or an abort): exactly one party is told
/// to free the block, and the cell ends `FREEING`.
#[test]
fn a_free_racing_a_move_frees_exactly_once() {
    for commit in [true, false] {
        loom::model(move || {
            let cell = Arc::new(PlaceCell::new());
            let frees = Arc::new(AtomicUsize::new(0));
            // Set by the mover between its claim and its commit.
            let in_move = Arc::new(AtomicBool::new(false));
            let dropper = {
                let (cell, frees, in_move) = (cell.clone(), frees.clone(), in_move.clone());
                thread::spawn(move || match cell.begin_free() {
                    FreeBy::Caller => {
                        assert!(!in_move.load(Ordering::Relaxed), "freed during the move");
                        frees.fetch_add(1, Ordering::Relaxed);
                    }
                    FreeBy::Mover => {}
                    FreeBy::AlreadyFreeing => panic!("one drop"),
                })
            };
            if cell.try_claim_for_move().is_ok() {
                in_move.store(true, Ordering::Relaxed);
                in_move.store(false, Ordering::Relaxed);
                let end = if commit {
                    cell.commit_move()
                } else {
                    cell.abort_move()
                };
                if end.expect("claimed") == MoveEnd::FreeNow {
                    frees.fetch_add(1, Ordering::Relaxed);
                }
            }
            dropper.join().unwrap();
            assert_eq!(frees.load(Ordering::Relaxed), 1);
            let state = cell.state();
            assert!(state.freeing && !state.moving && !state.free_after_move);
        });
    }
}

/// No unpin is lost: two pinners and a mover. The claim succeeds only when neither pinner is
/// inside (a pinner that finds `MOVING` is refused), and once all are done the count is 0 and
/// a claim succeeds.
#[test]
fn no_unpin_is_lost() {
    // Three threads: exhaustive search takes minutes, so bound the preemptions (5 finds the
    // bugs the mutations of the word tried so far plant, in about 2 s) unless
    // LOOM_MAX_PREEMPTIONS says otherwise.
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(|| {
        let block = Block::new();
        let inside = Arc::new(AtomicUsize::new(0));
        let pinners: Vec<_> = (0..2)
            .map(|_| {
                let (block, inside) = (block.clone(), inside.clone());
                // One attempt, no waiting (a third spinning thread would make the model
                // explode): a pin refused as `Moving` is a valid outcome here.
                thread::spawn(move || match block.cell.pin() {
                    Ok(guard) => {
                        inside.fetch_add(1, Ordering::Relaxed);
                        assert_eq!(
                            block.place.load(Ordering::Relaxed),
                            guard.generation().get()
                        );
                        inside.fetch_sub(1, Ordering::Relaxed);
                    }
                    Err(refused) => assert_eq!(refused, Refused::Moving),
                })
            })
            .collect();
        if block.cell.try_claim_for_move().is_ok() {
            assert_eq!(inside.load(Ordering::Relaxed), 0, "claimed while pinned");
            block.place.store(1, Ordering::Relaxed);
            assert_eq!(block.cell.commit_move(), Ok(MoveEnd::Live));
        }
        for pinner in pinners {
            pinner.join().unwrap();
        }
        assert_eq!(block.cell.state().pins, 0);
        assert!(block.try_move().is_some(), "an unpin was lost");
    });
}

/// An observation racing a move: the observer (waiting and retrying on `MOVING`) reads the
/// committed place of the generation it was given, and the place never changes after it.
#[test]
fn an_observe_racing_a_move_sees_the_committed_place() {
    loom::model(|| {
        let block = Block::new();
        let observer = {
            let block = block.clone();
            thread::spawn(move || {
                let generation = block.cell.observe_waiting(thread::yield_now).expect("live");
                let place = block.place.load(Ordering::Relaxed);
                assert_eq!(place, generation.get());
                place
            })
        };
        let moved = block.try_move().is_some();
        let observed = observer.join().unwrap();
        // Either the claim failed (the block was observed first) or the observer saw the
        // move's place: never both a move and an older observed place.
        assert_eq!(observed, block.place.load(Ordering::Relaxed));
        assert_eq!(observed, u64::from(moved));
        assert!(block.cell.state().sticky);
        assert_eq!(block.cell.try_claim_for_move(), Err(Unmovable::Sticky));
    });
}

/// The off-stream bit, set `Relaxed` through a pin, is seen by any claim after that pin:
/// a mover either claims before the pin (the pinner then waits for the commit) or fails.
#[test]
fn an_off_stream_use_is_never_missed_by_a_claim() {
    loom::model(|| {
        let block = Block::new();
        let user = {
            let block = block.clone();
            thread::spawn(move || {
                let guard = block.cell.pin_waiting(thread::yield_now).expect("live");
                guard.mark_off_stream();
                guard.generation().get()
            })
        };
        let moved = block.try_move().is_some();
        let used_at = user.join().unwrap();
        // Moved: the use came after the move (generation 1); not moved: before it.
        assert_eq!(used_at, u64::from(moved));
        assert_eq!(block.cell.try_claim_for_move(), Err(Unmovable::OffStream));
    });
}

/// A block's life through a thread's cache (`free_cache`), for the models below: the owner
/// frees it into its cache (`begin_free`, then a slot of its bin), takes it back (the slot's
/// `swap`) and hands it out again (`reset_cached`), while a relocator (and a flusher) take
/// the shard's lock, modelled by `shard`.
struct Cached {
    block: Arc<Block>,
    /// The bin's slot: 1 while it holds the block (`BinSlots`'s protocol).
    slot: AtomicU64,
    /// Set by the owner from the moment the block is in its cache until it resets the cell
    /// for the next hand-out (`Relaxed`: the claim that must not see it set is ordered by
    /// the cell's word).
    in_cache: AtomicBool,
    /// Frees done, by whoever does them (the owner's final drop, a flusher, a mover).
    frees: AtomicUsize,
    /// The stream's lock: relocators and flushers run under it.
    shard: loom::sync::Mutex<()>,
}

impl Cached {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            block: Block::new(),
            slot: AtomicU64::new(0),
            in_cache: AtomicBool::new(false),
            frees: AtomicUsize::new(0),
            shard: loom::sync::Mutex::new(()),
        })
    }

    /// The owner reads the block's address (`Allocation::address`: an observation, so the
    /// block never moves again) and checks it is its generation's place.
    fn observe(&self) {
        let generation = self
            .block
            .cell
            .observe_waiting(thread::yield_now)
            .expect("live");
        assert_eq!(self.block.place.load(Ordering::Relaxed), generation.get());
    }

    /// The owner's drop: the cell first, then its cache (as `Allocation`'s drop). Returns
    /// whether the block went into the cache (a block being moved is left to its mover).
    /// `observed`: the owner read the address first, so the free is `begin_free`'s store.
    fn free_into_cache(&self, observed: bool) -> bool {
        if observed {
            self.observe();
        }
        match self.block.cell.begin_free() {
            FreeBy::Caller => {
                self.in_cache.store(true, Ordering::Relaxed);
                // `BinSlots::put` is a plain `Release` store into a slot only its owner fills;
                // a swap here, because loom 0.7 lets a plain store fall between the read and
                // the write of another thread's swap (tokio-rs/loom#254), which C++'s
                // read-modify-write atomicity forbids: with a store, loom reports a block
                // lost between the flusher's swap and the owner's.
                let was = self.slot.swap(1, Ordering::Release);
                assert_eq!(was, 0, "the owner fills an empty slot");
                true
            }
            FreeBy::Mover => false,
            FreeBy::AlreadyFreeing => panic!("one drop"),
        }
    }

    /// The owner's next allocation of the size: the slot back (unless a flush took it) and
    /// a fresh cell (as `FreeCache::take` and `free_cache::reset_cell`). Returns whether it
    /// got the block.
    fn take_from_cache(&self) -> bool {
        if self.slot.swap(0, Ordering::Acquire) == 0 {
            return false;
        }
        self.in_cache.store(false, Ordering::Relaxed);
        assert_eq!(self.block.cell.reset_cached(), Ok(()));
        // A fresh block's state (a relocator may claim it from now on: `MOVING` is fine).
        let state = self.block.cell.state();
        assert!(!(state.sticky || state.off_stream || state.freeing || state.free_after_move));
        assert_eq!(state.pins, 0);
        true
    }

    /// The new owner uses the block (a pin: the place is its generation's; `observed`: then
    /// reads its address too) and drops it for good (counted when it frees the block itself).
    fn use_and_drop(&self, observed: bool) {
        {
            let guard = self
                .block
                .cell
                .pin_waiting(thread::yield_now)
                .expect("live");
            assert_eq!(
                self.block.place.load(Ordering::Relaxed),
                guard.generation().get()
            );
        }
        if observed {
            self.observe();
        }
        match self.block.cell.begin_free() {
            FreeBy::Caller => {
                self.frees.fetch_add(1, Ordering::Relaxed);
            }
            FreeBy::Mover => {}
            FreeBy::AlreadyFreeing => panic!("one drop"),
        }
    }

    /// One relocation attempt under the lock: a claim never succeeds on a cached block.
    fn relocate_once(&self) {
        let _shard = self.shard.lock().unwrap();
        if self.block.cell.try_claim_for_move().is_ok() {
            assert!(
                !self.in_cache.load(Ordering::Relaxed),
                "claimed a block in a thread's cache"
            );
            let next = self.block.cell.generation().get() + 1;
            self.block.place.store(next, Ordering::Relaxed);
            if self.block.cell.commit_move().expect("claimed") == MoveEnd::FreeNow {
                self.frees.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A flush under the lock: a block taken from the slot is `FREEING`, never `MOVING`,
    /// and freed into the shard (its cell stays `FREEING` until a hand-out of the shard).
    fn flush(&self) {
        let _shard = self.shard.lock().unwrap();
        if self.slot.swap(0, Ordering::Acquire) != 0 {
            let state = self.block.cell.state();
            assert!(state.freeing && !state.moving && !state.free_after_move);
            assert_eq!(state.pins, 0);
            self.frees.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A relocator (two attempts under the stream's lock) racing a block's trip through its
/// owner's cache: it never claims the block while the block is cached (free to its owner,
/// live to its shard), the owner's re-use reads the place of its pin's generation, and the
/// block is freed exactly once in the end (by its last owner, or by the mover of a block
/// dropped while moving). Each owner may read the block's address before its drop (then the
/// free is a plain store: the observation excludes every claim).
#[test]
fn a_cached_block_is_never_claimed_and_is_freed_once() {
    for (first_observes, second_observes) in [(false, false), (true, false), (false, true)] {
        loom::model(move || {
            let c = Cached::new();
            let owner = {
                let c = c.clone();
                thread::spawn(move || {
                    if c.free_into_cache(first_observes) {
                        assert!(c.take_from_cache(), "no flusher here");
                        c.use_and_drop(second_observes);
                    }
                })
            };
            c.relocate_once();
            c.relocate_once();
            owner.join().unwrap();
            assert_eq!(c.frees.load(Ordering::Relaxed), 1);
            let state = c.block.cell.state();
            assert!(state.freeing && !state.moving && !state.free_after_move);
        });
    }
}

/// A flush (under the stream's lock) racing the owner's hand-out from its cache, with a
/// relocator: exactly one of the flusher and the owner gets the block back from the slot,
/// the flusher always finds it `FREEING` and never claimed, the owner's hand-out resets the
/// cell only when it won the slot, and the block is freed exactly once.
#[test]
fn a_flush_racing_a_cache_hand_out_frees_once() {
    // Three threads and a lock: bound the preemptions as `no_unpin_is_lost` does.
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(|| {
        let c = Cached::new();
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                if c.free_into_cache(false) && c.take_from_cache() {
                    c.use_and_drop(false);
                }
            })
        };
        let flusher = {
            let c = c.clone();
            thread::spawn(move || c.flush())
        };
        c.relocate_once();
        owner.join().unwrap();
        flusher.join().unwrap();
        assert_eq!(c.frees.load(Ordering::Relaxed), 1);
        assert_eq!(c.slot.load(Ordering::Relaxed), 0);
    });
}
