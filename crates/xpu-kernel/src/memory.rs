//! Typed device memory on the caching allocator: [`DeviceBuffer<T>`] (owning) and the
//! borrowed views [`DeviceSlice`] / [`DeviceSliceMut`], with typed copies (host to device,
//! device to host, device to device, across devices) and fills.
//!
//! `T` is plain old data ([`bytemuck::Pod`]): every bit pattern is a valid `T`, so device
//! bytes can be read back as `T` without checks. Lengths, offsets and ranges are in
//! **elements of `T`** unless a name says bytes.
//!
//! Panics: none on user input; every misuse (a range outside a buffer, mismatched lengths, a
//! stream of another device, overlapping ranges, a byte size that overflows) is a
//! [`MemoryError`]. As for any `Vec`, the host buffers built by [`to_vec`] and by the staged
//! [`fill`] abort the process if the host is out of memory. Besides the errors each function
//! lists, every operation taking a stream fails with [`MemoryError::Capturing`] on a stream a
//! graph is capturing, and with `Alloc(AllocError::BadFork)` in a bad fork child.
//!
//! SVM: the allocator's `memory_kind:svm` was removed (a typed `ConfigError::Unsupported`), so
//! every block is an OpenCL buffer region and every copy here applies to every block.
//!
//! The anchor is cudarc's safe API (`htod_copy`, `dtoh_sync_copy`, `memcpy_dtod`,
//! `memset_zeros`) and torch's `Tensor.to(device, non_blocking=True)`; unlike cudarc, the
//! memory comes from xpu's stream-ordered caching allocator, and every copy on a stream
//! other than the buffer's allocation stream records that stream on the block
//! (`record_stream`, as `Tensor.record_stream`), so the block is not reused before the copy
//! completes.
//!
//! | operation | call | blocking? |
//! |---|---|---|
//! | allocate | [`DeviceBuffer::new`] (contents unspecified), [`DeviceBuffer::zeroed`] | no |
//! | host → device | [`DeviceBuffer::from_slice`], [`copy_htod`] / [`StreamMemoryExt::htod_copy`] | no (the host slice is copied into pinned staging before the call returns: by up to [`STAGING_MAX_THREADS`] threads from 2 MiB up, in pieces of [`staging_plan`], each uploaded as soon as it is filled) |
//! | pinned host → device | [`copy_htod_pinned`] (no staging: the raw pinned bandwidth) | no |
//! | device → host | [`copy_dtoh`], [`DeviceBuffer::to_vec`] / [`StreamMemoryExt::dtoh_sync_copy`] | yes (after the work enqueued on the stream before it) |
//! | device → device | [`copy_dtod`], [`DeviceBuffer::copy_within`] | no |
//! | fill | [`fill`], [`memset_zeros`] | no |
//! | across devices | [`copy_peer`], [`DeviceBuffer::to_device`] | until the source's bytes reached pinned staging; the upload is not waited for |
//!
//! ```
//! use xpu_kernel::memory::{DeviceBuffer, StreamMemoryExt};
//! # fn main() -> Result<(), xpu_kernel::MemoryError> {
//! # if xpu_device::device_count() == 0 { return Ok(()); }
//! let stream = xpu_stream::get_stream_from_pool(0, 0).expect("stream");
//! let x: DeviceBuffer<f32> = stream.htod_copy(&[1.0, 2.0, 3.0, 4.0])?;
//! assert_eq!(stream.dtoh_sync_copy(&x.slice(1..3)?)?, vec![2.0, 3.0]);
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use bytemuck::Pod;
use xpu_alloc::host::{host_allocate_on, HostError, HostPtr};
use xpu_alloc::{stream_key, AllocError, DataPtr};
use xpu_stream::Stream;

/// Largest pinned staging piece of the host-to-device path, bytes: each piece is one pinned
/// block from the caching host allocator and one `clEnqueueWriteBuffer`. 8 MiB moves in about
/// 150 us at the H200's 55.4 GB/s raw pinned bandwidth, so the per-command cost (a few us on
/// NVIDIA's OpenCL) stays near 2%.
pub const STAGING_CHUNK_BYTES: usize = 8 << 20;

/// First staging piece of a multi-threaded upload, bytes: pieces start at this size and double
/// (each round of [`staging_threads`] pieces) up to [`STAGING_CHUNK_BYTES`], so the first
/// transfer starts after one core copied 256 KiB (about 27 us at the 9.8 GB/s one H200 host core
/// reached) instead of after 8 MiB (850 us, 17% of a 256 MiB upload's transfer time).
pub const STAGING_FIRST_PIECE_BYTES: usize = 256 << 10;

/// Most threads copying a pageable source into pinned staging. Measured on the H200 machine
/// (2026-12-01, 16 cores): one core stages 9.8 GB/s, the raw pinned transfer runs at
/// 55.4 GB/s, so at least 6 copying threads keep the transfer busy; 8 leave headroom for the
/// memory bandwidth the transfer itself takes.
pub const STAGING_MAX_THREADS: usize = 8;

/// Bytes of source per staging thread: uploads smaller than twice this are staged on the
/// calling thread (spawning a thread costs tens of microseconds, about what one core copies
/// of 256 KiB), larger ones on up to `bytes / STAGING_BYTES_PER_THREAD` threads.
pub const STAGING_BYTES_PER_THREAD: usize = 1 << 20;

/// A failure of a typed-memory operation.
///
/// In a bad fork child every typed-memory entry point returns
/// `Alloc(AllocError::BadFork)` at once (before any allocator, staging or driver call).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    /// Source and destination of a copy have different lengths.
    #[error("copy length mismatch: the source has {src} elements, the destination {dst}")]
    LengthMismatch {
        /// Source length, elements.
        src: usize,
        /// Destination length, elements.
        dst: usize,
    },
    /// A range outside the buffer or view it was taken from.
    #[error("element range {start}..{end} is outside a buffer of {len} elements")]
    OutOfRange {
        /// First element of the range.
        start: usize,
        /// One past the last element of the range.
        end: usize,
        /// The length of the buffer or view, elements.
        len: usize,
    },
    /// The byte size of `len` elements overflows the address space.
    #[error("{len} elements of {elem_size} bytes overflow the address space")]
    TooLarge {
        /// Elements requested.
        len: usize,
        /// `size_of::<T>()`, bytes.
        elem_size: usize,
    },
    /// A stream of another device than the memory's.
    #[error("stream of device {stream} used with memory of device {device}")]
    StreamDevice {
        /// The stream's device.
        stream: usize,
        /// The memory's device.
        device: usize,
    },
    /// Overlapping source and destination ranges of one allocation (`clEnqueueCopyBuffer`
    /// fails with `CL_MEM_COPY_OVERLAP`, OpenCL 3.0 §5.2.3).
    #[error("overlapping copy within one buffer: elements {src}.. and {dst}.. ({len} elements)")]
    Overlap {
        /// First source element.
        src: usize,
        /// First destination element.
        dst: usize,
        /// Elements copied.
        len: usize,
    },
    /// A pinned host source whose byte length is not the destination's.
    #[error("pinned source of {bytes} bytes copied into {expected} bytes of device memory")]
    PinnedLength {
        /// The pinned allocation's length, bytes.
        bytes: usize,
        /// The destination's length, bytes.
        expected: usize,
    },
    /// A typed-memory command enqueued directly on a stream that a graph is capturing
    /// (as torch.cuda's "operation not permitted when stream is capturing"): during a
    /// capture, commands go through the capture handle ([`crate::graph::Capture`]). Nothing
    /// was enqueued; the stream stays usable.
    #[error(
        "stream {stream} of device {device} is being captured into a graph: enqueue through \
         the capture handle"
    )]
    Capturing {
        /// The stream's device.
        device: usize,
        /// The stream's id.
        stream: u64,
    },
    /// The caching device allocator failed (out of memory, a bad stream, ...).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// Pinned staging or a host copy failed.
    #[error(transparent)]
    Host(#[from] HostError),
}

xpu_device::impl_is_bad_fork! {
    /// True for a bad fork (see `xpu_device::fork`): the `BadFork` of the allocator or the
    /// pinned-host layer this error wraps (typed-memory entry points return
    /// `Alloc(AllocError::BadFork)` in a bad fork child).
    MemoryError { wraps: Alloc, Host; }
}

fn byte_len<T>(len: usize) -> Result<usize, MemoryError> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or(MemoryError::TooLarge {
            len,
            elem_size: std::mem::size_of::<T>(),
        })
}

/// Resolves `range` against a length `len`.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize), MemoryError> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        (s, e) => Err(MemoryError::OutOfRange {
            start: s.unwrap_or(usize::MAX),
            end: e.unwrap_or(usize::MAX),
            len,
        }),
    }
}

/// Typed device memory a copy can read: an element range of one allocator block.
/// Implemented by [`DeviceBuffer`], [`DeviceSlice`] and [`DeviceSliceMut`]; the launch layer
/// takes any of them as one kernel argument.
pub trait DeviceRegion<T: Pod> {
    /// The allocator block holding the elements.
    fn data_ptr(&self) -> &DataPtr;
    /// The first element's index in the block (elements of `T` from the block's start).
    fn offset(&self) -> usize;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first element's byte offset in the block (saturating at `usize::MAX`, which no
    /// block reaches: a copy then fails the block's range check).
    fn byte_offset(&self) -> usize {
        self.offset().saturating_mul(std::mem::size_of::<T>())
    }
    /// The length in bytes (saturating, as [`DeviceRegion::byte_offset`]).
    fn byte_len(&self) -> usize {
        self.len().saturating_mul(std::mem::size_of::<T>())
    }
    /// The device index.
    fn device(&self) -> usize {
        self.data_ptr().device()
    }
}

/// Typed device memory a copy or fill can write ([`DeviceBuffer`], [`DeviceSliceMut`]):
/// writing takes `&mut`, so no [`DeviceSlice`] of the same elements is alive.
pub trait DeviceRegionMut<T: Pod>: DeviceRegion<T> {}

/// An owning array of `len` elements of `T` on one device, in a block of the caching
/// allocator (freed, stream-ordered, on drop). As cudarc's `CudaSlice<T>`.
pub struct DeviceBuffer<T: Pod> {
    ptr: DataPtr,
    len: usize,
    _t: PhantomData<T>,
}

/// A borrowed element range of a [`DeviceBuffer`] (read-only). As cudarc's `CudaView`.
#[derive(Clone, Copy)]
pub struct DeviceSlice<'a, T: Pod> {
    ptr: &'a DataPtr,
    offset: usize,
    len: usize,
    _t: PhantomData<&'a [T]>,
}

/// A mutably borrowed element range of a [`DeviceBuffer`]. As cudarc's `CudaViewMut`.
pub struct DeviceSliceMut<'a, T: Pod> {
    ptr: &'a DataPtr,
    offset: usize,
    len: usize,
    _t: PhantomData<&'a mut [T]>,
}

impl<T: Pod> DeviceRegion<T> for DeviceBuffer<T> {
    fn data_ptr(&self) -> &DataPtr {
        &self.ptr
    }
    fn offset(&self) -> usize {
        0
    }
    fn len(&self) -> usize {
        self.len
    }
}
impl<T: Pod> DeviceRegionMut<T> for DeviceBuffer<T> {}

/// Inherent `len` and `is_empty` (the [`DeviceRegion`] ones, callable without importing the
/// trait).
macro_rules! len_accessors {
    () => {
        /// Number of elements ([`DeviceRegion::len`]).
        #[must_use]
        pub fn len(&self) -> usize {
            DeviceRegion::len(self)
        }

        /// Whether there are no elements ([`DeviceRegion::is_empty`]).
        #[must_use]
        pub fn is_empty(&self) -> bool {
            DeviceRegion::is_empty(self)
        }
    };
}

/// What the two views share: `DeviceRegion`, `Debug`, and the inherent `offset`, `len`,
/// `is_empty` (the trait's, callable without importing it).
macro_rules! view_common {
    ($view:ident) => {
        impl<T: Pod> DeviceRegion<T> for $view<'_, T> {
            fn data_ptr(&self) -> &DataPtr {
                self.ptr
            }
            fn offset(&self) -> usize {
                self.offset
            }
            fn len(&self) -> usize {
                self.len
            }
        }

        impl<'a, T: Pod> $view<'a, T> {
            /// `len` elements of `ptr`'s block from element `offset`.
            fn new(ptr: &'a DataPtr, offset: usize, len: usize) -> Self {
                Self {
                    ptr,
                    offset,
                    len,
                    _t: PhantomData,
                }
            }

            /// The elements `range` (indices relative to `offset`) of the `len` elements of
            /// `ptr`'s block from element `offset`.
            fn within(
                ptr: &'a DataPtr,
                offset: usize,
                len: usize,
                range: impl RangeBounds<usize>,
            ) -> Result<Self, MemoryError> {
                let (start, len) = resolve(range, len)?;
                Ok(Self::new(ptr, offset + start, len))
            }

            /// The first element's index in the block ([`DeviceRegion::offset`]).
            #[must_use]
            pub fn offset(&self) -> usize {
                DeviceRegion::offset(self)
            }

            len_accessors!();
        }

        impl<T: Pod> std::fmt::Debug for $view<'_, T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($view))
                    .field("type", &std::any::type_name::<T>())
                    .field("offset", &self.offset)
                    .field("len", &self.len)
                    .field("ptr", self.ptr)
                    .finish()
            }
        }
    };
}
view_common!(DeviceSlice);
view_common!(DeviceSliceMut);
impl<T: Pod> DeviceRegionMut<T> for DeviceSliceMut<'_, T> {}

impl<T: Pod> DeviceBuffer<T> {
    /// `len` elements on `stream`'s device, allocated for use on `stream` (its allocation
    /// stream). The contents are unspecified (any bit pattern is a valid `T`; they may be
    /// bytes of a freed allocation of this process). `len == 0` (or a zero-sized `T`) gives
    /// an empty buffer without a block. As cudarc's `alloc`.
    ///
    /// # Errors
    /// [`MemoryError::TooLarge`] when the byte size overflows; [`MemoryError::Alloc`] as
    /// `xpu_alloc::allocate` (out of memory, bad configuration, ...).
    pub fn new(len: usize, stream: &Stream) -> Result<Self, MemoryError> {
        check_fork()?;
        let bytes = byte_len::<T>(len)?;
        let ptr = xpu_alloc::allocate(bytes as u64, stream)?;
        Ok(Self {
            ptr,
            len,
            _t: PhantomData,
        })
    }

    /// `len` elements from the private pool `pool` (as [`DeviceBuffer::new`], whatever the
    /// thread's routing): the block is `pool`'s and returns to it when the buffer drops. As
    /// `torch.empty(..., device=...)` under `torch.cuda.use_mem_pool(pool)`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`]; [`MemoryError::Alloc`] with
    /// `AllocError::StreamDevice` for a stream of another device than the pool's.
    pub fn new_in_pool(
        len: usize,
        stream: &Stream,
        pool: &xpu_alloc::MemPool,
    ) -> Result<Self, MemoryError> {
        check_fork()?;
        let bytes = byte_len::<T>(len)?;
        let ptr = pool.allocate(bytes as u64, stream)?;
        Ok(Self {
            ptr,
            len,
            _t: PhantomData,
        })
    }

    /// `len` zeroed elements (the zero fill is enqueued on `stream`, non-blocking). As
    /// cudarc's `alloc_zeros`, `torch.zeros(device=...)`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`memset_zeros`].
    pub fn zeroed(len: usize, stream: &Stream) -> Result<Self, MemoryError> {
        check_fork()?;
        let mut buf = Self::new(len, stream)?;
        memset_zeros(stream, &mut buf)?;
        Ok(buf)
    }

    /// A new buffer holding a copy of `src` (see [`copy_htod`]; non-blocking: `src` may be
    /// changed or dropped as soon as the call returns). As cudarc's `htod_copy`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`copy_htod`].
    pub fn from_slice(src: &[T], stream: &Stream) -> Result<Self, MemoryError> {
        check_fork()?;
        let mut buf = Self::new(src.len(), stream)?;
        copy_htod(stream, src, &mut buf)?;
        Ok(buf)
    }

    len_accessors!();

    /// The device index ([`DeviceRegion::device`]).
    #[must_use]
    pub fn device(&self) -> usize {
        DeviceRegion::device(self)
    }

    /// The allocator block (for the launch layer and `xpu_alloc` functions).
    #[must_use]
    pub fn data_ptr(&self) -> &DataPtr {
        &self.ptr
    }

    /// The allocator block, giving up the typing.
    #[must_use]
    pub fn into_data_ptr(self) -> DataPtr {
        self.ptr
    }

    /// The elements `range` (element indices), borrowed read-only.
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] when the range is not within `0..len()`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, T>, MemoryError> {
        DeviceSlice::within(&self.ptr, 0, self.len, range)
    }

    /// The elements `range`, borrowed mutably (copy and fill destination).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] when the range is not within `0..len()`.
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, T>, MemoryError> {
        DeviceSliceMut::within(&self.ptr, 0, self.len, range)
    }

    /// The whole buffer as a [`DeviceSlice`].
    #[must_use]
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice::new(&self.ptr, 0, self.len)
    }

    /// The whole buffer as a [`DeviceSliceMut`].
    pub fn as_slice_mut(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut::new(&self.ptr, 0, self.len)
    }

    /// The elements, copied to a new `Vec` (blocking; see [`copy_dtoh`]). As cudarc's
    /// `dtoh_sync_copy`, `Tensor.cpu()`.
    ///
    /// # Errors
    /// As [`copy_dtoh`].
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>, MemoryError> {
        check_fork()?;
        to_vec(stream, self)
    }

    /// Device-to-device copy of the elements `src` to the elements starting at `dst` of this
    /// same buffer, on `stream` (non-blocking). As `memmove` within one buffer, but the
    /// ranges may not overlap (OpenCL has no overlapping copy).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] for a range outside the buffer; [`MemoryError::Overlap`]
    /// for overlapping ranges; otherwise as [`copy_dtod`].
    pub fn copy_within(
        &mut self,
        stream: &Stream,
        src: impl RangeBounds<usize>,
        dst: usize,
    ) -> Result<(), MemoryError> {
        check_fork()?;
        let (s, len) = resolve(src, self.len)?;
        let (d, _) = resolve(dst..dst.saturating_add(len), self.len)?;
        if len == 0 || std::mem::size_of::<T>() == 0 {
            return Ok(());
        }
        if s < d + len && d < s + len {
            return Err(MemoryError::Overlap {
                src: s,
                dst: d,
                len,
            });
        }
        check_stream(stream, &self.ptr)?;
        let view = self.ptr.view()?;
        let size = std::mem::size_of::<T>();
        note_use(&self.ptr, stream)?;
        Ok(view.copy_from(stream, &view, s * size, d * size, len * size)?)
    }

    /// A copy of this buffer on `dst_stream`'s device (see [`copy_peer`]). As torch's
    /// `Tensor.to(device, non_blocking=True)`.
    ///
    /// # Errors
    /// As [`DeviceBuffer::new`] and [`copy_peer`].
    pub fn to_device(&self, src_stream: &Stream, dst_stream: &Stream) -> Result<Self, MemoryError> {
        check_fork()?;
        let mut out = Self::new(self.len, dst_stream)?;
        copy_peer(src_stream, self, dst_stream, &mut out)?;
        Ok(out)
    }
}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("ptr", &self.ptr)
            .finish()
    }
}

impl<'a, T: Pod> DeviceSlice<'a, T> {
    /// A sub-range of this view (element indices relative to the view).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] when the range is not within `0..len()`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, T>, MemoryError> {
        DeviceSlice::within(self.ptr, self.offset, self.len, range)
    }

    /// The allocator block of the viewed buffer.
    #[must_use]
    pub fn data_ptr(&self) -> &'a DataPtr {
        self.ptr
    }
}

impl<T: Pod> DeviceSliceMut<'_, T> {
    /// A sub-range of this view, reborrowed mutably (indices relative to the view).
    ///
    /// # Errors
    /// [`MemoryError::OutOfRange`] when the range is not within `0..len()`.
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, T>, MemoryError> {
        DeviceSliceMut::within(self.ptr, self.offset, self.len, range)
    }

    /// This view read-only.
    #[must_use]
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice::new(self.ptr, self.offset, self.len)
    }

    /// The allocator block of the viewed buffer.
    #[must_use]
    pub fn data_ptr(&self) -> &DataPtr {
        self.ptr
    }
}

/// [`MemoryError::LengthMismatch`] unless a copy's two sides have the same length.
fn same_len(src: usize, dst: usize) -> Result<(), MemoryError> {
    if src == dst {
        Ok(())
    } else {
        Err(MemoryError::LengthMismatch { src, dst })
    }
}

/// Checks a copy between two regions, each with the stream it is used on: same lengths, each
/// stream of its region's device (and not capturing). Returns the byte length.
fn check_two_sided<T: Pod>(
    (src_stream, src): (&Stream, &impl DeviceRegion<T>),
    (dst_stream, dst): (&Stream, &impl DeviceRegion<T>),
) -> Result<usize, MemoryError> {
    same_len(src.len(), dst.len())?;
    check_stream(src_stream, src.data_ptr())?;
    check_stream(dst_stream, dst.data_ptr())?;
    Ok(src.byte_len())
}

fn check_stream(stream: &Stream, ptr: &DataPtr) -> Result<(), MemoryError> {
    if stream.is_capturing() {
        return Err(MemoryError::Capturing {
            device: stream.device(),
            stream: stream.id(),
        });
    }
    let device = ptr.device();
    if stream.device() == device {
        Ok(())
    } else {
        Err(MemoryError::StreamDevice {
            stream: stream.device(),
            device,
        })
    }
}

/// Records `stream` on `ptr`'s block when it is not the allocation stream (as
/// `Tensor.record_stream`). Called before enqueuing, so a failure part-way (e.g. the third of
/// five staged chunks) still leaves the enqueued part recorded: the marker that orders the
/// block's reuse is taken on `stream` when the block is freed.
fn note_use(ptr: &DataPtr, stream: &Stream) -> Result<(), MemoryError> {
    if !ptr.is_empty() && ptr.stream() != Some(stream_key(stream)) {
        xpu_alloc::record_stream(ptr, stream)?;
    }
    Ok(())
}

/// Host-to-device copy of `src` into `dst`, on `stream` (non-blocking, as cudarc's
/// `memcpy_htod` / torch's `copy_(non_blocking=True)` from pageable memory). `src` is copied
/// into pinned staging blocks from the caching host allocator, one block per piece of
/// [`staging_plan`], and each block is uploaded with `clEnqueueWriteBuffer` on `stream` as soon
/// as it is filled, so staging overlaps the transfers already enqueued. Uploads of at least
/// `2 * STAGING_BYTES_PER_THREAD` bytes are staged by [`staging_threads`] scoped threads (the
/// calling thread enqueues the pieces as they are filled); smaller ones on the calling thread.
/// Each block's use is recorded, so it is reused only after its upload completes. `src` is not
/// referenced after the call returns (the threads are joined before it returns). Ordered
/// after the work enqueued on `stream` before.
///
/// # Errors
/// [`MemoryError::LengthMismatch`] unless `src.len() == dst.len()`;
/// [`MemoryError::StreamDevice`] for a stream of another device; [`MemoryError::Host`] when
/// no pinned staging can be allocated or the enqueue fails (the pieces enqueued before the
/// failure still complete; the destination's contents are then partly written).
pub fn copy_htod<T: Pod>(
    stream: &Stream,
    src: &[T],
    dst: &mut impl DeviceRegionMut<T>,
) -> Result<(), MemoryError> {
    check_fork()?;
    same_len(src.len(), dst.len())?;
    let ptr = dst.data_ptr();
    check_stream(stream, ptr)?;
    let bytes: &[u8] = bytemuck::cast_slice(src);
    if bytes.is_empty() {
        return Ok(());
    }
    let view = ptr.view()?;
    let base = dst.byte_offset();
    note_use(ptr, stream)?;
    let device = stream.device();
    let threads = staging_threads(bytes.len());
    let plan = staging_plan(bytes.len(), threads);
    let upload = |offset: usize, staging: &HostPtr| {
        view.write_from_host(
            stream,
            staging,
            0,
            base.saturating_add(offset),
            staging.len(),
        )
    };
    if threads == 1 {
        for piece in plan {
            let staging = stage(device, &bytes[piece.clone()])?;
            upload(piece.start, &staging)?;
        }
        return Ok(());
    }
    stage_in_parallel(device, bytes, &plan, threads, upload)
}

/// The number of threads [`copy_htod`] stages `bytes` with: 1 below
/// `2 * STAGING_BYTES_PER_THREAD`, otherwise `bytes / STAGING_BYTES_PER_THREAD` capped by
/// [`STAGING_MAX_THREADS`] and by `std::thread::available_parallelism`.
#[must_use]
pub fn staging_threads(bytes: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (bytes / STAGING_BYTES_PER_THREAD)
        .min(STAGING_MAX_THREADS)
        .min(cores)
        .max(1)
}

/// The byte ranges of the pinned staging pieces [`copy_htod`] uses for `bytes` staged by
/// `threads` threads, in source order: one pinned block and one transfer each. With one thread,
/// pieces of [`STAGING_CHUNK_BYTES`]; with more, round `r` holds `threads` pieces of
/// `STAGING_FIRST_PIECE_BYTES << r` bytes (at most [`STAGING_CHUNK_BYTES`]); the last piece
/// may be shorter.
#[must_use]
pub fn staging_plan(bytes: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let threads = threads.max(1);
    let mut plan = Vec::new();
    let mut size = if threads == 1 {
        STAGING_CHUNK_BYTES
    } else {
        STAGING_FIRST_PIECE_BYTES
    };
    let mut at = 0;
    while at < bytes {
        if plan.len() % threads == 0 && !plan.is_empty() {
            size = (size * 2).min(STAGING_CHUNK_BYTES);
        }
        let end = bytes.min(at + size);
        plan.push(at..end);
        at = end;
    }
    plan
}

/// A pinned block of `piece.len()` bytes holding `piece`.
fn stage(device: usize, piece: &[u8]) -> Result<HostPtr, MemoryError> {
    let mut staging = host_allocate_on(device, piece.len())?;
    staging.as_mut_slice().copy_from_slice(piece);
    Ok(staging)
}

/// Stages the pieces of `plan` on `threads` scoped threads (each takes the next unstaged piece
/// in plan order) and hands each filled block to `upload` on the calling thread, in the order
/// they are filled. On the first failure the threads stop taking pieces; the error is returned
/// once all of them are joined.
fn stage_in_parallel(
    device: usize,
    bytes: &[u8],
    plan: &[std::ops::Range<usize>],
    threads: usize,
    upload: impl Fn(usize, &HostPtr) -> Result<(), HostError>,
) -> Result<(), MemoryError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<Result<(usize, HostPtr), MemoryError>>();
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(piece) = plan.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let staged = stage(device, &bytes[piece.clone()]).map(|h| (piece.start, h));
                    let failed = staged.is_err();
                    if tx.send(staged).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut result = Ok(());
        // Every piece arrives once unless a thread failed; the loop ends when all threads
        // dropped their senders.
        // pieces after a failure are dropped unsent (their blocks had no copy in flight).
        for staged in rx {
            if result.is_err() {
                continue;
            }
            result = staged.and_then(|(offset, staging)| Ok(upload(offset, &staging)?));
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
        }
        result
    })
}

/// Host-to-device copy from pinned memory the caller already holds (as torch's
/// `pinned.to(device, non_blocking=True)`): one `clEnqueueWriteBuffer` from the pinned block,
/// no staging copy, so it runs at the raw pinned bandwidth. `src` holds the elements' bytes:
/// allocate it with `xpu_alloc::host_allocate(dst.byte_len())` (or `host_allocate_on`) and
/// fill it with `bytemuck::cast_slice_mut` or `copy_from_slice`; its use is recorded, so
/// dropping it at once is safe, and writing it waits for the copy (see `HostPtr`).
///
/// # Errors
/// [`MemoryError::PinnedLength`] unless `src.len() == dst.byte_len()`;
/// [`MemoryError::StreamDevice`]; [`MemoryError::Host`] for a failed enqueue.
pub fn copy_htod_pinned<T: Pod>(
    stream: &Stream,
    src: &HostPtr,
    dst: &mut impl DeviceRegionMut<T>,
) -> Result<(), MemoryError> {
    let (len, offset) = (dst.byte_len(), dst.byte_offset());
    pinned_copy(stream, dst.data_ptr(), src.len(), len, |view| {
        view.write_from_host(stream, src, 0, offset, len)
    })
}

/// Device-to-host copy of `src` into pinned memory the caller holds (as torch's
/// `tensor.to("cpu", non_blocking=True)` into a pinned tensor, or cudarc's async `memcpy_dtoh`
/// into page-locked memory): one non-blocking `clEnqueueReadBuffer` into the pinned block,
/// after the work enqueued on `stream` before it. `dst` receives the elements' bytes: allocate
/// it with `xpu_alloc::host_allocate(src.byte_len())` (or `host_allocate_on`) and read it with
/// `bytemuck::cast_slice`. Reading `dst` (`Deref`, `as_slice`) waits for the copy, so the bytes
/// never change under a live borrow (see `HostPtr`); `dst` may be dropped at once (the block
/// is reused only after the copy completed).
///
/// # Errors
/// [`MemoryError::PinnedLength`] unless `dst.len() == src.byte_len()`;
/// [`MemoryError::StreamDevice`]; [`MemoryError::Host`] for a failed enqueue.
pub fn copy_dtoh_pinned<T: Pod>(
    stream: &Stream,
    src: &impl DeviceRegion<T>,
    dst: &mut HostPtr,
) -> Result<(), MemoryError> {
    let (len, offset) = (src.byte_len(), src.byte_offset());
    pinned_copy(stream, src.data_ptr(), dst.len(), len, |view| {
        view.read_into_host(stream, offset, dst, 0, len)
    })
}

/// What both pinned copies share: the fork and length checks (`pinned` bytes against the
/// region's `len`), the stream's device, nothing for 0 bytes, the stream's use noted on
/// `ptr`, then `copy` on the block's view.
fn pinned_copy(
    stream: &Stream,
    ptr: &DataPtr,
    pinned: usize,
    len: usize,
    copy: impl FnOnce(&xpu_alloc::BlockView<'_>) -> Result<(), HostError>,
) -> Result<(), MemoryError> {
    check_fork()?;
    if pinned != len {
        return Err(MemoryError::PinnedLength {
            bytes: pinned,
            expected: len,
        });
    }
    check_stream(stream, ptr)?;
    if len == 0 {
        return Ok(());
    }
    let view = ptr.view()?;
    note_use(ptr, stream)?;
    Ok(copy(&view)?)
}

/// Device-to-host copy of `src` into `dst`, on `stream`: blocking (`clEnqueueReadBuffer`
/// straight into `dst`, pageable), after the work enqueued on `stream` before it; `dst`
/// holds the elements when the call returns. As cudarc's `memcpy_dtoh` / `dtoh_sync_copy`.
///
/// # Errors
/// [`MemoryError::LengthMismatch`] unless `src.len() == dst.len()`;
/// [`MemoryError::StreamDevice`] for a stream of another device; [`MemoryError::Alloc`] for
/// a failed read.
pub fn copy_dtoh<T: Pod>(
    stream: &Stream,
    src: &impl DeviceRegion<T>,
    dst: &mut [T],
) -> Result<(), MemoryError> {
    check_fork()?;
    same_len(src.len(), dst.len())?;
    let ptr = src.data_ptr();
    check_stream(stream, ptr)?;
    let out: &mut [u8] = bytemuck::cast_slice_mut(dst);
    if out.is_empty() {
        return Ok(());
    }
    ptr.view()?.read(stream, src.byte_offset(), out)?;
    Ok(())
}

/// The elements of `src` in a new `Vec` (blocking; see [`copy_dtoh`]).
///
/// # Errors
/// As [`copy_dtoh`]; [`MemoryError::OutOfRange`] when `src` claims elements beyond its block
/// (checked before the `Vec` is sized).
pub fn to_vec<T: Pod>(stream: &Stream, src: &impl DeviceRegion<T>) -> Result<Vec<T>, MemoryError> {
    check_fork()?;
    // One read of the claim sizes the vector: a region whose `len()` changes between reads
    // gets the copy's own `LengthMismatch`, never a vector sized by an unchecked read.
    let len = checked_len(src)?;
    let mut out = vec![T::zeroed(); len];
    copy_dtoh(stream, src, &mut out)?;
    Ok(out)
}

/// Device-to-device copy of `src` into `dst` on `stream` (`clEnqueueCopyBuffer`,
/// non-blocking), both on the stream's device. As cudarc's `memcpy_dtod`.
///
/// # Errors
/// [`MemoryError::LengthMismatch`]; [`MemoryError::StreamDevice`] when either side is on
/// another device than the stream (use [`copy_peer`] across devices);
/// [`MemoryError::Overlap`] for overlapping ranges of one block; [`MemoryError::Alloc`] for
/// a failed enqueue.
pub fn copy_dtod<T: Pod>(
    stream: &Stream,
    src: &impl DeviceRegion<T>,
    dst: &mut impl DeviceRegionMut<T>,
) -> Result<(), MemoryError> {
    check_fork()?;
    let len = check_two_sided((stream, src), (stream, dst))?;
    if len == 0 {
        return Ok(());
    }
    let (sp, dp) = (src.data_ptr(), dst.data_ptr());
    let (s, d) = (src.byte_offset(), dst.byte_offset());
    if sp.same_allocation(dp) && s < d.saturating_add(len) && d < s.saturating_add(len) {
        return Err(MemoryError::Overlap {
            src: src.offset(),
            dst: dst.offset(),
            len: src.len(),
        });
    }
    let (sv, dv) = (sp.view()?, dp.view()?);
    note_use(sp, stream)?;
    note_use(dp, stream)?;
    Ok(dv.copy_from(stream, &sv, s, d, len)?)
}

/// Fills `dst` with `value` on `stream` (non-blocking). When `size_of::<T>()` is a power of
/// two up to 128 bytes this is one `clEnqueueFillBuffer` with `value`'s bytes as the pattern
/// (OpenCL 3.0 §5.2.3 allows only those pattern sizes); otherwise (e.g. `[u8; 3]`) the
/// values are built on the host and uploaded as [`copy_htod`] does. As cudarc's
/// `memset`-style fills and `Tensor.fill_`.
///
/// # Errors
/// [`MemoryError::StreamDevice`]; [`MemoryError::Alloc`] / [`MemoryError::Host`] for a
/// failed enqueue or staging allocation; [`MemoryError::OutOfRange`] when `dst` claims
/// elements beyond its block (checked before values are staged).
pub fn fill<T: Pod>(
    stream: &Stream,
    dst: &mut impl DeviceRegionMut<T>,
    value: T,
) -> Result<(), MemoryError> {
    check_fork()?;
    let size = std::mem::size_of::<T>();
    if size.is_power_of_two() && size <= 128 {
        fill_pattern(stream, dst, bytemuck::bytes_of(&value))
    } else {
        let values = vec![value; checked_len(dst)?];
        copy_htod(stream, &values, dst)
    }
}

/// The number of elements a region claims, read once and checked against its block before
/// host memory is sized from it: [`DeviceRegion`] is a public trait, so a user's type may
/// claim more elements than its block holds (or another number at each call), and a host
/// buffer of that length could not be allocated (a panic, or an abort) before the copy's own
/// range check refused it. The caller sizes its host memory from the returned value only.
///
/// # Errors
/// [`MemoryError::OutOfRange`] with the block's length in elements.
fn checked_len<T: Pod>(region: &impl DeviceRegion<T>) -> Result<usize, MemoryError> {
    let (start, len) = (region.offset(), region.len());
    claim_fits::<T>(region.data_ptr(), start, len).map_err(|elements| MemoryError::OutOfRange {
        start,
        end: start.saturating_add(len),
        len: elements,
    })?;
    Ok(len)
}

/// Whether elements `offset..offset + len` of `T` lie inside `block`; else `Err` with the
/// block's length in whole elements of `T`. A zero-sized `T` has no bytes to be outside of.
pub(crate) fn claim_fits<T>(block: &DataPtr, offset: usize, len: usize) -> Result<(), usize> {
    let bytes = usize::try_from(block.size()).unwrap_or(usize::MAX);
    match bytes.checked_div(std::mem::size_of::<T>()) {
        Some(elements) if offset.checked_add(len).is_none_or(|end| end > elements) => Err(elements),
        _ => Ok(()),
    }
}

/// Sets every byte of `dst` to zero on `stream` (non-blocking, one `clEnqueueFillBuffer`). As
/// cudarc's `memset_zeros`, `Tensor.zero_()`.
///
/// # Errors
/// As [`fill`].
pub fn memset_zeros<T: Pod>(
    stream: &Stream,
    dst: &mut impl DeviceRegionMut<T>,
) -> Result<(), MemoryError> {
    check_fork()?;
    fill_pattern(stream, dst, &[0])
}

fn fill_pattern<T: Pod>(
    stream: &Stream,
    dst: &mut impl DeviceRegionMut<T>,
    pattern: &[u8],
) -> Result<(), MemoryError> {
    let ptr = dst.data_ptr();
    check_stream(stream, ptr)?;
    let len = dst.byte_len();
    if len == 0 {
        return Ok(());
    }
    let view = ptr.view()?;
    note_use(ptr, stream)?;
    Ok(view.fill(stream, pattern, dst.byte_offset(), len)?)
}

/// Copy across devices (or within one), staged through pinned host memory since OpenCL has
/// no peer copies: `src` is read into a pinned block on `src_stream` (after the work
/// enqueued there before), then uploaded into `dst` on `dst_stream`. As torch's
/// `Tensor.to(other_device, non_blocking=True)`.
///
/// Blocking behaviour: the call returns once the source's bytes reached pinned memory and
/// the upload is enqueued; it does not wait for the upload (the pinned block's use is
/// recorded on `dst_stream`, so it is not reused before the upload completes). The wait for
/// the download happens on the host because the two devices have separate OpenCL contexts
/// and the backend orders a pinned upload after a download of another context by waiting
/// for it (`CommandQueue::copy_pinned`).
///
/// # Errors
/// [`MemoryError::LengthMismatch`]; [`MemoryError::StreamDevice`] when a stream is not on
/// its side's device; [`MemoryError::Host`] for a failed staging allocation or copy.
pub fn copy_peer<T: Pod>(
    src_stream: &Stream,
    src: &impl DeviceRegion<T>,
    dst_stream: &Stream,
    dst: &mut impl DeviceRegionMut<T>,
) -> Result<(), MemoryError> {
    check_fork()?;
    let len = check_two_sided((src_stream, src), (dst_stream, &*dst))?;
    if len == 0 {
        return Ok(());
    }
    let (sp, dp) = (src.data_ptr(), dst.data_ptr());
    let mut staging = host_allocate_on(dst_stream.device(), len)?;
    let (sv, dv) = (sp.view()?, dp.view()?);
    note_use(sp, src_stream)?;
    note_use(dp, dst_stream)?;
    sv.read_into_host(src_stream, src.byte_offset(), &mut staging, 0, len)?;
    Ok(dv.write_from_host(dst_stream, &staging, 0, dst.byte_offset(), len)?)
}

/// cudarc-style copies as methods of a [`Stream`] (`stream.htod_copy(&v)?`, ...). Each is the
/// free function of this module with the stream first.
pub trait StreamMemoryExt {
    /// A new [`DeviceBuffer`] on this stream holding a copy of `src` ([`DeviceBuffer::from_slice`]).
    ///
    /// # Errors
    /// As [`DeviceBuffer::from_slice`].
    fn htod_copy<T: Pod>(&self, src: &[T]) -> Result<DeviceBuffer<T>, MemoryError>;
    /// [`copy_htod`].
    ///
    /// # Errors
    /// As [`copy_htod`].
    fn memcpy_htod<T: Pod>(
        &self,
        src: &[T],
        dst: &mut impl DeviceRegionMut<T>,
    ) -> Result<(), MemoryError>;
    /// [`to_vec`] (blocking).
    ///
    /// # Errors
    /// As [`copy_dtoh`].
    fn dtoh_sync_copy<T: Pod>(&self, src: &impl DeviceRegion<T>) -> Result<Vec<T>, MemoryError>;
    /// [`copy_dtoh`] (blocking).
    ///
    /// # Errors
    /// As [`copy_dtoh`].
    fn memcpy_dtoh<T: Pod>(
        &self,
        src: &impl DeviceRegion<T>,
        dst: &mut [T],
    ) -> Result<(), MemoryError>;
    /// [`copy_dtod`].
    ///
    /// # Errors
    /// As [`copy_dtod`].
    fn memcpy_dtod<T: Pod>(
        &self,
        src: &impl DeviceRegion<T>,
        dst: &mut impl DeviceRegionMut<T>,
    ) -> Result<(), MemoryError>;
    /// [`fill`].
    ///
    /// # Errors
    /// As [`fill`].
    fn memset<T: Pod>(
        &self,
        dst: &mut impl DeviceRegionMut<T>,
        value: T,
    ) -> Result<(), MemoryError>;
    /// [`memset_zeros`].
    ///
    /// # Errors
    /// As [`memset_zeros`].
    fn memset_zeros<T: Pod>(&self, dst: &mut impl DeviceRegionMut<T>) -> Result<(), MemoryError>;
}

impl StreamMemoryExt for Stream {
    fn htod_copy<T: Pod>(&self, src: &[T]) -> Result<DeviceBuffer<T>, MemoryError> {
        DeviceBuffer::from_slice(src, self)
    }
    fn memcpy_htod<T: Pod>(
        &self,
        src: &[T],
        dst: &mut impl DeviceRegionMut<T>,
    ) -> Result<(), MemoryError> {
        copy_htod(self, src, dst)
    }
    fn dtoh_sync_copy<T: Pod>(&self, src: &impl DeviceRegion<T>) -> Result<Vec<T>, MemoryError> {
        to_vec(self, src)
    }
    fn memcpy_dtoh<T: Pod>(
        &self,
        src: &impl DeviceRegion<T>,
        dst: &mut [T],
    ) -> Result<(), MemoryError> {
        copy_dtoh(self, src, dst)
    }
    fn memcpy_dtod<T: Pod>(
        &self,
        src: &impl DeviceRegion<T>,
        dst: &mut impl DeviceRegionMut<T>,
    ) -> Result<(), MemoryError> {
        copy_dtod(self, src, dst)
    }
    fn memset<T: Pod>(
        &self,
        dst: &mut impl DeviceRegionMut<T>,
        value: T,
    ) -> Result<(), MemoryError> {
        fill(self, dst, value)
    }
    fn memset_zeros<T: Pod>(&self, dst: &mut impl DeviceRegionMut<T>) -> Result<(), MemoryError> {
        memset_zeros(self, dst)
    }
}

/// `Err(Alloc(BadFork))` in a bad fork child: the first check of the typed-memory entry points,
/// before any allocator, staging or driver call (see `xpu_device::fork::refuse_in_bad_fork`).
fn check_fork() -> Result<(), MemoryError> {
    xpu_device::fork::refuse_in_bad_fork(MemoryError::Alloc(AllocError::BadFork))
}

/// A buffer lives on its allocation's device: `xpu::device_of(&buffer)` switches to it, as
/// `torch.xpu.device_of(tensor)`.
impl<T: Pod> xpu_device::HasDevice for DeviceBuffer<T> {
    fn device_index(&self) -> Option<usize> {
        Some(self.device())
    }
}
