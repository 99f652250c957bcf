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
mod tests;
