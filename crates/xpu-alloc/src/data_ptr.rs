//! [`DataPtr`]: an allocation that frees itself on drop.

use std::sync::{Arc, OnceLock};

use xpu_caching::Allocation;
use xpu_device::backend::{raw, Buffer, Kernel};
use xpu_device::DeviceError;
use xpu_stream::Stream;

use crate::cl_stream::{ClBackend, StreamRef};
use crate::error::{check_fork, AllocError};
use crate::source::SegmentMemory;
use crate::stream::StreamKey;

pub(crate) struct Live {
    /// The segment's buffer and this allocation's byte offset in it, taken at the
    /// allocation's first use (a kernel argument, a view, a region), so that later uses
    /// touch no allocator lock. What kernels (through their offset parameters) and copies
    /// receive. Dropped before the block goes back to the allocator; the segment keeps its
    /// own share until it is released.
    pub segment: SegmentShare,
    /// The sub-buffer of exactly this allocation, taken at its first use as one (a kernel
    /// built as written, [`DataPtr::set_kernel_arg`], or [`DataPtr::block_cl_mem`]) from its segment's
    /// cache ([`crate::SubBuffers`]: made once per (offset, size) of the segment, released
    /// with the segment; queued commands keep their own reference until they complete,
    /// OpenCL 3.0 §5.5.1). A sub-buffer over bytes another one covered is made only after
    /// the allocation stream's earlier commands completed (see [`crate::SubBuffers`]).
    /// Declared first, so this share is dropped before the block goes back to the allocator:
    /// a sub-buffer the segment could not cache is released while no other allocation can
    /// make one of the same bytes (NVIDIA's driver crashes when the two happen at once).
    pub sub_buffer: SubBuffer,
    /// The caching allocator's block (freed when dropped, after the sub-buffer share).
    pub allocation: Allocation<ClBackend>,
}

/// The share of its segment's buffer an allocation holds ([`Live::segment`]), with the
/// allocation's byte offset in it; leaked in a bad fork child as [`SubBuffer`] is.
#[derive(Default)]
pub(crate) struct SegmentShare(OnceLock<(Arc<Buffer>, u64)>);

impl SegmentShare {
    #[cold]
    #[inline(never)]
    fn release(&mut self) {
        let mut slot = self.0.take();
        drop(xpu_device::fork::take_unless_bad_fork(&mut slot));
    }
}

impl Drop for SegmentShare {
    #[inline]
    fn drop(&mut self) {
        if self.0.get().is_some() {
            self.release();
        }
    }
}

/// The share of a sub-buffer an allocation holds ([`Live::sub_buffer`]): dropped when the
/// allocation drops (a release only for a sub-buffer its segment did not cache), leaked in a
/// bad fork child (`clReleaseMemObject` is a driver call; see
/// `xpu_device::fork`). It asks about the fork only when a sub-buffer exists, so the cached
/// free path, which has none, pays nothing for it; the block itself is leaked there by the
/// caching allocator's own check (`Allocation`'s drop, through `Backend::is_bad_fork`).
#[derive(Default)]
pub(crate) struct SubBuffer(OnceLock<Arc<Buffer>>);

impl SubBuffer {
    /// The sub-buffer's release, or its leak in a bad fork child (out of the free path).
    #[cold]
    #[inline(never)]
    fn release(&mut self) {
        let mut slot = self.0.take();
        drop(xpu_device::fork::take_unless_bad_fork(&mut slot));
    }
}

impl Drop for SubBuffer {
    #[inline]
    fn drop(&mut self) {
        if self.0.get().is_some() {
            self.release();
        }
    }
}

/// A device allocation from the caching allocator; returns its block to the allocator when
/// dropped (as PyTorch's `DataPtr` with the allocator's deleter). Zero-size allocations are
/// empty: no block, address 0.
pub struct DataPtr {
    pub(crate) live: Option<Live>,
    device: usize,
    size: u64,
}

impl DataPtr {
    #[inline]
    pub(crate) fn new(allocation: Allocation<ClBackend>) -> Self {
        let (device, size) = (allocation.device(), allocation.size());
        Self {
            live: Some(Live {
                segment: SegmentShare::default(),
                sub_buffer: SubBuffer::default(),
                allocation,
            }),
            device,
            size,
        }
    }

    /// The caching allocator's block (`None` when empty).
    pub(crate) fn allocation(&self) -> Option<&Allocation<ClBackend>> {
        self.live.as_ref().map(|l| &l.allocation)
    }

    /// An empty pointer (zero-size allocation) on `device`.
    #[must_use]
    pub fn empty(device: usize) -> Self {
        Self {
            live: None,
            device,
            size: 0,
        }
    }

    /// Requested size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Size in bytes of the block backing the allocation (rounded; may exceed the request
    /// when the block was not split). 0 when empty.
    #[must_use]
    pub fn allocated_size(&self) -> u64 {
        self.live
            .as_ref()
            .map_or(0, |l| l.allocation.allocated_size())
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> usize {
        self.device
    }

    /// Device address of the first byte: unique on the device while the allocation lives
    /// (0 when empty). With `relocation:merge` the first call fixes the block's place for
    /// good (it may wait for a move of the block in progress, never for the device).
    #[must_use]
    pub fn address(&self) -> u64 {
        self.live.as_ref().map_or(0, |l| l.allocation.address())
    }

    /// Whether `self` and `other` are the same allocation (the same [`DataPtr`]; a
    /// [`DataPtr`] is the only owner of its block). Unlike comparing
    /// [`DataPtr::address`]es, this reads nothing of the block's place.
    #[must_use]
    pub fn same_allocation(&self, other: &DataPtr) -> bool {
        std::ptr::eq(self, other)
    }

    /// Whether this is a zero-size allocation.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live.is_none()
    }

    /// The stream the block was allocated on (its allocation stream).
    #[must_use]
    pub fn stream(&self) -> Option<StreamKey> {
        self.live.as_ref().map(|l| l.allocation.stream())
    }

    /// The raw `cl_mem` of the segment holding this allocation and the allocation's byte
    /// offset in it, for kernel arguments (`clSetKernelArg` with the buffer, the offset as a
    /// separate argument) and other interop. No driver call.
    ///
    /// Raw access: the handle is not retained and covers the whole segment, which other
    /// allocations share. It may be used only while this [`DataPtr`] lives, and only for
    /// the bytes `offset..offset + size()`; using it (which takes `unsafe` code, e.g.
    /// `Buffer::from_raw_retained`) after the pointer is dropped, or beyond its bytes,
    /// touches memory of other allocations. Safe code reads and writes through
    /// [`DataPtr::view`]. Kernels and views use this same handle and offset, so raw commands
    /// on it mix with them as any commands on one buffer do; they must not overlap in time
    /// with commands on a sub-buffer of the allocation ([`DataPtr::block_cl_mem`]): OpenCL
    /// 3.0 §5.2.1 leaves that undefined.
    ///
    /// With `relocation:merge` the block's place is fixed for good first, and when
    /// relocation copies that wrote or read its bytes may still run, this waits on the host
    /// for them (on an allocation stream held back by a user event that this thread sets
    /// later, that wait lasts for ever).
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child, first (the segment is read under the
    /// stream's lock); [`AllocError::Unsupported`] for an empty pointer or simulated memory;
    /// [`AllocError::Stream`] when the wait for relocation copies failed.
    pub fn cl_mem_and_offset(&self) -> Result<(raw::cl_mem, u64), AllocError> {
        self.observe_place()?;
        self.with_buffer(|buffer, offset| (buffer.as_raw(), offset))
    }

    /// [`DataPtr::cl_mem_and_offset`] without the host wait for relocation copies that may
    /// still use the block's bytes: they are returned ([`DataPtr::observe_place_pending`]),
    /// and every command through the handle must be ordered after them
    /// ([`PendingMove::order`] on its stream; nothing to do on the allocation stream), as a
    /// foreign library call on a known stream does.
    ///
    /// # Errors
    /// As [`DataPtr::cl_mem_and_offset`], without the wait's.
    pub fn cl_mem_and_offset_pending(
        &self,
    ) -> Result<(raw::cl_mem, u64, Option<PendingMove>), AllocError> {
        let pending = self.observe_place_pending()?;
        let (mem, offset) = self.with_buffer(|buffer, offset| (buffer.as_raw(), offset))?;
        Ok((mem, offset, pending))
    }

    /// Fixes the block's place for the rest of the allocation's life
    /// ([`Allocation::observe`](xpu_caching::Allocation::observe)): the ways out of a raw
    /// place (address, `cl_mem`, sub-buffers, regions lent to other layers) call it first.
    /// Nothing for a block that does not relocate or an empty pointer.
    pub(crate) fn observe_place(&self) -> Result<(), AllocError> {
        match self.observe_place_pending()? {
            Some(pending) => pending.0.wait().map_err(AllocError::Stream),
            None => Ok(()),
        }
    }

    /// Fixes the block's place for good, as the raw ways out of a place do
    /// ([`DataPtr::cl_mem_and_offset`], [`DataPtr::block_cl_mem`]), without their host wait
    /// for the relocation copies that may still use the block's bytes: those copies are
    /// returned (`None` when there are none, or the block does not relocate). Every command
    /// that uses the place is then ordered after them on its stream
    /// ([`PendingMove::order`]), or is on the allocation stream, where they run
    /// ([`Allocation::observe_pending`](xpu_caching::Allocation::observe_pending)).
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child.
    pub fn observe_place_pending(&self) -> Result<Option<PendingMove>, AllocError> {
        check_fork()?;
        Ok(match &self.live {
            Some(live) if live.allocation.relocatable() => {
                live.allocation.observe_pending().map(PendingMove)
            }
            _ => None,
        })
    }

    /// The block's place for commands enqueued while the returned [`BlockPin`] lives (it
    /// holds the block in place): the segment's buffer and the allocation's byte offset in
    /// it. For a block that does not relocate this is the place cached at the first use; for
    /// one that may move, the place the allocator caches under the block's current move
    /// count (`Allocation::with_pinned_segment`).
    ///
    /// # Errors
    /// As [`DataPtr::view`].
    pub(crate) fn pinned_place(&self) -> Result<(Arc<Buffer>, u64, BlockPin<'_>), AllocError> {
        check_fork()?;
        let live = self.live.as_ref().ok_or_else(|| {
            AllocError::Unsupported("an empty allocation has no buffer".to_owned())
        })?;
        if !live.allocation.relocatable() {
            let (buffer, offset) = self.segment_buffer()?;
            return Ok((Arc::clone(buffer), offset, BlockPin::empty()));
        }
        let pin = BlockPin {
            pin: Some(live.allocation.pin()),
            stream: live.allocation.stream(),
            pending: None,
        };
        let held = pin.pin.as_ref().ok_or(AllocError::BadFork)?;
        let (buffer, offset) = live
            .allocation
            .with_pinned_segment(held, buffer_share)
            .unwrap_or_else(|| {
                check_fork()?;
                Err(AllocError::InvalidDevicePointer { address: 0 })
            })?;
        Ok((buffer, offset, pin))
    }

    /// A view of this allocation's bytes for copies, borrowing the pointer: it cannot
    /// outlive the allocation, and every access is checked against the requested size
    /// ([`DataPtr::size`]), never the rounded block or the segment. The view's commands go
    /// through the segment's buffer at the allocation's byte offset (copies take offsets in
    /// OpenCL, §5.2.2), as kernels receive it ([`DataPtr::set_kernel_arg`]): no sub-buffer,
    /// so NVIDIA's driver, which crashes when threads use sub-buffers of one buffer, never
    /// sees one. The segment's buffer is taken at the allocation's first use, so a view costs
    /// no driver call and no allocator lock after that.
    ///
    /// A handle never outlives its [`DataPtr`]:
    /// ```compile_fail
    /// # fn f(ptr: xpu_alloc::DataPtr) {
    /// let view = ptr.view().unwrap();
    /// drop(ptr); // error: `ptr` is borrowed by `view`
    /// drop(view);
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`AllocError::BadFork`] in a bad fork child (see `xpu_device::fork`), before any
    /// driver call; [`AllocError::Unsupported`] for an empty pointer or simulated memory.
    pub fn view(&self) -> Result<BlockView<'_>, AllocError> {
        check_fork()?;
        let (buffer, offset, pin) = self.pinned_place()?;
        Ok(BlockView {
            ptr: self,
            buffer,
            offset: to_usize(offset)?,
            len: to_usize(self.size)?,
            pin,
        })
    }

    /// The segment's buffer and the allocation's byte offset in it ([`Live::segment`]), with
    /// the errors of [`DataPtr::view`].
    pub(crate) fn segment_buffer(&self) -> Result<(&Arc<Buffer>, u64), AllocError> {
        check_fork()?;
        let live = self.live.as_ref().ok_or_else(|| {
            AllocError::Unsupported("an empty allocation has no buffer".to_owned())
        })?;
        if let Some((b, o)) = live.segment.0.get() {
            return Ok((b, *o));
        }
        let share = live
            .allocation
            .with_segment(buffer_share)
            .unwrap_or_else(|| {
                Err(AllocError::InvalidDevicePointer {
                    address: live.allocation.address(),
                })
            })?;
        // A concurrent first use may have stored the same share: either is right.
        let _ = live.segment.0.set(share);
        let (b, o) = live.segment.0.get().expect("set above");
        Ok((b, *o))
    }

    fn with_buffer<R>(&self, f: impl FnOnce(&Buffer, u64) -> R) -> Result<R, AllocError> {
        check_fork()?;
        let live = self.live.as_ref().ok_or_else(|| {
            AllocError::Unsupported("an empty allocation has no buffer".to_owned())
        })?;
        live.allocation
            .with_segment(|segment, offset| match &segment.memory {
                SegmentMemory::Buffer(memory) => Ok(f(memory.buffer(), offset)),
                SegmentMemory::Simulated(_) => Err(AllocError::Unsupported(
                    "simulated memory has no cl_mem".to_owned(),
                )),
            })
            .unwrap_or_else(|| {
                Err(AllocError::InvalidDevicePointer {
                    address: live.allocation.address(),
                })
            })
    }

    /// Sets argument `index` of `kernel` (a `__global`/`__constant` pointer parameter) to
    /// exactly this allocation: the kernel sees the allocation's first byte at its pointer's
    /// index 0.
    ///
    /// A kernel with offset parameters (every program `Program::build` compiles, see
    /// [`Kernel::takes_offset`]) gets the segment's buffer and the allocation's byte offset
    /// in it: two `clSetKernelArg`s at most (an offset equal to the last one set is none),
    /// no sub-buffer, no allocator lock after the allocation's first use. A kernel built as
    /// written (`Program::build_exact`) gets a sub-buffer of exactly the allocation
    /// (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1, made once per (offset, size) of the segment
    /// and kept by the segment until the segment is returned to the driver), or for a block
    /// that is its whole segment the segment's own buffer. Making a sub-buffer over bytes
    /// another sub-buffer covered first waits on the host for the allocation stream's earlier
    /// commands ([`crate::SubBuffers`]): on a stream held back by a user event that this
    /// thread sets later, that first use would wait for ever.
    ///
    /// The kernel keeps a reference to the buffer until the argument is replaced or the
    /// kernel is dropped; the allocation may be freed meanwhile (the block is then reused, so
    /// the stale argument must be replaced before the next launch, as launch layers do by
    /// setting every argument).
    ///
    /// # Errors
    /// [`BlockArgError::Alloc`] with [`AllocError::BadFork`] in a bad fork child (before any
    /// driver call), or for an empty allocation or memory without a `cl_mem` (simulated), or
    /// with [`AllocError::Stream`] when the wait before a new sub-buffer failed, or with
    /// [`AllocError::Unsupported`] for a block inside a segment given to a kernel without
    /// offset parameters on a platform whose sub-buffers are unsafe
    /// ([`crate::sub_buffers_safe_on`]: NVIDIA's); [`BlockArgError::Device`] with
    /// `DeviceError::MisalignedSubBuffer` when the device's `CL_DEVICE_MEM_BASE_ADDR_ALIGN`
    /// exceeds the block alignment (512 bytes), or the kernel's [`DeviceError::KernelArg`]
    /// (wrong parameter kind, another device's context, index out of range).
    pub fn set_kernel_arg(&self, kernel: &mut Kernel, index: u32) -> Result<(), BlockArgError> {
        // The argument stays in the kernel for a launch the allocator does not see.
        self.observe_place().map_err(BlockArgError::Alloc)?;
        self.set_observed_kernel_arg(kernel, index)
    }

    /// [`DataPtr::set_kernel_arg`] without the host wait for relocation copies that may
    /// still use the block's bytes: they are returned ([`DataPtr::observe_place_pending`]),
    /// and every launch of `kernel` must be ordered after them ([`PendingMove::order`] on
    /// its stream), as a graph capture does for its replays. A kernel without offset
    /// parameters gets a sub-buffer as [`DataPtr::set_kernel_arg`] gives it.
    ///
    /// # Errors
    /// As [`DataPtr::set_kernel_arg`].
    pub fn set_kernel_arg_pending(
        &self,
        kernel: &mut Kernel,
        index: u32,
    ) -> Result<Option<PendingMove>, BlockArgError> {
        let pending = self.observe_place_pending().map_err(BlockArgError::Alloc)?;
        self.set_observed_kernel_arg(kernel, index)?;
        Ok(pending)
    }

    /// Sets the argument of a block whose place is observed (or that does not relocate).
    fn set_observed_kernel_arg(
        &self,
        kernel: &mut Kernel,
        index: u32,
    ) -> Result<(), BlockArgError> {
        if kernel.takes_offset(index) {
            let (buffer, offset) = self.segment_buffer().map_err(BlockArgError::Alloc)?;
            return kernel
                .set_arg_shared_buffer_at(index, buffer, offset)
                .map_err(BlockArgError::Device);
        }
        // A parameter that takes no buffer is reported as such, before a sub-buffer is made
        // or refused.
        kernel
            .check_buffer_param(index)
            .map_err(BlockArgError::Device)?;
        let sub = self.waited_sub_buffer()?;
        kernel
            .set_arg_shared_buffer(index, sub)
            .map_err(BlockArgError::Device)
    }

    /// [`DataPtr::set_kernel_arg`] for a launch that enqueues the kernel while the returned
    /// [`BlockPin`] lives (`xpu_kernel::Launch`): a block that may move
    /// (`relocation:merge`) is held in place only until then, instead of for good. A kernel
    /// without offset parameters gets the block as [`DataPtr::set_kernel_arg`] gives it
    /// (fixed for good), without its host wait for relocation copies that may still use the
    /// bytes: the pin holds them, and [`BlockPin::prepare_on`] orders the launch's stream
    /// after them.
    ///
    /// # Errors
    /// As [`DataPtr::set_kernel_arg`].
    pub fn set_kernel_arg_pinned(
        &self,
        kernel: &mut Kernel,
        index: u32,
    ) -> Result<BlockPin<'_>, BlockArgError> {
        let relocatable = self
            .live
            .as_ref()
            .is_some_and(|l| l.allocation.relocatable());
        if !relocatable {
            self.set_kernel_arg(kernel, index)?;
            return Ok(BlockPin::empty());
        }
        if !kernel.takes_offset(index) {
            // A sub-buffer fixes the place for good; relocation copies that may still use
            // the bytes are waited for by the launch's stream on the device
            // (`BlockPin::prepare_on`), not on the host here (a launch on the block's own
            // stream, held back by a user event this thread sets later, would wait for ever).
            let pending = self.set_kernel_arg_pending(kernel, index)?;
            return Ok(BlockPin {
                pin: None,
                stream: self.stream().unwrap_or(StreamKey::new(0, 0)),
                pending,
            });
        }
        let (buffer, offset, pin) = self.pinned_place().map_err(BlockArgError::Alloc)?;
        kernel
            .set_arg_shared_buffer_at(index, &buffer, offset)
            .map_err(BlockArgError::Device)?;
        Ok(pin)
    }

    /// The raw `cl_mem` of exactly this allocation and its size in bytes: a sub-buffer of its
    /// segment covering the allocation's requested bytes (`CL_MEM_SIZE` = [`DataPtr::size`]),
    /// or for a block that is its whole segment the segment's buffer (its size: the block's),
    /// the one [`DataPtr::set_kernel_arg`] passes to a kernel built as written
    /// (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1, made once per (offset, size) of the segment
    /// and kept with the segment). For interop with OpenCL libraries that must see the
    /// allocation's bound; xpu's own interop ([`DataPtr::cl_mem_and_offset`]) and kernels use
    /// the segment's buffer and an offset instead. Refused for a block inside a segment on a
    /// platform whose sub-buffers are unsafe ([`crate::sub_buffers_safe_on`]: NVIDIA's).
    ///
    /// A plain value, not a retained handle (no safe `Buffer` that could be cloned and kept
    /// past the allocation's reuse): wrapping it (`Buffer::from_raw_retained`, `unsafe`) and
    /// every raw use of it must end before the allocation is freed, i.e. be stream-ordered
    /// before the free.
    ///
    /// # Errors
    /// As [`DataPtr::set_kernel_arg`]: [`BlockArgError::Alloc`] for an empty allocation or
    /// memory without a `cl_mem`, or with [`AllocError::Unsupported`] on a platform whose
    /// sub-buffers are unsafe; [`BlockArgError::Device`] for a failed `clCreateSubBuffer`.
    pub fn block_cl_mem(&self) -> Result<(raw::cl_mem, usize), BlockArgError> {
        self.observe_place().map_err(BlockArgError::Alloc)?;
        let b = self.waited_sub_buffer()?;
        Ok((b.as_raw(), b.size()))
    }

    /// The block's sub-buffer, waiting for the allocation stream when it must.
    fn waited_sub_buffer(&self) -> Result<&Arc<Buffer>, BlockArgError> {
        match self.sub_buffer(true) {
            Ok(b) => Ok(b),
            Err(SubBufferError::Arg(e)) => Err(e),
            // Not returned when waiting is allowed; reported as the failed wait it replaces.
            Err(SubBufferError::WouldWait) => Err(BlockArgError::Alloc(AllocError::Stream(
                xpu_caching::MarkerError::message("the wait for the allocation stream"),
            ))),
        }
    }

    /// [`DataPtr::block_cl_mem`] that never waits on the host: `Ok(None)` when relocation
    /// copies may still use the block's bytes ([`DataPtr::observe_place_pending`]; the place
    /// is fixed all the same), or when the block's sub-buffer is not made yet and making it
    /// would first wait for the allocation stream (its bytes overlap a cached sub-buffer, and
    /// that stream's work has not completed). For
    /// callers that must not block, such as a graph capture recording a command buffer (it
    /// falls back to a recorded replay).
    ///
    /// # Errors
    /// As [`DataPtr::block_cl_mem`].
    pub fn try_block_cl_mem(&self) -> Result<Option<(raw::cl_mem, usize)>, BlockArgError> {
        // Relocation copies that may still use the bytes would be a host wait too: a command
        // buffer cannot wait for them (recorded replays do, on the device).
        if self
            .observe_place_pending()
            .map_err(BlockArgError::Alloc)?
            .is_some()
        {
            return Ok(None);
        }
        match self.sub_buffer(false) {
            Ok(b) => Ok(Some((b.as_raw(), b.size()))),
            Err(SubBufferError::Arg(e)) => Err(e),
            Err(SubBufferError::WouldWait) => Ok(None),
        }
    }

    /// The block's sub-buffer; `wait`: whether making one over reused bytes may wait for the
    /// allocation stream on the host (else [`SubBufferError::WouldWait`]).
    fn sub_buffer(&self, wait: bool) -> Result<&Arc<Buffer>, SubBufferError> {
        // Before `clCreateSubBuffer`, and even for a cached sub-buffer: every entry point
        // refuses at once in a bad fork child.
        check_fork().map_err(BlockArgError::Alloc)?;
        let live = self.live.as_ref().ok_or_else(|| {
            BlockArgError::Alloc(AllocError::Unsupported(
                "an empty allocation has no buffer".to_owned(),
            ))
        })?;
        if let Some(b) = live.sub_buffer.0.get() {
            return Ok(b);
        }
        let size = to_usize(self.size).map_err(BlockArgError::Alloc)?;
        // The segment's cached sub-buffer for these bytes, or a new one (`with_segment` runs
        // under no allocator lock).
        let sub = live
            .allocation
            .with_segment(|segment, offset| match &segment.memory {
                SegmentMemory::Buffer(memory) => {
                    let (buffer, sub_buffers) = (memory.buffer(), memory.sub_buffers());
                    let wait_idle = || {
                        let stream_error =
                            |e| SubBufferError::Arg(BlockArgError::Alloc(AllocError::Stream(e)));
                        if wait {
                            return live.allocation.wait_for_stream().map_err(stream_error);
                        }
                        match live.allocation.stream_idle() {
                            Ok(true) => Ok(()),
                            Ok(false) => Err(SubBufferError::WouldWait),
                            Err(e) => Err(stream_error(e)),
                        }
                    };
                    // A block that is its whole segment passes the segment's buffer.
                    if offset == 0 && live.allocation.allocated_size() == segment.size {
                        return sub_buffers.whole(buffer, &live.sub_buffer.0, wait_idle);
                    }
                    if !sub_buffers_allowed(self.device) {
                        return Err(SubBufferError::Arg(BlockArgError::Alloc(
                            AllocError::Unsupported(
                                "a block inside a segment reaches a kernel built as written \
                             (no offset parameters) only as a sub-buffer, and this platform's \
                             sub-buffers are unsafe (NVIDIA's OpenCL crashes on them): build \
                             the kernel with Program::build, or pass the segment's buffer \
                             and offset (DataPtr::cl_mem_and_offset)"
                                    .to_owned(),
                            ),
                        )));
                    }
                    let offset = to_usize(offset)
                        .map_err(|e| SubBufferError::Arg(BlockArgError::Alloc(e)))?;
                    sub_buffers.get_or_create(buffer, offset, size, &live.sub_buffer.0, wait_idle)
                }
                SegmentMemory::Simulated(_) => Err(SubBufferError::Arg(BlockArgError::Alloc(
                    AllocError::Unsupported("simulated memory has no cl_mem".to_owned()),
                ))),
            })
            .unwrap_or_else(|| {
                Err(SubBufferError::Arg(BlockArgError::Alloc(
                    AllocError::InvalidDevicePointer {
                        address: live.allocation.address(),
                    },
                )))
            })?;
        // A concurrent first use may have stored its own: keep that one, drop ours.
        let _ = live.sub_buffer.0.set(sub);
        Ok(live.sub_buffer.0.get().expect("set above"))
    }

    /// Marks this allocation as used on `stream` (as `Tensor.record_stream`), in the
    /// allocator that made it (global or private): when it is freed, its block is reused only
    /// after the work enqueued on `stream` before the free completes. Ignored for an empty
    /// allocation and for the allocation stream.
    ///
    /// # Errors
    /// [`AllocError::StreamDevice`] for a stream of another device; [`AllocError::Stream`]
    /// for a stream whose queue is already released; [`AllocError::Capturing`] for a stream
    /// a graph is capturing (nothing recorded).
    pub fn record_stream(&self, stream: &Stream) -> Result<(), AllocError> {
        if self.live.is_none() {
            return Ok(());
        }
        if stream.device() != self.device {
            return Err(AllocError::StreamDevice {
                stream: stream.device(),
                device: self.device,
            });
        }
        stream.check_not_capturing("record_stream")?;
        self.record_stream_ref(&crate::cl_stream::ClStream::try_shared(*stream)?);
        Ok(())
    }

    /// Id of the allocator state (default pool or private pool) that owns the block.
    pub(crate) fn owner_id(&self) -> Option<u64> {
        self.live.as_ref().map(|l| l.allocation.owner_id())
    }

    pub(crate) fn record_stream_ref(&self, stream: &StreamRef) {
        if let Some(live) = &self.live {
            live.allocation.record_stream(stream);
        }
    }
}

/// The device and the caching allocator's block, whose own `Debug` shows its address, size
/// and allocation stream (`None`: an empty pointer).
impl std::fmt::Debug for DataPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPtr")
            .field("device", &self.device)
            .field("allocation", &self.allocation())
            .finish()
    }
}

// No `Drop` of its own: `live` drops in place, its allocation returning the block to the
// cache (the cached path: no move of the allocation out of `self`) and then its sub-buffer
// releasing. In a child forked after OpenCL was initialized both are leaked instead, each by
// its own drop (`Allocation`'s through `ClBackend::is_bad_fork`, [`SubBuffer`]'s): taking
// the allocator's lock could hang, and releasing a buffer is a driver call.

/// Why an allocation could not become a kernel argument ([`DataPtr::set_kernel_arg`]).
#[derive(Debug, thiserror::Error)]
pub enum BlockArgError {
    /// The allocation has no OpenCL buffer (empty, SVM or simulated memory), or the wait
    /// for its stream before a sub-buffer over reused bytes failed ([`AllocError::Stream`]).
    #[error(transparent)]
    Alloc(AllocError),
    /// The sub-buffer or the argument was refused (misaligned block, wrong parameter,
    /// another device's context).
    #[error(transparent)]
    Device(DeviceError),
}

/// Why [`DataPtr::sub_buffer`] gave no sub-buffer.
enum SubBufferError {
    Arg(BlockArgError),
    /// Making it would have waited for the allocation stream (not allowed to).
    WouldWait,
}

impl From<DeviceError> for SubBufferError {
    fn from(e: DeviceError) -> Self {
        SubBufferError::Arg(BlockArgError::Device(e))
    }
}

impl From<BlockArgError> for SubBufferError {
    fn from(e: BlockArgError) -> Self {
        SubBufferError::Arg(e)
    }
}

impl From<DeviceError> for BlockArgError {
    fn from(e: DeviceError) -> Self {
        Self::Device(e)
    }
}

xpu_device::impl_is_bad_fork! {
    /// True when the error it wraps is a bad fork ([`AllocError::is_bad_fork`],
    /// [`DeviceError::is_bad_fork`]; see `xpu_device::fork`).
    BlockArgError { wraps: Alloc, Device; }
}

/// Whether device `device`'s platform allows sub-buffers of a segment
/// ([`crate::sub_buffers_safe_on`]); `false` when the device cannot be read.
fn sub_buffers_allowed(device: usize) -> bool {
    xpu_device::device(device)
        .is_ok_and(|d| crate::sub_buffers_safe_on(&d.properties().platform_name))
}

fn to_usize(v: u64) -> Result<usize, AllocError> {
    usize::try_from(v)
        .map_err(|_| AllocError::Unsupported(format!("{v} bytes exceed the address space")))
}

/// The bytes of one allocation, borrowed from its [`DataPtr`] (see [`DataPtr::view`]):
/// bounds-checked blocking reads and writes, fills and device-side copies. Offsets and
/// lengths are in bytes, relative to the allocation's first byte, and must lie within its
/// requested size ([`DataPtr::size`]).
///
/// Commands are enqueued on the given stream, which must belong to the allocation's device.
/// A non-blocking command ([`BlockView::fill`], [`BlockView::copy_from`],
/// [`BlockView::write_from_host`], [`BlockView::read_into_host`]) on a stream other than the
/// allocation stream records that stream on the allocations it touches (as
/// [`DataPtr::record_stream`], which PyTorch leaves to the caller): freed at once, a block is
/// reused only after the command ran.
pub struct BlockView<'a> {
    ptr: &'a DataPtr,
    /// The segment's buffer.
    buffer: Arc<Buffer>,
    /// The allocation's first byte in `buffer`.
    offset: usize,
    /// The requested size ([`DataPtr::size`], converted once).
    len: usize,
    /// Holds a block that may move in place while the view lives.
    pin: BlockPin<'a>,
}

impl BlockView<'_> {
    /// The allocation viewed; its requested size ([`DataPtr::size`]) is the view's extent.
    #[must_use]
    pub fn data_ptr(&self) -> &DataPtr {
        self.ptr
    }

    /// The view's range `offset..offset + len` as a range of the segment buffer.
    fn range(&self, offset: usize, len: usize) -> Result<usize, AllocError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.offset + offset),
            _ => Err(AllocError::OutOfRange {
                offset: offset as u64,
                len: len as u64,
                size: self.len as u64,
            }),
        }
    }

    /// The stream's queue with its direct-enqueue permit (the capture check and the enqueue
    /// made through it are one step, see [`Stream::enqueue_queue`]).
    fn queue(&self, stream: &Stream) -> Result<xpu_stream::DirectQueue, AllocError> {
        let device = self.ptr.device();
        if stream.device() != device {
            return Err(AllocError::StreamDevice {
                stream: stream.device(),
                device,
            });
        }
        self.pin.prepare_on(stream)?;
        Ok(stream.enqueue_queue("block copy")?)
    }

    /// Records `stream` on the allocation when it is not the allocation stream, so that the
    /// block is reused only after a non-blocking command through the view on it ran,
    /// whenever the [`DataPtr`] is freed. Called before the command is enqueued: an error
    /// here (a released stream) then enqueues nothing.
    fn note_use(&self, stream: &Stream) -> Result<(), AllocError> {
        if self.ptr.stream() == Some(crate::stream_key(stream)) {
            return Ok(());
        }
        self.ptr
            .record_stream_ref(&crate::cl_stream::ClStream::try_shared(*stream)?);
        Ok(())
    }

    /// What a transfer of `len` bytes at byte `offset` of the view on `stream` starts with:
    /// the range checked ([`BlockView::range`]), then the stream ([`BlockView::queue`]), in
    /// that order of errors.
    fn target(
        &self,
        stream: &Stream,
        offset: usize,
        len: usize,
    ) -> Result<(usize, xpu_stream::DirectQueue), AllocError> {
        let at = self.range(offset, len)?;
        Ok((at, self.queue(stream)?))
    }

    /// Blocking write of `data` at byte `offset` of the allocation, on `stream`
    /// (`clEnqueueWriteBuffer`, blocking: `data` has been read when the call returns).
    ///
    /// # Errors
    /// [`AllocError::OutOfRange`] when `offset + data.len()` exceeds [`DataPtr::size`];
    /// [`AllocError::StreamDevice`] for a stream of another device; [`AllocError::Capturing`]
    /// for a capturing stream; [`AllocError::Stream`] for a released stream;
    /// [`AllocError::Device`] with the [`DeviceError`] for a failed enqueue;
    /// [`AllocError::BadFork`] in a bad fork child.
    pub fn write(&self, stream: &Stream, offset: usize, data: &[u8]) -> Result<(), AllocError> {
        let (at, permit) = self.target(stream, offset, data.len())?;
        // The permit covers the enqueue, not the wait for the write.
        Ok(permit
            .queue_ref()
            .write_releasing(&self.buffer, at, data, permit)?)
    }

    /// Blocking read of `out.len()` bytes at byte `offset` of the allocation, on `stream`
    /// (`clEnqueueReadBuffer`, blocking: after the work enqueued on `stream` before it).
    ///
    /// # Errors
    /// As [`BlockView::write`].
    pub fn read(&self, stream: &Stream, offset: usize, out: &mut [u8]) -> Result<(), AllocError> {
        let (at, permit) = self.target(stream, offset, out.len())?;
        // The permit covers the enqueue, not the wait for the read.
        Ok(permit
            .queue_ref()
            .read_releasing(&self.buffer, at, out, permit)?)
    }

    /// Fills `len` bytes at byte `offset` with the repeated `pattern` on `stream`
    /// (`clEnqueueFillBuffer`, non-blocking). `pattern.len()` must be a power of two up to
    /// 128 that divides `offset` and `len` (OpenCL 3.0 §5.2.3; the allocation's start is
    /// 512-byte aligned).
    ///
    /// # Errors
    /// As [`BlockView::write`]; [`AllocError::Device`] for a bad pattern.
    pub fn fill(
        &self,
        stream: &Stream,
        pattern: &[u8],
        offset: usize,
        len: usize,
    ) -> Result<(), AllocError> {
        let (at, queue) = self.target(stream, offset, len)?;
        self.note_use(stream)?;
        queue
            .fill(&self.buffer, pattern, at, len, &[])
            .map(drop)
            .map_err(AllocError::from)
    }

    /// Device-side copy of `len` bytes from `src` at `src_offset` to this allocation at
    /// `dst_offset`, on `stream` (`clEnqueueCopyBuffer`, non-blocking). Both allocations
    /// must be on the stream's device.
    ///
    /// # Errors
    /// [`AllocError::OutOfRange`] when either range exceeds its allocation; as
    /// [`BlockView::write`] otherwise (`CL_MEM_COPY_OVERLAP` for overlapping ranges of one
    /// allocation).
    pub fn copy_from(
        &self,
        stream: &Stream,
        src: &BlockView<'_>,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), AllocError> {
        let from = src.range(src_offset, len)?;
        let to = self.range(dst_offset, len)?;
        drop(src.queue(stream)?);
        if len == 0 {
            return Ok(());
        }
        let queue = self.queue(stream)?;
        src.note_use(stream)?;
        self.note_use(stream)?;
        queue
            .copy(&src.buffer, from, &self.buffer, to, len, &[])
            .map(drop)
            .map_err(AllocError::from)
    }
}

impl BlockView<'_> {
    /// What a host copy of `len` bytes at byte `offset` of the view on `stream` starts with:
    /// the range checked, the pinned place prepared for `stream`, and `stream` recorded on
    /// the block. Recorded before the copy is enqueued (as `fill` and `copy_from` do):
    /// recording after it could fail (the stream released by another thread in between) and
    /// leave an enqueued copy unrecorded, so that the block's next owner would get it while
    /// the copy still runs. A copy that then fails leaves a recorded stream with nothing on
    /// it, which only delays the block's reuse until that stream's marker. A stream of
    /// another device is refused first, nothing prepared or recorded (review h78: its
    /// recorded use held the block back behind that stream's work).
    fn host_target(
        &self,
        stream: &Stream,
        what: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<usize, crate::host::HostError> {
        let device = self.ptr.device();
        if stream.device() != device {
            return Err(crate::host::HostError::StreamDevice {
                stream: stream.device(),
                device,
            });
        }
        let at = self.host_range(what, offset, len)?;
        self.pin.prepare_on(stream).map_err(host_error)?;
        if len > 0 {
            self.note_use(stream).map_err(host_error)?;
        }
        Ok(at)
    }

    fn host_range(
        &self,
        what: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<usize, crate::host::HostError> {
        self.range(offset, len)
            .map_err(|_| crate::host::HostError::OutOfRange {
                what,
                offset: offset as u64,
                len: len as u64,
                size: self.len as u64,
            })
    }

    /// Non-blocking host-to-device copy of `len` bytes of pinned `src` at `src_offset` into
    /// this allocation at byte `offset`, on `stream` (see
    /// [`HostCopy::copy_pinned`](crate::host::HostCopy::copy_pinned)):
    /// the use of `src` is recorded, so dropping it at once is safe. A zero-length copy does
    /// nothing.
    ///
    /// # Errors
    /// [`HostError::OutOfRange`](crate::host::HostError::OutOfRange) for a range outside
    /// either side; [`HostError::StreamDevice`](crate::host::HostError::StreamDevice) for a
    /// stream of another device (nothing recorded); `Stream`/`Device` for a released stream
    /// or a failed enqueue.
    pub fn write_from_host(
        &self,
        stream: &Stream,
        src: &crate::host::HostPtr,
        src_offset: usize,
        offset: usize,
        len: usize,
    ) -> Result<(), crate::host::HostError> {
        use crate::host::{HostBytes, HostCopy};
        let at = self.host_target(stream, "device destination", offset, len)?;
        stream.copy_pinned(&self.buffer, at, HostBytes::From(src), src_offset, len)
    }

    /// Non-blocking device-to-host copy of `len` bytes of this allocation at byte `offset`
    /// into pinned `dst` at `dst_offset`, on `stream` (see
    /// [`HostCopy::copy_pinned`](crate::host::HostCopy::copy_pinned)):
    /// reading `dst` waits for the copy.
    ///
    /// # Errors
    /// As [`BlockView::write_from_host`].
    pub fn read_into_host(
        &self,
        stream: &Stream,
        offset: usize,
        dst: &mut crate::host::HostPtr,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), crate::host::HostError> {
        use crate::host::{HostBytes, HostCopy};
        let at = self.host_target(stream, "device source", offset, len)?;
        stream.copy_pinned(&self.buffer, at, HostBytes::Into(dst), dst_offset, len)
    }
}

impl std::fmt::Debug for BlockView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockView")
            .field("ptr", self.ptr)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// A share of `segment`'s buffer and the byte `offset` in it (a block's place for commands).
fn buffer_share(
    segment: &crate::SourceSegment,
    offset: u64,
) -> Result<(Arc<Buffer>, u64), AllocError> {
    match &segment.memory {
        SegmentMemory::Buffer(memory) => Ok((Arc::clone(memory.buffer()), offset)),
        SegmentMemory::Simulated(_) => Err(AllocError::Unsupported(
            "simulated memory has no cl_mem".to_owned(),
        )),
    }
}

/// A block held in place while commands through it are enqueued ([`DataPtr::view`],
/// [`DataPtr::set_kernel_arg_pinned`]): with `relocation:merge` the block does not move
/// until the pin drops. Empty (no cost) for a block that does not relocate.
#[must_use = "the block may move once the pin drops"]
pub struct BlockPin<'a> {
    pin: Option<xpu_caching::PlacePin<'a, ClBackend>>,
    stream: StreamKey,
    /// For a block whose place was fixed instead (a kernel without offset parameters takes
    /// a sub-buffer): relocation copies that may still use its bytes.
    pending: Option<PendingMove>,
}

impl BlockPin<'_> {
    /// Whether the pin holds a block that may move (else it is empty and costs nothing).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.pin.is_some() || self.pending.is_some()
    }

    /// A pin that holds nothing (a block that does not relocate).
    fn empty() -> Self {
        Self {
            pin: None,
            stream: StreamKey::new(0, 0),
            pending: None,
        }
    }

    /// The block's move count when pinned (0 for a block that does not relocate).
    fn generation(&self) -> u64 {
        self.pin
            .as_ref()
            .map_or(0, xpu_caching::PlacePin::generation)
    }

    /// Prepares a command through the pinned block on `stream` (call it before enqueueing):
    /// on a stream other than the block's allocation stream, a block that may move never
    /// moves again, and `stream` first waits for the copies of its last move when they may
    /// still run (see `xpu_caching::PlacePin::prepare_use_on`); for a block whose place was
    /// fixed instead (a kernel without offset parameters), `stream` waits for its pending
    /// relocation copies ([`PendingMove::order`]). Nothing for the allocation stream or a
    /// block that does not relocate.
    ///
    /// # Errors
    /// [`AllocError::Stream`] when the stream's queue is released or the wait cannot be
    /// enqueued.
    pub fn prepare_on(&self, stream: &Stream) -> Result<(), AllocError> {
        if let Some(pending) = &self.pending {
            pending.order(stream)?;
        }
        let Some(pin) = &self.pin else {
            return Ok(());
        };
        if crate::stream_key(stream) == self.stream {
            return Ok(());
        }
        let stream = crate::cl_stream::ClStream::try_shared(*stream)?;
        pin.prepare_use_on(&stream).map_err(AllocError::Stream)
    }
}

impl std::fmt::Debug for BlockPin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockPin")
            .field("pinned", &self.pin.is_some())
            .field("generation", &self.generation())
            .finish()
    }
}

/// A failed [`BlockPin::prepare_on`] or [`PendingMove::order`] as a host copy's error.
pub(crate) fn host_error(e: AllocError) -> crate::host::HostError {
    use crate::host::HostError;
    match e {
        AllocError::Stream(m) => match m.downcast_ref::<xpu_stream::StreamError>() {
            Some(s) => HostError::Stream(s.clone()),
            None => HostError::Device(xpu_device::DeviceError::InvalidArgument(m.to_string())),
        },
        AllocError::BadFork => HostError::BadFork,
        other => HostError::Device(xpu_device::DeviceError::InvalidArgument(other.to_string())),
    }
}

/// Relocation copies that may still read or write a block whose place was observed without
/// waiting ([`DataPtr::observe_place_pending`], [`DataPtr::set_kernel_arg_pending`]): they
/// run on the block's allocation stream. A command on another stream that uses the block is
/// ordered after them by [`PendingMove::order`].
#[derive(Clone, Debug)]
pub struct PendingMove(xpu_caching::PendingMove<ClBackend>);

impl PendingMove {
    /// Whether the copies completed (a status query, no wait).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.0.is_complete()
    }

    /// Makes `stream` wait for the copies on the device (an enqueued wait, never a host
    /// wait): its commands enqueued afterwards run after them. Nothing for the allocation
    /// stream or completed copies.
    ///
    /// # Errors
    /// [`AllocError::Stream`] for a released stream or a failed enqueue of the wait.
    pub fn order(&self, stream: &Stream) -> Result<(), AllocError> {
        if self.is_complete() {
            return Ok(());
        }
        let stream = crate::cl_stream::ClStream::try_shared(*stream)?;
        self.0.order(&stream).map_err(AllocError::Stream)
    }
}

/// An allocation lives on its device: `xpu::device_of(&ptr)` switches to it, as
/// `torch.xpu.device_of(tensor)` (an empty pointer too: it names the device it was asked of).
impl xpu_device::HasDevice for DataPtr {
    fn device_index(&self) -> Option<usize> {
        Some(self.device)
    }
}
