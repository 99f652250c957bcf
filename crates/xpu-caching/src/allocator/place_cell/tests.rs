//! The state word against a sequential model (proptest), the saturation paths, and a
//! std-thread stress run. The concurrent interleavings are loom's (`loom_tests`).

use proptest::prelude::*;

use super::*;

/// One step on one cell. Guard indices are taken modulo the live guards.
#[derive(Debug, Clone)]
enum Op {
    Pin,
    Unpin(usize),
    Observe,
    OffStream(usize),
    Claim,
    Commit,
    Abort,
    BeginFree,
    Reset,
    /// A thread cache's hand-out of a block freed into it.
    ResetCached,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Pin),
        4 => any::<usize>().prop_map(Op::Unpin),
        1 => Just(Op::Observe),
        1 => any::<usize>().prop_map(Op::OffStream),
        4 => Just(Op::Claim),
        2 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => Just(Op::BeginFree),
        1 => Just(Op::Reset),
        1 => Just(Op::ResetCached),
    ]
}

/// What the word should hold, plainly; `frees` counts the parties told to free the block
/// since the last reset.
#[derive(Debug, Default)]
struct Model {
    state: CellState,
    frees: u32,
    begun_free: bool,
}

impl Model {
    fn refusal(&self) -> Option<Refused> {
        if self.state.freeing || self.state.free_after_move {
            Some(Refused::Freeing)
        } else if self.state.moving {
            Some(Refused::Moving)
        } else {
            None
        }
    }

    fn movable(&self) -> bool {
        let s = &self.state;
        s.pins == 0
            && !s.sticky
            && !s.off_stream
            && !s.moving
            && !s.freeing
            && !s.free_after_move
            && s.generation < Generation::MAX
    }

    fn end_move(&mut self, bump: bool) -> Result<MoveEnd, NotMoving> {
        if !self.state.moving {
            return Err(NotMoving);
        }
        self.state.moving = false;
        if bump {
            self.state.generation = Generation(self.state.generation.0 + 1);
        }
        if self.state.free_after_move {
            self.state.free_after_move = false;
            self.state.freeing = true;
            self.frees += 1;
            Ok(MoveEnd::FreeNow)
        } else {
            Ok(MoveEnd::Live)
        }
    }
}

/// Runs `ops` on a fresh cell and on the model, comparing every result and every state.
fn check(ops: &[Op]) -> Result<(), TestCaseError> {
    let cell = PlaceCell::new();
    let mut model = Model::default();
    // Live guards, with whether the model expects each to count.
    let mut guards: Vec<(PinGuard<'_>, bool)> = Vec::new();
    let mut commits = 0u64;
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Pin => {
                let got = cell.pin();
                match model.refusal() {
                    Some(reason) => prop_assert_eq!(got.err(), Some(reason), "step {}", step),
                    None => {
                        let guard = got.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                        prop_assert_eq!(guard.generation(), model.state.generation);
                        let counted = !model.state.sticky;
                        if counted {
                            model.state.pins += 1;
                        }
                        guards.push((guard, counted));
                    }
                }
            }
            Op::Unpin(i) => {
                if !guards.is_empty() {
                    let (guard, counted) = guards.swap_remove(i % guards.len());
                    drop(guard);
                    if counted {
                        model.state.pins -= 1;
                    }
                }
            }
            Op::Observe => {
                let got = cell.observe();
                match model.refusal() {
                    Some(reason) => prop_assert_eq!(got, Err(reason)),
                    None => {
                        prop_assert_eq!(got, Ok(model.state.generation));
                        model.state.sticky = true;
                    }
                }
            }
            Op::OffStream(i) => {
                if !guards.is_empty() {
                    guards[i % guards.len()].0.mark_off_stream();
                    model.state.off_stream = true;
                }
            }
            Op::Claim => {
                let got = cell.try_claim_for_move();
                prop_assert_eq!(got.is_ok(), model.movable(), "step {}: {:?}", step, got);
                if got.is_ok() {
                    model.state.moving = true;
                }
            }
            Op::Commit => {
                let got = cell.commit_move();
                prop_assert_eq!(got, model.end_move(true));
                if got.is_ok() {
                    commits += 1;
                }
            }
            Op::Abort => prop_assert_eq!(cell.abort_move(), model.end_move(false)),
            Op::BeginFree => {
                let got = cell.begin_free();
                let want = if model.state.freeing || model.state.free_after_move {
                    FreeBy::AlreadyFreeing
                } else if model.state.moving {
                    model.state.free_after_move = true;
                    FreeBy::Mover
                } else {
                    model.state.freeing = true;
                    model.frees += 1;
                    FreeBy::Caller
                };
                model.begun_free = true;
                prop_assert_eq!(got, want);
            }
            Op::ResetCached => {
                let s = &model.state;
                let refused = s.moving || s.free_after_move || !s.freeing;
                if !refused {
                    // A hand-out comes after the previous allocation's free: a guard still
                    // held here can only be one that was forgotten, whose count the reset
                    // clears.
                    guards.drain(..).for_each(std::mem::forget);
                }
                let got = cell.reset_cached();
                if refused {
                    prop_assert_eq!(got, Err(CellInUse));
                } else {
                    prop_assert_eq!(got, Ok(()));
                    model = Model {
                        state: CellState {
                            generation: model.state.generation,
                            ..CellState::default()
                        },
                        ..Model::default()
                    };
                }
            }
            Op::Reset => {
                let refused = model.state.moving;
                if !refused {
                    // As for `ResetCached`: guards still held are forgotten ones.
                    guards.drain(..).for_each(std::mem::forget);
                }
                let got = cell.reset();
                if refused {
                    prop_assert_eq!(got, Err(CellInUse));
                } else {
                    prop_assert_eq!(got, Ok(()));
                    model = Model {
                        state: CellState {
                            generation: model.state.generation,
                            ..CellState::default()
                        },
                        ..Model::default()
                    };
                }
            }
        }
        prop_assert_eq!(cell.state(), model.state, "after step {}: {:?}", step, op);
        // Exactly once: never two parties told to free; once a free began and no move is in
        // flight, exactly one was.
        prop_assert!(model.frees <= 1);
        if model.begun_free && !model.state.moving {
            prop_assert_eq!(model.frees, 1, "after step {}", step);
        }
        // The generation counts commits (resets keep it).
        prop_assert_eq!(cell.generation().get(), commits);
    }
    drop(guards);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_word_follows_the_sequential_model(ops in proptest::collection::vec(op(), 0..64)) {
        check(&ops)?;
    }
}

#[test]
fn a_move_bumps_the_generation_and_a_pin_reports_it() {
    let cell = PlaceCell::new();
    assert_eq!(cell.try_claim_for_move(), Ok(()));
    assert_eq!(cell.pin().err(), Some(Refused::Moving));
    assert_eq!(cell.observe(), Err(Refused::Moving));
    assert_eq!(cell.try_claim_for_move(), Err(Unmovable::Moving));
    assert_eq!(cell.commit_move(), Ok(MoveEnd::Live));
    assert_eq!(cell.commit_move(), Err(NotMoving));
    let guard = cell.pin().unwrap();
    assert_eq!(guard.generation().get(), 1);
    assert_eq!(cell.try_claim_for_move(), Err(Unmovable::Pinned));
    drop(guard);
    assert_eq!(cell.try_claim_for_move(), Ok(()));
    assert_eq!(cell.abort_move(), Ok(MoveEnd::Live));
    assert_eq!(cell.generation().get(), 1);
}

#[test]
fn a_free_during_a_move_is_left_to_the_mover_once() {
    for commit in [true, false] {
        let cell = PlaceCell::new();
        cell.try_claim_for_move().unwrap();
        assert_eq!(cell.begin_free(), FreeBy::Mover);
        assert_eq!(cell.begin_free(), FreeBy::AlreadyFreeing);
        assert_eq!(cell.pin().err(), Some(Refused::Freeing));
        let end = if commit {
            cell.commit_move()
        } else {
            cell.abort_move()
        };
        assert_eq!(end, Ok(MoveEnd::FreeNow));
        assert!(cell.state().freeing);
        assert_eq!(cell.try_claim_for_move(), Err(Unmovable::Freeing));
        assert_eq!(cell.begin_free(), FreeBy::AlreadyFreeing);
        assert_eq!(cell.reset(), Ok(()));
        assert_eq!(cell.generation().get(), u64::from(commit));
        assert_eq!(cell.begin_free(), FreeBy::Caller);
    }
}

#[test]
fn the_waiting_forms_retry_until_the_move_ends() {
    let cell = PlaceCell::new();
    cell.try_claim_for_move().unwrap();
    let mut waits = 0;
    let generation = cell
        .observe_waiting(|| {
            waits += 1;
            if waits == 3 {
                assert_eq!(cell.commit_move(), Ok(MoveEnd::Live));
            }
        })
        .unwrap();
    assert_eq!((waits, generation.get()), (3, 1));
    let guard = cell.pin_waiting(|| unreachable!("not moving")).unwrap();
    assert!(!guard.counted, "a sticky block's pin is a load");
    drop(guard);
    let _ = cell.begin_free();
    assert_eq!(cell.pin_waiting(|| {}).err(), Some(BeingFreed));
    assert_eq!(cell.observe_waiting(|| {}), Err(BeingFreed));
}

#[test]
fn the_pin_that_would_overflow_the_count_makes_the_block_sticky() {
    let cell = PlaceCell::from_word(PIN_MASK - 1);
    let last_counted = cell.pin().unwrap();
    assert!(last_counted.counted);
    assert_eq!(cell.state().pins, u32::try_from(PIN_MASK).unwrap());
    let overflowing = cell.pin().unwrap();
    assert!(!overflowing.counted);
    let state = cell.state();
    assert_eq!(
        (state.pins, state.sticky),
        (u32::try_from(PIN_MASK).unwrap(), true)
    );
    drop(last_counted);
    drop(overflowing);
    assert_eq!(cell.state().pins, u32::try_from(PIN_MASK).unwrap() - 1);
    assert_eq!(cell.try_claim_for_move(), Err(Unmovable::Pinned));
}

#[test]
fn a_cell_at_the_last_generation_never_moves_again() {
    let cell = PlaceCell::from_word((Generation::MAX.get() - 1) << GEN_SHIFT);
    cell.try_claim_for_move().unwrap();
    assert_eq!(cell.commit_move(), Ok(MoveEnd::Live));
    assert_eq!(cell.generation(), Generation::MAX);
    assert_eq!(
        cell.try_claim_for_move(),
        Err(Unmovable::GenerationExhausted)
    );
    // Everything else still works, and the top bits hold the generation whole.
    let guard = cell.pin().unwrap();
    assert_eq!(guard.generation(), Generation::MAX);
    guard.mark_off_stream();
    drop(guard);
    let state = cell.state();
    assert!(state.off_stream && !state.moving && state.pins == 0);
    assert_eq!(cell.begin_free(), FreeBy::Caller);
    assert_eq!(cell.reset(), Ok(()));
    assert_eq!(cell.generation(), Generation::MAX);
}

/// Real threads, many rounds: pinners against a claimer that commits; the loom models prove
/// the interleavings, this checks the std build of the same code on the machine's memory
/// model.
#[test]
fn pins_and_moves_on_std_threads() {
    use std::sync::atomic::{AtomicBool, AtomicU64 as StdAtomicU64, Ordering as StdOrdering};

    const ROUNDS: u64 = 20_000;
    let cell = PlaceCell::new();
    // The "place": the mover writes generation g's place before committing g.
    let place = StdAtomicU64::new(0);
    let done = AtomicBool::new(false);
    let moves = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(StdOrdering::Relaxed) {
                    let guard = cell.pin_waiting(std::thread::yield_now).unwrap();
                    assert_eq!(place.load(StdOrdering::Relaxed), guard.generation().get());
                    assert!(!cell.state().moving);
                }
            });
        }
        // Counted, not asserted, here: a panic before `done` is set would leave the pinners
        // spinning and the test hanging.
        let (mut moves, mut pinned_while_moving, mut bad_commits) = (0, 0, 0);
        for _ in 0..ROUNDS {
            if cell.try_claim_for_move().is_ok() {
                pinned_while_moving += u32::from(cell.state().pins != 0);
                moves += 1;
                place.store(moves, StdOrdering::Relaxed);
                bad_commits += u32::from(cell.commit_move() != Ok(MoveEnd::Live));
            }
            std::hint::spin_loop();
        }
        done.store(true, StdOrdering::Relaxed);
        assert_eq!((pinned_while_moving, bad_commits), (0, 0));
        moves
    });
    assert_eq!(cell.generation().get(), moves);
    assert_eq!(cell.state().pins, 0);
    assert_eq!(cell.begin_free(), FreeBy::Caller);
}
