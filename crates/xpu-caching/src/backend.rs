//! The backend seam: what the caching allocator needs from a device, as one trait with
//! associated types ([`Backend`]). The algorithm ([`crate::CachingAllocator`]) is generic
//! over it; `xpu-alloc` implements it over OpenCL, [`crate::sim_stream::SimBackend`] without
//! a device. [`check_copy`] holds the range checks every [`Backend::enqueue_copy`] runs
//! before it calls anything.
//!
//! The seam holds nothing of the algorithm. Besides it, a backend type provides only the key
//! of the `thread_local!` in which its allocators keep their per-thread caches
//! ([`ThreadCacheKey`](crate::ThreadCacheKey), one line:
//! [`thread_caches!`](crate::thread_caches)`(MyBackend);`), since statics cannot be generic.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::{CopyEnd, CopyError};
use crate::stream::{MarkerError, StreamKey};

/// Where a marker stands ([`Backend::marker_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerStatus {
    /// The marked work may still run.
    Pending,
    /// The marked work has finished.
    Complete,
    /// The marker terminated abnormally: it tells nothing about the work before it.
    Failed,
}

/// A device as the caching allocator uses it: its segment memory, its streams and the
/// markers recorded on them. Segments themselves come from a
/// [`SegmentSource`](crate::SegmentSource) of the same [`Backend::Memory`].
///
/// # The stream-ordered contract
/// Stated once here; every implementation provides it and the allocator relies on nothing
/// else (as rmm's `device_memory_resource` states its stream-ordered contract):
/// - Work enqueued on one stream runs in enqueue order. A block freed by the user may be
///   handed out again on its allocation stream at once: later work of that stream runs
///   after the earlier work that used it. A backend whose driver breaks that order after a
///   failed wait (PoCL before 4.0) says so through [`Backend::stream_order_flag`] and
///   [`Backend::stream_follows_failed_wait`]: while a wait of the stream is known failed,
///   no block of the stream's pool or of a thread's freed-block cache is handed out on it.
/// - [`Backend::record_marker`] returns a marker that completes once all work enqueued on
///   the stream before it has finished; [`Backend::marker_complete`] never blocks;
///   [`Backend::marker_status`] also tells a marker that terminated abnormally, which says
///   nothing about the work before it; [`Backend::wait`] blocks the calling thread until
///   it completes. A block used on other streams (`record_stream`) is reused only after a
///   marker recorded at its free on each of those streams completed (a block whose marker
///   failed, or could not be recorded, is never reused).
/// - [`Backend::stream_wait`] makes work enqueued on a stream afterwards run after a marker
///   of another stream of the same device, without blocking the host (a segment moved
///   between streams is ordered this way).
/// - [`Backend::synchronize`] blocks until all work enqueued on the stream has finished.
/// - [`Backend::enqueue_copy`] enqueues a copy between segment memories on a stream, ordered
///   as any other work of that stream, without blocking (for relocating live blocks:
///   `docs/relocation.md`; no policy uses it yet).
/// - Stream handles ([`Backend::Stream`]) are cheap to clone and keep what a marker
///   operation needs alive; [`Backend::stream_key`] is stable and unique per device.
/// - No method calls back into the allocator. The allocator calls them with no allocator
///   lock held where they may block ([`Backend::wait`], [`Backend::synchronize`]), and
///   with no statistics write open for any of them.
///
/// A backend is a type-level marker (as wgpu-hal's `Api`): it is never instantiated by the
/// allocator. `Clone` lets the handles generic over it derive `Clone`.
pub trait Backend: Clone + Sized + Send + Sync + 'static {
    /// What backs a segment (an OpenCL buffer, or nothing in the simulated backend).
    type Memory: Send + Sync + std::fmt::Debug + 'static;
    /// A shared handle to a stream.
    type Stream: Clone + Send + Sync + 'static;
    /// A point in a stream's work.
    type Marker: Send + Sync + 'static;

    /// The stream's identity.
    fn stream_key(stream: &Self::Stream) -> StreamKey;
    /// Records a marker after all work enqueued on `stream` so far.
    ///
    /// # Errors
    /// [`MarkerError`] when the marker could not be enqueued.
    fn record_marker(stream: &Self::Stream) -> Result<Self::Marker, MarkerError>;
    /// Whether the marked work has finished. False for a failed marker (see
    /// [`Backend::marker_status`]).
    fn marker_complete(marker: &Self::Marker) -> bool;
    /// Where the marker stands, in one query; never blocks. [`MarkerStatus::Failed`]: the
    /// marker terminated abnormally (an OpenCL error status), and the work before it may
    /// still be queued: PoCL fails the commands after a failed one at once while the earlier
    /// ones wait (an in-order queue keeps its order only for commands that run). The
    /// allocator keeps the block that marker frees out of the cache, as when the marker could
    /// not be recorded. Default: from [`Backend::marker_complete`] (never failed).
    fn marker_status(marker: &Self::Marker) -> MarkerStatus {
        if Self::marker_complete(marker) {
            MarkerStatus::Complete
        } else {
            MarkerStatus::Pending
        }
    }
    /// Blocks the calling thread until the marked work has finished.
    ///
    /// # Errors
    /// [`MarkerError`] when the wait itself failed.
    fn wait(marker: &Self::Marker) -> Result<(), MarkerError>;
    /// Makes work enqueued on `stream` from now on wait for `marker` (recorded on another
    /// stream of the same device), without blocking the host.
    ///
    /// # Errors
    /// [`MarkerError`] when the wait could not be enqueued.
    fn stream_wait(stream: &Self::Stream, marker: &Self::Marker) -> Result<(), MarkerError>;
    /// Whether [`Backend::stream_wait`] on `marker` holds the waiting stream back until all
    /// the work enqueued before the marker on its stream has run, as far as can be told now
    /// without blocking. False while a wait enqueued before the marker on its stream has not
    /// completed, or after one failed: a driver may then complete the marker while earlier
    /// commands stay queued (PoCL does, and runs the commands after a barrier whose wait
    /// failed), so the waiting stream would run ahead of them. Default: true.
    fn marker_orders_waiters(marker: &Self::Marker) -> bool {
        let _ = marker;
        true
    }
    /// Whether a wait enqueued on the marker's stream before it is known to have failed: the
    /// commands enqueued on the stream after that wait (the marker among them) may then run
    /// ahead of earlier ones still queued (PoCL runs them), so the stream's order does not
    /// hold for them. Status queries only, no wait. Default: false.
    fn marker_follows_failed_wait(marker: &Self::Marker) -> bool {
        let _ = marker;
        false
    }
    /// For a stream whose driver may run the work enqueued after a failed wait ahead of the
    /// earlier work still queued (PoCL before 4.0): a flag that reads true whenever a wait of
    /// the stream may be unresolved (not yet completed with success, or failed), and false
    /// only while every wait enqueued on it so far completed with success or none was.
    /// `None` for a stream whose order holds whatever its waits become (the default: no
    /// cost). Asked once per stream, when the allocator first sees it (driver queries
    /// allowed, no allocator lock held). The allocator reads the flag with one relaxed load
    /// on its cached hand-out; while it reads true, hand-outs take the stream's lock and ask
    /// [`Backend::stream_follows_failed_wait`].
    fn stream_order_flag(stream: &Self::Stream) -> Option<Arc<AtomicBool>> {
        let _ = stream;
        None
    }
    /// Whether a wait enqueued on `stream` so far is known to have failed (and no
    /// [`Backend::synchronize`] of it succeeded since): on a stream with a
    /// [`Backend::stream_order_flag`], work enqueued on it from now on may run ahead of
    /// work enqueued before the failed wait and still queued, so a block whose last use may
    /// be such work is not handed out on it. Status queries only, never a wait (called under
    /// the stream's lock, the statistics write closed). Default: false.
    fn stream_follows_failed_wait(stream: &Self::Stream) -> bool {
        let _ = stream;
        false
    }
    /// Blocks until all work enqueued on `stream` has finished.
    ///
    /// # Errors
    /// [`MarkerError`] when the synchronization failed.
    fn synchronize(stream: &Self::Stream) -> Result<(), MarkerError>;
    /// Enqueues on `stream` a copy of `len` bytes from `src` at byte `src_offset` to `dst`
    /// at byte `dst_offset`, and returns without waiting for it. Stream-ordered: the copy
    /// runs after the work enqueued on `stream` before it, and work enqueued on `stream`
    /// after it runs after it (the marker [`Backend::record_marker`] records next completes
    /// only once the copy has). No event is returned: a marker recorded after the copy
    /// tells when it is done.
    ///
    /// The ranges are checked first, with [`check_copy`], before any device call: each must
    /// lie inside its memory's size, and when `src` and `dst` are the same memory object
    /// the ranges must not overlap. A copy of 0 bytes (at checked offsets) does nothing
    /// and returns `Ok`: no command is enqueued. The behaviour is OpenCL's
    /// `clEnqueueCopyBuffer` (OpenCL 3.0 API specification, §5.2.2 "Reading, Writing and
    /// Copying Buffer Objects"), whose refusals (`CL_INVALID_VALUE` for a range out of
    /// bounds, `CL_MEM_COPY_OVERLAP` for overlapping ranges of one buffer) become typed
    /// errors here, the same on every driver (PoCL and NVIDIA accept different mistakes).
    ///
    /// Every backend states it (no default): a backend without memory (the simulated one)
    /// copies nothing but still checks the ranges.
    ///
    /// # Errors
    /// [`CopyError::OutOfRange`] when a range exceeds its memory, [`CopyError::Overlap`]
    /// for overlapping ranges of one memory object (nothing was enqueued for either);
    /// [`CopyError::Unsupported`] for a copy the backend cannot check or make;
    /// [`CopyError::Device`] when the backend failed to enqueue it.
    fn enqueue_copy(
        stream: &Self::Stream,
        src: &Self::Memory,
        src_offset: u64,
        dst: &Self::Memory,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError>;
    /// The bytes `memory` really holds, when the backend can tell (`None`: it cannot, as for
    /// memory that is only a place). A segment whose memory holds fewer bytes than its size
    /// is refused when a source returns it ([`SegmentSource::allocate`](crate::SegmentSource::allocate)
    /// is user code): blocks carved out of it would reach past the memory's end. Default:
    /// `None`.
    fn memory_len(_memory: &Self::Memory) -> Option<u64> {
        None
    }
    /// Whether this process is a child forked after its parent initialized the device's
    /// driver (a "bad fork", as `torch.cuda`'s `_is_in_bad_fork`). Default: `false` (a
    /// backend without a driver, such as the simulated one).
    ///
    /// Contract: one relaxed atomic load at most (the allocator asks it on its cached
    /// allocate and free paths), never blocking, taking no lock and calling nothing; once
    /// true it stays true for the process. While it is true, every entry point of
    /// [`CachingAllocator`](crate::CachingAllocator), [`SharedState`](crate::SharedState),
    /// [`WeakShard`](crate::WeakShard) and [`Allocation`](crate::Allocation) returns
    /// [`CacheError::BadFork`](crate::CacheError::BadFork), or does nothing or answers a
    /// neutral value (documented on each), before taking any allocator lock or calling the
    /// backend or the segment source: a thread of the parent may have held such a lock at
    /// the fork (the child would hang on it) and the driver's state is unusable in the child.
    /// Dropping an allocation, a shard or an allocator's last handle then leaks what it
    /// holds (blocks, segments, markers, stream handles) instead of releasing it.
    #[inline]
    fn is_bad_fork() -> bool {
        false
    }
    /// True on a thread where a destructor must not wait for device work: the backend's
    /// completion-callback thread, whose later callbacks a wait there would hold up. A shard
    /// whose last handle drops there (the last allocation of an allocator already dropped,
    /// freed inside a callback) runs its teardown — waiting for its markers and its stream's
    /// work, then releasing its cached segments — on a thread of its own instead (an allocator
    /// built with a `DeferredDrop` hook hands it to that hook anyway). Default `false`.
    /// Contract: cheap (a thread-local read), never blocking, taking no lock.
    #[inline]
    fn drop_must_not_wait() -> bool {
        false
    }
}

/// The range checks of [`Backend::enqueue_copy`], the same for every backend: `len` bytes
/// from `src_offset` of a source of `src_size` bytes to `dst_offset` of a destination of
/// `dst_size` bytes; `same_memory` when both ends are one memory object. All figures in
/// bytes. An empty range is in bounds at any offset up to the memory's size, and overlaps
/// nothing.
///
/// # Errors
/// [`CopyError::OutOfRange`] when `offset + len` of an end exceeds its size (or
/// overflows), the source checked first; [`CopyError::Overlap`] when `same_memory` and
/// the two ranges share a byte (a copy onto itself included).
pub fn check_copy(
    len: u64,
    (src_offset, src_size): (u64, u64),
    (dst_offset, dst_size): (u64, u64),
    same_memory: bool,
) -> Result<(), CopyError> {
    for (end, offset, size) in [
        (CopyEnd::Source, src_offset, src_size),
        (CopyEnd::Destination, dst_offset, dst_size),
    ] {
        if offset.checked_add(len).is_none_or(|stop| stop > size) {
            return Err(CopyError::OutOfRange {
                end,
                offset,
                len,
                size,
            });
        }
    }
    // Both ends are in bounds, so neither sum overflows.
    if same_memory && len > 0 && src_offset < dst_offset + len && dst_offset < src_offset + len {
        return Err(CopyError::Overlap {
            src_offset,
            dst_offset,
            len,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_copy;
    use crate::error::{CopyEnd, CopyError};

    #[test]
    fn check_copy_refuses_ranges_out_of_bounds_and_overlaps_of_one_memory() {
        // In bounds, up to the last byte; empty ranges at the end.
        assert_eq!(check_copy(16, (0, 16), (48, 64), false), Ok(()));
        assert_eq!(check_copy(0, (16, 16), (64, 64), false), Ok(()));
        // One byte past either end; the source is named first.
        assert_eq!(
            check_copy(16, (1, 16), (0, 16), false),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Source,
                offset: 1,
                len: 16,
                size: 16
            })
        );
        assert_eq!(
            check_copy(8, (0, 16), (57, 64), false),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Destination,
                offset: 57,
                len: 8,
                size: 64
            })
        );
        // An empty range past the end is out of bounds too.
        assert!(matches!(
            check_copy(0, (17, 16), (0, 16), false),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Source,
                ..
            })
        ));
        // offset + len overflows: out of range, no panic.
        assert!(matches!(
            check_copy(u64::MAX, (0, 16), (2, u64::MAX), false),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Source,
                ..
            })
        ));
        assert!(matches!(
            check_copy(2, (0, 16), (u64::MAX, u64::MAX), false),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Destination,
                ..
            })
        ));
        // One memory: disjoint ranges (touching included) pass; any shared byte does not.
        assert_eq!(check_copy(8, (0, 64), (8, 64), true), Ok(()));
        assert_eq!(check_copy(8, (8, 64), (0, 64), true), Ok(()));
        for (src, dst) in [(0, 7), (7, 0), (4, 4)] {
            assert_eq!(
                check_copy(8, (src, 64), (dst, 64), true),
                Err(CopyError::Overlap {
                    src_offset: src,
                    dst_offset: dst,
                    len: 8
                }),
                "{src} -> {dst}"
            );
        }
        // The same offsets in two memories do not overlap; nor does an empty range.
        assert_eq!(check_copy(8, (4, 64), (4, 64), false), Ok(()));
        assert_eq!(check_copy(0, (4, 64), (4, 64), true), Ok(()));
        assert_eq!(
            CopyError::Overlap {
                src_offset: 0,
                dst_offset: 7,
                len: 8
            }
            .to_string(),
            "copy ranges overlap in one memory object: 8 bytes from offset 0 to offset 7"
        );
        assert_eq!(
            CopyError::OutOfRange {
                end: CopyEnd::Destination,
                offset: 57,
                len: 8,
                size: 64
            }
            .to_string(),
            "copy destination range of 8 bytes at offset 57 exceeds the memory's 64 bytes"
        );
    }
}
