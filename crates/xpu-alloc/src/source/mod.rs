//! The segment sources of the device allocator: the seam ([`SegmentSource`], from
//! `xpu-caching`) with this crate's memory type [`SegmentMemory`], the OpenCL
//! [`BufferSource`] and the simulated source over the same memory type.

mod buffer;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use xpu_device::backend::Buffer;

pub use buffer::{device_splits_segments, sub_buffers_safe_on, BufferSource};
pub use xpu_caching::source::{
    DeviceFailure, Fault, HookedSource, RecordedSegment, SegmentSource, Simulated,
    SimulatedCounters, SourceError, SourceHooks,
};

/// The memory behind one segment, as the source created it.
#[derive(Debug)]
pub enum SegmentMemory {
    /// No real memory (simulated source): only the segment's place, which bounds a
    /// simulated copy's ranges.
    Simulated(Simulated),
    /// An OpenCL buffer, and the sub-buffers made of it for allocations used as kernel
    /// arguments. Opaque: made only by [`SegmentMemory::buffer`] from an exclusive buffer,
    /// and the buffer is never handed back to code outside this crate, so that no safe code
    /// gives the allocator a buffer that something else also uses, nor keeps one it handed
    /// over.
    Buffer(BufferMemory),
}

/// The OpenCL memory behind a segment ([`SegmentMemory::Buffer`]).
#[derive(Debug)]
pub struct BufferMemory {
    /// The sub-buffers of this segment, by (offset, size) in bytes (dropped first: released
    /// before the buffer).
    sub_buffers: SubBuffers,
    /// The segment's buffer (shared with the allocations that pass it to kernels and
    /// views, so that neither costs a `clRetainMemObject`).
    buffer: Arc<xpu_device::backend::Buffer>,
}

impl BufferMemory {
    /// The buffer's size in bytes.
    #[must_use]
    pub fn size(&self) -> usize {
        self.buffer.size()
    }

    /// The segment's buffer.
    pub(crate) fn buffer(&self) -> &Arc<xpu_device::backend::Buffer> {
        &self.buffer
    }

    /// The sub-buffers made of it.
    pub(crate) fn sub_buffers(&self) -> &SubBuffers {
        &self.sub_buffers
    }

    /// The buffer, for the segment's owner alone: `None` while anything else shares it
    /// (an allocator's allocations, a sub-buffer). Only who holds the segment by value or
    /// `&mut` (a source before it hands the segment out or after it got it back, a test)
    /// reaches this.
    fn owned(&mut self) -> Option<&xpu_device::backend::Buffer> {
        if !self.sub_buffers.is_empty() {
            return None;
        }
        Arc::get_mut(&mut self.buffer).map(|b| &*b)
    }

    /// Blocking write of `data` at byte `offset` of the buffer on `queue`
    /// (`clEnqueueWriteBuffer`), by the segment's owner (`&mut` access, the buffer shared
    /// with nothing).
    ///
    /// # Errors
    /// `InvalidArgument` while the buffer is shared; as `CommandQueue::write` otherwise.
    pub fn write(
        &mut self,
        queue: &xpu_device::backend::CommandQueue,
        offset: usize,
        data: &[u8],
    ) -> Result<(), xpu_device::DeviceError> {
        let buffer = self.owned().ok_or_else(shared_buffer)?;
        queue.write(buffer, offset, data)
    }

    /// Blocking read into `out` from byte `offset` of the buffer on `queue`
    /// (`clEnqueueReadBuffer`), by the segment's owner, as [`BufferMemory::write`].
    ///
    /// # Errors
    /// As [`BufferMemory::write`].
    pub fn read(
        &mut self,
        queue: &xpu_device::backend::CommandQueue,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), xpu_device::DeviceError> {
        let buffer = self.owned().ok_or_else(shared_buffer)?;
        queue.read(buffer, offset, out)
    }
}

fn shared_buffer() -> xpu_device::DeviceError {
    xpu_device::DeviceError::InvalidArgument(
        "a segment's buffer is read or written by its owner only, while nothing shares it"
            .to_owned(),
    )
}

impl SegmentMemory {
    /// A segment of `buffer`, no sub-buffers made yet. The buffer is exclusive
    /// ([`ExclusiveBuffer`](xpu_device::backend::ExclusiveBuffer)): nothing else reads or
    /// writes it behind the allocations carved out of the segment. The allocator refuses a
    /// buffer smaller than the segment's size when a source returns it.
    #[must_use]
    pub fn buffer(buffer: xpu_device::backend::ExclusiveBuffer) -> SegmentMemory {
        SegmentMemory::Buffer(BufferMemory {
            sub_buffers: SubBuffers::default(),
            buffer: Arc::new(buffer.into_buffer()),
        })
    }
}

/// The most sub-buffers kept per segment; past it, a new (offset, size) gets a sub-buffer of
/// its own, not cached, released when its allocation drops. A training loop's block layout
/// repeats, so the cache holds what the loop uses.
pub const SUB_BUFFERS_PER_SEGMENT: usize = 1024;

/// The sub-buffers of one segment (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1) by (offset, size),
/// shared by every allocation that lands on the same bytes: a block reused for a same-sized
/// request costs no `clCreateSubBuffer` and its free no `clReleaseMemObject`. They live as
/// long as the segment and are released when the segment is returned to the driver
/// (`empty_cache`, the release of cached segments on out-of-memory), before its buffer, when
/// no command on the segment is queued any more. Sharing one is sound as sharing the segment
/// is: a sub-buffer is a view of the segment's bytes, and the caching allocator reuses those
/// bytes only after every recorded use completed (stream order); commands in flight hold
/// their own references (§5.5.1).
///
/// # Making a sub-buffer over bytes used before
/// A sub-buffer is made only while no command may still use its bytes through another
/// `cl_mem`, and no sub-buffer of the same bytes is released at the same time:
/// - a new (offset, size) that overlaps a cached sub-buffer's bytes, or any new one once the
///   cache is full, first waits for its allocation stream (the only stream whose commands on
///   these bytes may still run: uses on other streams were waited for before the block was
///   handed out);
/// - sub-buffers are made under this cache's lock, one at a time per segment;
/// - a cached sub-buffer is never released while the segment lives, and an uncached one is
///   released by its allocation before the block goes back to the allocator (`Live`'s field
///   order in `data_ptr.rs`), so never while another allocation could make one of its bytes.
///
/// The segment's own buffer, passed for a block that is its whole segment
/// (`SubBuffers::whole`), follows these rules as a sub-buffer of all its bytes.
///
/// OpenCL orders an in-order queue's commands whatever buffers they name (§5.1), so on a
/// conforming driver the wait is only lost time on a cache miss. NVIDIA's driver (H200,
/// driver 580) needs it: with threads sharing a queue and a segment, a sub-buffer made over
/// bytes that an earlier command still used through another sub-buffer ran before that
/// command (wrong values) or crashed the driver's own thread (SIGSEGV), and so did making one
/// while another thread released a sub-buffer of the same bytes. The raw-OpenCL reduction is
/// `ci/diag/nvidia_subbuffer_repro.c` (mode `acd` is these rules: 3 of 3 runs clean, where
/// `ac`, `aw` and `ad` crashed). These rules were not enough for burn's suite, so kernels no
/// longer take blocks as sub-buffers: a kernel built with offset parameters (every program
/// `Program::build` compiles) takes the segment's buffer and the block's byte offset. Only a
/// kernel built as written makes sub-buffers, and on NVIDIA's platform
/// ([`buffer::sub_buffers_safe_on`]) it is refused a block that is not its whole segment.
#[derive(Debug, Default)]
pub struct SubBuffers(parking_lot::Mutex<BTreeMap<(usize, usize), Arc<Buffer>>>);

impl SubBuffers {
    /// The sub-buffer of `parent` (this segment's buffer) for `size` bytes at `offset`: the
    /// allocation's own (`slot`), the cached one, or a new one, cached unless the cache is
    /// full and stored in `slot` under the cache's lock (so that threads making an
    /// allocation's first use at once get one sub-buffer, never a second one of the same
    /// bytes released at once). `wait_idle` is called, under no lock, before a sub-buffer is
    /// made over bytes that another one covered (or whenever the cache is full); it must
    /// return once no command enqueued before it can use the allocation's bytes (see the
    /// type's docs).
    ///
    /// # Errors
    /// As [`Buffer::sub_buffer`]; `wait_idle`'s error.
    pub(crate) fn get_or_create<E: From<xpu_device::DeviceError>>(
        &self,
        parent: &Buffer,
        offset: usize,
        size: usize,
        slot: &OnceLock<Arc<Buffer>>,
        wait_idle: impl FnOnce() -> Result<(), E>,
    ) -> Result<Arc<Buffer>, E> {
        self.get_or_make((offset, size), slot, wait_idle, || {
            parent.sub_buffer(offset, size)
        })
    }

    /// The handle of a block that is its whole segment: `parent` itself (one retained
    /// reference, no `clCreateSubBuffer`), kept and waited for as a sub-buffer of the whole
    /// buffer (key (0, the buffer's size)): taken after `wait_idle` when a cached sub-buffer
    /// covers some of its bytes (or the cache is full), and a later sub-buffer over these
    /// bytes waits as after any other (see [`SubBuffers::get_or_create`]).
    ///
    /// # Errors
    /// `wait_idle`'s error.
    pub(crate) fn whole<E: From<xpu_device::DeviceError>>(
        &self,
        parent: &Buffer,
        slot: &OnceLock<Arc<Buffer>>,
        wait_idle: impl FnOnce() -> Result<(), E>,
    ) -> Result<Arc<Buffer>, E> {
        self.get_or_make((0, parent.size()), slot, wait_idle, || Ok(parent.clone()))
    }

    /// [`SubBuffers::get_or_create`] for the bytes `key` ((offset, size)), whose handle
    /// `make` makes.
    fn get_or_make<E: From<xpu_device::DeviceError>>(
        &self,
        (offset, size): (usize, usize),
        slot: &OnceLock<Arc<Buffer>>,
        wait_idle: impl FnOnce() -> Result<(), E>,
        make: impl FnOnce() -> Result<Buffer, xpu_device::DeviceError>,
    ) -> Result<Arc<Buffer>, E> {
        let must_wait = {
            let map = self.0.lock();
            if let Some(b) = map.get(&(offset, size)) {
                return Ok(Arc::clone(b));
            }
            map.len() >= SUB_BUFFERS_PER_SEGMENT || overlaps(&map, offset, size)
        };
        if must_wait {
            wait_idle()?;
        }
        let mut map = self.0.lock();
        if let Some(b) = slot.get().or_else(|| map.get(&(offset, size))) {
            return Ok(Arc::clone(b));
        }
        // Made under the lock and stored in the allocation's slot under it: never two of the
        // same bytes at once, and a concurrent first use of the same allocation finds it.
        let sub = Arc::new(make()?);
        if map.len() < SUB_BUFFERS_PER_SEGMENT {
            map.insert((offset, size), Arc::clone(&sub));
        }
        let _ = slot.set(Arc::clone(&sub));
        Ok(sub)
    }

    /// The number of sub-buffers cached.
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether none is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a cached sub-buffer covers any of the `size` bytes at `offset`: a scan of the
/// cached ranges that start before the end (at most [`SUB_BUFFERS_PER_SEGMENT`], on a cache
/// miss only).
fn overlaps(map: &BTreeMap<(usize, usize), Arc<Buffer>>, offset: usize, size: usize) -> bool {
    let end = offset.saturating_add(size);
    map.range(..(end, 0))
        .rev()
        .any(|(&(o, s), _)| o < end && o.saturating_add(s) > offset)
}

impl From<Simulated> for SegmentMemory {
    fn from(memory: Simulated) -> Self {
        Self::Simulated(memory)
    }
}

/// One segment of this crate's sources.
pub type SourceSegment = xpu_caching::source::SourceSegment<SegmentMemory>;

/// A simulated device whose segments are [`SegmentMemory::Simulated`] (see
/// [`xpu_caching::source::SimulatedSource`]).
pub type SimulatedSource = xpu_caching::source::SimulatedSource<SegmentMemory>;

/// A segment source of this crate's memory type, as a [`crate::DeviceCore`] holds it.
pub type DynSource = dyn SegmentSource<Memory = SegmentMemory>;

#[cfg(test)]
mod tests {
    //! When the cache waits before making a sub-buffer (on a real OpenCL buffer; skipped
    //! without a device unless `XPU_REQUIRE_DEVICE=1`).

    use std::cell::Cell;

    use xpu_device::backend::{Buffer, MemFlags};

    use super::{SubBuffers, SUB_BUFFERS_PER_SEGMENT};

    /// A buffer of `bytes` on device 0 and the device's sub-buffer origin alignment in bytes
    /// (at least 512, the allocator's block alignment).
    fn segment(bytes: usize) -> Option<(Buffer, usize)> {
        match xpu_device::device(0) {
            Ok(d) => Some((
                Buffer::new(d.context().unwrap(), bytes, MemFlags::default()).unwrap(),
                usize::try_from(d.properties().mem_base_addr_align.max(512)).unwrap(),
            )),
            Err(e) => {
                assert!(std::env::var_os("XPU_REQUIRE_DEVICE").is_none(), "{e}");
                None
            }
        }
    }

    /// A 64 KiB [`segment`], its alignment, an empty cache and a wait counter at 0.
    fn scene() -> Option<(Buffer, usize, SubBuffers, Cell<u32>)> {
        let (parent, align) = segment(1 << 16)?;
        Some((parent, align, SubBuffers::default(), Cell::new(0)))
    }

    /// `get_or_create` with a wait that counts its calls and answers `ok`.
    fn get(
        cache: &SubBuffers,
        parent: &Buffer,
        at: (usize, usize),
        waits: &Cell<u32>,
        ok: bool,
    ) -> Result<usize, xpu_device::DeviceError> {
        cache
            .get_or_create(parent, at.0, at.1, &std::sync::OnceLock::new(), || {
                waits.set(waits.get() + 1);
                if ok {
                    Ok(())
                } else {
                    Err(xpu_device::DeviceError::BadFork)
                }
            })
            .map(|b| b.size())
    }

    #[test]
    fn a_sub_buffer_over_bytes_another_covered_is_made_after_the_wait_and_only_then() {
        let Some((parent, align, cache, waits)) = scene() else {
            return;
        };
        // Fresh bytes: no wait.
        assert_eq!(
            get(&cache, &parent, (0, 2 * align), &waits, true),
            Ok(2 * align)
        );
        assert_eq!(waits.get(), 0);
        // The same (offset, size): the cached one, no wait.
        assert_eq!(
            get(&cache, &parent, (0, 2 * align), &waits, true),
            Ok(2 * align)
        );
        assert_eq!(waits.get(), 0);
        // Bytes beside it: no wait.
        assert_eq!(
            get(&cache, &parent, (2 * align, align), &waits, true),
            Ok(align)
        );
        assert_eq!(waits.get(), 0);
        // Inside the first, at its start and past it: one wait each.
        assert_eq!(get(&cache, &parent, (0, align), &waits, true), Ok(align));
        assert_eq!(waits.get(), 1);
        assert_eq!(
            get(&cache, &parent, (align, 2 * align), &waits, true),
            Ok(2 * align)
        );
        assert_eq!(waits.get(), 2);
        assert_eq!(cache.len(), 4);
        // A failed wait makes nothing and caches nothing; the next try waits again.
        assert_eq!(
            get(&cache, &parent, (align, align), &waits, false),
            Err(xpu_device::DeviceError::BadFork)
        );
        assert_eq!((waits.get(), cache.len()), (3, 4));
        assert_eq!(
            get(&cache, &parent, (align, align), &waits, true),
            Ok(align)
        );
        assert_eq!((waits.get(), cache.len()), (4, 5));
    }

    /// `whole` with a wait that counts its calls; the handle's size.
    fn whole(cache: &SubBuffers, parent: &Buffer, waits: &Cell<u32>) -> usize {
        cache
            .whole(parent, &std::sync::OnceLock::new(), || {
                waits.set(waits.get() + 1);
                Ok::<(), xpu_device::DeviceError>(())
            })
            .unwrap()
            .size()
    }

    #[test]
    fn a_whole_segments_buffer_over_bytes_a_sub_buffer_covered_is_taken_after_the_wait() {
        // A fresh segment: its buffer at once.
        let Some((parent, align, fresh, waits)) = scene() else {
            return;
        };
        assert_eq!(whole(&fresh, &parent, &waits), 1 << 16);
        assert_eq!(waits.get(), 0);
        // Its bytes were a split block's (a cached sub-buffer): the buffer after the wait.
        let cache = SubBuffers::default();
        assert_eq!(get(&cache, &parent, (0, align), &waits, true), Ok(align));
        assert_eq!(waits.get(), 0);
        assert_eq!(whole(&cache, &parent, &waits), 1 << 16);
        assert_eq!(
            waits.get(),
            1,
            "the segment's buffer was taken without the wait"
        );
        // Cached: no wait again; a later sub-buffer over its bytes waits.
        assert_eq!(whole(&cache, &parent, &waits), 1 << 16);
        assert_eq!(waits.get(), 1);
        assert_eq!(
            get(&cache, &parent, (align, align), &waits, true),
            Ok(align)
        );
        assert_eq!((waits.get(), cache.len()), (2, 3));
    }

    /// A segment with room past [`SUB_BUFFERS_PER_SEGMENT`] sub-buffers of 512 bytes, and its
    /// cache filled with them (made without a wait: fresh bytes each); `None` without a
    /// device or on one whose sub-buffer origins need more than 512-byte alignment.
    fn full_cache() -> Option<(Buffer, SubBuffers)> {
        let (parent, align) = segment(SUB_BUFFERS_PER_SEGMENT * 512 + 4096)?;
        if align > 512 {
            return None;
        }
        let cache = SubBuffers::default();
        let waits = Cell::new(0);
        for i in 0..SUB_BUFFERS_PER_SEGMENT {
            assert_eq!(get(&cache, &parent, (i * 512, 512), &waits, true), Ok(512));
        }
        assert_eq!((waits.get(), cache.len()), (0, SUB_BUFFERS_PER_SEGMENT));
        Some((parent, cache))
    }

    #[test]
    fn a_full_cache_waits_before_every_uncached_sub_buffer() {
        let Some((parent, cache)) = full_cache() else {
            return;
        };
        let waits = Cell::new(0);
        // Fresh bytes, but the cache is full: the uncached sub-buffer waits first.
        let past = SUB_BUFFERS_PER_SEGMENT * 512;
        assert_eq!(get(&cache, &parent, (past, 512), &waits, true), Ok(512));
        assert_eq!((waits.get(), cache.len()), (1, SUB_BUFFERS_PER_SEGMENT));
        // A cached one is still found without a wait.
        assert_eq!(get(&cache, &parent, (0, 512), &waits, true), Ok(512));
        assert_eq!(waits.get(), 1);
    }

    #[test]
    fn threads_making_one_allocations_first_use_on_a_full_cache_get_one_sub_buffer() {
        let Some((parent, cache)) = full_cache() else {
            return;
        };
        // One allocation past the full cache (its `Live` slot), first used by two threads at
        // once: both pass the cache lookup and wait (the barrier holds each in its wait until
        // the other is there too), then make their sub-buffer in turn.
        let slot = std::sync::OnceLock::new();
        let both_waiting = std::sync::Barrier::new(2);
        let past = SUB_BUFFERS_PER_SEGMENT * 512;
        let [a, b] = std::thread::scope(|scope| {
            let first_use = || {
                cache
                    .get_or_create(&parent, past, 512, &slot, || {
                        both_waiting.wait();
                        Ok::<(), xpu_device::DeviceError>(())
                    })
                    .unwrap()
            };
            let t = [scope.spawn(first_use), scope.spawn(first_use)];
            t.map(|t| t.join().unwrap())
        });
        assert!(
            std::sync::Arc::ptr_eq(&a, &b),
            "the second thread made a second sub-buffer of the same bytes"
        );
        assert!(std::sync::Arc::ptr_eq(slot.get().unwrap(), &a));
        assert_eq!(cache.len(), SUB_BUFFERS_PER_SEGMENT);
    }
}
