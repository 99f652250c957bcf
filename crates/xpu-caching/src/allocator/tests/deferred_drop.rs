//! Allocators built on another allocator's accounting (`with_setup`, `SharedState`,
//! `weak_shards`): what xpu-alloc's private pools are made of.

use std::sync::Arc;

use parking_lot::Mutex;

use super::{core, returns, sim, Held, TestBackend, TestStream, HANG, MIB};
use crate::allocator::{CachingAllocator, SharedState};
use crate::config::AllocConfig;
use crate::source::{SegmentSource, Simulated, SourceError, SourceSegment};
use crate::stream::StreamKey;

/// Segments of the parent's source, charged to the parent's reserved bytes and fraction.
struct Charged(SharedState<TestBackend>);

impl SegmentSource for Charged {
    type Memory = Simulated;
    fn device(&self) -> usize {
        self.0.device()
    }
    fn name(&self) -> String {
        self.0.source().name()
    }
    fn total_memory(&self) -> u64 {
        self.0.source().total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.0.source().max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.0.source().base_addr_align()
    }
    fn free_needs_sync(&self) -> bool {
        self.0.source().free_needs_sync()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment<Simulated>, SourceError> {
        self.0.allocate_segment_from(self.0.source(), size)
    }
    fn free(&self, segment: SourceSegment<Simulated>) {
        self.0.release_segment_to(self.0.source(), segment);
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Teardowns handed over by each test's allocator's shards (the hook is a plain `fn`, so
/// one static per test: tests run in parallel).
static JOBS: Mutex<Vec<Job>> = Mutex::new(Vec::new());
static JOBS_2: Mutex<Vec<Job>> = Mutex::new(Vec::new());

fn keep_job(job: Job) {
    JOBS.lock().push(job);
}

fn keep_job_2(job: Job) {
    JOBS_2.lock().push(job);
}

fn child_of(
    parent: &CachingAllocator<TestBackend>,
    hook: fn(Job),
) -> CachingAllocator<TestBackend> {
    let shared = parent.shared();
    let history = shared.history();
    CachingAllocator::with_setup(
        Box::new(Charged(shared)),
        AllocConfig::default(),
        history,
        Some(hook),
    )
}

#[test]
fn a_dropped_shard_hands_its_teardown_to_the_deferred_drop_hook_which_waits_for_the_stream() {
    let parent = core(612 * MIB);
    let child = child_of(&parent, keep_job);
    let held = Arc::new(Held::default());
    let s = Arc::new(TestStream::Held(StreamKey::new(0, 7), held.clone()));
    let x = child.alloc(12 * MIB, &s).unwrap();
    assert_eq!(x.owner_id(), child.id());
    assert_ne!(child.id(), parent.id());
    // The child's segment is charged to the parent's reserved bytes, not its statistics.
    assert_eq!(parent.shared().reserved(), 12 * MIB);
    assert_eq!(parent.memory_stats().reserved_bytes.all.current, 0);
    assert_eq!(
        child.memory_stats().reserved_bytes.all.current,
        12 * (MIB as i64)
    );

    let shards = child.weak_shards();
    assert_eq!(shards.len(), 1);
    drop(child);
    assert!(shards[0].is_live(), "the allocation keeps its shard");
    // The last allocation's drop drops the shard: it must return at once although the
    // stream's work is held, handing the teardown to the hook.
    let dropped = returns(move || drop(x));
    assert!(dropped.is_some(), "the drop waited for the device");
    assert!(!shards[0].is_live());
    let job = {
        let mut jobs = JOBS.lock();
        assert_eq!(jobs.len(), 1, "one teardown handed over");
        jobs.pop().unwrap()
    };
    assert_eq!(
        parent.shared().reserved(),
        12 * MIB,
        "released before the teardown ran"
    );

    // The teardown waits for the stream's work (Backend::wait), then releases the segment.
    let (tx, started) = std::sync::mpsc::channel();
    *held.waiting.lock() = Some(tx);
    let teardown = std::thread::spawn(job);
    started
        .recv_timeout(HANG)
        .expect("the teardown waits for the held stream");
    assert_eq!(
        parent.shared().reserved(),
        12 * MIB,
        "released before the work finished"
    );
    held.release();
    teardown.join().unwrap();
    assert_eq!(parent.shared().reserved(), 0);
}

#[test]
fn release_cached_of_a_dropped_allocators_shard_frees_its_unused_segments_and_keeps_live_ones() {
    let parent = core(64 * MIB);
    let child = child_of(&parent, keep_job_2);
    let (_, s) = sim(8);
    let x = child.alloc(12 * MIB, &s).unwrap();
    let y = child.alloc(16 * MIB, &s).unwrap();
    drop(y);
    assert_eq!(
        parent.shared().reserved(),
        28 * MIB,
        "y's segment stays cached"
    );
    let shards = child.weak_shards();
    drop(child);
    shards[0].release_cached();
    assert_eq!(parent.shared().reserved(), 12 * MIB, "x's segment is live");
    assert!(shards[0].is_live());
    drop(x);
    // The shard's teardown went to the hook (this test's allocator shares it).
    let jobs: Vec<Job> = std::mem::take(&mut *JOBS_2.lock());
    assert_eq!(jobs.len(), 1);
    for job in jobs {
        job();
    }
    assert_eq!(parent.shared().reserved(), 0);
}
