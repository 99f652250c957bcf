//! No user code runs under an allocator lock: closures given to the allocator, and a private
//! pool's custom segment source, may call it.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use xpu_alloc::{
    BufferSource, HookedSource, MemPool, SegmentSource, SourceError, SourceHooks, SourceSegment,
};

use common::{fresh_stream, sim_core, stream, MIB};

/// Runs `f` on a child thread; a hang is an assertion failure (the thread is abandoned).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{what}: no answer after 20 s ({e}): deadlock"))
}

#[test]
fn the_stream_closure_of_allocate_with_may_allocate() {
    let (core, _) = sim_core(64 * MIB, "");
    let c = core.clone();
    let (outer, inner) = within("allocate inside allocate_with's closure", move || {
        let (_, s1) = stream(1);
        let (_, s2) = stream(2);
        let mut nested = None;
        let outer = c
            .allocate_with(4096, s1.key(), || {
                nested = Some(c.allocate(1024, &s2));
                s1.clone()
            })
            .unwrap();
        (outer, nested.expect("closure called").unwrap())
    });
    assert_eq!((outer.size(), inner.size()), (4096, 1024));
    assert_eq!(core.memory_allocated(), 4096 + 1024);
}

#[test]
fn with_raw_closure_may_call_the_allocator() {
    let (core, _) = sim_core(64 * MIB, "");
    let c = core.clone();
    let freed = within("raw_delete inside with_raw", move || {
        let (_, s) = stream(1);
        let a = c.raw_alloc(1024, s.key(), || s.clone()).unwrap();
        let b = c.raw_alloc(1024, s.key(), || s.clone()).unwrap();
        c.with_raw(a, |p| {
            assert_eq!(p.size(), 1024);
            c.raw_delete(b).unwrap();
            c.raw_delete(a).unwrap();
            c.memory_allocated()
        })
        .unwrap()
    });
    // `b` was freed at once; `a` stays allocated while the closure holds it.
    assert_eq!(freed, 1024);
    assert_eq!(core.memory_allocated(), 0);
}

// A private pool's custom segment source is user code: its `free` (run on the
// `xpu-pool-release` thread for a dropped pool) and its `Drop` may call the allocator back
// without deadlocking. Each scenario runs in a child process (a hang would otherwise stop
// the process-wide release thread for every later test); a hang is a killed child.

/// Addresses of the custom source's segments, apart from the default pool's.
const SHIFT: u64 = 1 << 60;

/// What the custom source does when the allocator calls it.
#[derive(Clone, Copy)]
enum Callback {
    /// `free` waits for the releases of dropped pools (the one running it included).
    WaitReleasesInFree,
    /// `Drop` reads the device's statistics (which visit every pool).
    StatsInDrop,
    /// `splits_segments` reads the device's statistics and configuration.
    StatsInSplitsSegments,
}

/// Hooks shifting device 0's buffers, calling the allocator back as `callback` says.
struct CallingBack {
    callback: Callback,
    frees: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl SourceHooks<BufferSource> for CallingBack {
    fn splits_segments(&self, inner: &BufferSource) -> bool {
        if let Callback::StatsInSplitsSegments = self.callback {
            let _ = xpu_alloc::memory_stats(0).unwrap();
            let _ = xpu_alloc::current_config();
        }
        inner.splits_segments()
    }
    fn allocate(&self, inner: &BufferSource, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = inner.allocate(size)?;
        segment.address += SHIFT;
        Ok(segment)
    }
    fn free(&self, inner: &BufferSource, mut segment: SourceSegment) {
        if let Callback::WaitReleasesInFree = self.callback {
            xpu_alloc::wait_pool_releases();
        }
        segment.address -= SHIFT;
        inner.free(segment);
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for CallingBack {
    fn drop(&mut self) {
        if let Callback::StatsInDrop = self.callback {
            let _ = xpu_alloc::memory_stats(0).unwrap();
        }
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// Device 0's buffers with [`CallingBack`] hooks, and the hooks' free and drop counters.
fn calling_back(
    callback: Callback,
) -> (
    HookedSource<BufferSource, CallingBack>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
) {
    let (frees, drops) = (Arc::default(), Arc::default());
    let hooks = CallingBack {
        callback,
        frees: Arc::clone(&frees),
        drops: Arc::clone(&drops),
    };
    let source = HookedSource::new(BufferSource::new(0).unwrap(), hooks);
    (source, frees, drops)
}

/// A dropped pool's segment is freed on the release thread; the source's `free` there waits
/// for the pool releases, and `wait_pool_releases` on the main thread then returns: the
/// release thread does not wait for itself.
#[test]
fn a_custom_sources_free_may_wait_for_pool_releases() {
    xpu_testing::scenario_test(
        "a_custom_sources_free_may_wait_for_pool_releases",
        "free-waits-releases",
        Duration::from_secs(30),
        "done: freed 1",
        || {
            let external = fresh_stream(0);
            let stream = external.stream();
            let (source, frees, _) = calling_back(Callback::WaitReleasesInFree);
            let pool = MemPool::with_source(0, source).unwrap();
            let block = pool.allocate(MIB, &stream).unwrap();
            drop(pool);
            drop(block); // the pool's last shard: torn down on the release thread
            xpu_alloc::wait_pool_releases();
            println!("done: freed {}", frees.load(Ordering::SeqCst));
        },
    );
}

/// A pool whose every handle and allocation is gone is forgotten by the device's pool
/// registry at its next visit (`memory_stats` here), which drops the pool's custom source:
/// its `Drop` may read the device's statistics (no registry lock held by then).
#[test]
fn a_custom_sources_drop_may_read_the_device_statistics() {
    xpu_testing::scenario_test(
        "a_custom_sources_drop_may_read_the_device_statistics",
        "drop-reads-stats",
        Duration::from_secs(30),
        "done: dropped 1",
        || {
            let (source, _, drops) = calling_back(Callback::StatsInDrop);
            let pool = MemPool::with_source(0, source).unwrap();
            drop(pool);
            xpu_alloc::wait_pool_releases();
            let _ = xpu_alloc::memory_stats(0).unwrap();
            println!("done: dropped {}", drops.load(Ordering::SeqCst));
        },
    );
}

/// A pool's custom source answers `splits_segments` (user code) by reading the device's
/// statistics and configuration. `set_config` with `split_segments` left to the sources
/// reaches every pool, and must not ask that source under the pools' registry lock or the
/// configuration's lock: the hook would wait for the lock its own caller holds.
#[test]
fn a_custom_sources_splits_segments_may_read_the_device_during_set_config() {
    xpu_testing::scenario_test(
        "a_custom_sources_splits_segments_may_read_the_device_during_set_config",
        "splits-reads-stats",
        Duration::from_secs(30),
        "done: set",
        || {
            let (source, _, _) = calling_back(Callback::StatsInSplitsSegments);
            let pool = MemPool::with_source(0, source).unwrap();
            xpu_alloc::set_config("max_split_size_mb:40").unwrap();
            assert_eq!(pool.memory_reserved(), 0);
            println!("done: set");
        },
    );
}
