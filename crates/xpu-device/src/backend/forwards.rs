//! The forwards of [`ClEvent::forward_to`] that may still have to pass on a failure.
//!
//! A forward sets its target from the driver's completion callback, which OpenCL 3.0 §5.11.4
//! calls "when the command completes or terminates abnormally". PoCL (3.1) never calls it
//! for a command that failed (through a failed event of its wait list): the target would stay
//! unset and every command waiting on it (a cross-device wait) would wait forever. So each
//! forward is also kept here until its source is over, and [`sweep`] sets the target of every
//! forward whose source failed, to the same error status. It runs wherever a failure starts
//! in the runtime: after a user event is set to an error status ([`ClEvent::set_failed`], an
//! unset user event failed on drop, a forward passing on a failure), after a forward is
//! registered (its source may have failed already) and when [`super::live_objects`] is read.
//! A failure set through a raw handle by foreign code reaches the targets at the next sweep.
//! A target set twice keeps its first status (the callback and a sweep may both set it). A
//! forward of [`ClEvent::complete_when_over`] absorbs a failure: its target is completed
//! (`CL_COMPLETE`) where another forward's would be failed.
//!
//! The driver's callback gets a key, not the target: the clone of the target it needs waits
//! in [`TARGETS`], taken by the callback or, for a source that failed (whose callback PoCL
//! never makes), by the sweep that passes the failure on. Whoever takes it releases it, so a
//! failed forward leaves no event reference behind.
//!
//! A forward is kept here before its callback is registered, and one from a user event that
//! would close a cycle of forwards between user events is refused then ([`keep`],
//! [`closes_cycle`]): a refused forward never had a callback, so nothing sets its target.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use super::keyed::Keyed;
use super::{ClEvent, EventStatus};

thread_local! {
    static INDEX_STEPS: Cell<u64> = const { Cell::new(0) };
}

/// How many entries of the index of forwards from user events (the cycle check's) the
/// calling thread has visited, adding, dropping or searching forwards, since it started. A
/// per-thread count (a thread-local cell, no atomics), for tests and diagnostics of the work
/// done under the forwards' global lock: take the difference of two readings around an
/// operation on one thread.
pub fn forward_index_steps_on_this_thread() -> u64 {
    INDEX_STEPS.try_with(Cell::get).unwrap_or(0)
}

/// Counts `n` index steps on this thread ([`forward_index_steps_on_this_thread`]).
fn index_steps(n: usize) {
    // `try_with`: a thread-local destructor may drop a forward.
    let _ = INDEX_STEPS.try_with(|c| c.set(c.get().saturating_add(n as u64)));
}

/// A raw event handle's address, as a key of the cycle search.
type RawEvent = usize;

/// `event`'s handle as a [`RawEvent`].
fn key_of(event: &ClEvent) -> RawEvent {
    event.as_raw() as RawEvent
}

struct Forward {
    source: ClEvent,
    target: ClEvent,
    /// The key of the target's clone in [`TARGETS`], for the driver's callback.
    key: usize,
    /// Whether a failed source completes the target instead of failing it
    /// ([`ClEvent::complete_when_over`]).
    absorbs: bool,
    /// The source is a user event (only such forwards can make a cycle of forwards).
    user_source: bool,
}

impl Forward {
    /// The status the target gets when the source failed with `code`.
    fn status_for(&self, code: i32) -> i32 {
        if self.absorbs {
            0
        } else {
            code
        }
    }
}

/// The targets' clones waiting for their source's callback, by key, with whether the forward
/// absorbs a failure.
static TARGETS: Mutex<Keyed<(ClEvent, bool)>> = Mutex::new(Keyed::new());

/// Keeps a clone of `target` for a callback; returns its key (never 0).
pub(super) fn hold_target(target: &ClEvent, absorbs: bool) -> usize {
    let clone = target.clone();
    TARGETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert((clone, absorbs))
}

/// Takes the clone kept under `key` and whether its forward absorbs a failure, if nobody took
/// it yet (the caller releases it, outside the lock).
pub(super) fn take_target(key: usize) -> Option<(ClEvent, bool)> {
    TARGETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take(key)
}

struct Forwards {
    list: Vec<Forward>,
    /// Each kept forward's place in `list`, by key (kept by [`Forwards::push`] and
    /// [`Forwards::take`], the only ways in and out of `list`).
    position: BTreeMap<usize, usize>,
    /// The keys of the kept forwards whose source is a command (not a user event): a failure
    /// passed on may fail their sources ([`sweep_rounds`]). Kept as `position` is.
    from_commands: BTreeSet<usize>,
    /// The kept forwards from user events (the only ones that can make a cycle of forwards),
    /// by source: each one's target by its key (so dropping one of a source's many forwards
    /// is one lookup, not a scan of them). Updated wherever `list` is.
    from_user: BTreeMap<RawEvent, BTreeMap<usize, RawEvent>>,
    /// [`register`] sweeps once the list is this long (then twice what is left), so the list
    /// stays about as long as the number of unfinished forwards at a time, at O(1) amortized.
    sweep_at: usize,
}

impl Forwards {
    /// Keeps `f` at the end of `list`.
    fn push(&mut self, f: Forward) {
        self.position.insert(f.key, self.list.len());
        if !f.user_source {
            self.from_commands.insert(f.key);
        }
        self.list.push(f);
    }

    /// Takes the forward at `at` out of `list` (the last one takes its place), and out of
    /// `from_user`; `None` past the end.
    fn take(&mut self, at: usize) -> Option<Forward> {
        if at >= self.list.len() {
            return None;
        }
        let f = self.list.swap_remove(at);
        self.position.remove(&f.key);
        self.from_commands.remove(&f.key);
        if let Some(moved) = self.list.get(at) {
            self.position.insert(moved.key, at);
        }
        self.unindex(&f);
        Some(f)
    }

    /// The kept forward of `key`, if any.
    fn kept(&self, key: usize) -> Option<&Forward> {
        index_steps(1);
        let at = *self.position.get(&key)?;
        self.list.get(at)
    }

    /// Takes `f` (removed from `list`) out of `from_user`.
    fn unindex(&mut self, f: &Forward) {
        if !f.user_source {
            return;
        }
        let source = key_of(&f.source);
        if let Some(targets) = self.from_user.get_mut(&source) {
            index_steps(1);
            targets.remove(&f.key);
            if targets.is_empty() {
                self.from_user.remove(&source);
            }
        }
    }
}

/// The user events a command may wait for (raw handle addresses): listed by a wait list of
/// the runtime's (any wrapper of the handle: [`ClEvent::note_waited`], called by the queue's
/// wait lists before the enqueue), or handed out ([`ClEvent::into_raw`]). A failure passed on
/// to a target that is not here cannot have failed a command enqueued through the runtime,
/// so the forwards from commands get no round for it (review h55: a round per failure a
/// forward's callback passed on cost c status queries beside c pending forwards from
/// commands; review h56 broke a note kept per wrapper, which a wait through another wrapper
/// of the handle missed). A runtime user event leaves the set when its unset guard drops
/// (set by then: no later failure of it); one wrapped from a raw handle stays, up to
/// [`WAITED_CAP`] entries, past which every user event counts as waited for. A command that
/// foreign code enqueues waiting for a user event's raw handle ([`ClEvent::as_raw`]) gets a
/// failure passed on at the next full sweep, as a failure set through a raw handle does.
static WAITED: Mutex<Waited> = Mutex::new(Waited {
    events: None,
    saturated: false,
});

/// Entries of [`WAITED`] past which it stops tracking (every user event then counts as waited
/// for): bounds it when user events wrapped from raw handles are waited for and never leave.
const WAITED_CAP: usize = 1 << 16;

struct Waited {
    events: Option<HashSet<RawEvent>>,
    saturated: bool,
}

/// Notes that a command may wait for the user event `raw` ([`WAITED`]).
pub(super) fn note_waited(raw: RawEvent) {
    let mut waited = WAITED.lock().unwrap_or_else(PoisonError::into_inner);
    if waited.saturated {
        return;
    }
    let events = waited.events.get_or_insert_with(HashSet::new);
    if events.len() >= WAITED_CAP && !events.contains(&raw) {
        waited.events = None;
        waited.saturated = true;
        return;
    }
    events.insert(raw);
}

/// The runtime user event `raw`'s unset guard dropped: it is set, and leaves [`WAITED`].
pub(super) fn forget_waited(raw: RawEvent) {
    let mut waited = WAITED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(events) = waited.events.as_mut() {
        events.remove(&raw);
    }
}

/// Whether a command may wait for the user event `raw` ([`WAITED`]). Read after the event's
/// status was set: a wait list noted later lists an event already failed, whose command the
/// driver fails at its enqueue (its forward's registration sweeps then).
pub(super) fn may_be_waited(raw: RawEvent) -> bool {
    let waited = WAITED.lock().unwrap_or_else(PoisonError::into_inner);
    waited.saturated || waited.events.as_ref().is_some_and(|e| e.contains(&raw))
}

/// Registration sweeps start once this many forwards are kept.
const FIRST_SWEEP: usize = 64;

static FORWARDS: Mutex<Forwards> = Mutex::new(Forwards {
    list: Vec::new(),
    position: BTreeMap::new(),
    from_commands: BTreeSet::new(),
    from_user: BTreeMap::new(),
    sweep_at: FIRST_SWEEP,
});

/// Keeps the forward from `source` to `target` until `source` is over, before the driver's
/// callback is registered ([`registered`] follows it, or [`unkeep`] when that failed):
/// `key` is the target's clone held for the callback ([`hold_target`]). `user_source`: the
/// source is a user event, so the forward may close a cycle of forwards between user events
/// ([`closes_cycle`]); then nothing is kept and `false` is returned (the caller drops the
/// target's clone; no callback was registered, so nothing sets the target).
///
/// The check and the push are one step under the list's lock: of two threads forwarding two
/// events to each other, the second sees the first's forward. The lock is not held while the
/// driver registers the callback, which may run at once and sweep.
pub(super) fn keep(
    source: &ClEvent,
    target: &ClEvent,
    key: usize,
    absorbs: bool,
    user_source: bool,
) -> bool {
    let mut forwards = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
    // A source that is over keeps nothing unset: its callback sets the target at once.
    if user_source && !is_over(source) && closes_cycle(&forwards, source, target) {
        return false;
    }
    if user_source {
        index_steps(1);
        forwards
            .from_user
            .entry(key_of(source))
            .or_default()
            .insert(key, key_of(target));
    }
    forwards.push(Forward {
        // Unguarded: the application's last wrapper of an unset user event still fails
        // it on drop (then the sweep fails the target).
        source: source.clone_unguarded(),
        target: target.clone(),
        key,
        absorbs,
        user_source,
    });
    true
}

/// After the callback of a forward kept by [`keep`] was registered: a source that has failed
/// already (whose callback the driver may never make) passes its failure on now, and a long
/// list is swept.
pub(super) fn registered(source: &ClEvent, key: usize, user_source: bool) {
    let full = {
        let forwards = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
        forwards.list.len() >= forwards.sweep_at
    };
    // A failure before or after the registration is seen here (or by the sweep of the thread
    // that set it, which runs after its status is set), unless the driver's callback took
    // the target already (PoCL calls it within `clSetEventCallback` for a source that is
    // over): it set the target and passed the failure on (review h55).
    if full {
        sweep();
    } else if matches!(source.status(), Ok(EventStatus::Error(_))) && target_waiting(key) {
        if user_source {
            // Only the forwards from the source can learn from its failure, passed on to
            // the rest when it was set (NVIDIA calls the callback later, on its own thread:
            // a whole sweep per registration asked about every forward kept; review h55 on
            // an H100).
            sweep_rounds(Some(vec![key_of(source)]), false);
        } else {
            sweep();
        }
    }
}

/// Whether the target's clone of `key` still waits for its callback ([`hold_target`]).
fn target_waiting(key: usize) -> bool {
    TARGETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(key)
}

/// Drops the forward kept under `key` (its callback could not be registered), if a sweep
/// has not already.
pub(super) fn unkeep(key: usize) {
    let dropped = {
        let mut forwards = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
        let at = forwards.position.get(&key).copied();
        at.and_then(|at| forwards.take(at))
    };
    drop(dropped);
}

/// Whether `event`'s command is over: complete, or terminated with an error.
fn is_over(event: &ClEvent) -> bool {
    matches!(
        event.status(),
        Ok(EventStatus::Complete | EventStatus::Error(_))
    )
}

/// Whether a forward from the user event `source` (not over) to `target` would close a cycle:
/// `target` is `source`, or reaches it through kept forwards from user events whose sources
/// are not over. Each event of such a cycle is a forward's target, held (guarded) by it until
/// its source is over, so once the application dropped its own wrappers none could be set
/// any more: every command waiting on one would wait for ever. A cycle through a command (a
/// command waiting on a user event, forwarded to another) is not seen: the runtime keeps no
/// wait lists.
///
/// A search from `target` in the index of the forwards from user events (`from_user`), no
/// driver call; only the sources on a path found are asked for their status (through the
/// kept list), and a path through a source that is over is no cycle: the search goes on
/// without that source.
fn closes_cycle(forwards: &Forwards, source: &ClEvent, target: &ClEvent) -> bool {
    let from_user = &forwards.from_user;
    let (goal, start) = (key_of(source), key_of(target));
    if start == goal {
        return true;
    }
    let mut over: HashSet<RawEvent> = HashSet::new();
    loop {
        // Depth-first from `start`, each reached event with the source that reached it.
        let mut reached: HashMap<RawEvent, RawEvent> = HashMap::new();
        let mut stack = vec![start];
        let mut found = false;
        'search: while let Some(at) = stack.pop() {
            if over.contains(&at) {
                continue;
            }
            for &to in from_user.get(&at).into_iter().flat_map(BTreeMap::values) {
                index_steps(1);
                if to != start && !reached.contains_key(&to) {
                    reached.insert(to, at);
                    if to == goal {
                        found = true;
                        break 'search;
                    }
                    stack.push(to);
                }
            }
        }
        if !found {
            return false;
        }
        // The path's sources, from the goal back: a cycle only if none is over.
        let mut live = true;
        let mut at = goal;
        while at != start {
            let Some(&from) = reached.get(&at) else {
                // Every reached event has the source that reached it.
                break;
            };
            // A kept forward from `from` (the index names it by its key) holds its source.
            let first = from_user.get(&from).and_then(|t| t.keys().next().copied());
            let kept = first.and_then(|key| forwards.kept(key));
            if kept.is_none_or(|f| is_over(&f.source)) {
                over.insert(from);
                live = false;
            }
            at = from;
        }
        if live {
            return true;
        }
    }
}

/// Drops the forwards whose source is over, first setting the target of each whose source
/// failed to that error status; repeats while that failed more (a target may be the source of
/// another forward through the commands waiting on it). No wait; no lock held while a status
/// is set or an event released.
pub(super) fn sweep() {
    sweep_rounds(None, false);
}

/// [`sweep`] after the user event `failed` (its raw handle's address) was set to an error
/// status by a forward's callback: only the forwards that failure can reach are asked about
/// (those from `failed`, and, when a command may have waited for it, `waited`
/// ([`may_be_waited`], read after the set), those from commands).
pub(super) fn sweep_after_failure(failed: usize, waited: bool) {
    sweep_rounds(Some(vec![failed]), waited);
}

/// The rounds of a sweep. The first asks about the forwards from `focus` (every forward, for
/// `None`; with a focus, a failure was just set on those events: `waited`, a command may have
/// waited for one of them). A failure passed on goes one link further per round: each later
/// round asks only about the forwards from the targets the round before failed; once such
/// rounds fail nothing more, the forwards from commands get one round if a failed target may
/// have been waited for by a command ([`may_be_waited`]), and `on_complete`'s closures
/// waiting for a failed event are handed over once if a failure was passed on since they
/// last were. So failing the head of a chain of `n` forwards between user events beside `c`
/// pending forwards from commands asks O(n + c) statuses, and a failure passed on to a
/// target no command waits for asks none of the `c` (reviews h52, h53 and h55: n (n - 1) / 2,
/// then n c, then c per forward registered from a failed event).
fn sweep_rounds(mut focus: Option<Vec<RawEvent>>, waited: bool) {
    let mut commands_owed = waited;
    let mut closures_owed = focus.is_some();
    loop {
        let commands_round = match &focus {
            None => true,
            Some(sources) => sources.is_empty(),
        };
        if commands_round {
            // The closures of `on_complete` waiting for a failed event, which the driver may
            // never hand over (see `callbacks`).
            super::callbacks::sweep_failed();
            closures_owed = false;
        }
        let (failed, done) = {
            let mut guard = FORWARDS.lock().unwrap_or_else(PoisonError::into_inner);
            let forwards = &mut *guard;
            if forwards.list.is_empty() {
                drop(guard);
                if closures_owed {
                    // No forward left, but the closures waiting for the targets failed since
                    // they were last handed over are owed theirs (review h54).
                    super::callbacks::sweep_failed();
                }
                return;
            }
            let (mut failed, mut done) = (Vec::new(), Vec::new());
            let mut judge = |forwards: &mut Forwards, at: usize| -> bool {
                let Some(f) = forwards.list.get(at) else {
                    return false;
                };
                match f.source.status() {
                    Ok(EventStatus::Error(code)) => {
                        failed.extend(forwards.take(at).map(|f| (f, code)));
                        true
                    }
                    // Complete: the callback sets the target. Unreadable: nothing to learn.
                    Ok(EventStatus::Complete) | Err(_) => {
                        done.extend(forwards.take(at));
                        true
                    }
                    Ok(_) => false,
                }
            };
            match &focus {
                None => {
                    let mut i = 0;
                    while i < forwards.list.len() {
                        if !judge(forwards, i) {
                            i += 1;
                        }
                    }
                }
                Some(sources) => {
                    let mut keys: Vec<usize> = Vec::new();
                    if sources.is_empty() {
                        keys.extend(forwards.from_commands.iter().copied());
                    }
                    for source in sources {
                        if let Some(targets) = forwards.from_user.get(source) {
                            index_steps(targets.len());
                            keys.extend(targets.keys().copied());
                        }
                    }
                    for key in keys {
                        if let Some(at) = forwards.position.get(&key).copied() {
                            judge(forwards, at);
                        }
                    }
                }
            }
            forwards.sweep_at = FIRST_SWEEP.max(2 * forwards.list.len());
            (failed, done)
        };
        drop(done);
        // The targets this round failed (a target already set, by its callback or by anyone,
        // keeps its status: whoever set it passed it on).
        let mut newly = Vec::new();
        for (forward, code) in failed {
            // See `fail`; the loop sweeps again instead of recursing.
            let set =
                super::held::set_user_status(forward.target.as_raw(), forward.status_for(code));
            if set.is_ok() && forward.status_for(code) < 0 {
                newly.push(key_of(&forward.target));
                // A command waiting for the target may fail with it (read after the set; the
                // target's clone keeps its guard, so its note stays).
                commands_owed |= may_be_waited(key_of(&forward.target));
            }
            // The driver may never call back for the failed source: its clone goes now.
            drop(take_target(forward.key));
        }
        if newly.is_empty() {
            if commands_owed && !commands_round {
                // The user events' rounds are over: the commands' round.
                commands_owed = false;
                focus = Some(Vec::new());
                continue;
            }
            if closures_owed {
                super::callbacks::sweep_failed();
            }
            return;
        }
        closures_owed = true;
        focus = Some(newly);
    }
}
