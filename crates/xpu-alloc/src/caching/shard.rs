//! A shard: the allocator state of one stream behind its own lock.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::cell::StatsWriter;
use super::device_wide::DeviceShared;
use super::state::ShardState;
use super::thread_cache::with_local;
use crate::stream::{StreamKey, StreamRef};

/// One stream's blocks and segments. Threads on different streams never share a shard.
pub(crate) struct Shard {
    pub key: StreamKey,
    pub shared: Arc<DeviceShared>,
    /// Creation rank on the device: the order in which the OOM path locks shards.
    pub rank: usize,
    state: Mutex<ShardState>,
}

impl Shard {
    pub(crate) fn new(
        key: StreamKey,
        stream: StreamRef,
        shared: Arc<DeviceShared>,
        rank: usize,
    ) -> Self {
        let state = ShardState::new(key, stream, &shared);
        Self {
            key,
            shared,
            rank,
            state: Mutex::new(state),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.state.lock()
    }

    /// The user frees `block` (DataPtr drop / raw_delete). `open_stats` opens the write on
    /// the caller's statistics cell; it runs only once the shard is locked, so readers never
    /// wait on a write that waits for the lock.
    #[inline]
    pub(crate) fn free<'a>(&self, block: u32, open_stats: impl FnOnce() -> StatsWriter<'a>) {
        let mut state = self.state.lock();
        let mut stats = open_stats();
        state.free(block, &mut stats);
    }

    /// Runs `f` on the segment of a live `block` and the block's address.
    pub(crate) fn with_segment<R>(
        &self,
        block: u32,
        f: impl FnOnce(&crate::source::SourceSegment, u64) -> R,
    ) -> Option<R> {
        let state = self.state.lock();
        let b = state.blocks.get(block)?;
        let segment = state.segments.get(b.segment)?;
        Some(f(&segment.source, b.addr))
    }

    /// Releases this shard's cached whole free segments (as `empty_cache` for one stream):
    /// waits for its pending frees and for the work enqueued on its stream, then frees them.
    /// Call without any allocator lock held. Used for the shards of a dropped private pool
    /// that live on through their allocations.
    pub(crate) fn release_cached(&self) {
        super::pending::wait_markers(&self.lock().pending_markers());
        let batch = with_local(&self.shared, |local| {
            let mut state = self.lock();
            let mut st = local.stats();
            state.process_events(&mut st);
            state.take_releasable(&mut st)
        });
        if let Some(batch) = batch {
            batch.wait();
            with_local(&self.shared, |local| {
                batch.free(&self.shared, &mut local.stats())
            });
        }
    }

    /// record_stream on `block`.
    pub(crate) fn record_stream(&self, block: u32, stream: &StreamRef) {
        self.state.lock().record_stream(block, stream);
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        // No block is live (each DataPtr holds the shard): finish pending frees and return
        // every cached segment to the device once the stream's work is done. No lock is
        // held (`&mut self`); statistics writes are closed while waiting.
        let shared = self.shared.clone();
        if let Some(run) = shared.deferred_drop {
            let empty = ShardState::new(self.key, self.state.get_mut().stream.clone(), &shared);
            let state = std::mem::replace(self.state.get_mut(), empty);
            run(Box::new(move || {
                let mut state = state;
                teardown(&mut state, &shared);
            }));
        } else {
            teardown(self.state.get_mut(), &shared);
        }
    }
}

/// Waits for the pending frees and the stream's work, then releases every cached segment.
fn teardown(state: &mut ShardState, shared: &Arc<DeviceShared>) {
    super::pending::wait_markers(&state.pending_markers());
    let batch = shared.stats.with_fallback(|st| {
        state.process_events(st);
        state.take_releasable(st)
    });
    if let Some(batch) = batch {
        batch.wait();
        shared.stats.with_fallback(|st| batch.free(shared, st));
    }
}
