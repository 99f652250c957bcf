//! A user event's set-once claim (`held::set_user_status`): a setter refused as already set reads
//! the event set.
//!
//! Review h64 (fresh eyes on xpu-device's event machinery at HEAD 2043737): the set-once claim
//! of `held::set_user_status` (2043737), the `WAITED` registry of `forwards` (7030739), the
//! per-raw-queue `SHARED` state of `queue` (99f3f47, 108da10, 846520d) and the exit's `_exit`
//! (0cc895e). PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`
//! (`cargo test -p xpu-device --test user_status_claim`). Safe calls only.
//!
//! Found: one defect, below. A setter refused because another thread holds the event's claim
//! returns `CL_INVALID_OPERATION` ("already set") before the claim holder has set the status:
//! right after the refusal the event still reads `Submitted`. No hang, crash or leak was
//! found; what was probed without a finding is in `claims_forwards_and_wrappers.rs`.
//!
//! Fixed since: a setter refused because another thread holds the claim now waits (bounded,
//! 2 s) until that thread has set the event, then reads it set; only a setter on the claim
//! holder's own thread (a driver calling back within the set) is refused at once. The test
//! passes (5 of 5 runs).
//!
//! Not a gate-ordered test: the window is inside one call of the runtime (between the claim
//! and the claim holder's `clSetUserEventStatus`), which no user event can hold open, so the
//! test races two setters at a barrier many times, as `user_status_once.rs` does, and fails
//! on any round that shows it.

mod common;

use std::sync::{Arc, Barrier};

use xpu_device::backend::EventStatus;

/// Rounds of two racing setters (3 to 8 rounds of 50,000 showed the defect in each of 5 runs).
const ROUNDS: usize = 50_000;

/// FINDING. `ClEvent::set_complete` / `set_failed` document `CL_INVALID_OPERATION` "when
/// already set" (crates/xpu-device/src/backend/event.rs:347, :388). Since 2043737,
/// `held::set_user_status` returns that code as soon as another setter holds the event's claim
/// (crates/xpu-device/src/backend/held.rs:178-179), i.e. while the claim holder is still
/// between its claim and its `clSetUserEventStatus` (reading the status, `note_failure`,
/// waiting for the write side of `EXCLUSION` for an error status). The refused caller is told
/// "already set" and then reads the event `Submitted`: `status()` / `is_complete()` answer as
/// if nobody had set it. Before 2043737 a second setter's refusal came from the driver, under
/// its event lock, after the first status was written (or from `check_unset`, which read it
/// set), so a refused setter always read the event set.
///
/// Sequence, per round: a new user event; a second thread calls `set_failed(-5)` while this
/// one calls `set_complete()` (both released by a barrier); each refused setter reads
/// `status()` right after its call returned.
///
/// Observed (PoCL 3.1, 2 cores): 5 of 5 runs failed, with 7, 8, 4, 5 and 3 of 50,000 rounds
/// where the refused setter (either one) read `Submitted`; 2 more runs of the final text: 7
/// and 9 (and 1 of 1 run of 20,000 rounds, 4).
///
/// Suggested fix: a setter refused because the claim is held waits until that claim is given
/// up (the holder makes one non-blocking status read and one non-blocking driver call; a
/// condition variable beside `SETTING`, or spinning on the claim), then reads the status and
/// answers as the once-only check does; a setter on the thread that holds the claim (a
/// driver calling back within the set) must not wait: refuse it at once as now (its claim
/// holder is the outer frame, whose set is already under way).
#[test]
fn a_setter_refused_as_already_set_reads_the_event_set() {
    let Some(dev) = common::device0() else {
        return;
    };
    // A queue of PoCL before 4.0 seen: error statuses take the failure exclusion (the
    // runtime's own state with any queue in use).
    let q = common::queue(dev);
    let barrier = Arc::new(Barrier::new(2));
    let mut unset_after_refusal = Vec::new();
    for round in 0..ROUNDS {
        let event = Arc::new(dev.create_user_event().unwrap());
        let other = {
            let (event, barrier) = (Arc::clone(&event), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let refused = event.set_failed(-5).is_err();
                (refused, event.status().unwrap())
            })
        };
        barrier.wait();
        let refused = event.set_complete().is_err();
        let seen = event.status().unwrap();
        let (theirs_refused, theirs_seen) = other.join().unwrap();
        if refused && seen == EventStatus::Submitted {
            unset_after_refusal.push((round, "set_complete"));
        }
        if theirs_refused && theirs_seen == EventStatus::Submitted {
            unset_after_refusal.push((round, "set_failed"));
        }
        // Exactly one setter won in every round (the claim's purpose holds).
        assert!(refused != theirs_refused, "round {round}");
    }
    drop(q);
    assert!(
        unset_after_refusal.is_empty(),
        "{} of {ROUNDS} rounds: a setter refused with CL_INVALID_OPERATION (\"already set\") \
         read the event Submitted right after (round, refused setter): {:?}",
        unset_after_refusal.len(),
        &unset_after_refusal[..unset_after_refusal.len().min(8)]
    );
}
