//! A shard: the allocator state of one stream behind its own lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::device_wide::{DeviceShared, InTeardown};
use super::place_cell::{PlaceArena, PlaceSlots};
use super::stats_cell::StatsWriter;
use super::stream_state::{Handed, ShardState};
use crate::backend::Backend;
use crate::source::SourceSegment;
use crate::stream::StreamKey;

/// One stream's blocks and segments. Threads on different streams never share a shard.
pub(crate) struct Shard<B: Backend> {
    pub key: StreamKey,
    pub shared: Arc<DeviceShared<B>>,
    /// Creation rank on the device: the order in which the OOM path locks shards.
    pub rank: usize,
    /// Set when frees wait for markers on this stream, cleared by an allocation that found
    /// none left: a thread cache's hand-out skips the stream's pending frees, so it leaves
    /// them to the cached path (which processes them) while this is set.
    pending_hint: AtomicBool,
    /// The stream's [`Backend::stream_order_flag`] and a handle of the stream: `None` where
    /// the stream's order holds whatever its waits become; else the flag reads true while
    /// one of its waits may be unresolved, and a hand-out then asks whether one failed
    /// ([`Shard::follows_failed_wait`]; then nothing of the stream's pool or of the threads'
    /// caches is handed out: [`ShardState::unordered`]).
    order: Option<(Arc<AtomicBool>, B::Stream)>,
    /// The blocks' relocation state ([`ShardState::cells`], shared): read without the lock.
    pub cells: Arc<PlaceArena>,
    /// The places cached for pinned readers ([`ShardState::places`], shared).
    pub places: Arc<PlaceSlots<B::Memory>>,
    state: Mutex<ShardState<B>>,
    /// How many times the stream's lock was taken or tried (tests: which paths take it).
    #[cfg(test)]
    locks: std::sync::atomic::AtomicU64,
}

impl<B: Backend> Shard<B> {
    /// `order_flag`: the stream's [`Backend::stream_order_flag`] (asked by the caller before
    /// it took the shard map's lock).
    pub(crate) fn new(
        key: StreamKey,
        stream: B::Stream,
        order_flag: Option<Arc<AtomicBool>>,
        shared: Arc<DeviceShared<B>>,
        rank: usize,
    ) -> Self {
        let order = order_flag.map(|flag| (flag, stream.clone()));
        let state = ShardState::new(key, stream, &shared);
        Self {
            key,
            shared,
            rank,
            pending_hint: AtomicBool::new(false),
            order,
            cells: Arc::clone(&state.cells),
            places: Arc::clone(&state.places),
            state: Mutex::new(state),
            #[cfg(test)]
            locks: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether frees may wait for markers on this stream (a hint, read without the lock).
    #[inline(always)]
    pub(crate) fn pending_hint(&self) -> bool {
        self.pending_hint.load(Ordering::Relaxed)
    }

    /// Whether a wait of the stream may be unresolved on a driver that breaks the stream's
    /// order after a failed wait (one relaxed load there; nothing but the field's read
    /// elsewhere). Only then may [`Shard::follows_failed_wait`] be true.
    #[inline(always)]
    pub(crate) fn order_unsettled(&self) -> bool {
        self.order
            .as_ref()
            .is_some_and(|(flag, _)| flag.load(Ordering::Relaxed))
    }

    /// Whether a wait of the stream is known to have failed (since the stream last
    /// synchronized with success) on a driver that may then run the stream's later work
    /// ahead of its earlier work still queued: a block of the stream's pool or of a thread's
    /// cache, whose last use may be such work, must not be handed out on it. Status queries
    /// of the stream's waits ([`Backend::stream_follows_failed_wait`], never a wait) only
    /// while [`Shard::order_unsettled`]; false at once elsewhere. Takes no allocator lock.
    #[inline(always)]
    pub(crate) fn follows_failed_wait(&self) -> bool {
        self.order_unsettled() && self.ask_failed_wait()
    }

    #[cold]
    #[inline(never)]
    fn ask_failed_wait(&self) -> bool {
        self.order
            .as_ref()
            .is_some_and(|(_, stream)| B::stream_follows_failed_wait(stream))
    }

    /// Updates the hint from the state (call under the shard's lock).
    #[inline(always)]
    pub(crate) fn note_pending(&self, state: &ShardState<B>) {
        let pending = state.has_pending();
        if pending != self.pending_hint() {
            self.pending_hint.store(pending, Ordering::Relaxed);
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ShardState<B>> {
        self.count_lock();
        self.state.lock()
    }

    /// The state, unless another thread holds its lock.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, ShardState<B>>> {
        self.count_lock();
        self.state.try_lock()
    }

    /// Counts a take (or try) of the stream's lock, in tests only.
    #[inline(always)]
    fn count_lock(&self) {
        #[cfg(test)]
        self.locks.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times the stream's lock was taken or tried so far.
    #[cfg(test)]
    pub(crate) fn locks_taken(&self) -> u64 {
        self.locks.load(Ordering::Relaxed)
    }

    /// The user frees `block` (DataPtr drop / raw_delete). `open_stats` opens the write on
    /// the caller's statistics cell; it runs only once the shard is locked, so readers never
    /// wait on a write that waits for the lock.
    #[inline]
    pub(crate) fn free<'a>(&self, block: u32, open_stats: impl FnOnce() -> StatsWriter<'a>) {
        let mut state = self.lock();
        let mut stats = open_stats();
        state.free(block, &mut stats);
        self.note_pending(&state);
    }

    /// The address to trace for the live block `handed` names: the hand-out's, unless the
    /// block handed out there (relocating) has moved since, then its current one, read
    /// under the stream's lock (only when the history records; a caller whose block may
    /// still move must hold it unmovable: freeing, or cached in a thread's cache).
    #[inline]
    pub(crate) fn traced_address(&self, handed: &Handed) -> u64 {
        if handed.relocating {
            self.relocating_traced_address(handed.block, handed.addr)
        } else {
            handed.addr
        }
    }

    /// [`Shard::traced_address`] of a relocating block, out of line and from scalars: the
    /// cached pair's paths call it only while the history records, and a `Handed` passed by
    /// reference to an out-of-line call is kept in memory on those paths, which cost the
    /// cached pair 7-10 ns (`pair_count`).
    #[cold]
    #[inline(never)]
    fn relocating_traced_address(&self, block: u32, handed_addr: u64) -> u64 {
        match self.cells.get(block) {
            Some(cell) if cell.at_hand_out_place(cell.generation()) => handed_addr,
            _ => self.address_of(block).unwrap_or(handed_addr),
        }
    }

    /// The current address of `block`, read under the stream's lock (`None` for a slab
    /// index that names no block).
    pub(crate) fn address_of(&self, block: u32) -> Option<u64> {
        self.lock().blocks.get(block).map(|b| b.addr)
    }

    /// Runs `f` on the segment of a live `block` and the block's address. `f` is user code:
    /// it runs after the stream's lock is released (the segment is shared, and cannot be
    /// released while the block is live), so it may call the allocator, on this stream too.
    pub(crate) fn with_segment<R>(
        &self,
        block: u32,
        f: impl FnOnce(&SourceSegment<B::Memory>, u64) -> R,
    ) -> Option<R> {
        let (segment, addr) = self.segment_of(block)?;
        Some(f(&segment, addr))
    }

    /// The segment of `block` (shared) and the block's address, read under the stream's
    /// lock; `None` for a slab index that names no block.
    pub(crate) fn segment_of(&self, block: u32) -> Option<(Arc<SourceSegment<B::Memory>>, u64)> {
        let state = self.lock();
        let b = state.blocks.get(block)?;
        Some((Arc::clone(&state.segments.get(b.segment)?.source), b.addr))
    }

    /// The latest relocation marker of `block`'s bytes ([`Block::moved`](super::block::Block::moved)),
    /// cloned under the lock (waited for after it).
    pub(crate) fn moved_marker(&self, block: u32) -> Option<super::block::Moved<B>> {
        let state = self.lock();
        state.blocks.get(block).and_then(|b| b.moved.clone())
    }

    /// The shard's stream (cloned under the lock, used after it).
    pub(crate) fn stream(&self) -> B::Stream {
        self.lock().stream.clone()
    }

    /// record_stream on `block`.
    pub(crate) fn record_stream(&self, block: u32, stream: &B::Stream) {
        self.lock().record_stream(block, stream);
    }
}

impl<B: Backend> Drop for Shard<B> {
    fn drop(&mut self) {
        // No block is live (each DataPtr holds the shard): finish pending frees and return
        // every cached segment to the device once the stream's work is done. No lock is
        // held (`&mut self`); statistics writes are closed while waiting. In a bad fork
        // child the shard is leaked instead: its segments, markers and stream stay the
        // parent's (no backend or source call, no statistics lock), and so does the
        // device-wide state. The teardown waits for device work: with a `DeferredDrop` hook it
        // runs there, on the backend's callback thread (`Backend::drop_must_not_wait`) on a
        // thread of its own, else here.
        if B::is_bad_fork() {
            self.state.get_mut().leak();
            std::mem::forget(self.shared.clone());
            // The stream handle kept with the order flag is the parent's too.
            std::mem::forget(self.order.take());
            return;
        }
        let shared = self.shared.clone();
        let deferred = shared.deferred_drop;
        // The state moves out of the shard for its teardown and is noted device-wide while
        // the teardown waits, so that snapshots still show its segments (review h87: a
        // dropped pool's segment with a pending free was counted but not shown).
        let empty = ShardState::new(self.key, self.state.get_mut().stream.clone(), &shared);
        let state = std::mem::replace(self.state.get_mut(), empty);
        let state = Arc::new(TearingDown(Mutex::new(state)));
        let noted: Arc<dyn InTeardown> = state.clone();
        shared.begin_teardown(noted.clone());
        let job = move || {
            teardown(&state.0, &shared);
            // A state that still holds segments (a pending free whose marker reads failed or
            // pending, or no release marker could be recorded) stays noted and is not
            // dropped: its segments stay reserved, counted and shown (dropping the state
            // would drop their memory while the statistics count it; review h89). They are
            // not released later.
            let emptied = state.0.lock().segments.iter().next().is_none();
            if emptied {
                shared.end_teardown(&noted);
            }
        };
        if deferred.is_none() && !B::drop_must_not_wait() {
            job();
            return;
        }
        let job: Box<dyn FnOnce() + Send> = Box::new(job);
        match deferred {
            Some(run) => run(job),
            // The backend's callback thread: the teardown waits on a thread of its own.
            None => teardown_elsewhere(job),
        }
    }
}

/// A dropped shard's state during its teardown.
struct TearingDown<B: Backend>(Mutex<ShardState<B>>);

impl<B: Backend> InTeardown for TearingDown<B> {
    fn snapshot(&self) -> Vec<crate::SegmentSnapshot> {
        self.0.lock().segments_snapshot()
    }
}

/// Runs `job` (a shard's teardown) on a new thread; in place when no thread can be started
/// (waiting here then, rather than leaking the segments).
fn teardown_elsewhere(job: Box<dyn FnOnce() + Send>) {
    let slot = Arc::new(Mutex::new(Some(job)));
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name("xpu-shard-teardown".into())
        .spawn(move || {
            if let Some(job) = theirs.lock().take() {
                job();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a thread for a shard's teardown; it waits here");
        if let Some(job) = slot.lock().take() {
            job();
        }
    }
}

/// Waits for the pending frees and the stream's work, then releases every cached segment.
/// The state's lock is held for each step, never over a wait.
fn teardown<B: Backend>(state: &Mutex<ShardState<B>>, shared: &Arc<DeviceShared<B>>) {
    // The blocks threads' caches still hold of this stream (their owners' shard handles are
    // gone, so no thread puts or takes one any more) are freed first.
    shared
        .stats
        .with_fallback(|st| state.lock().flush_thread_caches(st));
    let markers = state.lock().pending_markers();
    super::pending::wait_markers::<B>(&markers);
    let batch = shared.stats.with_fallback(|st| {
        let mut state = state.lock();
        state.process_events(st);
        state.take_releasable(st)
    });
    if let Some(batch) = batch {
        batch.wait();
        shared.stats.with_fallback(|st| batch.free(shared, st));
    }
}
