//! Foreign OpenCL libraries (CLBlast, clFFT, vendor BLAS...) on xpu's streams and caching
//! allocator: block-exact typed regions ([`ClRegion`]), one call that hands a stream's queue to
//! the library ([`ForeignExt::foreign`], [`ForeignCall::call`]) and adopts the `cl_event` it
//! returns as an [`Event`], and workspace memory from the caching allocator.
//!
//! A region's `cl_mem` is its allocation's segment buffer and its offset counts from the
//! segment's first byte ([`DataPtr::cl_mem_and_offset`]), as xpu's own kernels and copies take
//! blocks: no sub-buffer, which NVIDIA's OpenCL does not survive under several threads
//! (`xpu_alloc::sub_buffers_safe_on`). The buffer holds other blocks too, so what a call
//! touches is checked before the library sees it: [`ClRegion::require`] /
//! [`ClRegion::require_matrix`] bound it by the region, and the region by its allocation.
//! Offsets are in elements of `T`, as BLAS takes them.
//!
//! In one call: `stream.foreign().uses_elements(&region, n)?...workspace(bytes).call(f)` (`call` is
//! `unsafe`: the foreign code is arbitrary) hands `f` the stream's in-order queue and a workspace
//! block from the caching allocator (freed stream-ordered after the call), records blocks of other
//! streams on the stream first, and adopts the `cl_event` the library returns
//! (`ClEvent::from_raw_owned`, then `Event::from_cl_event`) as an `Event`: query, synchronize,
//! waits from any stream or device, and timing when the queue profiles. A region is `new` for reads
//! and `new_mut` for writes; its offset and length in elements are checked against the allocation's
//! size, not taken on trust from a `DeviceRegion` impl (`InteropError::OutsideAllocation`).
//! `clblast_sgemm` checks the extents of A, B and C, that C is writable and aliases neither A nor B
//! (`InteropError::Aliased`), and takes CLBlast's temporary buffer from the caching allocator
//! (`TempBuffer::AsNeeded` or `Always`).

use std::marker::PhantomData;

use bytemuck::Pod;
use xpu_alloc::{BlockArgError, DataPtr, PendingMove};
use xpu_device::backend::{raw, ClEvent};
use xpu_device::foreign::clblast::{Clblast, Layout, Sgemm, Transpose};
use xpu_device::foreign::ForeignError;
use xpu_event::{Event, EventFlags};
use xpu_stream::Stream;

use crate::memory::{DeviceRegion, DeviceRegionMut};

/// What interop with a foreign library can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InteropError {
    /// A call would touch more elements than the region holds (checked before the library
    /// runs).
    #[error(
        "the call needs {needed} elements from a region of {len} elements (offset {offset} in \
         its allocation)"
    )]
    RegionTooShort {
        /// Elements the call touches, from the region's start.
        needed: usize,
        /// The region's length, elements.
        len: usize,
        /// The region's offset in its allocation, elements.
        offset: usize,
    },
    /// The region's elements lie (partly) outside its allocation: a [`DeviceRegion`] whose
    /// offset and length do not describe memory of its block (the trait can be implemented
    /// outside this crate). Checked when the [`ClRegion`] is made.
    #[error("region elements {offset}+{len} lie outside an allocation of {elements} elements")]
    OutsideAllocation {
        /// The region's offset in its allocation, elements.
        offset: usize,
        /// The region's length, elements.
        len: usize,
        /// Whole elements of `T` in the allocation ([`DataPtr::size`] / `size_of::<T>()`); for
        /// a zero-sized `T`, the element indices left past the allocation's offset in its
        /// buffer.
        elements: usize,
    },
    /// The region's offset plus length does not fit the library's index type (`int` offsets
    /// of a C API...).
    #[error("region elements {offset}..{end} do not fit the library's {ty} offsets (max {max})")]
    OffsetOverflow {
        /// The region's offset in its buffer ([`ClRegion::offset`]), elements.
        offset: usize,
        /// One past its last element.
        end: usize,
        /// The index type's name.
        ty: &'static str,
        /// The largest value of the index type.
        max: String,
    },
    /// A region of another device than the stream's.
    #[error("a region of device {region} used on a stream of device {stream}")]
    OtherDevice {
        /// The region's device.
        region: usize,
        /// The stream's device.
        stream: usize,
    },
    /// An external stream whose queue is out of order: a foreign call on it would not be
    /// ordered after the stream's earlier work.
    #[error(
        "the queue of stream {stream:#x} is out of order; foreign calls need an in-order queue"
    )]
    OutOfOrderQueue {
        /// The stream id.
        stream: u64,
    },
    /// The library reported a failure (its own status code, e.g. a `CLBlastStatusCode`).
    #[error("the foreign library returned status {code}")]
    Library {
        /// The library's status code.
        code: i64,
    },
    /// The region's allocation has no OpenCL buffer (empty, simulated).
    #[error(transparent)]
    Block(#[from] BlockArgError),
    /// The allocation's byte offset in its segment is not a whole number of elements of the
    /// region's type (blocks start at multiples of 512 bytes, so only an element size that
    /// does not divide 512 can meet this): a library taking element offsets cannot reach it.
    #[error(
        "the allocation starts {offset} bytes into its segment, not a multiple of the \
         {element}-byte element"
    )]
    Misaligned {
        /// The allocation's byte offset in its segment's buffer.
        offset: u64,
        /// `size_of::<T>()`, bytes.
        element: usize,
    },
    /// A caching-allocator failure (workspace allocation, `record_stream`).
    #[error(transparent)]
    Alloc(#[from] xpu_alloc::AllocError),
    /// A stream-layer failure (released external stream...), or a failed OpenCL query of the
    /// stream's queue ([`StreamError::OpenCl`](xpu_stream::StreamError::OpenCl)).
    #[error(transparent)]
    Stream(#[from] xpu_stream::StreamError),
    /// Adopting or recording the call's event failed.
    #[error(transparent)]
    Event(#[from] xpu_event::EventError),
    /// A foreign library that is not installed ([`ForeignError::NotAvailable`]), or its
    /// failure status outside [`ForeignCall::call`].
    #[error(transparent)]
    Foreign(#[from] ForeignError),
    /// A region a call writes was made read-only ([`ClRegion::new`], not
    /// [`ClRegion::new_mut`]).
    #[error("the call writes a region made read-only (use ClRegion::new_mut)")]
    ReadOnly,
    /// The region a call writes shares elements with one it reads (BLAS requires the output
    /// not to alias an input: the result would depend on the order the library's work-items
    /// run in). Checked before the library runs.
    #[error(
        "the written region {written} shares elements with the read region {read} (elements \
         {start}..{end} of one allocation)"
    )]
    Aliased {
        /// The written region's name in the call (`"C"` for SGEMM).
        written: &'static str,
        /// The read region's name (`"A"` or `"B"`).
        read: &'static str,
        /// The first shared element, in the allocation.
        start: usize,
        /// One past the last shared element, in the allocation.
        end: usize,
    },
}

xpu_device::impl_from_via!(InteropError::Stream(xpu_stream::StreamError) <- xpu_device::ClError);

xpu_device::impl_is_bad_fork! {
    /// True for a bad fork (see `xpu_device::fork`): a `BadFork` of the allocator, stream or
    /// event layer this error wraps (in a bad fork child, [`ForeignCall::call`] and
    /// [`clblast_sgemm`] fail with the stream's `BadFork`), asked through that error's own
    /// `is_bad_fork`. A foreign library's own failure is never one.
    InteropError { wraps: Block, Alloc, Stream, Event; }
}

/// A typed region of one allocation for a foreign OpenCL library: the `cl_mem` of the
/// allocation's segment, the region's offset in it and its length, in elements of `T`. Borrows the allocation (and,
/// for [`ClRegion::new_mut`], the typed memory mutably), so the allocation cannot be freed
/// while the region exists.
#[derive(Debug)]
pub struct ClRegion<'a, T> {
    block: &'a DataPtr,
    mem: raw::cl_mem,
    /// Relocation copies that may still use the block's bytes (its place was fixed without
    /// waiting for them on the host): a call through the region is ordered after them.
    pending: Option<PendingMove>,
    /// The allocation's first element in `mem`.
    base: usize,
    /// The region's first element in its allocation.
    offset: usize,
    len: usize,
    writable: bool,
    _t: PhantomData<&'a [T]>,
}

impl<'a, T: Pod> ClRegion<'a, T> {
    /// A region a foreign call may only read.
    ///
    /// # Errors
    /// [`InteropError::OutsideAllocation`] when the region's elements are not all inside its
    /// allocation (a `DeviceRegion` implemented elsewhere that claims more);
    /// [`InteropError::Alloc`] for an empty allocation or one without an OpenCL buffer;
    /// [`InteropError::Misaligned`] for an element size that does not divide the
    /// allocation's byte offset in its segment.
    pub fn new(region: &'a impl DeviceRegion<T>) -> Result<Self, InteropError> {
        Self::make(region.data_ptr(), region.offset(), region.len(), false)
    }

    /// A region a foreign call may read and write (borrows the typed memory mutably).
    ///
    /// # Errors
    /// As [`ClRegion::new`].
    pub fn new_mut(region: &'a mut impl DeviceRegionMut<T>) -> Result<Self, InteropError> {
        let (offset, len) = (region.offset(), region.len());
        Self::make(region.data_ptr(), offset, len, true)
    }

    fn make(
        block: &'a DataPtr,
        offset: usize,
        len: usize,
        writable: bool,
    ) -> Result<Self, InteropError> {
        // The range is checked against the allocation, not taken on trust from the
        // `DeviceRegion` impl (a public trait): `require` and `require_matrix` then bound what
        // a call touches by memory that is really the block's.
        // (A zero-sized `T` has no bytes to be outside of.)
        crate::memory::claim_fits::<T>(block, offset, len).map_err(|elements| {
            InteropError::OutsideAllocation {
                offset,
                len,
                elements,
            }
        })?;
        // No host wait for relocation copies (a call on the block's own stream, held back by
        // a user event this thread sets later, would wait for ever): `ForeignCall::call`
        // orders its stream after them.
        let (mem, at, pending) = block.cl_mem_and_offset_pending()?;
        let element = std::mem::size_of::<T>().max(1);
        let base = usize::try_from(at)
            .ok()
            .filter(|a| a % element == 0)
            .ok_or(InteropError::Misaligned {
                offset: at,
                element,
            })?
            / element;
        // The region's end in the buffer must be a number: for a zero-sized `T` the range
        // check above had nothing to bound, and `offset()` / `offset_as()` add `base`.
        if base
            .checked_add(offset)
            .and_then(|start| start.checked_add(len))
            .is_none()
        {
            return Err(InteropError::OutsideAllocation {
                offset,
                len,
                elements: usize::MAX - base,
            });
        }
        Ok(ClRegion {
            block,
            mem,
            pending,
            base,
            offset,
            len,
            writable,
            _t: PhantomData,
        })
    }
}

impl<'a, T> ClRegion<'a, T> {
    /// The `cl_mem` of the allocation's segment (it holds other allocations too), not
    /// retained: valid while the region lives. Element `i` of the region is element
    /// `offset() + i` of this buffer. Commands through it are ordered after relocation
    /// copies that may still use the block's bytes when they run in a [`ForeignCall`] of a
    /// stream the region was declared on ([`ForeignCall::uses`]), or on the block's
    /// allocation stream.
    pub fn cl_mem(&self) -> raw::cl_mem {
        self.mem
    }

    /// The region's first element in the buffer ([`ClRegion::cl_mem`]), in elements of `T`
    /// (not bytes): the allocation's offset in its segment plus the region's in the
    /// allocation.
    pub fn offset(&self) -> usize {
        self.base + self.offset
    }

    /// The region's length, elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a foreign call may write the region (made with [`ClRegion::new_mut`]).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The allocation.
    pub fn data_ptr(&self) -> &'a DataPtr {
        self.block
    }

    /// The offset in the buffer ([`ClRegion::offset`]) converted to a library's index type
    /// (`i32` for C `int` offsets, `usize` for `size_t`), checking that every element of the
    /// region (`offset + len`) fits that type.
    ///
    /// # Errors
    /// [`InteropError::OffsetOverflow`].
    pub fn offset_as<I>(&self) -> Result<I, InteropError>
    where
        I: TryFrom<usize> + num_max::Max,
    {
        let offset = self.offset();
        let end = offset.checked_add(self.len);
        let overflow = || InteropError::OffsetOverflow {
            offset,
            end: end.unwrap_or(usize::MAX),
            ty: I::NAME,
            max: I::MAX_TEXT.to_owned(),
        };
        match end.map(I::try_from) {
            // offset <= end, so it fits too.
            Some(Ok(_)) => I::try_from(offset).map_err(|_| overflow()),
            _ => Err(overflow()),
        }
    }

    /// The elements (of the allocation) this region shares with `other`: `None` for regions
    /// of different allocations or disjoint ranges.
    fn shared_with(&self, other: &ClRegion<'_, T>) -> Option<(usize, usize)> {
        if !self.block.same_allocation(other.block) {
            return None;
        }
        let start = self.offset.max(other.offset);
        let end = self
            .offset
            .saturating_add(self.len)
            .min(other.offset.saturating_add(other.len));
        (start < end).then_some((start, end))
    }

    /// Checks that a call touching `needed` elements from the region's start stays inside it.
    ///
    /// # Errors
    /// [`InteropError::RegionTooShort`].
    pub fn require(&self, needed: usize) -> Result<(), InteropError> {
        if needed > self.len {
            return Err(InteropError::RegionTooShort {
                needed,
                len: self.len,
                offset: self.offset,
            });
        }
        Ok(())
    }

    /// Checks a `rows` x `cols` matrix with leading dimension `ld` (both in the storage
    /// order's sense: `rows` lines of `ld` elements, `cols` of them used per line), the
    /// extent BLAS touches: `(rows - 1) * ld + cols` elements; an empty matrix touches none.
    ///
    /// # Errors
    /// [`InteropError::RegionTooShort`] (also for `ld < cols` or an overflowing extent,
    /// reported as needing `usize::MAX` elements).
    pub fn require_matrix(&self, rows: usize, cols: usize, ld: usize) -> Result<(), InteropError> {
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let needed = if ld < cols {
            usize::MAX
        } else {
            (rows - 1)
                .checked_mul(ld)
                .and_then(|n| n.checked_add(cols))
                .unwrap_or(usize::MAX)
        };
        self.require(needed)
    }
}

/// Index types of C library offsets, for [`ClRegion::offset_as`].
pub mod num_max {
    /// An index type's name and largest value, for error messages.
    pub trait Max {
        /// The type's name.
        const NAME: &'static str;
        /// Its largest value, as text.
        const MAX_TEXT: &'static str;
    }
    macro_rules! max {
        ($($t:ty => $max:literal),*) => {$(
            impl Max for $t {
                const NAME: &'static str = stringify!($t);
                const MAX_TEXT: &'static str = $max;
            }
        )*};
    }
    max!(i8 => "127", u8 => "255", i16 => "32767", u16 => "65535", i32 => "2147483647", u32 => "4294967295", i64 => "9223372036854775807",
         u64 => "18446744073709551615", usize => "usize::MAX");
}

/// Starting a foreign library call on a [`Stream`] (an extension trait: streams live in
/// `xpu-stream`).
pub trait ForeignExt {
    /// A foreign call on this stream: declare the regions it uses with [`ForeignCall::uses`],
    /// optionally a workspace with [`ForeignCall::workspace`], then run it with
    /// [`ForeignCall::call`].
    fn foreign<'a>(&self) -> ForeignCall<'a>;
}

impl ForeignExt for Stream {
    fn foreign<'a>(&self) -> ForeignCall<'a> {
        ForeignCall {
            stream: *self,
            uses: Vec::new(),
            pending: Vec::new(),
            workspace: 0,
        }
    }
}

/// A foreign library call being assembled ([`ForeignExt::foreign`]).
#[derive(Debug)]
pub struct ForeignCall<'a> {
    stream: Stream,
    uses: Vec<&'a DataPtr>,
    /// The declared regions' pending relocation copies.
    pending: Vec<PendingMove>,
    workspace: usize,
}

/// What the foreign code receives: the stream's queue and the workspace.
#[derive(Debug)]
pub struct ForeignQueue<'w> {
    queue: raw::cl_command_queue,
    workspace: Option<ClRegion<'w, u8>>,
}

impl ForeignQueue<'_> {
    /// The stream's `cl_command_queue` (in order; not retained, valid during the call).
    pub fn queue(&self) -> raw::cl_command_queue {
        self.queue
    }

    /// The workspace asked for with [`ForeignCall::workspace`] (`None` when 0 bytes): an
    /// allocation of the caching allocator on the call's stream, freed stream-ordered after
    /// the call (reused only after the stream's work, the library's included, completes).
    pub fn workspace(&self) -> Option<&ClRegion<'_, u8>> {
        self.workspace.as_ref()
    }
}

impl<'a> ForeignCall<'a> {
    /// Declares a region the call uses: checked to be of the stream's device, and recorded on
    /// the stream (as `Tensor.record_stream`) when its allocation belongs to another stream,
    /// so freeing it waits for the call's work.
    ///
    /// # Errors
    /// [`InteropError::OtherDevice`].
    pub fn uses<T>(mut self, region: &ClRegion<'a, T>) -> Result<Self, InteropError> {
        let device = region.block.device();
        if device != self.stream.device() {
            return Err(InteropError::OtherDevice {
                region: device,
                stream: self.stream.device(),
            });
        }
        self.uses.push(region.block);
        self.pending.extend(region.pending.iter().cloned());
        Ok(self)
    }

    /// [`ForeignCall::uses`] after checking that the call touches at most `needed` elements
    /// from the region's start ([`ClRegion::require`]): an over-long extent is refused here,
    /// before the library sees the region.
    ///
    /// # Errors
    /// [`InteropError::RegionTooShort`], [`InteropError::OtherDevice`].
    pub fn uses_elements<T>(
        self,
        region: &ClRegion<'a, T>,
        needed: usize,
    ) -> Result<Self, InteropError> {
        region.require(needed)?;
        self.uses(region)
    }

    /// Asks for a workspace of `bytes` bytes from the caching allocator (counted in its
    /// statistics and limits), handed to the call in [`ForeignQueue::workspace`].
    pub fn workspace(mut self, bytes: usize) -> Self {
        self.workspace = bytes;
        self
    }

    /// Runs `f` with the stream's queue: the foreign library enqueues its work there, after
    /// everything enqueued on the stream before (the queue is in order, and xpu enqueues
    /// cross-stream waits as barriers at once, so no wait is pending), and returns the
    /// `cl_event` of its last command, or `None`. The event is adopted as an [`Event`] (timing
    /// enabled when the queue profiles); for `None`, a marker is recorded after the call.
    /// Allocations of other streams declared with [`ForeignCall::uses`] are recorded on this
    /// stream first.
    ///
    /// # Safety
    /// The foreign code is arbitrary; the caller guarantees that it:
    /// - touches only the regions declared with [`ForeignCall::uses`] (within
    ///   `offset..offset + len` of each, which [`ClRegion::require`] /
    ///   [`ClRegion::require_matrix`] check for a call's shapes) and the workspace, and writes
    ///   only regions made with [`ClRegion::new_mut`];
    /// - enqueues its device work on the given queue only (or orders other queues' work before
    ///   returning), does not keep the raw handles past the call, and does not release them;
    /// - returns either `None`, or an event it owns one reference to (which is handed over:
    ///   the library's caller must not release it) of a command on that queue;
    /// - returns `Err(code)` only with nothing left enqueued that uses the regions past the
    ///   call, or with such work ordered on the queue;
    /// - does not begin a graph capture of the stream, and does not wait for anything that a
    ///   thread beginning one may hold back: `f` runs under the stream's direct-enqueue
    ///   permit ([`xpu_stream::DirectQueue`]), for which such a capture waits, so that the
    ///   foreign commands are never enqueued on a capturing stream.
    ///
    /// # Errors
    /// [`InteropError::Library`] with the code `f` returned; [`InteropError::OutOfOrderQueue`]
    /// for an external stream with an out-of-order queue; allocation, stream and event errors.
    #[allow(unsafe_code)]
    pub unsafe fn call<F>(self, f: F) -> Result<Event, InteropError>
    where
        F: FnOnce(&ForeignQueue<'_>) -> Result<Option<raw::cl_event>, i64>,
    {
        // An early check (no permit yet: the allocation below may wait for the device).
        self.stream.check_not_capturing("foreign library call")?;
        if self.stream.is_external() && !self.stream.queue()?.is_in_order()? {
            return Err(InteropError::OutOfOrderQueue {
                stream: self.stream.id(),
            });
        }
        for block in &self.uses {
            if block.stream().is_some_and(|k| k.id != self.stream.id()) {
                block.record_stream(&self.stream)?;
            }
        }
        // Relocation copies that may still use a region's bytes run on its allocation
        // stream: this stream waits for them on the device (nothing on that stream itself).
        for pending in &self.pending {
            pending.order(&self.stream)?;
        }
        let workspace = match self.workspace {
            0 => None,
            n => Some(xpu_alloc::allocate(n as u64, &self.stream)?),
        };
        let region = match &workspace {
            None => None,
            Some(w) => Some(ClRegion::<u8>::make(w, 0, self.workspace, true)?),
        };
        // The check that counts: under the permit `queue` holds until the call's event is made
        // (a marker recorded on the stream included), no capture of the stream begins, so the
        // foreign commands are never enqueued on a capturing stream.
        let queue = self.stream.enqueue_queue("foreign library call")?;
        let foreign = ForeignQueue {
            queue: queue.as_raw(),
            workspace: region,
        };
        let flags = EventFlags {
            enable_timing: self.stream.has_profiling()?,
            blocking: false,
        };
        // The library enqueues on the raw queue, not through the wrapper: while it runs, and
        // after it (noted when the scope drops), a stream query must not take the stream for
        // idle (reviews h48, h82), whether or not the call failed.
        let raw_calls = queue.raw_enqueue_scope();
        let returned = f(&foreign).map_err(|code| InteropError::Library { code });
        drop(raw_calls);
        // The workspace is freed here (also on failure): allocated on this stream, its block
        // is reused only by work ordered after the library's (stream-ordered reuse).
        let ForeignQueue { .. } = foreign;
        drop(workspace);
        let returned = returned?;
        let event = match returned {
            Some(raw_event) => {
                // SAFETY: `call`'s caller guarantees that `raw_event` is a valid event the
                // foreign code owned one reference to and handed over.
                let event = unsafe { ClEvent::from_raw_owned(raw_event) };
                // A user event (no queue) has no profiling information: adopted untimed.
                let flags = EventFlags {
                    enable_timing: flags.enable_timing
                        && !event
                            .queue_raw()
                            .map_err(|e| {
                                xpu_event::EventError::from(xpu_device::DeviceError::from(e))
                            })?
                            .is_null(),
                    ..flags
                };
                Ok(Event::from_cl_event(event, &self.stream, flags)?)
            }
            None => {
                // On the queue of the held permit, not through `Event::record`, whose own
                // capture check would refuse the marker of work already enqueued when a
                // capture began waiting for this permit.
                let marker = queue
                    .enqueue_marker(&[])
                    .map_err(xpu_stream::StreamError::from)?;
                Ok(Event::from_cl_event(marker, &self.stream, flags)?)
            }
        };
        drop(queue);
        event
    }
}

/// Whether [`clblast_sgemm`] hands CLBlast a temporary buffer from the caching allocator.
///
/// CLBlast takes the temporary buffer as a bare `cl_mem` (no offset), so it gets a buffer
/// that starts at the workspace's first byte: the segment's own buffer when the workspace
/// starts its segment, else a sub-buffer of exactly the workspace
/// ([`DataPtr::block_cl_mem`], whose first making over bytes another sub-buffer covered
/// waits on the host for the stream's earlier commands). Where sub-buffers are unsafe (a
/// workspace further into its segment on NVIDIA's OpenCL), plain `CLBlastSgemm` runs instead
/// and [`SgemmDone::workspace_bytes`] is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempBuffer {
    /// `CLBlastSgemmWithTempBuffer` with a workspace of the size CLBlast asks for
    /// (`CLBlastSGemmTempBufferSize`) when it asks for one; plain `CLBlastSgemm` otherwise.
    AsNeeded,
    /// Always `CLBlastSgemmWithTempBuffer`, with a workspace of at least 4 bytes.
    Always,
}

/// A row-major SGEMM without transposes on xpu regions, `C = alpha * A * B + beta * C`, for
/// [`clblast_sgemm`]: A is `m x k` with leading dimension `lda`, B `k x n` (`ldb`), C `m x n`
/// (`ldc`), all in elements from each region's start.
#[derive(Debug, Clone, Copy)]
pub struct RowMajorSgemm<'r, 'a> {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// A and its leading dimension.
    pub a: (&'r ClRegion<'a, f32>, usize),
    /// B and its leading dimension.
    pub b: (&'r ClRegion<'a, f32>, usize),
    /// Scale of C's old value.
    pub beta: f32,
    /// C (made with [`ClRegion::new_mut`]) and its leading dimension.
    pub c: (&'r ClRegion<'a, f32>, usize),
}

impl<'r, 'a> RowMajorSgemm<'r, 'a> {
    /// `C = A · B` for contiguous matrices (leading dimensions `k`, `n`, `n`), `alpha` 1 and
    /// `beta` 0; set the public fields for anything else.
    #[must_use]
    pub fn new(
        (m, n, k): (usize, usize, usize),
        a: &'r ClRegion<'a, f32>,
        b: &'r ClRegion<'a, f32>,
        c: &'r ClRegion<'a, f32>,
    ) -> Self {
        RowMajorSgemm {
            m,
            n,
            k,
            alpha: 1.0,
            a: (a, k),
            b: (b, n),
            beta: 0.0,
            c: (c, n),
        }
    }

    /// The raw CLBlast arguments: the regions' `cl_mem`s, offsets in elements.
    #[must_use]
    pub fn to_raw(&self) -> Sgemm {
        let ((a, lda), (b, ldb), (c, ldc)) = (self.a, self.b, self.c);
        Sgemm {
            layout: Layout::RowMajor,
            a_transpose: Transpose::No,
            b_transpose: Transpose::No,
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: self.alpha,
            a: a.cl_mem(),
            a_offset: a.offset(),
            a_ld: lda,
            b: b.cl_mem(),
            b_offset: b.offset(),
            b_ld: ldb,
            beta: self.beta,
            c: c.cl_mem(),
            c_offset: c.offset(),
            c_ld: ldc,
        }
    }
}

/// What [`clblast_sgemm`] enqueued.
#[derive(Debug)]
pub struct SgemmDone {
    /// CLBlast's event of the SGEMM, adopted (waits, timing when the stream profiles).
    pub event: Event,
    /// The workspace taken from the caching allocator for CLBlast's temporary buffer, bytes
    /// (0: plain `CLBlastSgemm`).
    pub workspace_bytes: usize,
}

/// CLBlast's SGEMM ([`xpu_device::foreign::clblast`], loaded at run time) on `stream`, on xpu
/// regions, through [`ForeignCall::call`]: the extents of A, B and C are checked against the
/// regions ([`ClRegion::require_matrix`]) before CLBlast sees them, C must be writable, uses
/// of other streams' blocks are recorded, CLBlast's temporary buffer comes from the caching
/// allocator (per `temp`), and its event is adopted. Non-blocking.
///
/// This is a safe function because everything [`ForeignCall::call`] requires is checked
/// here, given that CLBlast does what its documentation says (reads A and B and writes C
/// within the given extents, enqueues on the given queue only and hands over its event).
///
/// # Errors
/// [`InteropError::Foreign`] with [`ForeignError::NotAvailable`] without CLBlast;
/// [`InteropError::RegionTooShort`] for an extent beyond a region (or a leading dimension
/// below its width); [`InteropError::ReadOnly`] for a read-only C; [`InteropError::Aliased`]
/// when C shares elements with A or B (the same region given twice);
/// [`InteropError::OtherDevice`]; [`InteropError::Library`] with CLBlast's status; allocation,
/// stream and event errors.
pub fn clblast_sgemm(
    stream: &Stream,
    g: &RowMajorSgemm<'_, '_>,
    temp: TempBuffer,
) -> Result<SgemmDone, InteropError> {
    let blas = Clblast::get()?;
    let ((a, lda), (b, ldb), (c, ldc)) = (g.a, g.b, g.c);
    if !c.is_writable() {
        return Err(InteropError::ReadOnly);
    }
    for (read, r) in [("A", a), ("B", b)] {
        if let Some((start, end)) = c.shared_with(r) {
            return Err(InteropError::Aliased {
                written: "C",
                read,
                start,
                end,
            });
        }
    }
    a.require_matrix(g.m, g.k, lda)?;
    b.require_matrix(g.k, g.n, ldb)?;
    c.require_matrix(g.m, g.n, ldc)?;
    let call = stream.foreign().uses(a)?.uses(b)?.uses(c)?;
    let raw = g.to_raw();
    let queue = stream.queue()?;
    // SAFETY: `queue` is the stream's live queue; the size query enqueues nothing.
    #[allow(unsafe_code)]
    let asked = unsafe { blas.sgemm_temp_buffer_size(&raw, queue.as_raw()) }?;
    let workspace_bytes = match temp {
        TempBuffer::AsNeeded => asked,
        TempBuffer::Always => asked.max(4),
    };
    let code = |e: ForeignError| e.code().map_or(-1, i64::from);
    let used_temp = std::cell::Cell::new(false);
    // SAFETY: A, B and C are regions of live allocations borrowed for this call, with the
    // extents CLBlast touches checked above and C writable; CLBlast enqueues on the given
    // queue only, keeps no handle, uses the first bytes of its temporary buffer (the size it
    // asked for, at most the workspace's) only during its commands, and hands over the event
    // it returns (`Clblast::sgemm`'s contract): what `ForeignCall::call` requires. The
    // temporary buffer takes no offset, so it starts at the workspace's first byte: the
    // segment's buffer when the workspace starts it, else a sub-buffer of exactly the
    // workspace (`block_cl_mem`), never the segment's buffer from another offset, whose
    // first bytes are other allocations'.
    #[allow(unsafe_code)]
    let event = unsafe {
        call.workspace(workspace_bytes).call(|q| {
            let temp = q.workspace().map(|ws| match ws.offset() {
                0 => Ok(ws.cl_mem()),
                _ => ws.data_ptr().block_cl_mem().map(|(mem, _)| mem),
            });
            match temp {
                Some(Ok(temp)) => {
                    used_temp.set(true);
                    blas.sgemm_with_temp_buffer(&raw, q.queue(), temp)
                        .map_err(code)
                }
                // No buffer starting at the workspace (a block inside a segment where
                // sub-buffers are unsafe, NVIDIA): CLBlast makes its own temporary buffer.
                Some(Err(_)) | None => blas.sgemm(&raw, q.queue()).map_err(code),
            }
        })
    }?;
    Ok(SgemmDone {
        event,
        workspace_bytes: if used_temp.get() { workspace_bytes } else { 0 },
    })
}
