//! Stream-ordered correctness on the simulated backend: the OOM path drains pending frees
//! and searches the pool again before releasing cached segments; statistics readers never
//! wait for an allocation in progress; the oversize rule under every release policy.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{returns, sim_core, stream, MIB};
use crate::allocator::CachingAllocator;
use crate::config::AllocConfig;
use crate::sim_stream::SimBackend;
use crate::source::{
    HookedSource, SegmentSource, Simulated, SimulatedSource, SourceError, SourceHooks,
    SourceSegment,
};
use crate::stats::MemoryStats;

/// With a 64 MiB limit, a 40 MiB block next to a live 16 MiB block is freed after being
/// used on a gated stream: the next 40 MiB request must wait for the pending free and take
/// that very block (same address), not fail. With `split`, a 56 MiB segment is cached first,
/// so the two blocks share it; otherwise each has a segment of its own. `check` then gets
/// the allocator and its statistics from before the request.
fn oom_path_reuses_a_pending_40_mib_block(
    split: bool,
    check: impl FnOnce(&CachingAllocator<SimBackend>, &MemoryStats),
) {
    let (core, _) = sim_core(128 * MIB, "");
    core.set_memory_fraction(0.5).unwrap();
    let (_, a) = stream(1);
    let (b_sim, b) = stream(2);
    if split {
        drop(core.alloc(56 * MIB, &a).unwrap());
    }
    let x = core.alloc(40 * MIB, &a).unwrap();
    let _live = core.alloc(16 * MIB, &a).unwrap();
    let addr = x.address();
    let _gate = b_sim.close_gate(); // stream B's work on x is still queued
    core.record_stream(&x, &b).unwrap();
    drop(x);
    let before = core.memory_stats();
    let y = core
        .alloc(40 * MIB, &a)
        .expect("the pending 40 MiB block fits once B's work is done");
    assert_eq!(y.address(), addr, "the pending block itself is reused");
    check(&core, &before);
}

/// The block shares its segment with a live one: no segment allocated or released.
#[test]
fn oom_path_reuses_a_pending_block_of_a_split_segment_after_draining() {
    oom_path_reuses_a_pending_40_mib_block(true, |core, before| {
        let st = core.memory_stats();
        assert_eq!(
            (st.num_device_alloc, st.num_device_free),
            (before.num_device_alloc, before.num_device_free)
        );
        assert_eq!(core.memory_reserved(), 56 * MIB);
    });
}

/// The block alone in its segment: the request reuses that very block (no new segment, no
/// segment release).
#[test]
fn oom_path_reuses_a_pending_whole_segment_without_releasing_it() {
    oom_path_reuses_a_pending_40_mib_block(false, |core, _| {
        let st = core.memory_stats();
        assert_eq!(
            (
                st.num_device_alloc,
                st.num_device_free,
                st.segment.all.current
            ),
            (2, 0, 2),
            "no segment released, none allocated"
        );
    });
}

/// Hooks that read the allocator's statistics from inside the source's `allocate` and
/// `free`.
struct Reading {
    core: Arc<OnceLock<CachingAllocator<SimBackend>>>,
    seen: Arc<Mutex<Vec<i64>>>,
}

impl Reading {
    fn note(&self) {
        if let Some(core) = self.core.get() {
            self.seen
                .lock()
                .push(core.memory_stats().reserved_bytes.all.current);
        }
    }
}

impl SourceHooks<SimulatedSource> for Reading {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        self.note();
        inner.allocate(size)
    }
    fn free(&self, inner: &SimulatedSource, segment: SourceSegment<Simulated>) {
        self.note();
        inner.free(segment);
    }
}

#[test]
fn statistics_can_be_read_from_inside_a_segment_source() {
    let cell = Arc::new(OnceLock::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let source = HookedSource::new(
        SimulatedSource::new(0, 64 * MIB, 64 * MIB),
        Reading {
            core: cell.clone(),
            seen: seen.clone(),
        },
    );
    let core = CachingAllocator::new(Box::new(source), AllocConfig::default());
    let _ = cell.set(core.clone());
    let (_, s) = stream(1);
    let done = returns(move || {
        let p = core.alloc(20 * MIB, &s).unwrap();
        drop(p);
        core.empty_cache();
        core.memory_reserved()
    });
    assert_eq!(
        done,
        Some(0),
        "a statistics read inside the source callback returned"
    );
    assert_eq!(*seen.lock(), [0, 20 * (MIB as i64)]);
}

/// A source's `allocate` runs without the lock of the stream being grown: a hook may
/// allocate and free through the same allocator, on the same stream, without waiting for
/// itself.
#[test]
fn a_segment_source_may_allocate_through_its_allocator_on_the_stream_being_grown() {
    assert_eq!(
        nested_allocation(1),
        (Some((20 * MIB, 2, 0, 2)), vec![MIB]),
        "the outer allocation returned (not waiting for its own lock)"
    );
}

/// Hooks whose first `free` allocates (and frees) a block through the allocator that owns
/// the source, on the stream whose allocation released the segment.
struct NestedFree {
    core: Arc<OnceLock<CachingAllocator<SimBackend>>>,
    stream: Arc<crate::sim_stream::SimStream>,
    done: Mutex<Option<u64>>,
    entered: std::sync::atomic::AtomicBool,
}

impl SourceHooks<SimulatedSource> for NestedFree {
    fn free(&self, inner: &SimulatedSource, segment: SourceSegment<Simulated>) {
        if !self.entered.swap(true, std::sync::atomic::Ordering::SeqCst) {
            if let Some(core) = self.core.get() {
                let nested = core.alloc(MIB, &self.stream).unwrap();
                *self.done.lock() = Some(nested.allocated_size());
            }
        }
        inner.free(segment);
    }
}

/// Over a 128 MiB device with `config` (and the memory `fraction`), caches a `cached`-byte
/// block on a stream, then allocates `request` bytes there, which releases the cached
/// segment: the source's `free` (a [`NestedFree`] hook allocating 1 MiB through the
/// allocator on that stream) must not wait for the stream's lock. Asserts that the
/// allocation returned with `request` bytes, after one device free, with two segments left
/// (the nested allocation's 2 MiB small segment and the request's) holding `request` + 2 MiB,
/// and that the hook's nested allocation got its 1 MiB.
fn assert_a_release_during_an_allocation_may_allocate_through_it(
    config: &str,
    fraction: Option<f64>,
    cached: u64,
    request: u64,
) {
    let cell = Arc::new(OnceLock::new());
    let (_, s) = stream(1);
    let hooks = NestedFree {
        core: cell.clone(),
        stream: s.clone(),
        done: Mutex::new(None),
        entered: std::sync::atomic::AtomicBool::new(false),
    };
    let source = Arc::new(HookedSource::new(
        SimulatedSource::new(0, 128 * MIB, 128 * MIB),
        hooks,
    ));
    let config = AllocConfig::parse(config).unwrap();
    let core = CachingAllocator::new(Box::new(source.clone()), config);
    if let Some(f) = fraction {
        core.set_memory_fraction(f).unwrap();
    }
    let _ = cell.set(core.clone());
    let done = returns(move || {
        drop(core.alloc(cached, &s).unwrap());
        let p = core.alloc(request, &s).unwrap();
        let size = p.allocated_size();
        drop(p);
        let st = core.memory_stats();
        (
            size,
            st.num_device_free,
            st.segment.all.current,
            st.reserved_bytes.all.current,
        )
    });
    let reserved = i64::try_from(request + 2 * MIB).unwrap();
    assert_eq!(
        done,
        Some((request, 1, 2, reserved)),
        "the allocation returned (not waiting for its own lock)"
    );
    assert_eq!(*source.hooks().done.lock(), Some(MIB));
}

/// A source's `free` runs without the lock of the stream whose allocation releases cached
/// segments (here `max_split_size_mb:64` releases a cached oversize 100 MiB segment so a
/// 70 MiB one fits in 128 MiB): a hook may allocate and free through the same allocator,
/// on the same stream, without waiting for itself; reserved bytes drop once the segment is
/// freed (a 2 MiB small segment and the 70 MiB one stay).
#[test]
fn a_segment_source_may_allocate_through_its_allocator_while_a_release_frees_a_segment() {
    assert_a_release_during_an_allocation_may_allocate_through_it(
        "max_split_size_mb:64,release_policy:on_oom",
        None,
        100 * MIB,
        70 * MIB,
    );
}

/// The same under garbage collection: with a 64 MiB limit (fraction 0.5) and a 0.5
/// threshold, a cached 40 MiB segment (above the 32 MiB threshold) is collected when a
/// 50 MiB request misses the cache; its free allocates through the allocator.
#[test]
fn a_segment_source_may_allocate_through_its_allocator_while_garbage_collection_frees() {
    assert_a_release_during_an_allocation_may_allocate_through_it(
        "garbage_collection_threshold:0.5,release_policy:on_oom",
        Some(0.5),
        40 * MIB,
        50 * MIB,
    );
}

/// With `max_split_size_mb:64` a cached 100 MiB block does not serve a 70 MiB request (it
/// exceeds it by the 20 MiB tolerance or more), under every release policy, and a loop of
/// identical rounds reaches a steady state with no new segments.
#[test]
fn oversize_rule_holds_under_every_release_policy() {
    for policy in ["", ",release_policy:before_grow", ",release_policy:on_oom"] {
        let (core, _) = sim_core(1 << 40, &format!("max_split_size_mb:64{policy}"));
        let (_, s) = stream(1);
        drop(core.alloc(100 * MIB, &s).unwrap());
        let p = core.alloc(70 * MIB, &s).unwrap();
        assert_eq!(p.allocated_size(), 70 * MIB, "{policy}");
        drop(p);
        let after_first = core.memory_stats().num_device_alloc;
        for _ in 0..100 {
            let big = core.alloc(100 * MIB, &s).unwrap();
            let p = core.alloc(70 * MIB, &s).unwrap();
            assert_eq!(p.allocated_size(), 70 * MIB, "{policy}");
            drop((big, p));
        }
        let st = core.memory_stats();
        assert_eq!(
            (st.num_device_alloc, st.num_device_free),
            (after_first, 0),
            "steady state without new segments ({policy})"
        );
    }
}

/// Hooks whose `allocate` allocates a 1 MiB block through the allocator that owns the
/// source, on the stream being grown, while fewer than `depth` such calls are in progress on
/// this thread (each nested block needs a small segment of its own, so the nested
/// allocation calls the source, and so the hook, again).
struct NestedDeep {
    core: Arc<OnceLock<CachingAllocator<SimBackend>>>,
    stream: Arc<crate::sim_stream::SimStream>,
    depth: usize,
    active: std::sync::atomic::AtomicUsize,
    sizes: Mutex<Vec<u64>>,
}

impl SourceHooks<SimulatedSource> for NestedDeep {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.active.fetch_add(1, SeqCst) < self.depth {
            if let Some(core) = self.core.get() {
                let nested = core.alloc(MIB, &self.stream).unwrap();
                self.sizes.lock().push(nested.allocated_size());
            }
        }
        self.active.fetch_sub(1, SeqCst);
        inner.allocate(size)
    }
}

/// What [`nested_allocation`] observes: the outer block's size, allocations made, bytes still
/// allocated, segments held.
type Grown = (u64, i64, i64, i64);

/// A 20 MiB allocation (then freed) from an allocator over a 64 MiB simulated source whose
/// hooks nest up to `depth` allocations ([`NestedDeep`]): its size, the allocations made,
/// the bytes still allocated and the segments held (`None` if it did not return), and the
/// sizes of the nested blocks.
fn nested_allocation(depth: usize) -> (Option<Grown>, Vec<u64>) {
    let cell = Arc::new(OnceLock::new());
    let (_, s) = stream(1);
    let hooks = NestedDeep {
        core: cell.clone(),
        stream: s.clone(),
        depth,
        active: std::sync::atomic::AtomicUsize::new(0),
        sizes: Mutex::new(Vec::new()),
    };
    let source = Arc::new(HookedSource::new(
        SimulatedSource::new(0, 64 * MIB, 64 * MIB),
        hooks,
    ));
    let core = CachingAllocator::new(Box::new(source.clone()), AllocConfig::default());
    let _ = cell.set(core.clone());
    let done = returns(move || {
        let p = core.alloc(20 * MIB, &s).unwrap();
        let size = p.allocated_size();
        drop(p);
        let st = core.memory_stats();
        (
            size,
            st.allocation.all.allocated,
            st.allocated_bytes.all.current,
            st.segment.all.current,
        )
    });
    let nested = source.hooks().sizes.lock().clone();
    (done, nested)
}

/// A source's `allocate` may allocate through its allocator from inside an allocation that
/// the source itself serves (two nested allocator calls on one thread): neither waits for
/// the other.
#[test]
fn a_segment_source_may_allocate_through_its_allocator_two_levels_deep() {
    assert_eq!(
        nested_allocation(2),
        (Some((20 * MIB, 3, 0, 3)), vec![MIB, MIB]),
        "the outer allocation returned (no nested call waited for another)"
    );
}
