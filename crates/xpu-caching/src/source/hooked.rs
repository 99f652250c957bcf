//! A pass-through source adaptor: another source, with hooks around its allocate and free.

use super::{SegmentSource, SourceError, SourceSegment};

/// What a [`HookedSource`] runs in place of its inner source's
/// [`SegmentSource::allocate`] and [`SegmentSource::free`]; each default forwards the call
/// unchanged, so an implementation overrides only the calls it observes.
///
/// A hook keeps the [`SegmentSource`] contract of the inner source: every segment it returns
/// from `allocate` comes from `inner.allocate`, and `free` passes each segment back to
/// `inner.free` exactly once, with the address and size `inner` gave it (a hook that moves
/// a segment's address, e.g. into a range of its own, moves it back first). The allocator
/// checks what it can: a segment of another size than asked, or overlapping a live segment
/// of the same source, is freed again and the allocation fails with a device error.
///
/// Hooks run where the allocator calls its source, outside the statistics write (so they
/// may read the allocator's statistics). Both run under no allocator lock, as any
/// [`SegmentSource`] is called: `allocate` when a stream grows, `free` when cached memory is
/// released (`empty_cache`, the OOM path, and the release policies, oversize releases or
/// garbage collection during an allocation: the segments are taken out of the stream's
/// cache under its lock and freed once it is released). Either may allocate, free or empty
/// the cache through the allocator that owns the source, on any stream.
pub trait SourceHooks<S: SegmentSource>: Send + Sync + 'static {
    /// Allocates a segment of exactly `size` bytes from `inner` (the default:
    /// `inner.allocate(size)`).
    ///
    /// # Errors
    /// Those of [`SegmentSource::allocate`], passed on from `inner`.
    fn allocate(&self, inner: &S, size: u64) -> Result<SourceSegment<S::Memory>, SourceError> {
        inner.allocate(size)
    }

    /// Returns `segment` to `inner` (the default: `inner.free(segment)`).
    fn free(&self, inner: &S, segment: SourceSegment<S::Memory>) {
        inner.free(segment);
    }
}

/// A segment source that forwards every call to an inner source `S`, running the hooks `H`
/// ([`SourceHooks`]) for `allocate` and `free`: a way to observe or adjust the segments a
/// source hands out (count them, log them, read the allocator's statistics at each
/// segment call) without writing a whole source, in the spirit of rmm's resource adaptors
/// (`callback_memory_resource`, `tracking_resource_adaptor`). The descriptive methods
/// (device, name, sizes, [`SegmentSource::free_memory`],
/// [`SegmentSource::free_needs_sync`]) are the inner source's.
///
/// To keep a handle on the hooks' state while an allocator owns the source, share the
/// adaptor itself (`Arc<HookedSource<S, H>>` is a source) and read it through
/// [`HookedSource::hooks`].
#[derive(Debug)]
pub struct HookedSource<S, H> {
    inner: S,
    hooks: H,
}

impl<S, H> HookedSource<S, H> {
    /// `inner`, with `hooks` run for its segment allocations and frees.
    #[must_use]
    pub fn new(inner: S, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The wrapped source.
    #[must_use]
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hooks (and whatever state they keep).
    #[must_use]
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

impl<S: SegmentSource, H: SourceHooks<S>> SegmentSource for HookedSource<S, H> {
    type Memory = S::Memory;
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
    fn free_memory(&self) -> Option<u64> {
        self.inner.free_memory()
    }
    fn free_needs_sync(&self) -> bool {
        self.inner.free_needs_sync()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment<S::Memory>, SourceError> {
        self.hooks.allocate(&self.inner, size)
    }
    fn free(&self, segment: SourceSegment<S::Memory>) {
        self.hooks.free(&self.inner, segment);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use std::sync::Arc;

    use super::{HookedSource, SourceHooks};
    use crate::allocator::CachingAllocator;
    use crate::config::AllocConfig;
    use crate::error::CacheError;
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
            let mut segment = inner.allocate(size)?;
            segment.address += SHIFT;
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
        assert_eq!(source.inner().used(), 4 << 20);
        source.free(segment);
        assert_eq!(source.hooks().freed.load(Ordering::SeqCst), 4 << 20);
        assert_eq!(source.inner().used(), 0, "handed back to the inner source");
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
            CacheError::Device(format!(
                "the segment source returned a segment of {} bytes for a request of {} bytes",
                10 << 20,
                20 << 20
            ))
        );
        assert_eq!(
            (source.inner().used(), source.inner().live_segments()),
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
            let mut segment = inner.allocate(size)?;
            segment.address = 1 << 40;
            Ok(segment)
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
        assert_eq!(b_ok, Err(CacheError::Device(message)));
        assert_eq!(active, 20 << 20, "one block handed out once");
        assert_eq!(
            source.inner().live_segments(),
            1,
            "the refused one went back"
        );
        cache.empty_cache();
        assert_eq!(source.inner().used(), 0);
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
        assert_eq!(
            (source.inner().used(), source.inner().live_segments()),
            (2 << 20, 1)
        );
        source.free(segment);
        assert_eq!(
            (source.inner().used(), source.inner().live_segments()),
            (0, 0)
        );
    }
}
