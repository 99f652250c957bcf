//! Private memory pools (`MemPool`, as torch.cuda.MemPool) on a real OpenCL device (PoCL in
//! CI): routing per thread, isolation from the default pool, per-pool statistics, routing
//! errors, lifetime, stream-ordered release, custom segment sources, block addresses unique
//! across pools, `use_mem_pool` from a thread-local destructor. Skipped without a device
//! unless `XPU_REQUIRE_DEVICE=1`. Each test allocates on streams of its own; device-wide
//! figures are compared as differences.

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use xpu_alloc::{
    AllocError, BufferSource, DataPtr, HookedSource, MemPool, SegmentSource, SourceError,
    SourceHooks, SourceSegment,
};
use xpu_event::{Event, Gate};
use xpu_stream::Stream;

use common::{device_stream, fresh_stream, MIB};

/// A [`device_stream`] and a new pool of device 0.
fn pool_and_stream() -> Option<(Stream, MemPool)> {
    device_stream().map(|stream| (stream, MemPool::new(0).unwrap()))
}

fn reserved() -> u64 {
    xpu_alloc::memory_reserved(0).unwrap()
}

/// Addresses of the blocks of `pool`'s segments.
fn pool_block_addresses(pool: &MemPool) -> Vec<u64> {
    pool.segments()
        .iter()
        .flat_map(|s| s.blocks.iter().map(|b| b.address))
        .collect()
}

#[test]
fn routing_sends_this_threads_allocations_to_the_pool_and_no_other_threads() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    let before = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(!pool.owns(&before), "no routing yet");
    let guard = xpu_alloc::use_mem_pool(&pool).unwrap();
    assert_eq!(pool.routing_threads(), 1);
    let routed = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(
        pool.owns(&routed),
        "this thread's allocation comes from the pool"
    );
    let s2 = fresh_stream(0);
    xpu_alloc::record_stream(&routed, &s2.stream()).expect("record_stream of a pool block");
    let raw = xpu_alloc::raw_alloc_with_stream(8192, &stream).unwrap();
    assert_eq!(
        pool.memory_allocated(),
        4096 + 8192,
        "raw_alloc is routed too"
    );
    let other = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let p = xpu_alloc::allocate(4096, &stream).unwrap();
                pool.owns(&p)
            })
            .join()
            .unwrap()
    });
    assert!(!other, "another thread is not routed");
    drop(guard);
    assert_eq!(pool.routing_threads(), 0);
    let after = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(!pool.owns(&after), "routing ends with the guard");
    xpu_alloc::raw_delete(raw).unwrap();
    assert_eq!(
        pool.memory_allocated(),
        4096,
        "raw_delete frees to the pool"
    );
}

#[test]
fn a_pools_freed_block_is_never_handed_to_the_default_pool_and_back() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    for size in [4096, 3 * MIB] {
        // Pool -> default: the pool's cached block stays the pool's.
        let p = pool.allocate(size, &stream).unwrap();
        let p_addr = p.address();
        drop(p);
        let d = xpu_alloc::allocate(size, &stream).unwrap();
        assert!(!pool.owns(&d));
        assert_ne!(
            d.address(),
            p_addr,
            "the default pool took the pool's freed block"
        );
        assert!(
            !pool_block_addresses(&pool).contains(&d.address()),
            "the default block lies in a pool segment"
        );
        assert!(
            pool_block_addresses(&pool).contains(&p_addr),
            "still cached by the pool"
        );
        // Default -> pool: the default pool's freed block stays the default pool's.
        let d_addr = d.address();
        drop(d);
        let q = pool.allocate(size, &stream).unwrap();
        assert!(pool.owns(&q));
        assert_eq!(q.address(), p_addr, "the pool reuses its own block");
        assert_ne!(q.address(), d_addr);
        let d2 = xpu_alloc::allocate(size, &stream).unwrap();
        assert_eq!(
            d2.address(),
            d_addr,
            "the default pool reuses its own block"
        );
    }
}

#[test]
fn per_pool_statistics_are_exact_and_count_in_the_device() {
    let Some(stream) = device_stream() else {
        return;
    };
    let device_before = xpu_alloc::memory_stats(0).unwrap();
    let pool = MemPool::new(0).unwrap();
    let a = pool.allocate(1000, &stream).unwrap();
    let b = pool.allocate(3 * MIB, &stream).unwrap();
    let st = pool.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 1024 + 3 * MIB as i64);
    assert_eq!(st.allocated_bytes.small_pool.current, 1024);
    assert_eq!(st.allocated_bytes.large_pool.current, 3 * MIB as i64);
    assert_eq!(st.requested_bytes.all.current, 1000 + 3 * MIB as i64);
    assert_eq!(st.allocation.all.current, 2);
    assert_eq!(st.segment.all.current, 2);
    let segments: u64 = pool.segments().iter().map(|s| s.size).sum();
    assert_eq!(pool.memory_reserved(), segments);
    assert_eq!(st.reserved_bytes.all.current, segments as i64);
    let device = xpu_alloc::memory_stats(0).unwrap();
    assert_eq!(
        device.reserved_bytes.all.current - device_before.reserved_bytes.all.current,
        segments as i64,
        "the device's statistics include the pool"
    );
    assert_eq!(
        device.allocated_bytes.all.current - device_before.allocated_bytes.all.current,
        1024 + 3 * MIB as i64
    );
    drop((a, b));
    let st = pool.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.allocated_bytes.all.freed, 1024 + 3 * MIB as i64);
    assert_eq!(st.allocated_bytes.all.peak, 1024 + 3 * MIB as i64);
    pool.empty_cache();
    assert_eq!(
        pool.memory_reserved(),
        0,
        "the pool's empty_cache releases its segments"
    );
    assert_eq!(pool.memory_stats().num_device_free, 2);
    let snap = pool.snapshot().unwrap();
    assert!(snap.segments.is_empty());
    let c = pool.allocate(4096, &stream).unwrap();
    let snap = pool.snapshot().unwrap();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].segment_pool_id, pool.id());
    let device_snap = xpu_alloc::memory_snapshot();
    assert!(
        device_snap
            .segments
            .iter()
            .any(|s| s.segment_pool_id == pool.id() && s.address == snap.segments[0].address),
        "the device snapshot lists the pool's segment with its id"
    );
    assert_eq!(pool.id().0, 0, "a user pool's id is (0, n)");
    assert!(pool.id().1 > 0);
    drop(c);
}

/// Asserts that a routing call failed with `expected`, whose message (torch's) starts with
/// `message`.
fn assert_routing_error(err: AllocError, expected: &AllocError, message: &str) {
    assert_eq!(&err, expected);
    assert!(err.to_string().starts_with(message), "{err}");
}

#[test]
fn routing_twice_to_one_pool_and_ending_an_inactive_routing_are_errors() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    let inner = MemPool::new(0).unwrap();
    let (device, id) = (0, pool.id());
    assert_routing_error(
        xpu_alloc::end_allocate_to_pool(&pool).unwrap_err(),
        &AllocError::NotRecordingToPool { device, id },
        "endAllocatePool: not currently recording to mempool_id",
    );
    let _g = xpu_alloc::use_mem_pool(&pool).unwrap();
    assert_routing_error(
        xpu_alloc::use_mem_pool(&pool).unwrap_err(),
        &AllocError::AlreadyRecordingToPool { device, id },
        "beginAllocateToPool: already recording to mempool_id",
    );
    {
        let _nested = xpu_alloc::use_mem_pool(&inner).unwrap();
        let p = xpu_alloc::allocate(4096, &stream).unwrap();
        assert!(inner.owns(&p), "the innermost routing applies");
    }
    let p = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(pool.owns(&p), "the outer routing is back");
    xpu_alloc::end_allocate_to_pool(&pool).unwrap();
    let err = xpu_alloc::end_allocate_to_pool(&pool).unwrap_err();
    assert!(matches!(err, AllocError::NotRecordingToPool { .. }));
    let q = xpu_alloc::allocate(4096, &stream).unwrap();
    assert!(
        !pool.owns(&q),
        "explicitly ended (the guard's drop then does nothing)"
    );
}

#[test]
fn a_pool_dropped_with_live_blocks_lives_until_they_are_freed() {
    let Some(stream) = device_stream() else {
        return;
    };
    let base = reserved();
    let pool = MemPool::new(0).unwrap();
    let x = pool.allocate(12 * MIB, &stream).unwrap();
    let x_addr = x.address();
    x.view()
        .unwrap()
        .write(&stream, 0, &vec![0x5A; 4096])
        .unwrap();
    let err = pool.release().unwrap_err();
    assert!(
        matches!(
            err,
            AllocError::PoolInUse {
                allocations: 1,
                routing: 0,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        reserved() - base,
        12 * MIB,
        "release refused: nothing released"
    );
    drop(pool);
    xpu_alloc::wait_pool_releases();
    assert_eq!(reserved() - base, 12 * MIB, "kept while its block lives");
    let d = xpu_alloc::allocate(12 * MIB, &stream).unwrap();
    assert_ne!(d.address(), x_addr);
    let mut seen = vec![0u8; 4096];
    x.view().unwrap().read(&stream, 0, &mut seen).unwrap();
    assert!(seen.iter().all(|&b| b == 0x5A), "the block is intact");
    drop(d);
    let with_default = reserved();
    drop(x);
    xpu_alloc::wait_pool_releases();
    assert_eq!(
        with_default - reserved(),
        12 * MIB,
        "the pool's segment is released once its last block is freed"
    );
}

#[test]
fn release_of_an_idle_pool_returns_its_segments() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    let base = reserved();
    drop(pool.allocate(5 * MIB, &stream).unwrap());
    assert!(pool.memory_reserved() > 0);
    let g = xpu_alloc::use_mem_pool(&pool).unwrap();
    assert!(matches!(
        pool.release(),
        Err(AllocError::PoolInUse {
            allocations: 0,
            routing: 1,
            ..
        })
    ));
    drop(g);
    pool.release().unwrap();
    assert_eq!(pool.memory_reserved(), 0);
    assert_eq!(reserved(), base);
}

/// Source hooks that count the calls and, at each free, note whether `watch` (an event
/// recorded after the work that reads the segment) had completed. They shift addresses
/// far from the device source's so they stay unique on the device. With
/// `opposite_splitting`, the source answers `splits_segments` unlike the device's own.
#[derive(Default)]
struct Watching {
    opposite_splitting: bool,
    allocs: AtomicUsize,
    frees: AtomicUsize,
    addresses: Mutex<Vec<u64>>,
    watch: Mutex<Option<Event>>,
    freed_after_work: Mutex<Vec<bool>>,
}

const SHIFT: u64 = 1 << 60;

/// A [`Watching`] source over device 0's buffers.
fn watching() -> Arc<HookedSource<BufferSource, Watching>> {
    Arc::new(HookedSource::new(
        BufferSource::new(0).unwrap(),
        Watching::default(),
    ))
}

impl SourceHooks<BufferSource> for Watching {
    fn splits_segments(&self, inner: &BufferSource) -> bool {
        inner.splits_segments() != self.opposite_splitting
    }
    fn allocate(&self, inner: &BufferSource, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = inner.allocate(size)?;
        segment.address += SHIFT;
        self.allocs.fetch_add(1, Ordering::SeqCst);
        self.addresses.lock().unwrap().push(segment.address);
        Ok(segment)
    }
    fn free(&self, inner: &BufferSource, mut segment: SourceSegment) {
        if let Some(event) = self.watch.lock().unwrap().as_ref() {
            let done = event.query().unwrap();
            self.freed_after_work.lock().unwrap().push(done);
        }
        self.frees.fetch_add(1, Ordering::SeqCst);
        segment.address -= SHIFT;
        inner.free(segment);
    }
}

#[test]
fn a_pool_with_a_custom_source_draws_its_segments_from_it_and_the_default_pool_does_not() {
    let Some(stream) = device_stream() else {
        return;
    };
    let source = watching();
    let pool = MemPool::with_source(0, source.clone()).unwrap();
    let base = reserved();
    let p = pool.allocate(3 * MIB, &stream).unwrap();
    assert_eq!(source.hooks().allocs.load(Ordering::SeqCst), 1);
    let seg = pool.segments()[0].address;
    assert_eq!(source.hooks().addresses.lock().unwrap().as_slice(), &[seg]);
    assert!(p.address() >= SHIFT, "the block lies in the custom segment");
    assert_eq!(
        reserved() - base,
        pool.memory_reserved(),
        "counted in the device"
    );
    let d = {
        let _g = xpu_alloc::use_mem_pool(&pool).unwrap();
        let q = xpu_alloc::allocate(4096, &stream).unwrap();
        assert!(pool.owns(&q));
        drop(q);
        xpu_alloc::allocate(4096, &fresh_stream(0).stream()).unwrap()
    };
    assert_eq!(
        source.hooks().allocs.load(Ordering::SeqCst),
        3,
        "routed allocations too"
    );
    drop(d);
    let d = xpu_alloc::allocate(3 * MIB, &stream).unwrap();
    assert!(!pool.owns(&d));
    assert!(d.address() < SHIFT);
    assert_eq!(
        source.hooks().allocs.load(Ordering::SeqCst),
        3,
        "the default pool never asks the custom source"
    );
    drop(p);
    pool.empty_cache();
    assert_eq!(
        source.hooks().frees.load(Ordering::SeqCst),
        3,
        "freed to the custom source"
    );
    let err = MemPool::with_source(1, watching());
    if xpu_device::device_count() > 1 {
        assert!(matches!(err, Err(AllocError::Unsupported(_))));
    }
}

/// With `split_segments` left unset (no `XPU_ALLOC_CONF` here), the segment source decides
/// whether segments are split: for a pool with a custom source, that source, not the
/// device's.
#[test]
fn a_pool_whose_custom_source_splits_unlike_the_device_follows_its_source() {
    let Some(stream) = device_stream() else {
        return;
    };
    let source = Arc::new(HookedSource::new(
        BufferSource::new(0).unwrap(),
        Watching {
            opposite_splitting: true,
            ..Watching::default()
        },
    ));
    let pool_splits = source.splits_segments();
    assert_ne!(pool_splits, BufferSource::new(0).unwrap().splits_segments());
    let pool = MemPool::with_source(0, source).unwrap();
    let p = pool.allocate(1000, &stream).unwrap();
    let segment = pool.segments()[0].size;
    if pool_splits {
        assert_eq!(segment, 2 * MIB, "a split small-pool segment");
        assert_eq!(p.allocated_size(), 1024);
    } else {
        assert_eq!(segment, 1024, "the block is its whole segment");
        assert_eq!(p.allocated_size(), 1024);
    }
    drop(p);
    pool.empty_cache();
}

/// Gate stream S; S copies from a pool block X into a default-pool block; free X; drop the
/// pool; open the gate: the copy reads X's bytes, and the custom source sees the segment
/// freed only after the copy completed (the release waited for S's work, without blocking
/// the drop).
#[test]
fn a_dropped_pools_segment_is_released_only_after_the_gated_work_that_reads_it() {
    const N: usize = 64 * 1024;
    let Some(stream) = device_stream() else {
        return;
    };
    let source = watching();
    let pool = MemPool::with_source(0, source.clone()).unwrap();
    let x = pool.allocate(12 * MIB, &stream).unwrap();
    x.view().unwrap().write(&stream, 0, &vec![0xC3; N]).unwrap();
    let out: DataPtr = xpu_alloc::allocate(N as u64, &stream).unwrap();
    let base = reserved();
    let gate = Gate::new(0).unwrap();
    gate.block(&stream).unwrap();
    out.view()
        .unwrap()
        .copy_from(&stream, &x.view().unwrap(), 0, 0, N)
        .unwrap();
    let mut copied = Event::new(Default::default());
    copied.record(&stream).unwrap();
    stream.queue().unwrap().flush().unwrap();
    *source.hooks().watch.lock().unwrap() = Some(copied);
    let copy_done = || {
        source
            .hooks()
            .watch
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .query()
            .unwrap()
    };
    drop(x);
    drop(pool); // returns at once: the release waits in the background
    assert!(!copy_done(), "the gate holds the copy back");
    assert_eq!(
        source.hooks().frees.load(Ordering::SeqCst),
        0,
        "not released under the gated copy"
    );
    assert_eq!(reserved(), base, "still reserved while the copy is queued");
    gate.open().unwrap();
    stream.synchronize().unwrap();
    assert!(copy_done());
    xpu_alloc::wait_pool_releases();
    assert_eq!(source.hooks().frees.load(Ordering::SeqCst), 1);
    assert_eq!(
        source.hooks().freed_after_work.lock().unwrap().as_slice(),
        &[true],
        "released after the copy completed"
    );
    assert_eq!(base - reserved(), 12 * MIB);
    let mut seen = vec![0u8; N];
    out.view().unwrap().read(&stream, 0, &mut seen).unwrap();
    assert!(
        seen.iter().all(|&b| b == 0xC3),
        "the copy read the pool block's bytes"
    );
}

#[test]
fn device_empty_cache_leaves_live_pools_and_releases_dropped_ones() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    drop(pool.allocate(3 * MIB, &stream).unwrap());
    let held = pool.memory_reserved();
    assert!(held > 0);
    xpu_alloc::empty_cache();
    assert_eq!(pool.memory_reserved(), held, "a live pool keeps its cache");
    let before = reserved();
    drop(pool);
    xpu_alloc::empty_cache();
    assert_eq!(
        before - reserved(),
        held,
        "a dropped pool's cache is released"
    );
    let st = xpu_alloc::memory_stats(0).unwrap();
    assert!(
        st.num_device_free >= 1,
        "a gone pool's counters stay in the device's"
    );
}

#[test]
fn device_empty_cache_releases_the_unused_segments_of_a_dropped_pool_with_live_blocks() {
    let Some((stream, pool)) = pool_and_stream() else {
        return;
    };
    let x = pool.allocate(12 * MIB, &stream).unwrap();
    let y = pool.allocate(12 * MIB, &stream).unwrap();
    assert_eq!(pool.segments().len(), 2);
    drop(pool);
    drop(y);
    let before = reserved();
    xpu_alloc::empty_cache();
    assert_eq!(
        before - reserved(),
        12 * MIB,
        "the freeable pool's unused segment is released, the live one kept"
    );
    let mut seen = vec![0u8; 16];
    x.view().unwrap().read(&stream, 0, &mut seen).unwrap();
    drop(x);
    xpu_alloc::wait_pool_releases();
    assert_eq!(before - reserved(), 24 * MIB);
}

#[test]
fn a_thread_that_exits_with_a_forgotten_routing_no_longer_counts_as_routing() {
    if !xpu_testing::devices(1) {
        return;
    }
    let pool = MemPool::new(0).unwrap();
    let p = pool.clone();
    // `join` returns after the thread's thread-locals are destroyed.
    std::thread::spawn(move || std::mem::forget(xpu_alloc::use_mem_pool(&p).unwrap()))
        .join()
        .unwrap();
    assert_eq!(pool.routing_threads(), 0);
    pool.release().unwrap();
}

// Block addresses stay unique on a device across its pools: a private pool's custom source
// that hands out a segment overlapping a live segment of the default pool gets it refused
// (freed again, a device error), instead of two live blocks at one address, where the raw
// table of `raw_alloc` would silently drop (free) the first.

/// Hooks handing out each of device 0's buffers at the address `at` holds (a source breaking
/// the documented rule that addresses are unique on the device).
struct At {
    at: Arc<AtomicU64>,
    real: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl SourceHooks<BufferSource> for At {
    fn allocate(&self, inner: &BufferSource, size: u64) -> Result<SourceSegment, SourceError> {
        let mut segment = inner.allocate(size)?;
        let at = self.at.load(Ordering::SeqCst);
        self.real.lock().unwrap().push((at, segment.address));
        segment.address = at;
        Ok(segment)
    }
    fn free(&self, inner: &BufferSource, mut segment: SourceSegment) {
        let mut real = self.real.lock().unwrap();
        if let Some(i) = real.iter().position(|&(at, _)| at == segment.address) {
            segment.address = real.remove(i).1;
        }
        drop(real);
        inner.free(segment);
    }
}

#[test]
fn a_pool_segment_overlapping_a_live_default_pool_segment_is_refused() {
    let Some(s) = device_stream() else {
        return;
    };
    let a = xpu_alloc::raw_alloc_with_stream(4096, &s).unwrap();
    let segment = xpu_alloc::device_allocator(0)
        .unwrap()
        .core()
        .snapshot()
        .into_iter()
        .find(|seg| (seg.address..seg.address + seg.size).contains(&a.address()))
        .expect("a's segment");
    let at = Arc::new(AtomicU64::new(segment.address));
    let pool = MemPool::with_source(
        0,
        HookedSource::new(
            BufferSource::new(0).unwrap(),
            At {
                at: Arc::clone(&at),
                real: std::sync::Mutex::default(),
            },
        ),
    )
    .unwrap();
    let allocated_before = xpu_alloc::memory_allocated(0).unwrap();
    let b = {
        let _routed = xpu_alloc::use_mem_pool(&pool).unwrap();
        xpu_alloc::raw_alloc_with_stream(4096, &s)
    };
    let b_addr = b.as_ref().map(xpu_alloc::DevicePtr::address).ok();
    let b_err = b.as_ref().err().map(ToString::to_string);
    let allocated_after = xpu_alloc::memory_allocated(0).unwrap();
    // `a` must still be live, whatever happened to `b`.
    let a_deleted = xpu_alloc::raw_delete(a);
    if let Ok(b) = b {
        let _ = xpu_alloc::raw_delete(b);
    }
    assert!(
        a_deleted.is_ok(),
        "a was freed behind the caller's back (b at {b_addr:x?}, allocated {allocated_before} \
         -> {allocated_after}): {a_deleted:?}"
    );
    assert!(
        b_addr.is_none(),
        "the pool handed out a block at {b_addr:x?}, inside a live segment of the default pool"
    );
    assert_eq!(allocated_after, allocated_before, "nothing allocated for b");
    assert_eq!(
        pool.memory_reserved(),
        0,
        "the overlapping segment went back"
    );
    // The pool works again once its source hands out unique addresses.
    at.store(1 << 61, Ordering::SeqCst);
    let c = pool.allocate(4096, &s).unwrap();
    assert_eq!(c.address(), 1 << 61);
    let b_err = b_err.expect("b refused");
    assert!(b_err.contains("overlapping the live segment"), "{b_err}");
}

// `use_mem_pool` (as `torch.cuda.use_mem_pool`) called from a thread-local destructor while
// the thread exits, after the thread's routing state was destroyed, returns a typed error:
// a panic there (an `AccessError` of the destroyed thread-local) would abort the process.
// Runs in a child process, so that an abort fails this test instead of killing the test
// binary.

/// What the thread-local destructor's `use_mem_pool` returned (`None`: it did not run).
static OUTCOME: Mutex<Option<Result<(), AllocError>>> = Mutex::new(None);

/// Calls `use_mem_pool` on its pool when the thread exits.
struct RouteOnExit(MemPool);

impl Drop for RouteOnExit {
    fn drop(&mut self) {
        let outcome = xpu_alloc::use_mem_pool(&self.0).map(drop);
        *OUTCOME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome);
    }
}

thread_local! {
    static ON_EXIT: RefCell<Option<RouteOnExit>> = const { RefCell::new(None) };
}

#[test]
fn use_mem_pool_from_a_thread_local_destructor_after_the_routing_state_is_gone_is_an_error() {
    xpu_testing::scenario_test(
        "use_mem_pool_from_a_thread_local_destructor_after_the_routing_state_is_gone_is_an_error",
        "routing-thread-exit",
        Duration::from_secs(60),
        "done",
        || {
            let pool = MemPool::new(0).unwrap();
            let id = pool.id();
            let in_thread = pool.clone();
            std::thread::spawn(move || {
                // Registered first, so its destructor runs after the routing state's
                // (thread-local destructors run in the reverse order of registration),
                // which the routing below registers.
                ON_EXIT.with_borrow_mut(|slot| *slot = Some(RouteOnExit(in_thread.clone())));
                drop(xpu_alloc::use_mem_pool(&in_thread).unwrap());
            })
            .join()
            .expect("the thread exits normally");
            let outcome = OUTCOME.lock().unwrap().take();
            assert_eq!(
                outcome,
                Some(Err(AllocError::RoutingUnavailable { device: 0, id })),
                "the destructor ran and got the typed error"
            );
            assert_eq!(pool.id(), id);
            // The pool is not left routed: it can be released.
            pool.release().unwrap();
            println!("done");
        },
    );
}
