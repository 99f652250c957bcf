//! Unit tests of the algorithm on the simulated backend, and on a test backend whose
//! streams can hold their work or fail every marker operation.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::thread_cache::ThreadCacheKey;
use super::{Allocation, CachingAllocator};
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::error::{CacheError, CopyError, DeviceFailure};
use crate::sim_stream::{SimBackend, SimMarker, SimStream};
use crate::source::{Simulated, SimulatedSource};
use crate::stream::{MarkerError, StreamKey};

mod bad_fork;
mod config_change;
mod config_race;
mod deferred_drop;
mod oom_history;
mod peaks;
mod pending_release;
mod review_h9;
mod stream_order;
mod streams;
mod thread_cache;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

impl<B: ThreadCacheKey> CachingAllocator<B> {
    /// [`CachingAllocator::allocate`] of a non-zero size.
    fn alloc(&self, size: u64, stream: &B::Stream) -> Result<Allocation<B>, CacheError> {
        self.allocate(size, stream)
            .map(|a| a.expect("a non-zero size gives an allocation"))
    }
}

/// An allocator over a simulated device of `capacity` bytes (max allocation = capacity).
fn sim_core(capacity: u64, config: &str) -> (CachingAllocator<SimBackend>, Arc<SimulatedSource>) {
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let config = AllocConfig::parse(config).expect("valid config");
    (
        CachingAllocator::new(Box::new(source.clone()), config),
        source,
    )
}

/// A simulated stream with id `id` on device 0 (twice: the handle and the backend stream).
fn stream(id: u64) -> (Arc<SimStream>, Arc<SimStream>) {
    let s = SimStream::new(StreamKey::new(0, id));
    (s.clone(), s)
}
/// Hang detection only (never an ordering): a call that should return at once.
const HANG: Duration = Duration::from_secs(20);

/// Work a test releases: a marker's wait blocks until then, and tells the test when a wait
/// starts (the "device" is busy until then).
#[derive(Default)]
struct Held {
    released: Mutex<bool>,
    cv: Condvar,
    waiting: Mutex<Option<mpsc::Sender<()>>>,
}

impl Held {
    fn release(&self) {
        *self.released.lock() = true;
        self.cv.notify_all();
    }

    fn wait(&self) {
        if let Some(tx) = self.waiting.lock().take() {
            let _ = tx.send(());
        }
        let mut released = self.released.lock();
        while !*released {
            self.cv.wait(&mut released);
        }
    }
}

enum TestStream {
    Sim(Arc<SimStream>),
    /// Markers complete when the test releases the work.
    Held(StreamKey, Arc<Held>),
    /// No marker can be recorded (nor a synchronize done).
    Broken(StreamKey),
}

enum TestMarker {
    Sim(SimMarker),
    Held(Arc<Held>),
}

#[derive(Clone)]
struct TestBackend;

fn lost() -> MarkerError {
    MarkerError::message("queue lost")
}

impl Backend for TestBackend {
    type Memory = Simulated;
    type Stream = Arc<TestStream>;
    type Marker = TestMarker;

    fn stream_key(stream: &Arc<TestStream>) -> StreamKey {
        match &**stream {
            TestStream::Sim(s) => s.key(),
            TestStream::Held(k, _) | TestStream::Broken(k) => *k,
        }
    }
    fn record_marker(stream: &Arc<TestStream>) -> Result<TestMarker, MarkerError> {
        match &**stream {
            TestStream::Sim(s) => Ok(TestMarker::Sim(s.record_marker())),
            TestStream::Held(_, h) => Ok(TestMarker::Held(h.clone())),
            TestStream::Broken(_) => Err(lost()),
        }
    }
    fn marker_complete(marker: &TestMarker) -> bool {
        match marker {
            TestMarker::Sim(m) => m.is_complete(),
            TestMarker::Held(h) => *h.released.lock(),
        }
    }
    fn wait(marker: &TestMarker) -> Result<(), MarkerError> {
        match marker {
            TestMarker::Sim(m) => m.wait(),
            TestMarker::Held(h) => h.wait(),
        }
        Ok(())
    }
    fn stream_wait(stream: &Arc<TestStream>, marker: &TestMarker) -> Result<(), MarkerError> {
        match (&**stream, marker) {
            (TestStream::Sim(s), TestMarker::Sim(m)) => {
                s.wait_marker(m);
                Ok(())
            }
            _ => Err(MarkerError::message("not supported")),
        }
    }
    fn synchronize(stream: &Arc<TestStream>) -> Result<(), MarkerError> {
        match &**stream {
            TestStream::Sim(s) => s.synchronize(),
            TestStream::Held(_, h) => h.wait(),
            TestStream::Broken(_) => return Err(lost()),
        }
        Ok(())
    }
    /// The simulated copy's checks on every stream; a broken stream then fails to enqueue
    /// (but for 0 bytes, which enqueue nothing).
    fn enqueue_copy(
        stream: &Arc<TestStream>,
        src: &Simulated,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        let check = || src.check_copy_to(src_offset, dst, dst_offset, len);
        match &**stream {
            TestStream::Sim(s) => s.enqueue_copy(src, src_offset, dst, dst_offset, len),
            TestStream::Held(..) => check(),
            TestStream::Broken(_) => {
                check()?;
                if len == 0 {
                    return Ok(());
                }
                Err(CopyError::Device(DeviceFailure::message("queue lost")))
            }
        }
    }
}

crate::thread_caches!(TestBackend);

fn core(capacity: u64) -> CachingAllocator<TestBackend> {
    let source = SimulatedSource::<Simulated>::new(0, capacity, capacity);
    CachingAllocator::new(Box::new(source), AllocConfig::default())
}

fn sim(id: u64) -> (Arc<SimStream>, Arc<TestStream>) {
    let s = SimStream::new(StreamKey::new(0, id));
    (s.clone(), Arc::new(TestStream::Sim(s)))
}

/// A seeded linear congruential generator (Knuth's MMIX constants): the next 31-bit value
/// at each call, the same sequence for the same seed.
fn lcg(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    }
}

/// Runs `f` on another thread and returns its result, or `None` when it did not return
/// within [`HANG`].
fn returns<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG).ok()
}

#[test]
fn statistics_do_not_wait_for_an_allocation_waiting_on_device_work() {
    let core = core(64 * MIB);
    let (_, a) = sim(1);
    let held = Arc::new(Held::default());
    let (tx, started) = mpsc::channel();
    *held.waiting.lock() = Some(tx);
    let b = Arc::new(TestStream::Held(StreamKey::new(0, 2), held.clone()));
    let x = core.alloc(40 * MIB, &a).unwrap();
    core.record_stream(&x, &b).unwrap();
    drop(x);
    let alloc = {
        let core = core.clone();
        std::thread::spawn(move || core.allocate(40 * MIB, &a).map(|p| p.map(|p| p.address())))
    };
    // The allocating thread is now inside the OOM path, waiting for stream B.
    started
        .recv_timeout(HANG)
        .expect("the OOM path waits for B");
    let reader = core.clone();
    let stats = returns(move || reader.memory_stats());
    held.release();
    let stats = stats.expect("memory_stats() returned while an allocation waits for the device");
    assert_eq!(stats.reserved_bytes.all.current, 40 * (MIB as i64));
    assert!(alloc.join().unwrap().is_ok());
}

/// When the marker of a recorded use cannot be recorded, nothing orders a reuse after that
/// use: the block must stay out of the cache, not be freed silently.
#[test]
fn a_block_whose_free_marker_fails_is_never_reused() {
    let core = core(1 << 30);
    let (_, a) = sim(1);
    let (b_sim, b) = sim(2);
    let broken = Arc::new(TestStream::Broken(StreamKey::new(0, 3)));
    let x = core.alloc(MIB, &a).unwrap();
    let addr = x.address();
    core.record_stream(&x, &broken).unwrap();
    core.record_stream(&x, &b).unwrap(); // a use whose marker completes
    drop(x);
    b_sim.open_gate();
    for _ in 0..3 {
        let y = core.alloc(MIB, &a).unwrap();
        assert_ne!(y.address(), addr, "the block was reused");
    }
    core.empty_cache();
    let y = core.alloc(MIB, &a).unwrap();
    assert_ne!(y.address(), addr, "the block was reused after empty_cache");
    assert_eq!(
        core.memory_stats().active.all.current,
        2,
        "y and the kept block"
    );
}

/// Every current and peak of the allocated, allocation and inactive-split arrays (all and
/// per pool), reserved and requested bytes, equal the figures of the snapshot (and their
/// running maxima) after each step of a seeded random sequence of allocations on two
/// streams, frees, configuration changes and `empty_cache` on one thread, relocation off.
#[test]
fn statistics_match_the_snapshot_through_random_allocations_config_changes_and_empty_cache() {
    statistics_match_the_snapshot(",relocation:off", true);
}

/// As above with relocation on (the default): every current matches, and so does every
/// peak but the inactive-split ones, which a move may raise while it runs under the
/// stream's lock (its targets are split before the places it vacates merge), so they are
/// at least the snapshots' running maxima.
#[test]
fn statistics_match_the_snapshot_with_relocation() {
    statistics_match_the_snapshot("", false);
}

/// As above with small blocks moving too (`relocation:merge_all`).
#[test]
fn statistics_match_the_snapshot_with_relocation_of_small_blocks() {
    statistics_match_the_snapshot(",relocation:merge_all", false);
}

fn statistics_match_the_snapshot(relocation: &str, exact_split_peaks: bool) {
    use crate::allocator::snapshot::BlockState;
    use crate::size::PoolKind;
    let (core, _src) = sim_core(8 * GIB, relocation.trim_start_matches(','));
    let streams = [stream(1).0, stream(2).0];
    let mut live: Vec<Allocation<SimBackend>> = Vec::new();
    let mut rnd = lcg(0x1234_5678);
    let mut peaks = [[0i64; 3]; 4];
    for step in 0..2000 {
        let r = rnd() % 100;
        if r < 50 || live.is_empty() {
            let size = match rnd() % 4 {
                0 => 1 + rnd() % 4096,
                1 => 1 + rnd() % (1 << 20),
                2 => (1 << 20) + rnd() % (12 << 20),
                _ => 1 + rnd() % (64 << 20),
            };
            let s = &streams[(rnd() % 2) as usize];
            live.push(core.alloc(size, s).unwrap());
        } else if r < 95 {
            let i = (rnd() as usize) % live.len();
            live.swap_remove(i);
        } else if r < 97 {
            let cfg = match rnd() % 3 {
                0 => "",
                1 => "roundup_power2_divisions:4",
                _ => "max_split_size_mb:40,roundup_power2_divisions:[256:2,>:8]",
            };
            let cfg = format!("{cfg}{relocation}");
            core.set_config(AllocConfig::parse(cfg.trim_start_matches(',')).unwrap());
        } else {
            core.empty_cache();
        }
        let stats = core.memory_stats();
        let snap = core.snapshot();
        // [allocated_bytes, allocation, inactive_split, inactive_split_bytes] x [all, small, large]
        let mut m = [[0i64; 3]; 4];
        let mut reserved = [0i64; 3];
        let mut requested = [0i64; 3];
        for seg in &snap {
            let p = if seg.pool == PoolKind::Small { 1 } else { 2 };
            for i in [0, p] {
                reserved[i] += seg.size as i64;
            }
            let split = seg.blocks.len() > 1;
            for b in &seg.blocks {
                for i in [0, p] {
                    match b.state {
                        BlockState::Allocated => {
                            m[0][i] += b.size as i64;
                            m[1][i] += 1;
                            requested[i] += b.requested as i64;
                        }
                        BlockState::Inactive if split => {
                            m[2][i] += 1;
                            m[3][i] += b.size as i64;
                        }
                        _ => {}
                    }
                }
            }
        }
        let arrays = [
            stats.allocated_bytes,
            stats.allocation,
            stats.inactive_split,
            stats.inactive_split_bytes,
        ];
        for (k, a) in arrays.iter().enumerate() {
            for (i, s) in [a.all, a.small_pool, a.large_pool].iter().enumerate() {
                assert_eq!(s.current, m[k][i], "step {step} stat {k} pool {i}");
                peaks[k][i] = peaks[k][i].max(m[k][i]);
                if exact_split_peaks || k < 2 {
                    assert_eq!(s.peak, peaks[k][i], "step {step} peak {k} pool {i}");
                } else {
                    assert!(s.peak >= peaks[k][i], "step {step} peak {k} pool {i}");
                    peaks[k][i] = s.peak;
                }
            }
        }
        for (i, s) in [
            stats.reserved_bytes.all,
            stats.reserved_bytes.small_pool,
            stats.reserved_bytes.large_pool,
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(s.current, reserved[i], "step {step} reserved {i}");
        }
        for (i, s) in [
            stats.requested_bytes.all,
            stats.requested_bytes.small_pool,
            stats.requested_bytes.large_pool,
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(s.current, requested[i], "step {step} requested {i}");
        }
        assert_eq!(stats.active_bytes.all.current, m[0][0]);
    }
    if !exact_split_peaks {
        assert!(
            core.relocation_stats().moves > 0,
            "the sequence moved blocks"
        );
    }
}

/// After four threads allocated on shared and own streams and freed each other's blocks
/// (and exited, their statistics cells retired), the currents equal the snapshot's figures.
#[test]
fn statistics_currents_match_the_snapshot_after_four_threads_allocate_and_free() {
    currents_match_the_snapshot_after_four_threads("");
}

/// As above with small blocks moving too (`relocation:merge_all`).
#[test]
fn statistics_currents_match_the_snapshot_after_four_threads_with_small_blocks_moving() {
    currents_match_the_snapshot_after_four_threads("relocation:merge_all");
}

fn currents_match_the_snapshot_after_four_threads(config: &str) {
    use crate::allocator::snapshot::BlockState;
    let (core, _src) = sim_core(16 * GIB, config);
    let shared: Arc<Mutex<Vec<Allocation<SimBackend>>>> = Arc::default();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let core = core.clone();
            let shared = shared.clone();
            std::thread::spawn(move || {
                let streams = [stream(1).0, stream(2 + t).0];
                let mut rnd = lcg(0x9876_5432 + t);
                for _ in 0..3000 {
                    let r = rnd() % 100;
                    if r < 55 {
                        let size = match rnd() % 3 {
                            0 => 1 + rnd() % 4096,
                            1 => 1 + rnd() % (1 << 20),
                            _ => 1 + rnd() % (24 << 20),
                        };
                        let a = core.alloc(size, &streams[(rnd() % 2) as usize]).unwrap();
                        shared.lock().push(a);
                    } else {
                        let mut v = shared.lock();
                        if !v.is_empty() {
                            let i = (rnd() as usize) % v.len();
                            let a = v.swap_remove(i);
                            drop(v);
                            drop(a);
                        }
                    }
                    if rnd() % 500 == 0 {
                        core.empty_cache();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = core.memory_stats();
    let snap = core.snapshot();
    let (mut alloc, mut n, mut split_n, mut split_b, mut reserved) = (0i64, 0i64, 0i64, 0i64, 0i64);
    for seg in &snap {
        reserved += seg.size as i64;
        for b in &seg.blocks {
            match b.state {
                BlockState::Allocated => {
                    alloc += b.size as i64;
                    n += 1;
                }
                BlockState::Inactive if seg.blocks.len() > 1 => {
                    split_n += 1;
                    split_b += b.size as i64;
                }
                _ => {}
            }
        }
    }
    assert_eq!(stats.allocated_bytes.all.current, alloc);
    assert_eq!(stats.active_bytes.all.current, alloc);
    assert_eq!(stats.allocation.all.current, n);
    assert_eq!(stats.inactive_split.all.current, split_n);
    assert_eq!(stats.inactive_split_bytes.all.current, split_b);
    assert_eq!(stats.reserved_bytes.all.current, reserved);
    assert_eq!(
        stats.allocation.all.allocated - stats.allocation.all.freed,
        n
    );
    shared.lock().clear();
    let stats = core.memory_stats();
    assert_eq!(stats.allocated_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
    core.empty_cache();
    let stats = core.memory_stats();
    assert_eq!(stats.reserved_bytes.all.current, 0);
    assert_eq!(stats.inactive_split.all.current, 0);
    assert_eq!(stats.inactive_split_bytes.all.current, 0);
}

/// A simulated source whose free does not wait for queued work (as SVM): the allocator
/// synchronizes the stream before freeing one of its segments.
struct FreeNeedsSync(SimulatedSource<Simulated>);

impl crate::source::SegmentSource for FreeNeedsSync {
    type Memory = Simulated;
    fn device(&self) -> usize {
        self.0.device()
    }
    fn name(&self) -> String {
        self.0.name()
    }
    fn total_memory(&self) -> u64 {
        self.0.total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.0.max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.0.base_addr_align()
    }
    fn free_needs_sync(&self) -> bool {
        true
    }
    fn allocate(
        &self,
        size: u64,
    ) -> Result<crate::source::SourceSegment<Simulated>, crate::source::SourceError> {
        self.0.allocate(size)
    }
    fn free(&self, segment: crate::source::SourceSegment<Simulated>) {
        self.0.free(segment);
    }
}

/// The synchronize before freeing a segment of a source whose free does not wait runs
/// without the stream's lock: while an allocation that released a cached oversize 100 MiB
/// segment (`max_split_size_mb:64`, 128 MiB device) waits for the stream's work, a cached
/// allocation on the same stream returns; the waiting one completes once the work does.
#[test]
fn a_cached_allocation_does_not_wait_for_a_synchronize_before_a_segment_free() {
    let source = FreeNeedsSync(SimulatedSource::new(0, 128 * MIB, 128 * MIB));
    let config = AllocConfig::parse("max_split_size_mb:64,release_policy:on_oom").unwrap();
    let core: CachingAllocator<TestBackend> = CachingAllocator::new(Box::new(source), config);
    let held = Arc::new(Held::default());
    let (tx, started) = mpsc::channel();
    *held.waiting.lock() = Some(tx);
    let h = Arc::new(TestStream::Held(StreamKey::new(0, 1), held.clone()));
    drop(core.alloc(100 * MIB, &h).unwrap());
    drop(core.alloc(MIB, &h).unwrap());
    let grow = {
        let (core, h) = (core.clone(), h.clone());
        std::thread::spawn(move || core.alloc(70 * MIB, &h).map(|p| p.allocated_size()))
    };
    // The growing thread is now synchronizing the stream before freeing the 100 MiB segment.
    started
        .recv_timeout(HANG)
        .expect("the release synchronizes the stream");
    let cached = {
        let (core, h) = (core.clone(), h.clone());
        returns(move || core.alloc(MIB, &h).map(|p| p.allocated_size()).ok())
    };
    held.release();
    assert_eq!(
        cached,
        Some(Some(MIB)),
        "the cached allocation returned while the stream was being synchronized"
    );
    assert_eq!(grow.join().unwrap().ok(), Some(70 * MIB));
    let st = core.memory_stats();
    assert_eq!(
        (
            st.num_device_free,
            st.segment.all.current,
            st.reserved_bytes.all.current
        ),
        (1, 2, 72 * (MIB as i64)),
        "the 100 MiB segment freed after the synchronize"
    );
}

/// `WeakShard::release_cached` (the device's `empty_cache` of a dropped private pool's shard)
/// waits for the shard's pending frees with no allocator lock held: while it waits for
/// stream B's work, a block of the same shard can be freed (before, the shard's lock was
/// held through the wait, so the free, and any allocation on the stream, waited for B).
#[test]
fn a_free_on_a_shard_does_not_wait_for_its_release_cached_waiting_on_device_work() {
    let core = core(64 * MIB);
    let (_, a) = sim(1);
    let held = Arc::new(Held::default());
    let (tx, started) = mpsc::channel();
    *held.waiting.lock() = Some(tx);
    let b = Arc::new(TestStream::Held(StreamKey::new(0, 2), held.clone()));
    let x = core.alloc(MIB, &a).unwrap();
    let y = core.alloc(MIB, &a).unwrap();
    core.record_stream(&x, &b).unwrap();
    drop(x);
    let weak = core.weak_shards();
    assert_eq!(weak.len(), 1);
    let releasing = std::thread::spawn(move || weak[0].release_cached());
    started
        .recv_timeout(HANG)
        .expect("release_cached waits for B");
    let freed = returns(move || drop(y));
    held.release();
    releasing.join().unwrap();
    assert!(
        freed.is_some(),
        "the free waited for release_cached's wait on stream B"
    );
    assert_eq!(core.memory_stats().allocated_bytes.all.current, 0);
}
