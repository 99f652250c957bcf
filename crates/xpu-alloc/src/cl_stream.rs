//! The OpenCL implementation of the caching allocator's [`Backend`]: markers are OpenCL
//! markers enqueued on the stream's queue; a device-side wait is a barrier on the waiting
//! stream; segments are OpenCL buffers ([`crate::BufferSource`]). The same backend also
//! runs the allocator without a device (simulated memory and [`SimStream`]s), for replays,
//! benchmarks and tests of the registry-free API.
//!
//! A copy between segments ([`Backend::enqueue_copy`]) is `clEnqueueCopyBuffer` on the
//! stream's queue, through xpu-device's `CommandQueue::copy`, after the runtime's own range
//! checks.
//!
//! A [`ClStream`] holds a strong reference to its queue, taken when it is created (at
//! allocation-stream registration and at `record_stream`): an external stream dropped by
//! its owner afterwards still gets the marker that orders the reuse of a block it used.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use xpu_caching::backend::check_copy;
use xpu_caching::sim_stream::{SimMarker, SimStream};
use xpu_caching::{Backend, CopyError, DeviceFailure, MarkerStatus};
use xpu_device::backend::{Buffer, EventStatus, OrderedMarker};
use xpu_stream::{QueueRef, Stream, StreamError};

use crate::source::SegmentMemory;
use crate::stream::{MarkerError, StreamKey};

/// The allocator's key of a stream.
#[must_use]
pub fn stream_key(stream: &Stream) -> StreamKey {
    StreamKey::new(stream.device(), stream.id())
}

/// A real stream as the allocator sees it: the handle and, when it could be resolved at
/// creation, a strong reference to its queue (which keeps an external stream's queue alive
/// after its [`xpu_stream::ExternalStream`] is dropped).
#[derive(Debug, Clone)]
pub struct ClStream {
    stream: Stream,
    queue: Option<QueueRef>,
}

impl ClStream {
    /// The stream as a [`StreamRef`], holding its queue when it can be resolved now. A stream
    /// whose queue is already released (a stale handle of a dropped external stream) can
    /// never run work again, none that uses memory handed out for it included: its markers
    /// are complete at once ([`StreamMarker::Idle`]) and its synchronization returns at once,
    /// so the segments cached for it are released as any others; a device-side wait on it
    /// fails.
    #[must_use]
    pub fn shared(stream: Stream) -> StreamRef {
        StreamRef::Device(Arc::new(Self {
            stream,
            queue: stream.queue().ok(),
        }))
    }

    /// The stream as a [`StreamRef`] holding its queue.
    ///
    /// # Errors
    /// As [`Stream::queue`]: `ExternalReleased` when the stream's queue is released (a
    /// dropped external stream), `BadFork` in a bad fork child (`From<StreamError>` for
    /// [`AllocError`](crate::AllocError) keeps both).
    pub fn try_shared(stream: Stream) -> Result<StreamRef, StreamError> {
        let queue = stream.queue()?;
        Ok(StreamRef::Device(Arc::new(Self {
            stream,
            queue: Some(queue),
        })))
    }

    /// The stream handle.
    #[must_use]
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The queue of every marker operation: in a bad fork child `BadFork`, first, even when
    /// the queue was resolved in the parent (no driver call on the parent's queue).
    fn queue(&self) -> Result<QueueRef, MarkerError> {
        if xpu_device::fork::is_in_bad_fork() {
            return Err(marker_error(StreamError::BadFork));
        }
        match &self.queue {
            Some(q) => Ok(q.clone()),
            None => self.stream.queue().map_err(marker_error),
        }
    }

    /// The queue, or `None` for a stream whose queue was released before this handle was
    /// made (no work can be enqueued on it any more: see [`ClStream::shared`]); in a bad fork
    /// child `BadFork`, first, as [`ClStream::queue`].
    fn live_queue(&self) -> Result<Option<QueueRef>, MarkerError> {
        if xpu_device::fork::is_in_bad_fork() {
            return Err(marker_error(StreamError::BadFork));
        }
        match &self.queue {
            Some(q) => Ok(Some(q.clone())),
            None => match self.stream.queue() {
                Ok(q) => Ok(Some(q)),
                Err(StreamError::ExternalReleased { .. }) => Ok(None),
                Err(e) => Err(marker_error(e)),
            },
        }
    }
}

/// A failed stream operation as the [`MarkerError`] of this backend: it holds the
/// [`StreamError`] (an OpenCL call's `ClError` as `StreamError::OpenCl`), which
/// [`MarkerError::downcast_ref`] gives back.
fn marker_error(e: impl Into<StreamError>) -> MarkerError {
    MarkerError::new(e.into())
}

/// A marker recorded on a real stream (`clEnqueueMarkerWithWaitList`, flushed so that it
/// completes without a later flush), judged in order with the waits enqueued before it on its
/// queue ([`OrderedMarker`]).
#[derive(Debug)]
pub struct EventMarker(OrderedMarker);

impl EventMarker {
    /// One status query ([`OrderedMarker::status`]). Complete: `CL_COMPLETE` with every wait
    /// enqueued before it on the queue complete; also an event whose status cannot be read
    /// (nothing more can be learned), and one in a bad fork child, which is not queried (no
    /// driver call there), and an error status once a synchronize of its stream that began
    /// after it returned ([`OrderedMarker::drained_by_finish`]). Failed: an error status, or
    /// a wait before it failed, with no such synchronize; PoCL fails the commands after a
    /// failed one at once, and completes later markers, while earlier ones stay queued, so the
    /// marker says nothing about the stream's earlier work (the allocator keeps the block out
    /// of the cache until it reads complete). Pending otherwise.
    fn status(&self) -> MarkerStatus {
        if xpu_device::fork::is_in_bad_fork() {
            return MarkerStatus::Complete;
        }
        match self.0.status() {
            Ok(EventStatus::Complete) | Err(_) => MarkerStatus::Complete,
            // A synchronize of the stream begun after the marker returned: nothing before it
            // is queued any more (review h60: memory kept out after a failed wait never came
            // back).
            Ok(EventStatus::Error(_)) if self.0.drained_by_finish() => MarkerStatus::Complete,
            Ok(EventStatus::Error(_)) => MarkerStatus::Failed,
            Ok(_) => MarkerStatus::Pending,
        }
    }

    fn is_complete(&self) -> bool {
        self.status() == MarkerStatus::Complete
    }
}

impl ClStream {
    fn record_marker(&self) -> Result<StreamMarker, MarkerError> {
        let Some(queue) = self.live_queue()? else {
            return Ok(StreamMarker::Idle);
        };
        let marker = queue.enqueue_ordered_marker().map_err(marker_error)?;
        queue.flush().map_err(marker_error)?;
        Ok(StreamMarker::Device(EventMarker(marker)))
    }
}

impl ClStream {
    /// `clEnqueueCopyBuffer` of `len` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset` on the stream's queue, after [`check_copy`] (one memory object when the
    /// `cl_mem` handles are equal); 0 bytes enqueue nothing. The queue comes from
    /// [`Stream::enqueue_queue`]: a stream being captured refuses (`StreamError::Capturing`),
    /// as does a bad fork child (`BadFork`, before any driver call) and an external stream
    /// whose owner dropped it (`ExternalReleased`), each in [`CopyError::Device`].
    fn enqueue_copy(
        &self,
        src: &Buffer,
        src_offset: u64,
        dst: &Buffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        // OpenCL also refuses overlapping ranges of two sub-buffers of one buffer (§5.2.2),
        // which the handles alone cannot tell. Segments are whole buffers.
        if src.is_sub_buffer() || dst.is_sub_buffer() {
            return Err(CopyError::Unsupported(
                "a copy from or to a sub-buffer segment (its overlap with other views of its \
                 buffer cannot be checked)",
            ));
        }
        check_copy(
            len,
            (src_offset, buffer_size(src)),
            (dst_offset, buffer_size(dst)),
            src.as_raw() == dst.as_raw(),
        )?;
        if len == 0 {
            return Ok(());
        }
        // In bounds of buffers whose sizes are `usize`: the conversions cannot fail.
        let (Ok(src_offset), Ok(dst_offset), Ok(len)) = (
            usize::try_from(src_offset),
            usize::try_from(dst_offset),
            usize::try_from(len),
        ) else {
            return Err(CopyError::Unsupported(
                "a copy range beyond the host's address space",
            ));
        };
        let queue = self
            .stream
            .enqueue_queue("copy between segments")
            .map_err(copy_error)?;
        // The copy's event is not kept: a marker recorded after it tells when it is done.
        queue
            .copy(src, src_offset, dst, dst_offset, len, &[])
            .map_err(|e| copy_error(StreamError::from(e)))?;
        Ok(())
    }
}

/// A buffer's size in bytes, as the allocator counts them.
fn buffer_size(buffer: &Buffer) -> u64 {
    // usize is at most 64 bits on every target xpu builds for.
    buffer.size() as u64
}

/// A failed copy as the [`CopyError`] of this backend: it holds the [`StreamError`] (an
/// OpenCL call's `ClError` as `StreamError::OpenCl`), which
/// [`DeviceFailure::downcast_ref`] gives back.
fn copy_error(e: StreamError) -> CopyError {
    CopyError::Device(DeviceFailure::new(e))
}

/// A stream as the allocator of this crate sees it (cheap to clone): a device stream, or a
/// simulated one (for the allocator without a device).
#[derive(Debug, Clone)]
pub enum StreamRef {
    /// A real stream (see [`ClStream::shared`]).
    Device(Arc<ClStream>),
    /// A simulated stream.
    Simulated(Arc<SimStream>),
}

impl StreamRef {
    /// The stream's identity.
    #[must_use]
    pub fn key(&self) -> StreamKey {
        match self {
            Self::Device(s) => stream_key(&s.stream),
            Self::Simulated(s) => s.key(),
        }
    }
}

impl From<Arc<SimStream>> for StreamRef {
    fn from(stream: Arc<SimStream>) -> Self {
        Self::Simulated(stream)
    }
}

/// A marker of a [`StreamRef`].
#[derive(Debug)]
pub enum StreamMarker {
    /// An OpenCL marker.
    Device(EventMarker),
    /// A marker of a simulated stream.
    Simulated(SimMarker),
    /// The marker of a stream whose queue was released before the allocator first saw it
    /// (see [`ClStream::shared`]): no work to wait for, complete at once.
    Idle,
}

/// The OpenCL backend of the caching allocator: OpenCL buffers (or simulated memory),
/// [`StreamRef`]s and their markers. In a bad fork child (see `xpu_device::fork`) its
/// marker operations on device streams fail with `StreamError::BadFork` (in the
/// [`MarkerError`]) before any driver call, also through a handle whose queue the parent
/// resolved, and a device marker counts as complete without being queried.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClBackend;

impl Backend for ClBackend {
    type Memory = SegmentMemory;
    type Stream = StreamRef;
    type Marker = StreamMarker;

    fn stream_key(stream: &StreamRef) -> StreamKey {
        stream.key()
    }

    fn record_marker(stream: &StreamRef) -> Result<StreamMarker, MarkerError> {
        match stream {
            StreamRef::Device(s) => s.record_marker(),
            StreamRef::Simulated(s) => Ok(StreamMarker::Simulated(s.record_marker())),
        }
    }

    fn marker_complete(marker: &StreamMarker) -> bool {
        match marker {
            StreamMarker::Device(m) => m.is_complete(),
            StreamMarker::Simulated(m) => m.is_complete(),
            StreamMarker::Idle => true,
        }
    }

    fn marker_status(marker: &StreamMarker) -> MarkerStatus {
        match marker {
            StreamMarker::Device(m) => m.status(),
            StreamMarker::Simulated(_) | StreamMarker::Idle => {
                if Self::marker_complete(marker) {
                    MarkerStatus::Complete
                } else {
                    MarkerStatus::Pending
                }
            }
        }
    }

    fn wait(marker: &StreamMarker) -> Result<(), MarkerError> {
        match marker {
            StreamMarker::Device(m) => {
                if xpu_device::fork::is_in_bad_fork() {
                    return Err(marker_error(StreamError::BadFork));
                }
                m.0.event().wait().map_err(marker_error)
            }
            StreamMarker::Simulated(m) => {
                m.wait();
                Ok(())
            }
            StreamMarker::Idle => Ok(()),
        }
    }

    fn marker_orders_waiters(marker: &StreamMarker) -> bool {
        match marker {
            StreamMarker::Device(m) => xpu_device::fork::is_in_bad_fork() || m.0.orders_waiters(),
            StreamMarker::Simulated(_) | StreamMarker::Idle => true,
        }
    }

    fn marker_follows_failed_wait(marker: &StreamMarker) -> bool {
        match marker {
            StreamMarker::Device(m) => {
                !xpu_device::fork::is_in_bad_fork() && m.0.follows_failed_wait()
            }
            StreamMarker::Simulated(_) | StreamMarker::Idle => false,
        }
    }

    /// The queue's [`CommandQueue::order_flag`](xpu_device::backend::CommandQueue::order_flag)
    /// (its wait log's flag) on a driver that reorders after a failed wait (PoCL before 4.0);
    /// `None` elsewhere, for a simulated stream, a released queue and in a bad fork child.
    fn stream_order_flag(stream: &StreamRef) -> Option<Arc<AtomicBool>> {
        match stream {
            StreamRef::Device(s) => s.live_queue().ok().flatten()?.order_flag(),
            StreamRef::Simulated(_) => None,
        }
    }

    /// [`CommandQueue::follows_failed_wait`](xpu_device::backend::CommandQueue::follows_failed_wait):
    /// status queries of the queue's logged waits. False for a simulated stream, a released
    /// queue (it runs no work any more) and in a bad fork child (no driver call).
    fn stream_follows_failed_wait(stream: &StreamRef) -> bool {
        match stream {
            StreamRef::Device(s) => s
                .live_queue()
                .ok()
                .flatten()
                .is_some_and(|q| q.follows_failed_wait()),
            StreamRef::Simulated(_) => false,
        }
    }

    fn stream_wait(stream: &StreamRef, marker: &StreamMarker) -> Result<(), MarkerError> {
        match (stream, marker) {
            (StreamRef::Device(s), StreamMarker::Device(m)) => {
                s.queue()?
                    .enqueue_barrier(&[m.0.event()])
                    .map_err(marker_error)?;
                Ok(())
            }
            (StreamRef::Simulated(s), StreamMarker::Simulated(m)) => {
                s.wait_marker(m);
                Ok(())
            }
            // Nothing to wait for (the marker's stream can run no work).
            (StreamRef::Device(_), StreamMarker::Idle) => Ok(()),
            _ => Err(MarkerError::message(
                "a stream can only wait for markers of streams of its own kind",
            )),
        }
    }

    fn synchronize(stream: &StreamRef) -> Result<(), MarkerError> {
        match stream {
            StreamRef::Device(s) => match s.live_queue()? {
                Some(queue) => queue.finish().map_err(marker_error),
                None => Ok(()),
            },
            StreamRef::Simulated(s) => {
                s.synchronize();
                Ok(())
            }
        }
    }

    /// A device stream copies between buffer segments with `clEnqueueCopyBuffer`
    /// (`ClStream`'s copy: the ranges checked first; a stream being captured, a bad fork
    /// child or a released external stream refuse in [`CopyError::Device`], holding the
    /// `StreamError`); a simulated stream between simulated segments as
    /// [`SimStream::enqueue_copy`] (checked, no byte moved). Mixed kinds are
    /// [`CopyError::Unsupported`].
    fn memory_len(memory: &SegmentMemory) -> Option<u64> {
        match memory {
            SegmentMemory::Buffer(m) => u64::try_from(m.size()).ok(),
            SegmentMemory::Simulated(_) => None,
        }
    }

    fn enqueue_copy(
        stream: &StreamRef,
        src: &SegmentMemory,
        src_offset: u64,
        dst: &SegmentMemory,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        match (stream, src, dst) {
            (StreamRef::Device(s), SegmentMemory::Buffer(src), SegmentMemory::Buffer(dst)) => {
                s.enqueue_copy(src.buffer(), src_offset, dst.buffer(), dst_offset, len)
            }
            (
                StreamRef::Simulated(s),
                SegmentMemory::Simulated(src),
                SegmentMemory::Simulated(dst),
            ) => s.enqueue_copy(src, src_offset, dst, dst_offset, len),
            _ => Err(CopyError::Unsupported(
                "a copy between memory and a stream of different kinds (device and simulated)",
            )),
        }
    }

    /// `xpu_device::fork::is_in_bad_fork` (one relaxed atomic load).
    #[inline]
    fn is_bad_fork() -> bool {
        xpu_device::fork::is_in_bad_fork()
    }

    /// True on xpu-device's completion-callback thread (`xpu-callbacks`), where a shard's
    /// teardown must not wait for device work.
    #[inline]
    fn drop_must_not_wait() -> bool {
        xpu_device::backend::on_callback_thread()
    }
}

// The key of the `thread_local!` of the caching allocator's per-thread caches over OpenCL.
xpu_caching::thread_caches!(ClBackend);
