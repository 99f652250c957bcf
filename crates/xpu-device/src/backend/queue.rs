//! In-order OpenCL command queues (`cl_command_queue`) and the commands the runtime enqueues.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use opencl3::command_queue as clq;

use super::pinned::DeviceAccess;
use super::waits::{EarlierWaits, WaitLog, WaitsStatus};
use super::{
    cl, raw, release, wait_list, Buffer, ClEvent, Context, DeviceId, EventStatus, Kernel,
    PinnedBuffer,
};
use crate::error::{ClError, DeviceError, Result};

thread_local! {
    /// Markers enqueued by this thread through [`CommandQueue::enqueue_marker`].
    static MARKERS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Set while this thread enqueues an idle probe's marker
    /// ([`CommandQueue::enqueue_idle_probe`]): that enqueue is not noted as one after it.
    static PROBING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many markers (`clEnqueueMarkerWithWaitList`) the calling thread has enqueued through
/// [`CommandQueue::enqueue_marker`] since it started, failed calls included. A per-thread
/// count (a thread-local cell, no atomics), for tests and diagnostics of the commands one
/// operation adds to a queue: take the difference of two readings around it on one thread.
pub fn markers_enqueued_on_this_thread() -> u64 {
    MARKERS.try_with(std::cell::Cell::get).unwrap_or(0)
}

const QUEUE_CONTEXT: u32 = 0x1090;
const QUEUE_DEVICE: u32 = 0x1091;
const QUEUE_PROPERTIES: u32 = 0x1093;
const QUEUE_PRIORITY_KHR: u64 = 0x1096;
const OUT_OF_ORDER: u64 = 1 << 0;
const CODE_INVALID_CONTEXT: i32 = -34;
const CODE_MEM_COPY_OVERLAP: i32 = -8;
/// `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` (OpenCL 3.0 §5.11): the status of a command
/// an event of whose wait list failed, and what the runtime reports for a point still queued
/// after a failed wait (`Event::query`, `Stream::query`).
pub const CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: i32 = -14;
const PROFILING_ENABLE: u64 = 1 << 1;

/// `cl_khr_priority_hints` levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueuePriority {
    /// `CL_QUEUE_PRIORITY_HIGH_KHR`.
    High,
    /// `CL_QUEUE_PRIORITY_MED_KHR`.
    Medium,
    /// `CL_QUEUE_PRIORITY_LOW_KHR`.
    Low,
}

/// How to create a queue. Queues are always in-order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueOptions {
    /// `CL_QUEUE_PROFILING_ENABLE`: needed for event timing.
    pub profiling: bool,
    /// A `cl_khr_priority_hints` hint; only pass it when the device reports the extension.
    pub priority: Option<QueuePriority>,
}

/// How many times [`CommandQueue::finish`] calls `clFinish` again after one returned an
/// error, to learn whether the queue drained (NVIDIA returns an error once per batch of
/// failed commands, then succeeds).
pub const FINISH_RETRIES: usize = 3;

/// What a [`CommandQueue::finish_outcome`] found.
#[derive(Debug)]
#[must_use]
pub struct FinishOutcome {
    /// Every command enqueued before the call began completed: a `clFinish` of the call
    /// returned with success.
    pub drained: bool,
    /// What [`CommandQueue::finish`] returns: the first failed `clFinish` of the call, else
    /// the kept release failure, else `Ok`.
    pub result: Result<(), ClError>,
}

/// A reference-counted in-order command queue. `Clone` retains, `Drop` releases; every
/// wrapper of one raw queue (clones, and wrappers made again from its raw handle while one
/// lives: [`CommandQueue::from_raw_borrowed`], an external stream over a runtime queue) shares
/// what the runtime knows of the queue: its context, the waits of its commands, the commands
/// enqueued after an idle probe (review h59: a second wrapper's own record let an external
/// stream's query answer `true` over work enqueued through the first, and a marker through it
/// miss a failed wait of the first).
#[derive(Debug)]
pub struct CommandQueue(raw::cl_command_queue, Arc<QueueShared>);

/// The shared state of every live wrapper of each raw queue, by the queue's address (a queue
/// stays alive, so its address unique, while a wrapper holds its reference). Looked up when a
/// wrapper is made from a raw handle (not when one is cloned). When the last wrapper drops
/// while the state's wait log holds a wait not known complete or a failure, the state is kept
/// ([`Shared::Kept`]): other code may own the queue and wrap it again (a new external stream
/// over it), and a marker through the new wrapper must still be judged with the failed wait
/// enqueued before (review h61: it read complete while a command before the wait was queued,
/// and the allocators reused blocks recorded on the new stream). Otherwise the entry goes.
/// A queue the runtime creates never takes over a kept state (its address may be a released
/// queue's).
static SHARED: parking_lot::Mutex<Option<std::collections::HashMap<usize, Shared>>> =
    parking_lot::Mutex::new(None);

/// Kept states past which the oldest are dropped (queues abandoned after a failed wait).
const KEPT_STATES: usize = 4096;

/// An entry of [`SHARED`].
enum Shared {
    /// The state of the live wrappers.
    Live(std::sync::Weak<QueueShared>),
    /// The state of a queue without a live wrapper whose wait log still matters, with the
    /// order it was kept in.
    Kept(Arc<QueueShared>, u64),
}

/// The shared state of the raw queue `raw`: the live wrappers', or a kept one (when `fresh`
/// is false: a wrapper made from a raw handle, whose context is the kept one's), or a new one.
fn shared_of(raw: raw::cl_command_queue, fresh: bool) -> Arc<QueueShared> {
    let mut map = SHARED.lock();
    let map = map.get_or_insert_with(Default::default);
    let key = raw as usize;
    match map.remove(&key) {
        Some(Shared::Live(weak)) => {
            if let Some(shared) = weak.upgrade() {
                shared.wrappers.fetch_add(1, Ordering::AcqRel);
                map.insert(key, Shared::Live(weak));
                return shared;
            }
        }
        Some(Shared::Kept(shared, _)) if !fresh => {
            let known = shared.context.load(Ordering::Relaxed);
            let same_context = known == 0
                || clq::get_command_queue_data(raw, QUEUE_CONTEXT)
                    .ok()
                    .and_then(|v| {
                        v.get(..8)
                            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                    })
                    == Some(known as u64);
            if same_context {
                shared.wrappers.fetch_add(1, Ordering::AcqRel);
                map.insert(key, Shared::Live(Arc::downgrade(&shared)));
                return shared;
            }
        }
        _ => {}
    }
    let shared = Arc::new(if fresh {
        QueueShared::created()
    } else {
        QueueShared::default()
    });
    shared.wrappers.store(1, Ordering::Release);
    map.insert(key, Shared::Live(Arc::downgrade(&shared)));
    shared
}

/// The last wrapper of `raw`, whose state is `shared`, drops: its entry goes, or is kept
/// while its wait log matters (see [`SHARED`]).
fn last_wrapper_dropped(raw: raw::cl_command_queue, shared: &Arc<QueueShared>) {
    static KEPT_ORDER: AtomicU64 = AtomicU64::new(0);
    let mut map = SHARED.lock();
    let Some(map) = map.as_mut() else {
        return;
    };
    let key = raw as usize;
    let ours = matches!(map.get(&key), Some(Shared::Live(w)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(shared)));
    // A wrapper made meanwhile holds the lock to look the entry up: it finds it live then.
    // Counted wrappers, not the `Arc`'s references: markers and idle probes hold the state
    // too, and may outlive the last wrapper (review h63: the state was then not kept).
    if !ours || shared.wrappers.load(Ordering::Acquire) != 0 {
        return;
    }
    if shared.waits.is_watched() {
        let order = KEPT_ORDER.fetch_add(1, Ordering::Relaxed);
        map.insert(key, Shared::Kept(Arc::clone(shared), order));
        let kept = map
            .values()
            .filter(|e| matches!(e, Shared::Kept(..)))
            .count();
        if kept > KEPT_STATES {
            let oldest = map
                .iter()
                .filter_map(|(k, e)| match e {
                    Shared::Kept(_, o) => Some((*o, *k)),
                    Shared::Live(_) => None,
                })
                .min();
            if let Some((_, k)) = oldest {
                map.remove(&k);
            }
        }
    } else {
        map.remove(&key);
    }
}

/// What every wrapper of one raw queue knows of it ([`CommandQueue`]).
#[derive(Debug, Default)]
struct QueueShared {
    /// The queue's context (`CL_QUEUE_CONTEXT`, fixed at creation), read once on first need
    /// (0 until then) so that checking a buffer's context costs no driver query. Only
    /// compared, never used as a handle (not retained).
    context: AtomicUsize,
    /// The waits of the commands enqueued through the wrapper (see `waits`).
    waits: Arc<WaitLog>,
    /// Whether the queue's platform frees a failed command's event under its own lock
    /// ([`super::Platform::frees_failed_events`]), read on first need: 0 unknown, 1 no,
    /// 2 yes.
    frees_failed_events: AtomicU8,
    /// Whether a command was enqueued through these clones since a drop last reported it to
    /// the exit's registry (`at_exit::wrapper_dropped`) or a `finish` of theirs covered it.
    enqueued: AtomicBool,
    /// The latest generation handed out: to an idle probe begun through these clones
    /// ([`CommandQueue::enqueue_idle_probe`]) or to a `clFinish` of theirs; 1 for a queue the
    /// runtime created (its creation), 0 for a raw handle wrapped with nothing handed out yet.
    probes: AtomicU64,
    /// The live wrappers sharing this state (clones and wrappers made again from the raw
    /// handle; markers and probes holding it are not counted): see [`SHARED`].
    wrappers: AtomicUsize,
    /// How many `clFinish` calls began through these wrappers (numbered before each call).
    finishes_begun: AtomicU64,
    /// The highest number ([`QueueShared::finishes_begun`]) of a `clFinish` that returned with
    /// success: every command enqueued before that one began completed.
    finished_begun: AtomicU64,
    /// The highest probe generation that was the latest when a command's enqueue call
    /// through these clones returned (a probe's own marker excepted): a probe of a higher
    /// generation saw no command enqueued after it began.
    noted_probe: AtomicU64,
    /// The highest generation ([`QueueShared::probes`]) taken by a `clFinish` that returned
    /// with success, or 1 for a queue the runtime created (idle at its creation); 0: none.
    /// While no command was noted at or after it ([`QueueShared::noted_probe`] below it), the
    /// queue is idle ([`CommandQueue::idle_since_finish`]).
    finished_generation: AtomicU64,
    /// Calls of other code that may be enqueuing on the raw handle right now
    /// ([`CommandQueue::raw_enqueue_scope`]): while one runs, the queue is never taken for
    /// idle, whatever was noted.
    raw_calls: AtomicUsize,
}

impl QueueShared {
    /// The state of a queue the runtime just created: idle, nothing enqueued on it yet
    /// (generation 1, its creation, counts as a finish).
    fn created() -> QueueShared {
        QueueShared {
            probes: AtomicU64::new(1),
            finished_generation: AtomicU64::new(1),
            ..QueueShared::default()
        }
    }

    /// The count of begun finishes, read right after a marker's enqueue returned: a finish
    /// numbered above it began after the marker ([`QueueShared::finished_since`]).
    fn finishes_seen(&self) -> u64 {
        self.finishes_begun.load(Ordering::Acquire)
    }

    /// Whether a finish numbered above `seen` ([`QueueShared::finishes_seen`]) returned with
    /// success: every command enqueued before the marker that read `seen` completed.
    fn finished_since(&self, seen: u64) -> bool {
        self.finished_begun.load(Ordering::Acquire) > seen
    }
}

/// A call of other code enqueuing on a queue's raw handle, from
/// [`CommandQueue::raw_enqueue_scope`] to its drop (which notes the call's commands).
#[derive(Debug)]
pub struct RawEnqueueScope<'a>(&'a CommandQueue);

impl Drop for RawEnqueueScope<'_> {
    fn drop(&mut self) {
        // Noted before the count drops: whoever reads the count at zero sees the note.
        self.0.note_enqueued();
        self.0 .1.raw_calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A marker after every command enqueued on its queue before it, that also tells whether a
/// command was enqueued through the same wrapper or its clones after it began
/// ([`CommandQueue::enqueue_idle_probe`], [`CommandQueue::enqueued_since`]): once the marker
/// completed and none was, the queue is idle, with no new marker (as `torch.cuda.Stream.query`
/// answers of an idle stream).
#[derive(Debug)]
pub struct IdleProbe {
    marker: ClEvent,
    generation: u64,
    /// The shared state of the wrapper clones it was begun through (held, so that its
    /// identity is never that of another queue's).
    queue: Arc<QueueShared>,
    /// The waits enqueued before the marker, which judge it ([`IdleProbe::is_complete`]).
    earlier: Option<EarlierWaits>,
    /// The queue's count of begun finishes read after the marker's enqueue returned
    /// ([`IdleProbe::drained_by_finish`]).
    finishes: u64,
}

impl IdleProbe {
    /// The probe's marker, as the driver reports it (to wait for it; its own status is not
    /// judged in order: [`IdleProbe::is_complete`] is).
    pub fn event(&self) -> &ClEvent {
        &self.marker
    }

    /// Whether the commands enqueued before the probe completed, judged in order as
    /// [`OrderedMarker::status`]: `true` once the driver reports the marker complete and
    /// every wait enqueued before it on the queue completed with success; `false` while
    /// either is pending. A driver may complete the marker after a barrier whose wait failed
    /// while earlier commands stay queued (PoCL does: review h51), so the marker alone is not
    /// trusted then.
    ///
    /// # Errors
    /// A failed `clGetEventInfo` on the marker; the marker's own negative status, or that of
    /// a wait enqueued before it (sticky up to a [`CommandQueue::finish`] that returned with
    /// success, as [`OrderedMarker::status`]), as a `ClError` of `"command execution"`.
    pub fn is_complete(&self) -> Result<bool, ClError> {
        match in_order(self.marker.status()?, self.earlier.as_ref()) {
            EventStatus::Complete => Ok(true),
            EventStatus::Error(code) => Err(ClError::new("command execution", code)),
            _ => Ok(false),
        }
    }

    /// Whether a wait enqueued before the probe is already known to have failed, as
    /// [`OrderedMarker::known_failed_wait`] (no status query): what a stream query reports
    /// while the probe is still queued.
    pub fn known_failed_wait(&self) -> bool {
        self.earlier
            .as_ref()
            .is_some_and(EarlierWaits::known_failure)
    }

    /// Whether the commands enqueued before the probe are known to have completed through a
    /// [`CommandQueue::finish`] of its queue begun after the probe's marker was enqueued and
    /// returned with success, as [`OrderedMarker::drained_by_finish`]: then a probe that
    /// reads a failure ([`IdleProbe::is_complete`]) has no earlier work left. One atomic load,
    /// no driver call.
    pub fn drained_by_finish(&self) -> bool {
        self.queue.finished_since(self.finishes)
    }
}

/// A marker whose completion is judged with the waits enqueued before it on its queue
/// ([`CommandQueue::enqueue_ordered_marker`]): what the allocators free memory under.
#[derive(Debug)]
pub struct OrderedMarker {
    event: ClEvent,
    earlier: Option<EarlierWaits>,
    /// The queue's shared state and its count of begun finishes read after the marker's
    /// enqueue returned ([`OrderedMarker::drained_by_finish`]).
    finishes: (Arc<QueueShared>, u64),
    /// An adopted command ([`CommandQueue::adopt_in_order`]): `earlier` may hold waits
    /// logged after it, so a pending one tells nothing of it.
    adopted: bool,
}

impl OrderedMarker {
    /// The marker's event (to wait for it, or to make another queue wait for it).
    pub fn event(&self) -> &ClEvent {
        &self.event
    }

    /// The marker's status, trusted only in order: `Complete` once the driver reports it
    /// complete and every wait enqueued before it on the queue completed with success;
    /// `Submitted` while the driver reports it complete but such a wait is still pending;
    /// `Error` when the driver reports the marker failed, or when such a wait failed (then
    /// with the wait's status: a driver may complete later commands while the ones before
    /// the failure stay queued, as PoCL does, and nothing tells when those ran). A wait's
    /// failure is sticky: every later ordered marker of the queue reads `Error` too, up to a
    /// [`CommandQueue::finish`] that returned with success (the markers enqueued after it are
    /// judged with the waits enqueued after it only). An adopted command
    /// ([`CommandQueue::adopt_in_order`]) that the driver reports complete reads `Complete`
    /// while none of those waits failed, pending ones or not (they may have been logged after
    /// it: review h85).
    ///
    /// # Errors
    /// A failed `clGetEventInfo` on the marker.
    pub fn status(&self) -> std::result::Result<EventStatus, ClError> {
        let status = self.event.status()?;
        if self.adopted && status == EventStatus::Complete {
            return Ok(match self.earlier.as_ref().map(EarlierWaits::status) {
                Some(WaitsStatus::Failed(code)) => EventStatus::Error(code),
                _ => EventStatus::Complete,
            });
        }
        Ok(in_order(status, self.earlier.as_ref()))
    }

    /// Whether the commands enqueued before the marker are known to have completed through a
    /// [`CommandQueue::finish`] of its queue (through the wrapper or its clones) begun after
    /// the marker's enqueue returned and returned with success: then even a marker that reads
    /// `Error` after a failed wait ([`OrderedMarker::status`]) has no earlier work left
    /// (`clFinish`, OpenCL 3.0 §5.15, returns once every earlier command completed). `false`
    /// while no such finish returned. One atomic load, no driver call.
    pub fn drained_by_finish(&self) -> bool {
        let (queue, seen) = &self.finishes;
        queue.finished_since(*seen)
    }

    /// Whether every wait enqueued before the marker on its queue (through the wrapper or
    /// its clones) completed with success, or none was: only then does a barrier of another
    /// queue on [`OrderedMarker::event`] hold that queue back until the work before the
    /// marker ran. A pending wait may still fail, and after a failed one a driver may complete
    /// the marker while earlier commands stay queued (PoCL does; it also runs the commands
    /// after a barrier whose wait failed, so passing the failure on does not help). Status
    /// queries of the logged waits (never a wait); one field read while none was logged.
    pub fn orders_waiters(&self) -> bool {
        self.earlier
            .as_ref()
            .is_none_or(|earlier| earlier.status() == WaitsStatus::Complete)
    }

    /// Whether a wait enqueued before the marker is already known to have failed
    /// (`EarlierWaits::known_failure`): no status query, one lock while waits are logged,
    /// one field read otherwise. For a marker still pending: PoCL fails such a marker with
    /// the wait while NVIDIA keeps it queued behind the earlier work, so a query that
    /// reports this reads the same on both (an H100, 2026-12-07: `Event::query` read
    /// `false` where `Event::synchronize` reported the failure).
    pub fn known_failed_wait(&self) -> bool {
        self.earlier
            .as_ref()
            .is_some_and(EarlierWaits::known_failure)
    }

    /// Whether a wait enqueued before the marker on its queue (through the wrapper or its
    /// clones) is known to have failed, whatever the driver says of the marker: the driver
    /// may then have run, or run later, the commands enqueued after that wait ahead of earlier
    /// ones still queued (PoCL does), so the queue's order no longer holds for them. Status
    /// queries of the logged waits (never a wait); one field read while none was logged.
    /// Asked now, every time (`EarlierWaits::failure_now`): a finish that began before the
    /// marker and covers the failure clears it for the marker once it returned (review h91).
    pub fn follows_failed_wait(&self) -> bool {
        self.earlier
            .as_ref()
            .is_some_and(|earlier| earlier.failure_now().is_some())
    }
}

/// A marker's driver `status` judged with the waits enqueued before it (`earlier`; `None`:
/// none could stand before it): see [`OrderedMarker::status`].
fn in_order(status: EventStatus, earlier: Option<&EarlierWaits>) -> EventStatus {
    match (status, earlier) {
        (EventStatus::Complete, Some(earlier)) => match earlier.status() {
            WaitsStatus::Complete => EventStatus::Complete,
            WaitsStatus::Pending => EventStatus::Submitted,
            WaitsStatus::Failed(code) => EventStatus::Error(code),
        },
        (status, _) => status,
    }
}

// SAFETY: cl_command_queue is reference counted and enqueue calls are thread-safe
// (OpenCL 3.0 appendix A.2); we own one reference.
unsafe impl Send for CommandQueue {}
// SAFETY: as above; commands from several threads are serialized by the driver.
unsafe impl Sync for CommandQueue {}

pub(super) fn check_range(
    what: impl std::fmt::Display,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::InvalidArgument(format!(
            "{what}: range {offset}..{offset}+{len} exceeds the buffer's {size} bytes"
        ))),
    }
}

/// Checks a fill of `len` bytes at `offset` of a buffer of `size` bytes with a pattern of
/// `pattern_len` bytes: a power of two up to 128 dividing `offset` and `len`
/// (`clEnqueueFillBuffer`, OpenCL 3.0 §5.2.3), and the range inside the buffer.
pub(super) fn check_fill(pattern_len: usize, offset: usize, len: usize, size: usize) -> Result<()> {
    let p = pattern_len;
    if !p.is_power_of_two() || p > 128 || offset % p != 0 || len % p != 0 {
        return Err(DeviceError::InvalidArgument(format!(
            "fill: pattern of {p} bytes must be a power of two <= 128 dividing offset {offset} and length {len}"
        )));
    }
    check_range("fill", offset, len, size)
}

/// [`check_range`] for both ends of a copy of `len` bytes, the source's first, each given as
/// `(offset, size)` in bytes; errors name the end "`what` source" or "`what` destination".
fn check_copy_ranges(
    what: &str,
    len: usize,
    (src_offset, src_size): (usize, usize),
    (dst_offset, dst_size): (usize, usize),
) -> Result<()> {
    check_range(format_args!("{what} source"), src_offset, len, src_size)?;
    check_range(
        format_args!("{what} destination"),
        dst_offset,
        len,
        dst_size,
    )
}

/// The ranges of a copy of `len` bytes between two buffers, each end given as
/// `(buffer, offset)` ([`check_copy_ranges`]: errors name the "copy source" or "copy
/// destination").
pub(super) fn check_buffer_copy(
    len: usize,
    (src, src_offset): (&Buffer, usize),
    (dst, dst_offset): (&Buffer, usize),
) -> Result<()> {
    check_copy_ranges(
        "copy",
        len,
        (src_offset, src.size()),
        (dst_offset, dst.size()),
    )
}

impl CommandQueue {
    /// Wraps one owned reference, counted in [`super::live_objects`].
    /// Wraps one owned reference to `raw`, counted in [`super::live_objects`]: `fresh`, a
    /// queue the runtime just created (a new state), else a raw handle wrapped again (the
    /// state of its live wrappers, or a kept one: see [`SHARED`]).
    pub(super) fn counted(raw: raw::cl_command_queue, fresh: bool) -> Self {
        super::live::created(super::live::Kind::Queue);
        super::at_exit::wrapper_created(raw);
        CommandQueue(raw, shared_of(raw, fresh))
    }

    /// `clCreateCommandQueueWithProperties` with a property list.
    fn with_properties(context: &Context, device: DeviceId, props: &[u64]) -> Result<CommandQueue> {
        debug_assert_eq!(props.last(), Some(&0), "a property list ends with 0");
        // SAFETY: context and device are live handles and `props` is a 0-terminated property
        // list that outlives the call (clCreateCommandQueueWithProperties, §5.1).
        let q = cl("clCreateCommandQueueWithProperties", unsafe {
            clq::create_command_queue_with_properties(
                context.as_raw(),
                device.as_raw(),
                props.as_ptr(),
            )
        })?;
        Ok(CommandQueue::counted(q, true))
    }

    /// Creates an in-order queue (`clCreateCommandQueueWithProperties`).
    ///
    /// # Errors
    /// A failed `clCreateCommandQueueWithProperties`.
    pub fn new(context: &Context, device: DeviceId, options: QueueOptions) -> Result<CommandQueue> {
        let mut props: Vec<u64> = Vec::with_capacity(5);
        if options.profiling {
            props.extend([QUEUE_PROPERTIES as u64, PROFILING_ENABLE]);
        }
        if let Some(p) = options.priority {
            let v = match p {
                QueuePriority::High => 1,
                QueuePriority::Medium => 2,
                QueuePriority::Low => 4,
            };
            props.extend([QUEUE_PRIORITY_KHR, v]);
        }
        props.push(0);
        Self::with_properties(context, device, &props)
    }

    /// Creates an out-of-order queue (`CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE`). The runtime's
    /// streams never use one; it exists for interop code and for testing that external-queue
    /// validation rejects it.
    ///
    /// # Errors
    /// A failed `clCreateCommandQueueWithProperties` (`CL_INVALID_QUEUE_PROPERTIES` where the
    /// device has no out-of-order support).
    pub fn new_out_of_order(context: &Context, device: DeviceId) -> Result<CommandQueue> {
        let props: [u64; 3] = [QUEUE_PROPERTIES as u64, OUT_OF_ORDER, 0];
        Self::with_properties(context, device, &props)
    }

    /// Wraps a user's queue without taking over the user's reference: the wrapper retains its
    /// own reference and releases only that one, so the user's queue is never released by us.
    ///
    /// # Safety
    /// `raw` must be a valid `cl_command_queue` (or null, which is rejected with an error).
    ///
    /// # Errors
    /// `CL_INVALID_COMMAND_QUEUE` for null; a failed `clRetainCommandQueue`.
    pub unsafe fn from_raw_borrowed(raw: raw::cl_command_queue) -> Result<CommandQueue, ClError> {
        if raw.is_null() {
            return Err(ClError::new("clRetainCommandQueue", -36));
        }
        // SAFETY: the caller guarantees `raw` is a valid queue (clRetainCommandQueue precondition).
        cl("clRetainCommandQueue", unsafe {
            clq::retain_command_queue(raw)
        })?;
        Ok(CommandQueue::counted(raw, false))
    }

    /// A new wrapper of this queue made from its raw handle, as other code wrapping
    /// [`CommandQueue::as_raw`] with [`CommandQueue::from_raw_borrowed`] would make one
    /// (retained; it shares what every wrapper of the queue knows of it). Safe: `self` keeps
    /// the queue alive for the call. For the tests of the crates above, which hold no
    /// `unsafe` code.
    ///
    /// # Errors
    /// A failed `clRetainCommandQueue`.
    #[doc(hidden)]
    pub fn rewrapped(&self) -> Result<CommandQueue, ClError> {
        // SAFETY: `self` holds a reference to the live queue `self.0` for the whole call.
        unsafe { CommandQueue::from_raw_borrowed(self.0) }
    }

    /// A reference to this queue held as other code would hold its own (retained, not a
    /// wrapper: not counted in [`super::live_objects`] nor seen by the runtime), which
    /// [`ForeignQueue::wrap`] wraps again. Safe: `self` keeps the queue alive for the call.
    /// For the tests of the crates above, which hold no `unsafe` code.
    ///
    /// # Errors
    /// A failed `clRetainCommandQueue`.
    #[doc(hidden)]
    pub fn foreign_reference(&self) -> Result<ForeignQueue, ClError> {
        // SAFETY: `self` holds a reference to the live queue `self.0` for the call.
        cl("clRetainCommandQueue", unsafe {
            clq::retain_command_queue(self.0)
        })?;
        Ok(ForeignQueue(self.0))
    }

    /// Wraps a user's queue taking over the caller's reference: dropping the last clone
    /// releases the queue.
    ///
    /// # Safety
    /// `raw` must be a valid, non-null `cl_command_queue` whose reference the caller owns and
    /// gives up.
    pub unsafe fn from_raw_owned(raw: raw::cl_command_queue) -> CommandQueue {
        CommandQueue::counted(raw, false)
    }

    /// The wait list of a non-blocking command that waits on nothing but the queue's earlier
    /// commands: on PoCL before 4.0 it holds the read side of the failure exclusion (see
    /// `held`) until the enqueue call returned, as a list with events does.
    fn empty_wait_list(&self) -> WaitList {
        // An empty list still orders the command after the queue's previous one, in whose
        // notify list PoCL 3.1 enters it: a failure passed on by another thread meanwhile
        // races that entry (review h38: SIGSEGV and PoCL assertions, 8 of 10 runs).
        let excluded = self.frees_failed_events().then(super::held::enqueue_side);
        WaitList(Vec::new(), None, Cell::new(excluded))
    }

    /// The raw wait list of a command of this queue. Events of another context are refused
    /// with `CL_INVALID_CONTEXT`, as OpenCL 3.0 §5.13 specifies for every enqueue call: PoCL
    /// accepts them without checking. Costs one info query per event (none for an empty
    /// list), two on PoCL before 4.0.
    ///
    /// On PoCL before 4.0 ([`CommandQueue::frees_failed_events`]) the events whose status
    /// already is an error are replaced by one unset user event,
    /// which the list sets to the first such status when it drops, after the enqueue call
    /// (never for a blocking one: it would wait for it). PoCL 3.1 adds a command waiting on
    /// a failed event to the event's notify list, which was passed on already and never is
    /// again: the command would stay queued forever, and so would every later `finish` of its
    /// queue (review h32). A failure that starts between this check and the enqueue call is
    /// not caught.
    fn checked_wait_list(
        &self,
        function: &'static str,
        wait: &[&ClEvent],
    ) -> Result<WaitList, ClError> {
        if wait.is_empty() {
            return Ok(self.empty_wait_list());
        }
        let ctx = self.context_raw()?;
        let stand_in = self.frees_failed_events();
        // Held until the enqueue call returned (`logged`): no failure is passed on between
        // the check below and the command's entry in its events' notify lists.
        let excluded = stand_in.then(super::held::enqueue_side);
        let mut failed = None;
        for e in wait {
            if e.context_raw()? != ctx {
                return Err(ClError::new(function, CODE_INVALID_CONTEXT));
            }
            e.note_waited();
            if !stand_in {
                continue;
            }
            if let (None, Ok(super::EventStatus::Error(code))) = (&failed, e.status()) {
                failed = Some(code);
            }
        }
        let Some(code) = failed else {
            return Ok(WaitList(wait_list(wait), None, Cell::new(excluded)));
        };
        // Reached only with `stand_in`: the queue's platform frees failed events.
        let proxy = ClEvent::user_in(ctx, true)?;
        let mut list: Vec<raw::cl_event> = wait
            .iter()
            .filter(|e| !matches!(e.status(), Ok(super::EventStatus::Error(_))))
            .map(|e| e.as_raw())
            .collect();
        list.push(proxy.as_raw());
        Ok(WaitList(list, Some((proxy, code)), Cell::new(excluded)))
    }

    /// Runs `enqueue` (the enqueue call of a command waiting for `list`) with the list logged
    /// in the queue's waits first (see `waits`); the entry is dropped again when the enqueue
    /// fails.
    fn logged<T, E>(
        &self,
        list: &WaitList,
        enqueue: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let entry = self.1.waits.add(&list.0);
        let result = enqueue();
        self.note_enqueued();
        // The enqueue call returned: failures may be passed on again.
        drop(list.2.take());
        if let Some(n) = entry {
            if result.is_err() {
                self.1.waits.forget(n);
            }
            self.1.waits.enqueued(n);
        }
        result
    }

    /// Notes, after its enqueue call, that a command was enqueued through this wrapper (for
    /// the exit's registry: a load, and a store the first time only; and for idle probes: two
    /// loads, and a `fetch_max` the first time after each probe began).
    fn note_enqueued(&self) {
        if !self.1.enqueued.load(Ordering::Relaxed) {
            self.1.enqueued.store(true, Ordering::Release);
        }
        let probe = self.1.probes.load(Ordering::Acquire);
        if self.1.noted_probe.load(Ordering::Acquire) < probe
            && !PROBING.try_with(Cell::get).unwrap_or(false)
        {
            self.1.noted_probe.fetch_max(probe, Ordering::AcqRel);
        }
    }

    /// The raw `cl_command_queue`, valid while `self` lives.
    pub fn as_raw(&self) -> raw::cl_command_queue {
        self.0
    }

    fn info_u64(&self, param: u32) -> Result<u64, ClError> {
        let v = cl(
            "clGetCommandQueueInfo",
            clq::get_command_queue_data(self.0, param),
        )?;
        let mut a = [0u8; 8];
        let n = v.len().min(8);
        a[..n].copy_from_slice(&v[..n]);
        Ok(u64::from_ne_bytes(a))
    }

    /// `CL_QUEUE_PROPERTIES` bits.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo`.
    pub fn properties(&self) -> Result<u64, ClError> {
        self.info_u64(QUEUE_PROPERTIES)
    }

    /// True unless `CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE` is set.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo`.
    pub fn is_in_order(&self) -> Result<bool, ClError> {
        Ok(self.properties()? & OUT_OF_ORDER == 0)
    }

    /// True when `CL_QUEUE_PROFILING_ENABLE` is set.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo`.
    pub fn has_profiling(&self) -> Result<bool, ClError> {
        Ok(self.properties()? & PROFILING_ENABLE != 0)
    }

    /// The raw context the queue was created on.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo`.
    pub fn context_raw(&self) -> Result<raw::cl_context, ClError> {
        let known = self.1.context.load(Ordering::Relaxed);
        if known != 0 {
            return Ok(known as raw::cl_context);
        }
        let context = self.info_u64(QUEUE_CONTEXT)? as usize;
        self.1.context.store(context, Ordering::Relaxed);
        Ok(context as raw::cl_context)
    }

    /// Whether the queue's platform frees a failed command's event under its own lock (PoCL
    /// before 4.0, [`super::Platform::frees_failed_events`]): then the events of its commands
    /// are kept until they are over, and failed events in a wait list go through a stand-in.
    /// Three driver queries the first time for the wrapper and its clones, one atomic load
    /// after; false when the platform cannot be read.
    pub(super) fn frees_failed_events(&self) -> bool {
        match self.1.frees_failed_events.load(Ordering::Relaxed) {
            1 => return false,
            2 => return true,
            _ => {}
        }
        let frees = self
            .device_raw()
            .map(DeviceId::from_raw)
            .and_then(|d| d.platform())
            .is_ok_and(|p| p.frees_failed_events());
        if frees {
            super::held::note_frees_failed_events();
        }
        self.1
            .frees_failed_events
            .store(if frees { 2 } else { 1 }, Ordering::Relaxed);
        frees
    }

    /// Whether the queue's driver may run the commands enqueued after a failed wait ahead of
    /// the earlier ones still queued, which breaks the in-order queue's order for them: PoCL
    /// before 4.0 (the platforms of [`super::Platform::frees_failed_events`]: a barrier whose
    /// wait failed terminates at once while the commands before it stay queued, and the
    /// commands after it run). NVIDIA keeps the order. Three driver queries the first time
    /// for the wrapper and its clones, one atomic load after; false when the platform cannot
    /// be read.
    pub fn reorders_after_failed_wait(&self) -> bool {
        self.frees_failed_events()
    }

    /// On a queue that [`CommandQueue::reorders_after_failed_wait`], the flag that reads true
    /// while a wait of the queue's commands (enqueued through this wrapper or its clones) has
    /// not completed with success, or one failed and no `clFinish` returned with success
    /// since: while it reads false, every command enqueued so far runs after the ones
    /// enqueued before it. Read with one atomic load, no lock. `None` on other queues (the
    /// order holds whatever the waits become).
    pub fn order_flag(&self) -> Option<Arc<AtomicBool>> {
        self.frees_failed_events()
            .then(|| self.1.waits.watched_flag())
    }

    /// Whether a wait of the queue's commands (through this wrapper or its clones) is known
    /// to have failed since the last [`CommandQueue::finish`] that returned with success: on
    /// a queue that [`CommandQueue::reorders_after_failed_wait`], the commands enqueued from
    /// now on may run ahead of ones enqueued before the failed wait and still queued. Status
    /// queries of the logged waits (never a wait); one atomic load while none is logged and
    /// none failed.
    pub fn follows_failed_wait(&self) -> bool {
        self.1.waits.failed_since_finish()
    }

    /// The event an enqueue call of this queue returned, as a [`ClEvent`]: kept until its
    /// command is over when the last wrapper drops if the driver needs it
    /// ([`CommandQueue::frees_failed_events`]; registered in `notify_lists` too), else
    /// released at once.
    ///
    /// `ticket` is [`CommandQueue::ticket`], taken before the enqueue call.
    pub(super) fn command_event(
        &self,
        raw: raw::cl_event,
        ticket: Option<super::notify_lists::Ticket>,
    ) -> ClEvent {
        self.note_enqueued();
        match ticket {
            Some(ticket) => {
                super::notify_lists::register(raw, ticket);
                ClEvent::from_owned_held(raw)
            }
            None => ClEvent::from_owned(raw),
        }
    }

    /// On a queue whose driver [`CommandQueue::frees_failed_events`], the `notify_lists`
    /// ticket a command takes before its enqueue call (handed to
    /// [`CommandQueue::command_event`] with its event); `None` on other queues.
    pub(super) fn ticket(
        &self,
        waits: impl IntoIterator<Item = raw::cl_event>,
    ) -> Option<super::notify_lists::Ticket> {
        if !self.frees_failed_events() {
            return None;
        }
        let context = self.context_raw().map_or(0, |c| c as usize);
        Some(super::notify_lists::ticket(context, waits))
    }

    /// Refuses a buffer of another context than the queue's with `CL_INVALID_CONTEXT`, as
    /// OpenCL 3.0 §5.2.2-§5.2.3 specify for the commands on buffers: the runtime checks it
    /// rather than trusting every driver to (NVIDIA aborts on a kernel argument of another
    /// context). No driver query once the queue's context is known (the buffer recorded its
    /// own at creation).
    pub(super) fn check_buffer_context(
        &self,
        function: &'static str,
        buffer: &Buffer,
    ) -> Result<(), ClError> {
        if buffer.context_raw() != self.context_raw()? {
            return Err(ClError::new(function, CODE_INVALID_CONTEXT));
        }
        Ok(())
    }

    /// The raw device the queue was created for.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo`.
    pub fn device_raw(&self) -> Result<raw::cl_device_id, ClError> {
        Ok(self.info_u64(QUEUE_DEVICE)? as usize as raw::cl_device_id)
    }

    /// Submits queued commands to the device (`clFlush`).
    ///
    /// # Errors
    /// A failed `clFlush`.
    pub fn flush(&self) -> Result<(), ClError> {
        cl("clFlush", clq::flush(self.0))
    }

    /// Blocks until every command on the queue completed (`clFinish`), then reports a release
    /// failure kept from an earlier `Drop`, if any. Once it returned with success, the failed
    /// waits of the commands enqueued before it no longer make the ordered markers enqueued
    /// after it read failed ([`OrderedMarker::status`]): nothing before them is queued.
    ///
    /// After a command failed through its wait list, NVIDIA's `clFinish` returns an error
    /// once per batch of failed commands (the failure's status, seen as -5 for a user event
    /// failed with -5), after every earlier command completed, and succeeds from then on;
    /// PoCL's returns success. An error return is not taken as proof that the queue drained
    /// (a driver may return one without waiting), so after one `clFinish` is called again, up
    /// to [`FINISH_RETRIES`] times: the first error is returned (reported once), and when a
    /// later call succeeded the queue is known drained as after a successful finish (the
    /// ordered markers enqueued after it are judged without the waits before it; see
    /// [`CommandQueue::finish_outcome`]). Without that, an event recorded after a synchronize
    /// that reported NVIDIA's failure kept reading the failure, though its work ran (an
    /// H100, 2026-12-07).
    ///
    /// # Errors
    /// A failed `clFinish` (the first one), or the kept release failure.
    pub fn finish(&self) -> Result<(), ClError> {
        self.finish_outcome().result
    }

    /// [`CommandQueue::finish`], telling too whether the queue is known drained: whether a
    /// `clFinish` of this call returned with success, so every command enqueued before the
    /// call began completed (also when `result` is the error of an earlier `clFinish` of the
    /// call, or the kept release failure).
    pub fn finish_outcome(&self) -> FinishOutcome {
        if self.frees_failed_events() {
            // A failure set through a raw handle by foreign code is passed on to the forwards'
            // targets only by a sweep (PoCL before 4.0 makes no callback for a failed
            // command): one now, so that a command of this queue waiting on such a target does
            // not keep the `clFinish` below waiting (review h43). No driver call while no
            // forward is pending.
            super::forwards::sweep();
        }
        let covered = self.1.waits.before_finish();
        // Every command noted before this swap was enqueued before the `clFinish` (a command
        // is noted after its enqueue call): a successful finish covers it for the exit's
        // registry. A command enqueued meanwhile notes itself again.
        let enqueued = self.1.enqueued.swap(false, Ordering::AcqRel);
        let number = self.1.finishes_begun.fetch_add(1, Ordering::AcqRel) + 1;
        // A generation of its own: a command noted after this point may have been enqueued
        // after the `clFinish` began (`idle_since_finish`).
        let generation = self.1.probes.fetch_add(1, Ordering::AcqRel) + 1;
        let first = cl("clFinish", clq::finish(self.0));
        let mut drained = first.is_ok();
        let mut retries = 0;
        while !drained && retries < FINISH_RETRIES {
            retries += 1;
            drained = clq::finish(self.0).is_ok();
        }
        if !drained {
            if enqueued {
                self.1.enqueued.store(true, Ordering::Release);
            }
            return FinishOutcome {
                drained,
                result: first,
            };
        }
        // The successful `clFinish` began after everything read above: it covers it.
        self.1.finished_begun.fetch_max(number, Ordering::AcqRel);
        self.1
            .finished_generation
            .fetch_max(generation, Ordering::AcqRel);
        if let Some(covered) = covered {
            self.1.waits.finished(covered);
        }
        // After a failed `clFinish` the kept release failure stays kept for the next finish.
        let result = first.and_then(|()| super::take_release_error().map_or(Ok(()), Err));
        FinishOutcome { drained, result }
    }

    /// A marker (`clEnqueueMarkerWithWaitList`): completes when all earlier commands of this
    /// queue (or, with a wait list, those events) complete. Does not block later commands.
    ///
    /// # Errors
    /// A failed `clEnqueueMarkerWithWaitList`.
    pub fn enqueue_marker(&self, wait: &[&ClEvent]) -> Result<ClEvent, ClError> {
        let _ = MARKERS.try_with(|c| c.set(c.get() + 1));
        self.enqueue_synchronization(
            "clEnqueueMarkerWithWaitList",
            clq::enqueue_marker_with_wait_list,
            wait,
        )
    }

    /// Begins an idle check: a marker (as [`CommandQueue::enqueue_marker`]) that
    /// [`CommandQueue::enqueued_since`] compares with the commands enqueued later through this
    /// wrapper or its clones. Costs a marker and one atomic increment.
    ///
    /// # Errors
    /// A failed `clEnqueueMarkerWithWaitList`.
    pub fn enqueue_idle_probe(&self) -> Result<IdleProbe, ClError> {
        // Before the marker's enqueue: a command enqueued after the marker returns from its
        // enqueue call after the marker's was made (the driver orders the two calls on the
        // queue), so its note reads this generation or a later one.
        let generation = self.1.probes.fetch_add(1, Ordering::AcqRel) + 1;
        let _ = PROBING.try_with(|p| p.set(true));
        let marker = self.enqueue_marker(&[]);
        let _ = PROBING.try_with(|p| p.set(false));
        let marker = marker?;
        Ok(IdleProbe {
            marker,
            generation,
            queue: Arc::clone(&self.1),
            earlier: EarlierWaits::after_marker(&self.1.waits),
            // After the enqueue returned: a finish numbered above began after it.
            finishes: self.1.finishes_seen(),
        })
    }

    /// Notes that other code enqueued commands on the raw queue ([`CommandQueue::as_raw`]: a
    /// foreign library): the idle probes begun before read as if a command was enqueued
    /// through the wrapper ([`CommandQueue::enqueued_since`]), and the exit's drain waits for
    /// the queue as for one of its own commands. Call it once that code returned. Two atomic
    /// loads, a store and a `fetch_max` at most.
    pub fn note_raw_enqueue(&self) {
        self.note_enqueued();
    }

    /// Whether the queue is known idle without a driver call: a `clFinish` through this
    /// wrapper or its clones returned with success (or the runtime created the queue) and no
    /// command was noted as enqueued through them since that finish began (nor since the
    /// creation). Commands enqueued on the raw handle by other code are seen only once noted
    /// ([`CommandQueue::note_raw_enqueue`]); a queue wrapped from a raw handle is known idle
    /// only after a finish. Two atomic loads.
    pub fn idle_since_finish(&self) -> bool {
        if self.1.raw_calls.load(Ordering::Acquire) > 0 {
            return false;
        }
        let finished = self.1.finished_generation.load(Ordering::Acquire);
        finished > 0 && self.1.noted_probe.load(Ordering::Acquire) < finished
    }

    /// A call of other code that enqueues on the raw handle ([`CommandQueue::as_raw`]: a
    /// foreign library) begins: until the returned guard drops, neither
    /// [`CommandQueue::idle_since_finish`] nor a probe ([`CommandQueue::enqueued_since`])
    /// takes the queue for idle, and the guard's drop notes the call's commands
    /// ([`CommandQueue::note_raw_enqueue`]). Noting only after the call let a stream query on
    /// another thread answer `true` over a command the call had enqueued and was still
    /// running (review h82). An atomic increment, and the note and a decrement at the drop.
    #[must_use = "the call's commands are noted when the guard drops"]
    pub fn raw_enqueue_scope(&self) -> RawEnqueueScope<'_> {
        self.1.raw_calls.fetch_add(1, Ordering::AcqRel);
        RawEnqueueScope(self)
    }

    /// Whether a command was enqueued through this wrapper or its clones after `probe` began
    /// (its own marker excepted; a probe begun through another wrapper reads as if one was):
    /// when not, and the probe's marker completed, every command enqueued through them
    /// before this call completed. One atomic load, no driver call. Commands enqueued on the raw handle by
    /// other code are seen only once noted ([`CommandQueue::note_raw_enqueue`]).
    pub fn enqueued_since(&self, probe: &IdleProbe) -> bool {
        !Arc::ptr_eq(&probe.queue, &self.1)
            || self.1.raw_calls.load(Ordering::Acquire) > 0
            || self.1.noted_probe.load(Ordering::Acquire) >= probe.generation
    }

    /// A marker after every earlier command of this queue, whose completion is judged in
    /// order ([`OrderedMarker::status`]): with the waits of the commands enqueued before it
    /// through this wrapper or its clones. Costs what [`CommandQueue::enqueue_marker`] costs,
    /// and one atomic load while no wait is logged.
    ///
    /// # Errors
    /// A failed `clEnqueueMarkerWithWaitList`.
    pub fn enqueue_ordered_marker(&self) -> Result<OrderedMarker, ClError> {
        let event = self.enqueue_marker(&[])?;
        // Read after the enqueue returned: a finish numbered above began after it.
        let seen = self.1.finishes_seen();
        Ok(OrderedMarker {
            event,
            earlier: EarlierWaits::after_marker(&self.1.waits),
            finishes: (Arc::clone(&self.1), seen),
            adopted: false,
        })
    }

    /// `event`, the event of a command already enqueued on this queue (by other code: an
    /// adopted library event), judged in order as a marker enqueued now would be
    /// ([`OrderedMarker::status`]): with every wait logged on the queue so far, a superset of
    /// the waits enqueued before the command, so a failed wait enqueued after it judges it
    /// failed too (towards failure, never towards completion), while a pending one logged
    /// after it does not hold it back ([`OrderedMarker::status`]). A command the driver
    /// already reports complete while no logged wait failed completed in order: judged by its
    /// own status alone. PoCL completes a command enqueued after a failed wait while earlier
    /// ones stay queued: adopted as it is, such a command read complete over gated work
    /// (review h83); judged with every logged wait as a marker, a complete one read pending
    /// behind an unrelated later wait, and its `synchronize` waited for it (review h85). The
    /// caller checks that the event is a command of this queue. One status query of the
    /// command, and of the logged waits when it is complete.
    pub fn adopt_in_order(&self, event: ClEvent) -> OrderedMarker {
        // Read after the command's enqueue returned (its event exists).
        let seen = self.1.finishes_seen();
        let mut earlier = EarlierWaits::after_marker(&self.1.waits);
        if matches!(event.status(), Ok(EventStatus::Complete))
            && !matches!(
                earlier.as_ref().map(EarlierWaits::status),
                Some(WaitsStatus::Failed(_))
            )
        {
            earlier = None;
        }
        OrderedMarker {
            event,
            earlier,
            finishes: (Arc::clone(&self.1), seen),
            adopted: true,
        }
    }

    /// A barrier (`clEnqueueBarrierWithWaitList`): later commands of this queue wait for the
    /// listed events (or, with an empty list, for all earlier commands). The host never blocks.
    ///
    /// # Errors
    /// A failed `clEnqueueBarrierWithWaitList`.
    pub fn enqueue_barrier(&self, wait: &[&ClEvent]) -> Result<ClEvent, ClError> {
        self.enqueue_synchronization(
            "clEnqueueBarrierWithWaitList",
            clq::enqueue_barrier_with_wait_list,
            wait,
        )
    }

    /// A marker or barrier: `enqueue` is `clEnqueueMarkerWithWaitList` or
    /// `clEnqueueBarrierWithWaitList` (named `function`), which take only the queue and a
    /// wait list.
    fn enqueue_synchronization(
        &self,
        function: &'static str,
        enqueue: unsafe fn(
            raw::cl_command_queue,
            u32,
            *const raw::cl_event,
        ) -> Result<raw::cl_event, i32>,
        wait: &[&ClEvent],
    ) -> Result<ClEvent, ClError> {
        let _entry = super::at_exit::DriverEntry::enter(function)?;
        let list = self.checked_wait_list(function, wait)?;
        let ticket = self.ticket(list.0.iter().copied());
        let e = self.logged(&list, || {
            // SAFETY: the queue is live and `list` holds `list.count()` live events for the
            // call (clEnqueueMarkerWithWaitList and clEnqueueBarrierWithWaitList, §5.12).
            let raw = unsafe { enqueue(self.0, list.count(), list.ptr()) };
            cl(function, raw)
        })?;
        Ok(self.command_event(e, ticket))
    }

    /// The command of a copy or fill of 0 bytes: a marker after `wait` (and, the queue being
    /// in-order, after the earlier commands), so every driver behaves the same. OpenCL leaves
    /// size 0 to `CL_INVALID_VALUE` (§5.2.2, §5.2.3), which PoCL returns for
    /// `clEnqueueCopyBuffer` but not for `clEnqueueFillBuffer` or `clEnqueueReadBuffer`.
    fn enqueue_nothing(&self, wait: &[&ClEvent]) -> Result<ClEvent> {
        Ok(self.enqueue_marker(wait)?)
    }

    /// A device-side command moving `len` bytes, after `wait`: [`CommandQueue::enqueue_nothing`]
    /// for 0 bytes, else `enqueue` (the OpenCL call `function`) given the checked wait list.
    fn enqueue_bytes(
        &self,
        function: &'static str,
        len: usize,
        wait: &[&ClEvent],
        enqueue: impl FnOnce(&WaitList) -> Result<raw::cl_event, i32>,
    ) -> Result<ClEvent> {
        if len == 0 {
            return self.enqueue_nothing(wait);
        }
        let _entry = super::at_exit::DriverEntry::enter(function)?;
        let list = self.checked_wait_list(function, wait)?;
        let ticket = self.ticket(list.0.iter().copied());
        let e = self.logged(&list, || cl(function, enqueue(&list)))?;
        Ok(self.command_event(e, ticket))
    }

    /// Blocking write of `data` into `dst` at byte `offset`, after the earlier commands of the
    /// queue.
    ///
    /// # Errors
    /// `InvalidArgument` when the range exceeds the buffer; `CL_INVALID_CONTEXT` for a buffer of
    /// another context than the queue's (checked by the runtime, not left to the driver); a failed
    /// `clEnqueueWriteBuffer`; `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` (as from
    /// `clEnqueueWriteBuffer`) when the driver terminated the write without running it because an
    /// earlier command failed (nothing was written).
    pub fn write(&self, dst: &Buffer, offset: usize, data: &[u8]) -> Result<()> {
        self.blocking_transfer("write", dst, offset, HostBytes::From(data))
    }

    /// Blocking read of `out.len()` bytes of `src` at byte `offset`, after the earlier commands
    /// of the queue.
    ///
    /// # Errors
    /// `InvalidArgument` when the range exceeds the buffer; `CL_INVALID_CONTEXT` for a buffer of
    /// another context than the queue's (checked by the runtime, not left to the driver); a failed
    /// `clEnqueueReadBuffer`; `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` (as from
    /// `clEnqueueReadBuffer`) when the driver terminated the read without running it because an
    /// earlier command failed (`out` may not hold the buffer's bytes).
    pub fn read(&self, src: &Buffer, offset: usize, out: &mut [u8]) -> Result<()> {
        self.blocking_transfer("read", src, offset, HostBytes::Into(out))
    }

    /// As [`CommandQueue::write`], but `release` is dropped right after the write is
    /// enqueued, before the host waits for it: a stream layer passes its direct-enqueue
    /// permit there, so the permit covers the enqueue and not the wait. The call returns
    /// once the write is over (the host bytes are not used after it returns), also when the
    /// wait itself fails (the command's status then decides; a failing driver is polled).
    ///
    /// # Errors
    /// As [`CommandQueue::write`].
    pub fn write_releasing<G>(
        &self,
        dst: &Buffer,
        offset: usize,
        data: &[u8],
        release: G,
    ) -> Result<()> {
        self.transfer_then_wait("write", dst, offset, HostBytes::From(data), release)
    }

    /// As [`CommandQueue::read`], with `release` dropped right after the read is enqueued,
    /// before the host waits for it (see [`CommandQueue::write_releasing`]). `out` holds
    /// the bytes when the call returns; the driver no longer writes it then.
    ///
    /// # Errors
    /// As [`CommandQueue::read`].
    pub fn read_releasing<G>(
        &self,
        src: &Buffer,
        offset: usize,
        out: &mut [u8],
        release: G,
    ) -> Result<()> {
        self.transfer_then_wait("read", src, offset, HostBytes::Into(out), release)
    }

    /// The transfer of [`CommandQueue::write_releasing`] / [`CommandQueue::read_releasing`]:
    /// a non-blocking enqueue, `release` dropped, then a host wait until the command is over.
    fn transfer_then_wait<G>(
        &self,
        what: &str,
        buffer: &Buffer,
        offset: usize,
        host: HostBytes<'_>,
        release: G,
    ) -> Result<()> {
        let Some((len, host, function)) = host_transfer(what, buffer, offset, host)? else {
            return Ok(());
        };
        // SAFETY: the host slice is borrowed (exclusively when read into) for this whole call,
        // and the call returns only once the command is over (the loop below: a successful
        // wait, or a terminal status; a failing driver is polled until one is reported), so
        // the driver never touches the host range after the borrow ends; the range was checked
        // against the buffer size (clEnqueueWriteBuffer / clEnqueueReadBuffer, §5.2.2).
        let enqueued = unsafe {
            self.enqueue_transfer(buffer, false, offset, len, host, &self.empty_wait_list())
        };
        drop(release);
        let e = enqueued?;
        // clWaitForEvents flushes the event's queue (§5.15). A wait on a command terminated
        // abnormally fails with CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST; the status tells.
        // Its result is not needed: the status below decides.
        let _ = e.wait();
        let status = loop {
            match e.status() {
                Ok(st @ (super::EventStatus::Complete | super::EventStatus::Error(_))) => {
                    break st;
                }
                // Not over although the wait returned: only a failing driver; poll.
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        match status {
            super::EventStatus::Error(_) => {
                Err(ClError::new(function, CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST).into())
            }
            _ => Ok(()),
        }
    }

    /// The blocking `write` or `read`: checks `offset + len` against the buffer, does nothing
    /// for no bytes, else transfers and waits, and reports a transfer the driver terminated.
    fn blocking_transfer(
        &self,
        what: &str,
        buffer: &Buffer,
        offset: usize,
        host: HostBytes<'_>,
    ) -> Result<()> {
        if self.frees_failed_events() {
            // Enqueued under the failure exclusion, which a blocking call must not hold (it
            // would wait for commands whose failure waits for the exclusion): a non-blocking
            // enqueue and a host wait instead.
            return self.transfer_then_wait(what, buffer, offset, host, ());
        }
        let Some((len, host, function)) = host_transfer(what, buffer, offset, host)? else {
            return Ok(());
        };
        // SAFETY: blocking (CL_TRUE): the host slice, borrowed for this call (exclusively when
        // read into), is read or written before the call returns; the range was checked
        // against the buffer size (clEnqueueWriteBuffer / clEnqueueReadBuffer, §5.2.2).
        let e =
            unsafe { self.enqueue_transfer(buffer, true, offset, len, host, &WaitList::empty()) }?;
        // A blocking call returns once its command is over, also when the driver terminated
        // it without running it because an earlier command of the queue failed (PoCL then
        // returns CL_SUCCESS): the event's status tells, as the wait list would (§5.2.2).
        match e.status()? {
            super::EventStatus::Error(_) => {
                Err(ClError::new(function, CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST).into())
            }
            _ => Ok(()),
        }
    }

    /// One `clEnqueueWriteBuffer` (for [`Transfer::Write`]) or `clEnqueueReadBuffer` (for
    /// [`Transfer::Read`]) of `len` bytes at byte `offset` of `buffer`, after `list`.
    ///
    /// # Safety
    /// `offset..offset + len` lies inside `buffer`; the host range of `len` bytes from the
    /// transfer's pointer stays valid (and, for a read, unborrowed by Rust code) until the
    /// command completes (§5.2.2) — until the call returns when `blocking`.
    unsafe fn enqueue_transfer(
        &self,
        buffer: &Buffer,
        blocking: bool,
        offset: usize,
        len: usize,
        host: Transfer,
        list: &WaitList,
    ) -> Result<ClEvent, ClError> {
        let function = if matches!(host, Transfer::Write(_)) {
            "clEnqueueWriteBuffer"
        } else {
            "clEnqueueReadBuffer"
        };
        let _entry = super::at_exit::DriverEntry::enter(function)?;
        self.check_buffer_context(function, buffer)?;
        let (q, mem, blocking) = (self.0, buffer.as_raw(), u32::from(blocking));
        let (n, events) = (list.count(), list.ptr());
        let ticket = self.ticket(list.0.iter().copied());
        let e = match host {
            // SAFETY: the queue and buffer are live, `list` outlives the call, and the ranges
            // are the caller's obligation (this function's `# Safety`).
            Transfer::Write(p) => cl("clEnqueueWriteBuffer", unsafe {
                clq::enqueue_write_buffer(q, mem, blocking, offset, len, p, n, events)
            })?,
            // SAFETY: as for the write.
            Transfer::Read(p) => cl("clEnqueueReadBuffer", unsafe {
                clq::enqueue_read_buffer(q, mem, blocking, offset, len, p, n, events)
            })?,
        };
        Ok(self.command_event(e, ticket))
    }

    /// Non-blocking copy of `len` bytes between `buffer` and pinned host memory, in the
    /// direction `pinned` gives: [`PinnedBytes::From`] copies the pinned bytes at byte
    /// `pinned_offset` into `buffer` at byte `buffer_offset` (`clEnqueueWriteBuffer` from the
    /// mapped pointer, the fastest path on every driver measured); [`PinnedBytes::Into`] copies
    /// the other way (`clEnqueueReadBuffer` into the mapped pointer). Both ranges are checked,
    /// the source's first. The copy starts after `wait` and after the unfinished copies of the
    /// pinned buffer, made on any queue, that conflict with it (added to the wait list; those
    /// of another context through user events of this one that their completion sets, no
    /// host wait), and it is tracked on the pinned buffer
    /// until it completes (what host accesses then wait for: see [`PinnedBytes`]). The pinned
    /// memory is kept alive until the copy completes, whatever the caller does with its
    /// handle. A copy of 0 bytes uses no host byte: its event is a marker after `wait`, and
    /// nothing is tracked.
    ///
    /// # Errors
    /// `InvalidArgument` for out-of-range regions; `CL_INVALID_CONTEXT` for a buffer of another
    /// context than the queue's (checked by the runtime, not left to the driver); a failed
    /// `clGetCommandQueueInfo`, `clEnqueueWriteBuffer` or `clEnqueueReadBuffer`.
    pub fn copy_pinned(
        &self,
        buffer: &Buffer,
        buffer_offset: usize,
        pinned: PinnedBytes<'_>,
        pinned_offset: usize,
        len: usize,
        wait: &[&ClEvent],
    ) -> Result<ClEvent> {
        let buffer_range = (buffer_offset, buffer.size());
        let (function, pinned, access, host) = match pinned {
            PinnedBytes::From(src) => {
                check_copy_ranges(
                    "pinned write",
                    len,
                    (pinned_offset, src.len()),
                    buffer_range,
                )?;
                let p = src.host_ptr().wrapping_add(pinned_offset);
                let host = Transfer::Write(p.cast_const().cast());
                ("clEnqueueWriteBuffer", src, DeviceAccess::Reads, host)
            }
            PinnedBytes::Into(dst) => {
                check_copy_ranges("pinned read", len, buffer_range, (pinned_offset, dst.len()))?;
                let host = Transfer::Read(dst.host_ptr().wrapping_add(pinned_offset).cast());
                ("clEnqueueReadBuffer", &*dst, DeviceAccess::Writes, host)
            }
        };
        if len == 0 {
            // No host byte is used: nothing to order after or to track.
            return self.enqueue_nothing(wait);
        }
        // `after` keeps its events retained until the enqueue below returned.
        let after = pinned.order_after_conflicts(access, self)?;
        let all: Vec<&ClEvent> = wait.iter().copied().chain(after.iter()).collect();
        let list = self.checked_wait_list(function, &all)?;
        // SAFETY: the host range `host_ptr()+pinned_offset .. +len` lies inside `pinned`'s
        // live mapping and the device range inside `buffer` (both checked above). For
        // `From`, the device only reads the host bytes, as may other holders of the
        // `&PinnedBuffer`; for `Into`, the exclusive borrow means no host borrow of the bytes
        // is live now. `track` below holds a clone of the mapping until the command completes
        // (§5.2.2: the pointer stays valid until completion) and makes the host accesses that
        // conflict with it wait for it (`as_mut_slice`, which needs `&mut`, after a `From`;
        // every access after an `Into`), so the bytes never change under a borrow.
        let ev = self.logged(&list, || unsafe {
            self.enqueue_transfer(buffer, false, buffer_offset, len, host, &list)
        })?;
        pinned.track(&ev, access);
        Ok(ev)
    }

    /// Device-side copy of `len` bytes (`clEnqueueCopyBuffer`); non-blocking. A copy of 0
    /// bytes (at offsets inside or at the end of the buffers) moves nothing: its event is a
    /// marker after `wait`, the same on every driver.
    ///
    /// # Errors
    /// `InvalidArgument` for out-of-range regions; `CL_INVALID_CONTEXT` for a buffer of another
    /// context than the queue's (checked by the runtime, not left to the driver);
    /// `CL_MEM_COPY_OVERLAP` for overlapping regions of one buffer (§5.2.2; checked by the
    /// runtime: NVIDIA's driver accepts a copy of a range onto itself); a failed
    /// `clEnqueueCopyBuffer`.
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
        wait: &[&ClEvent],
    ) -> Result<ClEvent> {
        check_buffer_copy(len, (src, src_offset), (dst, dst_offset))?;
        // In range, so the ends do not overflow.
        if len > 0
            && src.as_raw() == dst.as_raw()
            && src_offset < dst_offset + len
            && dst_offset < src_offset + len
        {
            return Err(ClError::new("clEnqueueCopyBuffer", CODE_MEM_COPY_OVERLAP).into());
        }
        self.check_buffer_context("clEnqueueCopyBuffer", src)?;
        self.check_buffer_context("clEnqueueCopyBuffer", dst)?;
        self.enqueue_bytes("clEnqueueCopyBuffer", len, wait, |list| {
            // SAFETY: both buffers are live cl_mem objects (the runtime keeps them alive until
            // the command completes, §5.5.1), ranges were checked, and `list` outlives the call.
            unsafe {
                clq::enqueue_copy_buffer(
                    self.0,
                    src.as_raw(),
                    dst.as_raw(),
                    src_offset,
                    dst_offset,
                    len,
                    list.count(),
                    list.ptr(),
                )
            }
        })
    }

    /// Fills `len` bytes at `offset` with a repeated `pattern` (`clEnqueueFillBuffer`);
    /// non-blocking. `pattern.len()` must be 1, 2, 4, ..., 128 and divide `offset` and `len`.
    /// A fill of 0 bytes writes nothing: its event is a marker after `wait`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad pattern or range; `CL_INVALID_CONTEXT` for a buffer of another
    /// context than the queue's (checked by the runtime, not left to the driver); a failed
    /// `clEnqueueFillBuffer`.
    pub fn fill(
        &self,
        dst: &Buffer,
        pattern: &[u8],
        offset: usize,
        len: usize,
        wait: &[&ClEvent],
    ) -> Result<ClEvent> {
        check_fill(pattern.len(), offset, len, dst.size())?;
        self.check_buffer_context("clEnqueueFillBuffer", dst)?;
        self.enqueue_bytes("clEnqueueFillBuffer", len, wait, |list| {
            // SAFETY: the pattern is copied by the driver before the call returns (§5.2.3:
            // "the memory associated with pattern can be reused or freed after the function
            // returns"), the range was checked, and the buffer is kept alive by the runtime.
            unsafe {
                clq::enqueue_fill_buffer(
                    self.0,
                    dst.as_raw(),
                    pattern.as_ptr().cast(),
                    pattern.len(),
                    offset,
                    len,
                    list.count(),
                    list.ptr(),
                )
            }
        })
    }

    /// Launches `kernel` over an N-dimensional range (`clEnqueueNDRangeKernel`, OpenCL 3.0
    /// §5.10), N = 1..=3, after the events of `wait`. Non-blocking: the returned event completes
    /// with the kernel. The buffers set as arguments stay alive until the command completes,
    /// whatever the caller drops: the kernel holds them until the launch, and the driver keeps
    /// the memory objects of a queued command (§5.5.1, `clReleaseMemObject`).
    ///
    /// A call outside `unsafe` does not compile:
    /// ```compile_fail,E0133
    /// fn launch(q: &xpu_device::backend::CommandQueue, k: &xpu_device::backend::Kernel) {
    ///     let _ = q.enqueue_kernel(k, &[1], None, &[]);
    /// }
    /// ```
    ///
    /// # Safety
    /// The kernel is arbitrary code that the runtime cannot check. The caller guarantees that:
    /// - every memory access of the kernel, for every work-item of `global`, stays inside the
    ///   buffer (or sub-buffer) set for the pointer argument it goes through, and inside the
    ///   size given to [`Kernel::set_arg_local`] for `__local` arguments (on a CPU device an
    ///   out-of-bounds access reaches the host process's memory);
    /// - the `__local` variables the kernel declares, with its `__local` arguments, fit the
    ///   device's local memory (the runtime checks the arguments alone:
    ///   [`KernelArgProblem::LocalMemoryExceeded`](crate::KernelArgProblem));
    /// - no memory the kernel writes is borrowed by Rust code (`&`/`&mut`) before the returned
    ///   event completes, and no memory it reads is written by the host meanwhile: this
    ///   concerns memory the host can see (pinned host buffers, SVM, buffers wrapping host
    ///   memory); device-only buffers are reached by the host only through the queue's copies;
    /// - the kernel terminates (a kernel that never ends hangs every later synchronization
    ///   of the queue and of its device).
    ///
    /// # Errors
    /// `InvalidArgument` for a bad dimension count; [`DeviceError::KernelArg`] for an
    /// argument never set or `__local` arguments beyond the device's local memory
    /// (`LocalMemoryExceeded`); a failed `clEnqueueNDRangeKernel` (`CL_INVALID_CONTEXT` for a queue
    /// or wait-list event of another context).
    pub unsafe fn enqueue_kernel(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        wait: &[&ClEvent],
    ) -> Result<ClEvent> {
        let mut e: raw::cl_event = ptr::null_mut();
        let ticket = self.ticket(wait.iter().map(|w| w.as_raw()));
        // SAFETY: the kernel code's obligations are this function's `# Safety`, passed on;
        // `e` outlives the call and receives the command's event.
        unsafe { self.enqueue_nd_range(kernel, global, local, wait, &mut e)? };
        Ok(self.command_event(e, ticket))
    }

    /// As [`CommandQueue::enqueue_kernel`], without an event handed back, for a caller that
    /// would drop it at once. The command is ordered by the queue as any other; waiting for it
    /// takes a later marker or a `clFinish` of the queue. The driver is passed a NULL `event`
    /// (OpenCL 3.0 §5.10: then no event object is created for the command): one
    /// `clReleaseEvent` fewer per launch. Except on PoCL before 4.0
    /// ([`Platform::frees_failed_events`](super::Platform::frees_failed_events)): there the
    /// event is asked for and dropped as a
    /// [`ClEvent`] of that queue is (kept until the command is over), since PoCL 3.1 aborts
    /// the process when a launch made with a NULL `event` fails through a failed wait after a
    /// later command took over its buffers (review h32; see the `held` module).
    ///
    /// # Safety
    /// As [`CommandQueue::enqueue_kernel`].
    ///
    /// # Errors
    /// As [`CommandQueue::enqueue_kernel`].
    pub unsafe fn enqueue_kernel_without_event(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        wait: &[&ClEvent],
    ) -> Result<()> {
        if self.frees_failed_events() {
            // SAFETY: as in `enqueue_kernel`.
            drop(unsafe { self.enqueue_kernel(kernel, global, local, wait) }?);
            return Ok(());
        }
        // SAFETY: the kernel code's obligations are this function's `# Safety`, passed on; a
        // NULL `event` asks for no event object (§5.10).
        unsafe { self.enqueue_nd_range(kernel, global, local, wait, ptr::null_mut()) }
    }

    /// `clEnqueueNDRangeKernel` of `kernel` after the events of `wait`, the command's event
    /// written to `event` unless it is NULL: the checks and the call both launches share.
    ///
    /// # Safety
    /// As [`CommandQueue::enqueue_kernel`]; `event` is NULL or valid for a write.
    ///
    /// # Errors
    /// As [`CommandQueue::enqueue_kernel`].
    unsafe fn enqueue_nd_range(
        &self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
        wait: &[&ClEvent],
        event: *mut raw::cl_event,
    ) -> Result<()> {
        if global.is_empty() || global.len() > 3 || local.is_some_and(|l| l.len() != global.len()) {
            return Err(DeviceError::InvalidArgument(
                "enqueue_kernel: 1 to 3 dimensions, local size of the same rank".into(),
            ));
        }
        kernel.check_all_set()?;
        let _entry = super::at_exit::DriverEntry::enter("clEnqueueNDRangeKernel")?;
        let list = self.checked_wait_list("clEnqueueNDRangeKernel", wait)?;
        let runtime = cl(
            "clEnqueueNDRangeKernel",
            cl3::load_library()
                .as_ref()
                .map_err(|_| cl3::error_codes::DLOPEN_RUNTIME_LOAD_FAILED),
        )?;
        // The loader types its entry points as safe `fn`s; the call's contract: the kernel is
        // live with every argument set through Kernel's checked setters (kinds and contexts
        // match the parameters; buffers held by the kernel); the work sizes and wait list
        // outlive the call (§5.10); `event` is NULL or writable (this function's `# Safety`),
        // and what the kernel code does is the caller's obligation.
        self.logged(&list, || {
            match runtime.clEnqueueNDRangeKernel(
                self.0,
                kernel.as_raw(),
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local.map_or(ptr::null(), |l| l.as_ptr()),
                list.count(),
                list.ptr(),
                event,
            ) {
                Some(0) => Ok(()),
                Some(code) => Err(ClError::new("clEnqueueNDRangeKernel", code).into()),
                None => Err(ClError::new(
                    "clEnqueueNDRangeKernel",
                    cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE,
                )
                .into()),
            }
        })
    }
}

/// Other code's reference to a queue ([`CommandQueue::foreign_reference`]), released on
/// drop. For tests: the queue outlives the runtime's wrappers of it, as a queue other code
/// owns does.
#[doc(hidden)]
#[derive(Debug)]
pub struct ForeignQueue(raw::cl_command_queue);

// SAFETY: a retained cl_command_queue reference; retaining, wrapping and releasing it are
// thread-safe (OpenCL 3.0 appendix A.2).
unsafe impl Send for ForeignQueue {}
// SAFETY: as above; `&self` only reads the handle.
unsafe impl Sync for ForeignQueue {}

impl ForeignQueue {
    /// A new wrapper of the queue from the raw handle, as other code registering its queue
    /// (an external stream) makes one ([`CommandQueue::from_raw_borrowed`]).
    ///
    /// # Errors
    /// A failed `clRetainCommandQueue`.
    pub fn wrap(&self) -> Result<CommandQueue, ClError> {
        // SAFETY: `self` holds a reference to the live queue for as long as it lives.
        unsafe { CommandQueue::from_raw_borrowed(self.0) }
    }
}

impl Drop for ForeignQueue {
    fn drop(&mut self) {
        // SAFETY: the one reference `foreign_reference` retained, released once.
        release::note("clReleaseCommandQueue", unsafe {
            clq::release_command_queue(self.0)
        });
    }
}

impl Clone for CommandQueue {
    fn clone(&self) -> Self {
        // SAFETY: self.0 is a live queue (we own a reference).
        release::note("clRetainCommandQueue", unsafe {
            clq::retain_command_queue(self.0)
        });
        super::live::created(super::live::Kind::Queue);
        super::at_exit::wrapper_created(self.0);
        self.1.wrappers.fetch_add(1, Ordering::AcqRel);
        CommandQueue(self.0, Arc::clone(&self.1))
    }
}

impl Drop for CommandQueue {
    fn drop(&mut self) {
        super::live::released(super::live::Kind::Queue);
        let last = self.1.wrappers.fetch_sub(1, Ordering::AcqRel) == 1;
        // The last wrapper, with commands enqueued through the wrappers: they may still run (a
        // kernel PoCL compiles when it first runs), and the exit's drain must still wait for
        // them (see `at_exit`), so the registry keeps the queue, with a marker after its last
        // command, until that is over. (Not in a bad fork child, whose queues belong to the
        // parent: `wrapper_dropped` retires nothing there.)
        let enqueued = self.1.enqueued.swap(false, Ordering::AcqRel);
        if super::at_exit::wrapper_dropped(self.0, enqueued) {
            let marker = self
                .enqueue_synchronization(
                    "clEnqueueMarkerWithWaitList",
                    clq::enqueue_marker_with_wait_list,
                    &[],
                )
                .ok();
            if marker.is_some() {
                let _ = self.flush();
            }
            super::at_exit::retired_marker(self.0, marker);
            // That marker is the registry's: a wrapper made again over the raw handle (which
            // may take over this state, see `SHARED`) has enqueued nothing yet (review h44's
            // borrowed wrappers piled up a retirement each otherwise). Unless one was made
            // meanwhile (it may have enqueued: its note stays).
            if self.1.wrappers.load(Ordering::Acquire) == 0 {
                self.1.enqueued.store(false, Ordering::Release);
            }
        }
        if last {
            last_wrapper_dropped(self.0, &self.1);
        }
        // SAFETY: we own exactly one reference to a live queue.
        release::note("clReleaseCommandQueue", unsafe {
            clq::release_command_queue(self.0)
        });
    }
}

impl PartialEq for CommandQueue {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for CommandQueue {}

/// A command's raw wait list in the form every `clEnqueue*` call takes: a count, and a pointer
/// that is null for an empty list (OpenCL 3.0 §5.13: a non-null list with a zero count is
/// `CL_INVALID_EVENT_WAIT_LIST`). The events stay retained by their `ClEvent`s, which the
/// caller borrows for the call. The second field, when the caller's list held failed events,
/// is the user event that stands for them in the list and the status it gets when the list
/// drops (see [`CommandQueue::checked_wait_list`]).
/// The third field is the read side of the failure exclusion, held from the check to the
/// enqueue call on a queue of PoCL before 4.0 (see `held`).
struct WaitList(
    Vec<raw::cl_event>,
    Option<(ClEvent, i32)>,
    Cell<Option<parking_lot::RwLockReadGuard<'static, ()>>>,
);

impl WaitList {
    /// No events.
    fn empty() -> Self {
        WaitList(Vec::new(), None, Cell::new(None))
    }

    /// The number of events, as the `num_events_in_wait_list` argument.
    #[allow(clippy::cast_possible_truncation)] // a wait list never holds 2^32 events
    fn count(&self) -> u32 {
        self.0.len() as u32
    }

    /// The `event_wait_list` argument: null when empty, else valid while `self` lives.
    fn ptr(&self) -> *const raw::cl_event {
        if self.0.is_empty() {
            ptr::null()
        } else {
            self.0.as_ptr()
        }
    }
}

impl Drop for WaitList {
    fn drop(&mut self) {
        // The exclusion first: failing the proxy takes its write side.
        drop(self.2.take());
        if let Some((proxy, code)) = self.1.take() {
            // After the enqueue call: the command now waits on the proxy, and fails through
            // it as through the failed events it stands for. A proxy nothing waits on (the
            // enqueue failed) fails harmlessly.
            if let Err(e) = proxy.set_failed(code) {
                tracing::error!(%e, "cannot fail the stand-in of a failed wait");
            }
        }
    }
}

/// The host side of a `clEnqueueWriteBuffer` / `clEnqueueReadBuffer`.
enum Transfer {
    /// Host to device (`clEnqueueWriteBuffer`): the device reads from this pointer.
    Write(*const c_void),
    /// Device to host (`clEnqueueReadBuffer`): the device writes to this pointer.
    Read(*mut c_void),
}

/// The pinned host end of a [`CommandQueue::copy_pinned`], which gives the copy's direction.
///
/// The borrows are what keep the host bytes from changing under a live borrow: a copy into
/// the buffer cannot be enqueued while a slice of it lives,
///
/// ```compile_fail,E0502
/// # use xpu_device::backend::{Buffer, CommandQueue, PinnedBuffer, PinnedBytes};
/// # fn f(q: &CommandQueue, dev: &Buffer, pinned: &mut PinnedBuffer) {
/// let bytes = pinned.as_slice();
/// // error: `*pinned` is borrowed by `bytes`
/// let _ = q.copy_pinned(dev, 0, PinnedBytes::Into(pinned), 0, bytes.len(), &[]);
/// # }
/// ```
///
/// nor a copy from it while a mutable slice lives.
///
/// ```compile_fail,E0502
/// # use xpu_device::backend::{Buffer, CommandQueue, PinnedBuffer, PinnedBytes};
/// # fn f(q: &CommandQueue, dev: &Buffer, pinned: &mut PinnedBuffer) {
/// let bytes = pinned.as_mut_slice();
/// // error: `*pinned` is borrowed mutably by `bytes`
/// let _ = q.copy_pinned(dev, 0, PinnedBytes::From(pinned), 0, bytes.len(), &[]);
/// # }
/// ```
#[derive(Debug)]
pub enum PinnedBytes<'a> {
    /// Host to device: the device only reads these bytes. The copy is tracked on the buffer:
    /// until it completes, [`PinnedBuffer::as_mut_slice`] waits (the host cannot change bytes
    /// the device has yet to read, OpenCL 3.0 §5.2.2), while [`PinnedBuffer::as_slice`] does
    /// not. The copy starts after the unfinished device-to-host copies into the buffer.
    From(&'a PinnedBuffer),
    /// Device to host, into these bytes. Borrowed exclusively, so no host borrow of the bytes
    /// is live at the enqueue; the copy is then tracked on the buffer:
    /// [`PinnedBuffer::as_slice`] and [`PinnedBuffer::as_mut_slice`] wait for it, so the bytes
    /// never change under a borrow. The copy starts after every unfinished copy from or into
    /// the buffer.
    Into(&'a mut PinnedBuffer),
}

/// The host bytes of a blocking transfer.
enum HostBytes<'a> {
    /// Written to the device.
    From(&'a [u8]),
    /// Read from the device into.
    Into(&'a mut [u8]),
}

/// The byte count, transfer direction and OpenCL function of a host transfer of `host` at
/// `offset` of `buffer`, its range checked against the buffer; `None` for no bytes.
fn host_transfer(
    what: &str,
    buffer: &Buffer,
    offset: usize,
    host: HostBytes<'_>,
) -> Result<Option<(usize, Transfer, &'static str)>> {
    let (len, host, function) = match host {
        HostBytes::From(data) => (
            data.len(),
            Transfer::Write(data.as_ptr().cast()),
            "clEnqueueWriteBuffer",
        ),
        HostBytes::Into(out) => (
            out.len(),
            Transfer::Read(out.as_mut_ptr().cast()),
            "clEnqueueReadBuffer",
        ),
    };
    check_range(what, offset, len, buffer.size())?;
    Ok((len != 0).then_some((len, host, function)))
}
