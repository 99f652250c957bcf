//! External streams: a user's `cl_command_queue` registered with the runtime.
//!
//! `unsafe CommandQueue::from_raw_borrowed / from_raw_owned` (xpu-device) is the only unsafe step;
//! `ExternalStream::new` validates the queue (in-order, device, context) and owns the registration:
//! dropping it unregisters the stream, so stale handles get a typed error.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use xpu_device::backend::CommandQueue;

use crate::error::StreamError;
use crate::id;
use crate::pool::MAX_DEVICES;
use crate::priority::{level_of, PRIORITY_NORMAL};
use crate::progress::TrackedQueue;
use crate::state::StateLock;
use crate::stream::Stream;

/// A registered external queue.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) device: usize,
    /// The queue and what is known of its completed work.
    pub(crate) queue: Arc<TrackedQueue>,
    pub(crate) profiling: bool,
    /// The stream's capture state (see `capture.rs`), shared with its capture guards.
    pub(crate) capture: Arc<StateLock>,
    /// The live [`ExternalStream`]s of the queue: it is unregistered when the last drops.
    registrations: usize,
}

static REGISTRY: RwLock<BTreeMap<u64, Entry>> = RwLock::new(BTreeMap::new());
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// The entry of an external stream id, if still registered.
pub(crate) fn lookup(stream_id: u64) -> Option<Entry> {
    REGISTRY.read().get(&stream_id).cloned()
}

/// The queues of every external stream registered on `device`.
pub(crate) fn queues_of(device: usize) -> Vec<Arc<TrackedQueue>> {
    REGISTRY
        .read()
        .values()
        .filter(|e| e.device == device)
        .map(|e| Arc::clone(&e.queue))
        .collect()
}

/// A user's in-order `cl_command_queue` registered as a stream of the runtime, like
/// `torch.xpu.get_stream_from_external`. It can be a current stream, an allocation stream and
/// an event's recording stream; [`synchronize`](crate::synchronize) waits on it.
///
/// # The unsafe constructor
/// Wrapping a raw handle is the one unsafe step, and it happens in the device layer:
/// [`CommandQueue::from_raw_borrowed`] (the runtime retains its own reference and releases
/// only that one: the user's queue is never released by the runtime) or
/// [`CommandQueue::from_raw_owned`] (the caller hands its reference over: the queue is
/// released when the runtime drops it). Both have a `# Safety` section: the handle must be a
/// live `cl_command_queue`. [`ExternalStream::new`] is then safe and validates, in this order:
/// 1. non-null ([`StreamError::ExternalNull`]);
/// 2. in-order ([`StreamError::ExternalNotInOrder`]);
/// 3. created for the given device ([`StreamError::ExternalDeviceMismatch`]);
/// 4. created on the runtime's context of that device, [`xpu_device::Device::context`]
///    ([`StreamError::ExternalContextMismatch`]).
///
/// torch.xpu checks the context before the device; here every device has its own context, so
/// that order would report a queue of the wrong device as a context error. Checking the device
/// first names the actual mistake.
///
/// # Work enqueued by other code
/// Commands enqueued through the runtime (its wrappers of the queue, clones included) are
/// noted on the queue. Other code enqueuing on the raw handle runs inside
/// [`CommandQueue::raw_enqueue_scope`] on a wrapper of the queue (e.g. `stream.queue()?`), or
/// notes its commands once its call returned ([`CommandQueue::note_raw_enqueue`]; a query on
/// another thread during the call may then answer `true` over them):
/// [`Stream::query`](crate::Stream::query) then asks about them with a new marker; unnoted,
/// a query may answer `true` from a marker enqueued before them, or from a synchronize that
/// returned before them ([`Stream::synchronize`](crate::Stream::synchronize) waits for them
/// either way).
///
/// # Lifetime
/// The registration lives as long as this value. Dropping it unregisters the stream (and
/// drops the runtime's reference to the queue once no operation in flight still holds it);
/// afterwards, [`Stream`] handles copied from it report [`StreamError::ExternalReleased`].
/// Ids are never reused, so a stale handle never aliases another queue. [`ExternalStream::leak`]
/// keeps the registration for the whole process.
///
/// A queue registered again while registered (a wrapper of the same raw handle) is the same
/// stream: the same id, equal handles, one pool of the caching allocator, as
/// `torch.cuda.ExternalStream`s of one pointer compare equal (review h81: two registrations
/// were two streams). It stays registered until the last of its registrations drops; its
/// priority is the first registration's.
///
/// ```
/// use xpu_device::backend::{CommandQueue, QueueOptions};
/// use xpu_stream::ExternalStream;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # if xpu_device::device_count() == 0 { return Ok(()); }
/// // A queue made by other OpenCL code on the runtime's context of device 0.
/// let theirs = xpu_device::device(0)?.create_queue(QueueOptions { profiling: true, priority: None })?;
/// let raw = theirs.as_raw();
/// // SAFETY: `raw` is a live queue (`theirs` holds a reference for the whole block).
/// let queue = unsafe { CommandQueue::from_raw_borrowed(raw) }?;
/// let ext = ExternalStream::new(queue, 0)?;
/// assert_eq!(ext.stream().as_raw()?, raw);
/// ext.stream().synchronize()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping an ExternalStream unregisters it"]
pub struct ExternalStream {
    stream: Stream,
}

impl ExternalStream {
    /// Validates and registers `queue` as a stream of `device`, with normal priority.
    ///
    /// # Errors
    /// `Device(InvalidDevice)` for a bad index, the four validation errors above in that
    /// order, or a failed `clGetCommandQueueInfo`; `BadFork` in a bad fork child (the queue
    /// is then leaked, not released).
    pub fn new(queue: CommandQueue, device: usize) -> Result<ExternalStream, StreamError> {
        ExternalStream::with_priority(queue, device, PRIORITY_NORMAL)
    }

    /// As [`ExternalStream::new`], recording `priority` (clamped) on the stream. The runtime
    /// does not read the queue's own priority hint.
    ///
    /// # Errors
    /// As [`ExternalStream::new`].
    pub fn with_priority(
        queue: CommandQueue,
        device: usize,
        priority: i32,
    ) -> Result<ExternalStream, StreamError> {
        if xpu_device::fork::is_in_bad_fork() {
            // Releasing the queue would be a driver call in a bad fork child.
            std::mem::forget(queue);
            return Err(StreamError::BadFork);
        }
        if queue.as_raw().is_null() {
            // Releasing a null handle would only record a spurious release failure.
            std::mem::forget(queue);
            return Err(StreamError::ExternalNull);
        }
        let dev = xpu_device::device(device)?;
        if device >= MAX_DEVICES {
            return Err(StreamError::TooManyDevices {
                index: device,
                max: MAX_DEVICES,
            });
        }
        if !queue.is_in_order()? {
            return Err(StreamError::ExternalNotInOrder);
        }
        if queue.device_raw()? != dev.id().as_raw() {
            return Err(StreamError::ExternalDeviceMismatch { device });
        }
        if queue.context_raw()? != dev.context()?.as_raw() {
            return Err(StreamError::ExternalContextMismatch { device });
        }
        let profiling = queue.has_profiling()?;
        let raw = queue.as_raw();
        // One lock over the search and the insertion: two threads registering one queue get
        // one stream.
        let mut registry = REGISTRY.write();
        if let Some((&id, entry)) = registry
            .iter_mut()
            .find(|(_, e)| e.queue.queue.as_raw() == raw)
        {
            entry.registrations += 1;
            let stream = Stream::from_parts(entry.device, id);
            drop(registry);
            // Released outside the lock (a driver call); the registered wrapper holds its own
            // reference.
            drop(queue);
            return Ok(ExternalStream { stream });
        }
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let stream = Stream::from_parts(device, id::external(level_of(priority), serial));
        let entry = Entry {
            device,
            queue: Arc::new(TrackedQueue::new(queue)),
            profiling,
            capture: Arc::default(),
            registrations: 1,
        };
        registry.insert(stream.id(), entry);
        Ok(ExternalStream { stream })
    }

    /// The stream handle (copyable; valid while `self` lives).
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Keeps the registration for the rest of the process and returns the handle.
    pub fn leak(self) -> Stream {
        let s = self.stream;
        std::mem::forget(self);
        s
    }
}

impl Drop for ExternalStream {
    fn drop(&mut self) {
        if xpu_device::fork::is_in_bad_fork() {
            // In a bad fork child: no registry lock (the parent may have held it), no release.
            return;
        }
        let removed = {
            let mut registry = REGISTRY.write();
            match registry.get_mut(&self.stream.id()) {
                Some(entry) if entry.registrations > 1 => {
                    entry.registrations -= 1;
                    None
                }
                _ => registry.remove(&self.stream.id()),
            }
        };
        // Dropped outside the lock: releasing a queue is a driver call.
        drop(removed);
    }
}
