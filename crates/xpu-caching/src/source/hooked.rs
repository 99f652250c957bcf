//! A pass-through source adaptor: another source, with hooks around its allocate and free
//! and its size queries.

use super::{SegmentSource, SourceError, SourceSegment};

/// What a [`HookedSource`] runs in place of its inner source's
/// [`SegmentSource::allocate`] and [`SegmentSource::free`], of its size queries
/// [`SegmentSource::total_memory`] and [`SegmentSource::max_alloc_size`], and of
/// [`SegmentSource::splits_segments`]; each default
/// forwards the call unchanged, so an implementation overrides only the calls it observes or
/// adjusts.
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
/// the cache through the allocator that owns the source, on any stream. The size queries
/// run where the allocator asks its source (`max_alloc_size` once, when an allocator or a
/// pool is built on the source; `total_memory` for the memory fraction, `mem_get_info`
/// and the out-of-memory report), also under no allocator lock.
pub trait SourceHooks<S: SegmentSource>: Send + Sync + 'static {
    /// The device's memory in bytes that the source reports (the default:
    /// `inner.total_memory()`).
    fn total_memory(&self, inner: &S) -> u64 {
        inner.total_memory()
    }

    /// The largest segment in bytes that the source reports it can allocate (the default:
    /// `inner.max_alloc_size()`).
    fn max_alloc_size(&self, inner: &S) -> u64 {
        inner.max_alloc_size()
    }

    /// Whether the allocator may split the source's segments (the default:
    /// `inner.splits_segments()`; see [`SegmentSource::splits_segments`], asked once when an
    /// allocator is built over the source).
    fn splits_segments(&self, inner: &S) -> bool {
        inner.splits_segments()
    }

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
/// ([`SourceHooks`]) for `allocate`, `free` and the size queries (`total_memory`,
/// `max_alloc_size`): a way to observe or adjust the segments a source hands out (count
/// them, log them, read the allocator's statistics at each segment call) or the sizes it
/// reports without writing a whole source, in the spirit of rmm's resource adaptors
/// (`callback_memory_resource`, `tracking_resource_adaptor`). The other descriptive
/// methods (device, name, [`SegmentSource::base_addr_align`],
/// [`SegmentSource::free_memory`], [`SegmentSource::free_needs_sync`]) are the inner
/// source's.
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
        self.hooks.total_memory(&self.inner)
    }
    fn max_alloc_size(&self) -> u64 {
        self.hooks.max_alloc_size(&self.inner)
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
    fn splits_segments(&self) -> bool {
        self.hooks.splits_segments(&self.inner)
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment<S::Memory>, SourceError> {
        self.hooks.allocate(&self.inner, size)
    }
    fn free(&self, segment: SourceSegment<S::Memory>) {
        self.hooks.free(&self.inner, segment);
    }
}

#[cfg(test)]
mod tests;
