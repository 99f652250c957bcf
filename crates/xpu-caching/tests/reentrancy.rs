//! User code handed to the allocator runs under no allocator lock: a closure may call the
//! allocator back, on the same stream too, without deadlocking.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use xpu_caching::sim_stream::SimStream;
use xpu_caching::source::Simulated;
use xpu_caching::{
    AllocConfig, CachingAllocator, HookedSource, SegmentSource, SimBackend, SimulatedSource,
    SourceError, SourceHooks, SourceSegment, StreamKey,
};

/// Runs `f` on a thread and fails the test when it does not finish in `secs` (a deadlock).
fn finishes_within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the call deadlocked (no result within the time limit)")
}

/// An allocator over a simulated 1 GiB device 0, default configuration.
fn sim_cache() -> CachingAllocator<SimBackend> {
    let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
    CachingAllocator::new(Box::new(source), AllocConfig::default())
}

/// `Allocation::with_segment` hands its closure the segment; the closure may allocate,
/// free and record streams on the same stream (user code, not run under the stream's lock).
#[test]
fn with_segment_closure_may_call_the_allocator_on_the_same_stream() {
    let (offset, inner_size, stats_allocated) = finishes_within(20, || {
        let cache = sim_cache();
        let stream = SimStream::new(StreamKey::new(0, 1));
        let other = SimStream::new(StreamKey::new(0, 2));
        let a = cache.allocate(4096, &stream).unwrap().unwrap();
        let b = cache.allocate(4096, &stream).unwrap().unwrap();
        let (offset, inner_size) = a
            .with_segment(|segment, offset| {
                assert!(offset + 4096 <= segment.size);
                let inner = cache.allocate(1024, &stream).unwrap().unwrap();
                b.record_stream(&other);
                let size = inner.allocated_size();
                drop(inner);
                (offset, size)
            })
            .expect("a live allocation has a segment");
        drop(b);
        let allocated = cache.memory_stats().allocated_bytes.all.current;
        drop(a);
        (offset, inner_size, allocated)
    });
    assert_eq!(offset % 512, 0);
    assert_eq!(inner_size, 1024);
    assert_eq!(stats_allocated, 4096, "only `a` is live then");
}

/// Test state of [`CallsItsPool`].
#[derive(Default)]
struct NestedState {
    /// The allocator owning the source (taken out at the end: it owns the hooks).
    cache: Mutex<Option<CachingAllocator<SimBackend>>>,
    /// Tells the test that the waiting thread is inside its nested call's source call.
    held: Mutex<Option<mpsc::Sender<()>>>,
    /// The other thread's progress: sent once its own nested call returned.
    progress_tx: Mutex<Option<mpsc::Sender<()>>>,
    progress_rx: Mutex<Option<mpsc::Receiver<()>>>,
    /// Whether the waiting thread saw that progress while it was held (`None`: not held).
    arrived: Mutex<Option<bool>>,
}

thread_local! {
    /// Depth of the source calls on this thread (0: none running).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// This thread is the one that waits inside its nested call's source call.
    static WAITER: Cell<bool> = const { Cell::new(false) };
}

/// A segment-source hook that calls its own pool: each outer segment allocation first
/// allocates (and frees) a block of the same allocator on a fresh stream (which needs a
/// segment of its own: a nested source call). The waiting thread's nested source call
/// waits there, bounded, for the other thread's nested call to return.
struct CallsItsPool(Arc<NestedState>);

static NEXT_STREAM: AtomicU64 = AtomicU64::new(100);

impl SourceHooks<Arc<SimulatedSource>> for CallsItsPool {
    fn allocate(
        &self,
        inner: &Arc<SimulatedSource>,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        let depth = DEPTH.get();
        DEPTH.set(depth + 1);
        let state = &self.0;
        if depth == 0 {
            let cache = state
                .cache
                .lock()
                .unwrap()
                .clone()
                .expect("the allocator is set");
            let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
            let stream = SimStream::new(StreamKey::new(0, id));
            let nested = cache.allocate(1 << 20, &stream);
            assert!(
                matches!(nested, Ok(Some(_))),
                "the nested allocation succeeds"
            );
            drop(nested);
            if !WAITER.get() {
                if let Some(tx) = state.progress_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            }
        } else if depth == 1 && WAITER.get() {
            if let Some(tx) = state.held.lock().unwrap().take() {
                let _ = tx.send(());
            }
            let rx = state.progress_rx.lock().unwrap().take();
            if let Some(rx) = rx {
                // Bounded: before the fix the other thread cannot progress while this one
                // is here (a hook that waited unbounded deadlocked).
                *state.arrived.lock().unwrap() = Some(rx.recv_timeout(HANG).is_ok());
            }
        }
        DEPTH.set(depth);
        inner.allocate(size)
    }
}

/// Hang detection only (never an ordering).
const HANG: Duration = Duration::from_secs(20);

/// No user code under an allocator lock: a segment-source hook that calls its own pool
/// makes a nested call (the thread's own allocator state is busy), and that nested call's
/// source call runs under no lock shared with another thread's nested call. Thread A waits
/// inside its nested source call for thread B, which makes the same kind of nested call;
/// B's nested call returns while A waits. Before the fix, A's nested call held the
/// allocator's fallback (statistics) lock through its source call, and B's nested call
/// blocked on it until A gave up.
#[test]
fn a_source_hook_calling_its_own_pool_does_not_block_another_thread_s_nested_call() {
    let state = Arc::new(NestedState::default());
    let source = Arc::new(HookedSource::new(
        Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30)),
        CallsItsPool(state.clone()),
    ));
    let cache = CachingAllocator::<SimBackend>::new(Box::new(source), AllocConfig::default());
    *state.cache.lock().unwrap() = Some(cache.clone());
    let (held_tx, held_rx) = mpsc::channel();
    let (progress_tx, progress_rx) = mpsc::channel();
    *state.held.lock().unwrap() = Some(held_tx);
    *state.progress_tx.lock().unwrap() = Some(progress_tx);
    *state.progress_rx.lock().unwrap() = Some(progress_rx);
    let a = {
        let cache = cache.clone();
        std::thread::spawn(move || {
            WAITER.set(true);
            let stream = SimStream::new(StreamKey::new(0, 1));
            cache.allocate(4 << 20, &stream).map(|a| a.is_some())
        })
    };
    held_rx
        .recv_timeout(HANG)
        .expect("thread A reached its nested source call");
    let b = {
        let cache = cache.clone();
        std::thread::spawn(move || {
            let stream = SimStream::new(StreamKey::new(0, 2));
            cache.allocate(4 << 20, &stream).map(|a| a.is_some())
        })
    };
    assert_eq!(a.join().unwrap(), Ok(true));
    assert_eq!(b.join().unwrap(), Ok(true));
    state.cache.lock().unwrap().take();
    assert_eq!(
        *state.arrived.lock().unwrap(),
        Some(true),
        "thread B's nested call returned while thread A was inside its nested source call"
    );
    assert_eq!(cache.memory_stats().allocated_bytes.all.current, 0);
    assert_eq!(
        cache.memory_stats().allocation.all.allocated,
        4,
        "two outer and two nested allocations counted"
    );
}

/// A segment source written by the user whose `free_needs_sync` reads the allocator's
/// statistics (and answers `true`, so the stream is synchronized before each free).
struct ReadsStatsBeforeFree {
    inner: Arc<SimulatedSource>,
    cache: Mutex<Option<CachingAllocator<SimBackend>>>,
    /// `allocated_bytes.all.current` as each `free_needs_sync` read it.
    seen: Mutex<Vec<i64>>,
}

impl SegmentSource for ReadsStatsBeforeFree {
    type Memory = Simulated;
    fn device(&self) -> usize {
        self.inner.device()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn total_memory(&self) -> u64 {
        self.inner.total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.inner.max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.inner.base_addr_align()
    }
    fn free_needs_sync(&self) -> bool {
        let cache = self.cache.lock().unwrap().clone();
        if let Some(cache) = cache {
            let allocated = cache.memory_stats().allocated_bytes.all.current;
            self.seen.lock().unwrap().push(allocated);
        }
        true
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment<Simulated>, SourceError> {
        self.inner.allocate(size)
    }
    fn free(&self, segment: SourceSegment<Simulated>) {
        self.inner.free(segment);
    }
}

/// Unsplit segments under `release_policy:before_grow`: a 20 MiB request that would raise
/// the reserved high-water mark first releases the idle 10 MiB segment, during the
/// allocation. The source's `free_needs_sync` (user code) reads the statistics then: it
/// must run with the allocating thread's statistics write closed, or the read waits for
/// that write for ever (a sequence lock whose writer is the reader's own thread).
#[test]
fn a_sources_free_needs_sync_may_read_statistics_during_a_release_before_growing() {
    let source = Arc::new(ReadsStatsBeforeFree {
        inner: Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30)),
        cache: Mutex::new(None),
        seen: Mutex::new(Vec::new()),
    });
    let config = AllocConfig::parse("split_segments:False").unwrap();
    let cache = CachingAllocator::<SimBackend>::new(Box::new(source.clone()), config);
    *source.cache.lock().unwrap() = Some(cache.clone());
    let c = cache.clone();
    let reserved = finishes_within(20, move || {
        let stream = SimStream::new(StreamKey::new(0, 1));
        drop(c.allocate(10 << 20, &stream).unwrap().unwrap());
        let big = c.allocate(20 << 20, &stream).unwrap().unwrap();
        let reserved = c.memory_reserved();
        drop(big);
        reserved
    });
    source.cache.lock().unwrap().take();
    assert_eq!(reserved, 20 << 20, "the idle 10 MiB segment was released");
    assert_eq!(
        *source.seen.lock().unwrap(),
        vec![0],
        "free_needs_sync read the statistics once, with nothing allocated"
    );
    assert_eq!(cache.memory_stats().num_device_free, 1);
}

/// Hooks that switch the allocator's configuration (splitting off, then on again) from
/// inside every segment allocation.
struct TogglesSplitting(Mutex<Option<CachingAllocator<SimBackend>>>, AtomicU64);

impl SourceHooks<Arc<SimulatedSource>> for TogglesSplitting {
    fn allocate(
        &self,
        inner: &Arc<SimulatedSource>,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        let cache = self.0.lock().unwrap().clone();
        if let Some(cache) = cache {
            let n = self.1.fetch_add(1, Ordering::SeqCst);
            let text = if n % 2 == 0 {
                "split_segments:False"
            } else {
                "split_segments:True"
            };
            cache.set_config(AllocConfig::parse(text).unwrap());
        }
        inner.allocate(size)
    }
}

/// `set_config` called by the segment source during an allocation (user code, under no
/// allocator lock) switches splitting while the allocation is between its search and its
/// new segment: the allocation completes under the rules it started with, no live blocks
/// overlap, and everything returns at the end.
#[test]
fn a_source_may_switch_splitting_during_the_allocation_that_called_it() {
    let hooks = TogglesSplitting(Mutex::new(None), AtomicU64::new(0));
    let source = Arc::new(HookedSource::new(
        Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30)),
        hooks,
    ));
    let cache =
        CachingAllocator::<SimBackend>::new(Box::new(source.clone()), AllocConfig::default());
    *source.hooks().0.lock().unwrap() = Some(cache.clone());
    let c = cache.clone();
    let ranges = finishes_within(20, move || {
        let stream = SimStream::new(StreamKey::new(0, 1));
        let mut live = Vec::new();
        for (i, size) in [4096u64, 2 << 20, 4096, 12 << 20, 700_000, 3 << 20, 512]
            .into_iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            live.push(c.allocate(size, &stream).unwrap().unwrap());
            if i % 3 == 2 {
                live.remove(i % live.len());
            }
        }
        let mut ranges: Vec<(u64, u64)> = live
            .iter()
            .map(|a| (a.address(), a.address() + a.allocated_size()))
            .collect();
        ranges.sort_unstable();
        drop(live);
        ranges
    });
    for w in ranges.windows(2) {
        assert!(w[0].1 <= w[1].0, "live blocks overlap: {w:?}");
    }
    source.hooks().0.lock().unwrap().take();
    cache.empty_cache();
    let st = cache.memory_stats();
    assert!(
        source.hooks().1.load(Ordering::SeqCst) > 2,
        "the hook switched"
    );
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.active_bytes.all.current, 0);
    assert_eq!(st.inactive_split_bytes.all.current, 0);
    assert_eq!(st.reserved_bytes.all.current, 0);
    assert_eq!(cache.reserved_bytes(), 0);
}
