//! What a thread keeps per device allocator: its statistics cell (registered in the
//! device's [`StatsRegistry`](super::stats_registry::StatsRegistry)) and the shards it
//! allocated from recently, so the cached path finds both without a lock.
//!
//! The allocator owns this state and its type ([`ThreadCaches`], opaque); a backend provides
//! only the key of the `thread_local!` that stores it ([`ThreadCacheKey`], declared with
//! [`thread_caches!`](crate::thread_caches)): statics cannot be generic, so each backend type
//! has its own, and the cached path reaches it with one thread-local access and no type check.
//! The backend seam ([`Backend`]) knows nothing of it.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::thread::LocalKey;

use super::device_wide::DeviceShared;
use super::free_cache::FreeCache;
use super::shard_cache::ShardCache;
use super::stats_cell::{CellsShared, StatsCell, StatsWriter};
use crate::backend::Backend;

/// The key of the `thread_local!` in which the allocators over a backend keep their
/// per-thread caches: all a backend provides for the allocator's thread-local state.
/// Implement it with [`thread_caches!`](crate::thread_caches) (`thread_caches!(MyBackend);`
/// next to `impl Backend for MyBackend`): statics cannot be generic, so the `thread_local!`
/// is declared in the backend's crate, for its type.
pub trait ThreadCacheKey: Backend {
    /// The calling thread's caches of the allocators over this backend.
    fn thread_caches() -> &'static LocalKey<ThreadCaches<Self>>;
}

/// What a thread keeps per allocator over backend `B` (statistics cell, recent shards);
/// opaque: the allocator's own state, stored under a backend's [`ThreadCacheKey`].
pub struct ThreadCaches<B: Backend>(RefCell<Vec<Entry<B>>>);

impl<B: Backend> ThreadCaches<B> {
    /// No caches yet.
    #[must_use]
    pub const fn new() -> Self {
        Self(RefCell::new(Vec::new()))
    }
}

impl<B: Backend> Default for ThreadCaches<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// Implements [`ThreadCacheKey`] for a backend type: `thread_caches!(MyBackend);` next to
/// its `impl Backend for MyBackend` block. The `thread_local!` it declares holds
/// [`ThreadCaches`], initialized without allocating (`const`).
#[macro_export]
macro_rules! thread_caches {
    ($backend:ty) => {
        impl $crate::ThreadCacheKey for $backend {
            fn thread_caches() -> &'static ::std::thread::LocalKey<$crate::ThreadCaches<$backend>> {
                ::std::thread_local! {
                    static CACHES: $crate::ThreadCaches<$backend> =
                        const { $crate::ThreadCaches::new() };
                }
                &CACHES
            }
        }
    };
}

/// A thread's cache of one allocator.
pub(crate) struct Entry<B: Backend> {
    id: u64,
    shared: Weak<DeviceShared<B>>,
    cell: Arc<StatsCell>,
    shards: ShardCache<B>,
    bins: FreeCache<B>,
}

impl<B: Backend> Drop for Entry<B> {
    fn drop(&mut self) {
        // A thread exiting in a bad fork child does not fold its cell into the registry
        // (whose lock may have been held at the fork); its shards leak as they drop, and so
        // do the blocks of its freed-block cache.
        if B::is_bad_fork() {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            // The thread's cached blocks return to their shards (a spare cell: the
            // thread-local state is going away).
            let bins = &mut self.bins;
            let gens = &shared.stats.gens;
            shared.stats.with_spare(|cell| bins.flush((cell, gens)));
            shared.stats.retire(&self.cell);
        }
    }
}

/// What a thread has for one device allocator.
pub(crate) struct Local<'a, B: Backend> {
    /// The thread's statistics cell (or a spare cell of the call's own).
    pub cell: &'a StatsCell,
    pub gens: &'a CellsShared,
    /// The shards this thread allocated from recently on this device.
    pub shards: &'a mut ShardCache<B>,
    /// The thread's freed-block cache of this allocator (`None`: none, as in a nested call
    /// or at thread teardown, or for a private pool's allocator).
    pub bins: Option<&'a mut FreeCache<B>>,
}

impl<'a, B: Backend> Local<'a, B> {
    /// Opens a write on the thread's statistics cell.
    #[inline]
    pub(crate) fn stats(&self) -> StatsWriter<'a> {
        self.cell.write(self.gens)
    }
}

#[inline]
fn entry<'v, B: Backend>(
    entries: &'v mut Vec<Entry<B>>,
    shared: &Arc<DeviceShared<B>>,
) -> &'v mut Entry<B> {
    if entries.first().is_some_and(|e| e.id == shared.id) {
        return &mut entries[0];
    }
    entry_slow(entries, shared)
}

#[cold]
fn entry_slow<'v, B: Backend>(
    entries: &'v mut Vec<Entry<B>>,
    shared: &Arc<DeviceShared<B>>,
) -> &'v mut Entry<B> {
    if let Some(pos) = entries.iter().position(|e| e.id == shared.id) {
        return &mut entries[pos];
    }
    entries.retain(|e| e.shared.strong_count() > 0);
    entries.push(Entry {
        id: shared.id,
        shared: Arc::downgrade(shared),
        cell: shared.stats.register(),
        shards: ShardCache::new(),
        bins: FreeCache::new(),
    });
    let last = entries.len() - 1;
    &mut entries[last]
}

/// Runs `f` with this thread's cell and shard cache for `shared`.
#[inline(always)]
pub(crate) fn with_local<B: ThreadCacheKey, R>(
    shared: &Arc<DeviceShared<B>>,
    f: impl FnOnce(Local<'_, B>) -> R,
) -> R {
    let mut slot = Some(f);
    let done = B::thread_caches().try_with(|local| {
        let mut entries = local.0.try_borrow_mut().ok()?;
        let f = slot.take()?;
        let e = entry(&mut entries, shared);
        let bins = if shared.thread_cache {
            Some(&mut e.bins)
        } else {
            None
        };
        Some(f(Local {
            cell: &e.cell,
            gens: &shared.stats.gens,
            shards: &mut e.shards,
            bins,
        }))
    });
    match done {
        Ok(Some(result)) => result,
        _ => with_fallback(shared, slot),
    }
}

/// [`with_local`] when the thread-local state is unavailable (thread teardown) or already
/// borrowed (a nested call, e.g. from a segment source's hook): a spare statistics cell of
/// the call's own, under no lock (the call may run a segment source, user code, and
/// another thread's nested call must not wait for it), and no shard cache.
#[cold]
#[inline(never)]
fn with_fallback<B: Backend, R>(
    shared: &Arc<DeviceShared<B>>,
    mut slot: Option<impl FnOnce(Local<'_, B>) -> R>,
) -> R {
    let mut no_cache = ShardCache::new();
    let stats = &shared.stats;
    stats.with_spare(|cell| match slot.take() {
        Some(f) => f(Local {
            cell,
            gens: &stats.gens,
            shards: &mut no_cache,
            bins: None,
        }),
        // `slot` is only emptied right before `f` runs and returns `Some`.
        None => unreachable!("thread-local closure consumed without a result"),
    })
}
