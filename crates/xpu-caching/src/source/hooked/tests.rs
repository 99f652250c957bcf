//! Tests of [`HookedSource`](super::HookedSource): forwarding, and the allocator refusing
//! segments that break the source contract.

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

use super::{HookedSource, SourceHooks};
use crate::allocator::CachingAllocator;
use crate::config::AllocConfig;
use crate::error::{CacheError, DeviceFailure};
use crate::sim_stream::{SimBackend, SimStream};
use crate::source::{SegmentSource, Simulated, SimulatedSource, SourceError, SourceSegment};
use crate::stream::StreamKey;

/// An allocator over a simulated source of `capacity` bytes (segments of at most 64 MiB)
/// behind `hooks`, and a stream of device 0.
#[allow(clippy::type_complexity)]
fn cache_over<H: SourceHooks<SimulatedSource> + 'static>(
    capacity: u64,
    hooks: H,
) -> (
    Arc<HookedSource<SimulatedSource, H>>,
    CachingAllocator<SimBackend>,
    Arc<SimStream>,
) {
    let source = Arc::new(HookedSource::new(
        SimulatedSource::new(0, capacity, 64 << 20),
        hooks,
    ));
    let cache = CachingAllocator::new(Box::new(source.clone()), AllocConfig::default());
    (source, cache, SimStream::new(StreamKey::new(0, 1)))
}

/// A segment of `size` bytes from `inner`, its address moved to `to(address)` (what a hook
/// that places segments in a range of its own does).
fn allocate_moved(
    inner: &SimulatedSource,
    size: u64,
    to: impl FnOnce(u64) -> u64,
) -> Result<SourceSegment<Simulated>, SourceError> {
    let mut segment = inner.allocate(size)?;
    segment.address = to(segment.address);
    Ok(segment)
}

/// Counts calls, and moves addresses by `SHIFT` on the way out and back.
#[derive(Default)]
struct Shift {
    allocs: AtomicU64,
    freed: AtomicU64,
}

const SHIFT: u64 = 1 << 60;

impl SourceHooks<SimulatedSource> for Shift {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        let segment = allocate_moved(inner, size, |address| address + SHIFT)?;
        self.allocs.fetch_add(1, Ordering::SeqCst);
        Ok(segment)
    }
    fn free(&self, inner: &SimulatedSource, mut segment: SourceSegment<Simulated>) {
        self.freed.fetch_add(segment.size, Ordering::SeqCst);
        segment.address -= SHIFT;
        inner.free(segment);
    }
}

/// No hook overridden: the adaptor is the inner source.
struct Plain;
impl SourceHooks<SimulatedSource> for Plain {}

#[test]
fn a_hooked_source_describes_itself_as_its_inner_source_and_runs_its_hooks() {
    let source = HookedSource::new(
        SimulatedSource::new(3, 64 << 20, 32 << 20),
        Shift::default(),
    );
    let plain: SimulatedSource = SimulatedSource::new(3, 64 << 20, 32 << 20);
    assert_eq!(
        (
            source.device(),
            source.name(),
            source.total_memory(),
            source.max_alloc_size(),
            source.base_addr_align(),
            source.free_memory(),
            source.free_needs_sync(),
        ),
        (
            plain.device(),
            plain.name(),
            plain.total_memory(),
            plain.max_alloc_size(),
            plain.base_addr_align(),
            plain.free_memory(),
            plain.free_needs_sync(),
        )
    );
    let segment = source.allocate(4 << 20).unwrap();
    let unhooked = plain.allocate(4 << 20).unwrap();
    assert_eq!(
        segment.address,
        unhooked.address + SHIFT,
        "moved by the hook"
    );
    assert_eq!(source.hooks().allocs.load(Ordering::SeqCst), 1);
    assert_eq!(source.inner().counters().used, 4 << 20);
    source.free(segment);
    assert_eq!(source.hooks().freed.load(Ordering::SeqCst), 4 << 20);
    assert_eq!(
        source.inner().counters().used,
        0,
        "handed back to the inner source"
    );
    assert_eq!(
        source.allocate(64 << 20).unwrap_err(),
        SourceError::OutOfMemory,
        "the inner source's errors pass through"
    );
    assert_eq!(source.hooks().allocs.load(Ordering::SeqCst), 1);
}

/// Hands out half of what was asked (a broken contract a safe hook can write).
struct Short;
impl SourceHooks<SimulatedSource> for Short {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        inner.allocate(size / 2)
    }
}

/// An allocator over a source that returns a segment of another size than it asked for
/// reports a device error (and hands the segment back) instead of carving blocks past
/// the segment's end or panicking.
#[test]
fn a_segment_of_the_wrong_size_is_refused_and_returned_to_the_source() {
    let (source, cache, stream) = cache_over(64 << 20, Short);
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache
            .allocate(20 << 20, &stream)
            .map(|a| a.map(|a| a.allocated_size()))
    }))
    .expect("allocate must not panic")
    .expect_err("a short segment must not be used");
    assert_eq!(
        err,
        CacheError::Device(DeviceFailure::message(format!(
            "the segment source returned a segment of {} bytes for a request of {} bytes",
            10 << 20,
            20 << 20
        )))
    );
    let held = source.inner().counters();
    assert_eq!(
        (held.used, held.live_segments),
        (0, 0),
        "returned to the source"
    );
    let stats = cache.memory_stats();
    assert_eq!(stats.reserved_bytes.all.current, 0);
    assert_eq!(stats.allocated_bytes.all.current, 0);
}

/// Gives every segment the same address (a broken contract a safe hook can write).
struct SameAddress;
impl SourceHooks<SimulatedSource> for SameAddress {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        allocate_moved(inner, size, |_| 1 << 40)
    }
}

/// A segment whose address range overlaps a live segment of the same allocator is
/// refused (freed again, a device error): blocks are told apart by address, so two
/// blocks at one address would let a free take the other's pool entry and the pool hand
/// one block out twice. Run in a child: the broken pool panics in a drop (an abort).
#[test]
fn a_segment_overlapping_a_live_one_is_refused_and_returned_to_the_source() {
    const CHILD: &str = "XPU_CACHING_OVERLAP_SCENARIO";
    if std::env::var_os(CHILD).is_some() {
        overlapping_segment_scenario();
        println!("SCENARIO PASSED");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "source::hooked::tests::\
             a_segment_overlapping_a_live_one_is_refused_and_returned_to_the_source",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("re-run the test binary");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("SCENARIO PASSED"),
        "child: {:?}\n{stdout}\n{stderr}",
        out.status
    );
}

fn overlapping_segment_scenario() {
    let (source, cache, stream) = cache_over(128 << 20, SameAddress);
    let a = cache.allocate(20 << 20, &stream).unwrap().unwrap();
    let b = cache.allocate(20 << 20, &stream);
    let b_ok = b.as_ref().map(Option::is_some).map_err(Clone::clone);
    drop((a, b));
    let x = cache.allocate(20 << 20, &stream).unwrap().unwrap();
    let y = cache.allocate(20 << 20, &stream);
    let active = cache.memory_stats().active_bytes.all.current;
    drop((x, y));
    let message = format!(
        "the segment source returned a segment at {:#x} of {} bytes overlapping the live \
         segment at {:#x} of {} bytes",
        1u64 << 40,
        20 << 20,
        1u64 << 40,
        20 << 20
    );
    assert_eq!(
        b_ok,
        Err(CacheError::Device(DeviceFailure::message(message)))
    );
    assert_eq!(active, 20 << 20, "one block handed out once");
    assert_eq!(
        source.inner().counters().live_segments,
        1,
        "the refused one went back"
    );
    cache.empty_cache();
    assert_eq!(source.inner().counters().used, 0);
    let stats = cache.memory_stats();
    assert_eq!(stats.reserved_bytes.all.current, 0);
    assert_eq!(stats.active_bytes.all.current, 0);
}

#[test]
fn default_hooks_forward_allocate_and_free_unchanged() {
    let source = HookedSource::new(SimulatedSource::new(0, 8 << 20, 8 << 20), Plain);
    let plain: SimulatedSource = SimulatedSource::new(0, 8 << 20, 8 << 20);
    let segment = source.allocate(2 << 20).unwrap();
    assert_eq!(segment.address, plain.allocate(2 << 20).unwrap().address);
    let held = source.inner().counters();
    assert_eq!((held.used, held.live_segments), (2 << 20, 1));
    source.free(segment);
    let held = source.inner().counters();
    assert_eq!((held.used, held.live_segments), (0, 0));
}

/// Reports half the inner source's largest segment and a total of 100 MiB.
struct Sizes;
impl SourceHooks<SimulatedSource> for Sizes {
    fn total_memory(&self, _inner: &SimulatedSource) -> u64 {
        100 << 20
    }
    fn max_alloc_size(&self, inner: &SimulatedSource) -> u64 {
        inner.max_alloc_size() / 2
    }
}

#[test]
fn the_allocator_sees_the_sizes_a_hook_reports() {
    let (source, cache, stream) = cache_over(256 << 20, Sizes);
    assert_eq!(source.max_alloc_size(), 32 << 20);
    assert_eq!(
        cache.mem_get_info().1,
        100 << 20,
        "the total the hook reports"
    );
    let err = cache.allocate(48 << 20, &stream).unwrap_err();
    assert!(
        matches!(
            err,
            CacheError::TooLarge {
                requested,
                max,
                ..
            } if requested == 48 << 20 && max == 32 << 20
        ),
        "{err:?}"
    );
    assert_eq!(
        source.inner().counters().used,
        0,
        "refused without asking the inner source"
    );
    let block = cache.allocate(32 << 20, &stream).unwrap();
    assert!(block.is_some());
}

/// Panics in its first `allocate` (a user's hook with a bug), then forwards.
#[derive(Default)]
struct PanicsOnce {
    calls: AtomicU64,
}
impl SourceHooks<SimulatedSource> for PanicsOnce {
    fn allocate(
        &self,
        inner: &SimulatedSource,
        size: u64,
    ) -> Result<SourceSegment<Simulated>, SourceError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a segment source hook panicked");
        }
        inner.allocate(size)
    }
}

/// A source whose `allocate` panics leaves nothing charged: the bytes reserved for the
/// segment before the call are given back as the panic unwinds, so `mem_get_info`, the
/// memory fraction and the release policy's high-water mark see none of them, and an
/// allocation the fraction allows still succeeds afterwards.
#[test]
fn a_panicking_source_leaves_no_reserved_bytes_charged() {
    let (source, cache, stream) = cache_over(64 << 20, PanicsOnce::default());
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.allocate(40 << 20, &stream).map(|a| a.is_some())
    }));
    assert!(unwound.is_err(), "the hook's panic reaches the caller");
    assert_eq!(cache.reserved_bytes(), 0, "reserved bytes left charged");
    assert_eq!(cache.mem_get_info(), (64 << 20, 64 << 20));
    cache.set_memory_fraction(0.75).unwrap();
    let a = cache
        .allocate(40 << 20, &stream)
        .expect("40 MiB of the 48 MiB the fraction allows")
        .expect("non-empty");
    assert_eq!(a.allocated_size(), 40 << 20);
    drop(a);
    cache.empty_cache();
    assert_eq!(cache.reserved_bytes(), 0);
    assert_eq!(source.inner().counters().live_segments, 0);
    let stats = cache.memory_stats();
    assert_eq!(stats.reserved_bytes.all.current, 0);
    assert_eq!(stats.allocated_bytes.all.current, 0);
}
