//! Pinned host buffers: `CL_MEM_ALLOC_HOST_PTR` buffers mapped for the host.
//!
//! A pinned buffer's host bytes are read or written by the device while a non-blocking copy
//! runs (`clEnqueueReadBuffer` / `clEnqueueWriteBuffer` with the mapped pointer, OpenCL 3.0
//! §5.2.2: the memory is used until the command completes). Each buffer therefore tracks the
//! copies in flight on it, and its host accessors wait for them: [`PinnedBuffer::as_slice`]
//! waits for the copies that write the host bytes (device to host), and
//! [`PinnedBuffer::as_mut_slice`] for every copy (a host write must not race a device read).
//! Together with the copy functions' borrows (`&mut` for a device-to-host copy, `&` for a
//! host-to-device copy), no safe code can observe the bytes changing under a live borrow, nor
//! change bytes a queued copy has yet to read. Tracking is robust to `mem::forget` and to
//! clones: the state lives in the buffer, not in a guard.

use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opencl3::command_queue as clq;
use parking_lot::Mutex;

use super::{cl, release, Buffer, ClEvent, CommandQueue, Context, EventStatus, MemFlags};
use crate::error::{DeviceError, Result};

const MAP_READ_WRITE: u64 = 1 | 2;

/// What a tracked copy does with the host bytes of a pinned buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceAccess {
    /// Host to device: the device reads the host bytes. Host writes must wait.
    Reads,
    /// Device to host: the device writes the host bytes. Every host access must wait.
    Writes,
}

/// Events of the tracked copies, oldest first. Completed events are pruned lazily (when a
/// copy is tracked, and after an accessor waited), never from a completion callback.
#[derive(Debug, Default)]
struct InFlight {
    reads: VecDeque<ClEvent>,
    writes: VecDeque<ClEvent>,
}

impl InFlight {
    fn list(&mut self, access: DeviceAccess) -> &mut VecDeque<ClEvent> {
        match access {
            DeviceAccess::Reads => &mut self.reads,
            DeviceAccess::Writes => &mut self.writes,
        }
    }
}

#[derive(Debug)]
struct Inner {
    buffer: Buffer,
    queue: CommandQueue,
    ptr: *mut u8,
    /// Tracked host-to-device copies whose completion has not been reported yet (decremented
    /// by the copy's completion callback). Zero means no copy reads the host bytes: the host
    /// may write without a driver call.
    reads_pending: AtomicUsize,
    /// As `reads_pending`, for device-to-host copies: zero means no copy writes the host
    /// bytes, so the host may read (and write) without a driver call.
    writes_pending: AtomicUsize,
    /// The tracked copies' events, for waiting. Never locked while waiting.
    in_flight: Mutex<InFlight>,
}

impl Inner {
    fn pending(&self, access: DeviceAccess) -> &AtomicUsize {
        match access {
            DeviceAccess::Reads => &self.reads_pending,
            DeviceAccess::Writes => &self.writes_pending,
        }
    }
}

// SAFETY: the mapping is plain host memory owned by this object; the cl handles are
// thread-safe (OpenCL 3.0 appendix A.2); the tracking state is atomics and a mutex.
unsafe impl Send for Inner {}
// SAFETY: through a shared reference, the host bytes are only read ([`PinnedBuffer::as_slice`],
// after waiting for every copy that writes them) or read by the device (a host-to-device copy,
// which takes `&PinnedBuffer`). Writes by the host need `&mut PinnedBuffer` and wait for every
// tracked copy; writes by the device need `&mut PinnedBuffer` at enqueue and are tracked, so
// every later host access waits for them. No safe API exposes the `cl_mem` behind the mapping
// (through which a device command could write the bytes untracked).
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        let ticket = self.queue.ticket([]);
        // SAFETY: `ptr` is the pointer returned by our map of `buffer` on `queue`, unmapped
        // exactly once here (clEnqueueUnmapMemObject, §5.5.2). Copies that used the mapping
        // hold their own Arc until they complete (see `PinnedBuffer::track`), so none is in
        // flight when the last reference drops.
        let r = unsafe {
            clq::enqueue_unmap_mem_object(
                self.queue.as_raw(),
                self.buffer.as_raw(),
                self.ptr.cast(),
                0,
                ptr::null(),
            )
        };
        // No wait for the unmap: the last reference is often dropped inside the CL_COMPLETE
        // callback of a copy (`track`), where blocking calls such as clWaitForEvents
        // are undefined behavior (OpenCL 3.0 §5.11.4) and can deadlock a driver's callback
        // thread. Nothing needs the wait: the buffer released right after stays alive until
        // the enqueued unmap completes (§5.5.1).
        match r {
            Ok(e) => drop(self.queue.command_event(e, ticket)),
            Err(code) => release::note("clEnqueueUnmapMemObject", Err(code)),
        }
    }
}

/// True when `event`'s command no longer runs: complete, or terminated abnormally.
fn finished(event: &ClEvent) -> bool {
    matches!(
        event.status(),
        Ok(EventStatus::Complete | EventStatus::Error(_))
    )
}

/// Blocks until `event`'s command no longer runs (`clWaitForEvents`, which also flushes the
/// event's queue). False when neither the wait nor a status query could tell (a failing
/// driver).
/// A user event of `context` (the context of `queue`) completed once `event`'s command is
/// over, whether it completed or failed ([`ClEvent::complete_when_over`]); `None` when it
/// cannot be made.
/// `event_queue` is `event`'s queue.
fn bridge(
    event: &ClEvent,
    event_queue: super::raw::cl_command_queue,
    context: super::raw::cl_context,
    queue: &CommandQueue,
) -> Option<ClEvent> {
    let bridge = ClEvent::user_in(context, queue.frees_failed_events()).ok()?;
    event.complete_when_over(&bridge).ok()?;
    // The bridge is set once that copy is over, so its queue must run it: OpenCL guarantees
    // progress of a command waited on from another queue only after a flush of its own
    // (OpenCL 3.0 §5.15; a host wait flushed it before, review h43).
    super::at_exit::flush_if_wrapped(event_queue);
    Some(bridge)
}

/// Waits on the host until `event`'s command is over (a failed wait means the command
/// terminated, or a failing driver, for which the status decides).
fn wait_on_host(event: &ClEvent) {
    while !settle(event) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn settle(event: &ClEvent) -> bool {
    // A wait on an abnormally terminated command fails with
    // CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: the command is over all the same.
    event.wait().is_ok() || finished(event)
}

/// Host memory the device copies from at full speed: a `CL_MEM_ALLOC_HOST_PTR` buffer mapped
/// for reading and writing by the host. The memory is unmapped and released on drop, but copies
/// in flight hold an internal reference, so the memory outlives them.
///
/// Host access is tied to copy completion: the copy functions of [`CommandQueue`]
/// ([`CommandQueue::copy_pinned`]) record their events
/// on the buffer, and [`PinnedBuffer::as_slice`] / [`PinnedBuffer::as_mut_slice`] wait for the
/// copies that conflict with the access. When nothing is in flight the accessors make no
/// driver call (two atomic loads).
///
/// The `cl_mem` behind the mapping is not handed out: a device command through it would write
/// the host bytes without being tracked.
///
/// ```compile_fail
/// # fn f(p: &xpu_device::backend::PinnedBuffer) {
/// let _ = p.buffer(); // no such accessor: a clone of the buffer could write behind a borrow
/// # }
/// ```
#[derive(Debug)]
pub struct PinnedBuffer(Arc<Inner>);

impl PinnedBuffer {
    /// Allocates `size` bytes and maps them (blocking map on `queue`).
    ///
    /// # Errors
    /// `InvalidArgument` for size 0; a failed `clCreateBuffer` or `clEnqueueMapBuffer`.
    pub fn new(context: &Context, queue: &CommandQueue, size: usize) -> Result<PinnedBuffer> {
        let buffer = Buffer::new(
            context,
            size,
            MemFlags {
                alloc_host_ptr: true,
            },
        )?;
        let mut mapped: opencl3::types::cl_mem = ptr::null_mut();
        let ticket = queue.ticket([]);
        // SAFETY: blocking map (CL_TRUE) of the whole live buffer; the pointer written to
        // `mapped` stays valid until the matching unmap in Inner::drop (clEnqueueMapBuffer,
        // OpenCL 3.0 §5.5.1).
        let ev = cl("clEnqueueMapBuffer", unsafe {
            clq::enqueue_map_buffer(
                queue.as_raw(),
                buffer.as_raw(),
                1,
                MAP_READ_WRITE,
                0,
                size,
                &mut mapped,
                0,
                ptr::null(),
            )
        })?;
        drop(queue.command_event(ev, ticket));
        let ptr: *mut u8 = mapped.cast();
        if ptr.is_null() {
            return Err(DeviceError::InvalidArgument(
                "map returned a null pointer".into(),
            ));
        }
        Ok(PinnedBuffer(Arc::new(Inner {
            buffer,
            queue: queue.clone(),
            ptr: ptr.cast(),
            reads_pending: AtomicUsize::new(0),
            writes_pending: AtomicUsize::new(0),
            in_flight: Mutex::new(InFlight::default()),
        })))
    }

    /// Another handle to the same memory, for keeping it alive while a copy is in flight.
    /// Crate-private so that safe code cannot obtain two `&mut` views of one mapping.
    pub(crate) fn share(&self) -> PinnedBuffer {
        PinnedBuffer(Arc::clone(&self.0))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.0.buffer.size()
    }

    /// Always false: pinned buffers hold at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The mapped host address. Reading or writing through it is `unsafe` and bypasses the
    /// copy tracking: the caller must wait for the copies in flight itself.
    pub fn host_ptr(&self) -> *mut u8 {
        self.0.ptr
    }

    /// True while a tracked copy (a [`CommandQueue::copy_pinned`] of this buffer) has not
    /// finished (completed or terminated abnormally). The host allocator uses it to keep a
    /// freed block out of its cache until its copies finished. No driver call when no copy
    /// was tracked since the last completion callbacks ran (two atomic loads); otherwise one
    /// non-blocking status query (`clGetEventInfo`) per tracked event, never a wait.
    pub fn has_copies_in_flight(&self) -> bool {
        let inner = &*self.0;
        if inner.reads_pending.load(Ordering::Acquire) == 0
            && inner.writes_pending.load(Ordering::Acquire) == 0
        {
            return false;
        }
        // A completion callback runs shortly after its command completed: the status is the
        // authority (an unfinished tracked copy is always in the lists).
        let in_flight = inner.in_flight.lock();
        in_flight
            .reads
            .iter()
            .chain(in_flight.writes.iter())
            .any(|e| !finished(e))
    }

    /// Orders a new copy with `access`, about to be enqueued on `queue`, after the unfinished
    /// tracked copies it conflicts with on the host bytes (a device write conflicts with every
    /// copy, a device read with the device writes), so that two copies on different queues never
    /// race on the bytes. Returns the events the new command waits for: the conflicting copies
    /// of `queue` itself, and for each conflicting copy of another queue or context (whose
    /// event cannot be in the wait list of another context, OpenCL 3.0 §5.11) a user event of
    /// `queue`'s context completed once that copy is over, whatever its status
    /// ([`ClEvent::complete_when_over`]): the caller never waits on the host for another
    /// device's work, and a copy that failed on another queue (nothing written) does not fail
    /// this one, which the user did not make depend on it (review h41: an upload silently
    /// dropped on a healthy stream). Only when no bridge can be made is that copy waited for
    /// here. No driver call when nothing is in flight.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo` for the queue's context.
    pub(crate) fn order_after_conflicts(
        &self,
        access: DeviceAccess,
        queue: &CommandQueue,
    ) -> Result<Vec<ClEvent>> {
        let inner = &*self.0;
        let writes = inner.writes_pending.load(Ordering::Acquire) != 0;
        let reads =
            access == DeviceAccess::Writes && inner.reads_pending.load(Ordering::Acquire) != 0;
        if !writes && !reads {
            return Ok(Vec::new());
        }
        let mut events: Vec<ClEvent> = {
            let in_flight = inner.in_flight.lock();
            let mut v = Vec::new();
            if writes {
                v.extend(in_flight.writes.iter().cloned());
            }
            if reads {
                v.extend(in_flight.reads.iter().cloned());
            }
            v
        };
        events.retain(|e| !finished(e));
        if events.is_empty() {
            return Ok(events);
        }
        let context = queue.context_raw()?;
        let mut same = Vec::with_capacity(events.len());
        for e in events {
            match e.queue_raw() {
                // An earlier command of the same in-order queue: ordered by the queue itself
                // (in the list all the same, as the driver would order it).
                Ok(q) if q == queue.as_raw() => same.push(e),
                // Another queue or context: a bridge in this context, completed once that
                // copy is over, whatever its status (its failure is its own queue's).
                Ok(q) => match bridge(&e, q, context, queue) {
                    Some(bridge) => same.push(bridge),
                    None => wait_on_host(&e),
                },
                // Unknown: wait on the host.
                Err(_) => wait_on_host(&e),
            }
        }
        Ok(same)
    }

    /// Records a copy enqueued on this buffer: `event` is waited for by the accessors that
    /// conflict with `access`, and the memory is kept alive until the copy completes (its
    /// completion callback holds a reference). Called by the copy functions right after the
    /// enqueue, before the caller can touch the buffer again.
    pub(crate) fn track(&self, event: &ClEvent, access: DeviceAccess) {
        let inner = &*self.0;
        let pending = inner.pending(access);
        let pruned: Vec<ClEvent> = {
            let mut in_flight = inner.in_flight.lock();
            let list = in_flight.list(access);
            let pruned = if pending.load(Ordering::Acquire) == 0 {
                // Every earlier copy reported its completion.
                list.drain(..).collect()
            } else {
                // Amortized: each event is removed once; one query when the oldest still runs.
                let mut done = Vec::new();
                while list.front().is_some_and(finished) {
                    done.extend(list.pop_front());
                }
                done
            };
            list.push_back(event.clone());
            // Under the lock, so that an accessor seeing the count sees the event.
            pending.fetch_add(1, Ordering::AcqRel);
            pruned
        };
        // Released outside the lock.
        drop(pruned);
        let keep = self.share();
        let registered = event.on_complete(move |_status| {
            keep.0.pending(access).fetch_sub(1, Ordering::AcqRel);
            drop(keep);
        });
        if registered.is_err() {
            // No callback: wait here, while `self` keeps the memory alive.
            if settle(event) {
                pending.fetch_sub(1, Ordering::AcqRel);
            } else {
                // Cannot tell when the copy ends: keep the memory mapped forever rather than
                // risk a use after free, and leave the copy counted.
                tracing::warn!(
                    "pinned buffer: neither a completion callback nor a wait worked; the memory is leaked"
                );
                std::mem::forget(self.share());
            }
        }
    }

    /// Blocks until the tracked copies that conflict with a host access have completed: the
    /// device-to-host copies, and with `write` also the host-to-device ones. No lock is held
    /// while waiting; no driver call when nothing is in flight.
    fn wait_for_copies(&self, write: bool) {
        let inner = &*self.0;
        let reads = write && inner.reads_pending.load(Ordering::Acquire) != 0;
        let writes = inner.writes_pending.load(Ordering::Acquire) != 0;
        if !reads && !writes {
            return;
        }
        let events: Vec<ClEvent> = {
            let in_flight = inner.in_flight.lock();
            let mut v: Vec<ClEvent> = Vec::new();
            if writes {
                v.extend(in_flight.writes.iter().cloned());
            }
            if reads {
                v.extend(in_flight.reads.iter().cloned());
            }
            v
        };
        if events.is_empty() {
            // Already waited for by an earlier access; only the callbacks are still to run.
            return;
        }
        for event in &events {
            // The copy's events may belong to different contexts (a block used with another
            // device's stream): one wait per event, as clWaitForEvents requires one context.
            while !settle(event) {
                // A failing driver: poll until the completion callback reported the end of
                // every copy of this kind, or the status can be read.
                if inner.writes_pending.load(Ordering::Acquire) == 0
                    && (!write || inner.reads_pending.load(Ordering::Acquire) == 0)
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut removed: Vec<ClEvent> = Vec::new();
        {
            let mut guard = inner.in_flight.lock();
            let in_flight = &mut *guard;
            for list in [&mut in_flight.writes, &mut in_flight.reads] {
                let mut i = 0;
                while i < list.len() {
                    if events.contains(&list[i]) {
                        removed.extend(list.remove(i));
                    } else {
                        i += 1;
                    }
                }
            }
        }
        drop(removed);
    }

    /// The host view. Waits first for every tracked copy that writes these bytes (a
    /// [`CommandQueue::copy_pinned`] into this buffer), so the bytes never change while
    /// the slice lives; copies that only read the bytes (host to device) do not delay it.
    ///
    /// This is a host wait (`clWaitForEvents`) when such a copy is in flight: a copy held back
    /// by an unset user event blocks the caller until the event is set (from another thread).
    pub fn as_slice(&self) -> &[u8] {
        self.wait_for_copies(false);
        // SAFETY: ptr..ptr+len is a live host mapping owned by self.0 (valid until unmapped in
        // Inner::drop, which cannot run while &self exists). No tracked copy writes it any more
        // (waited above), and a new one needs `&mut self`, which cannot coexist with the
        // returned borrow.
        unsafe { std::slice::from_raw_parts(self.0.ptr, self.len()) }
    }

    /// The mutable host view. Waits first for every tracked copy of this buffer, in either
    /// direction (a host write must neither race a device write nor change bytes a queued
    /// host-to-device copy has yet to read); see [`PinnedBuffer::as_slice`] for the wait.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.wait_for_copies(true);
        // SAFETY: as in as_slice; no tracked copy uses the bytes any more (waited above), and
        // &mut self excludes other borrows and new copies (internal shares never touch the
        // bytes from the host).
        unsafe { std::slice::from_raw_parts_mut(self.0.ptr, self.len()) }
    }
}
