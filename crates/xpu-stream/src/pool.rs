//! Per-device stream pools: 3 levels x 32 in-order, profiling queues plus one default queue,
//! created on the first touch of the device and never destroyed (as torch.xpu).
//!
//! Lookup is lock-free: one `OnceLock` per device holding a leaked `&'static` pool, so resolving
//! a native stream's queue is an atomic load and an index. Only pool creation takes a lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use xpu_device::backend::QueueOptions;

use crate::error::{check_fork, StreamError};
use crate::id;
use crate::priority::{hint_of_level, level_of, LEVELS};
use crate::progress::TrackedQueue;
use crate::state::StateLock;
use crate::stream::Stream;

/// Streams per priority level of each device's pool (torch's `kStreamsPerPool`).
pub const STREAMS_PER_LEVEL: usize = 32;
/// The highest device count the stream layer supports (torch.xpu: 127).
pub const MAX_DEVICES: usize = 128;

/// One device's queues.
#[derive(Debug)]
pub(crate) struct DevicePool {
    /// The default stream's queue: never handed out by the pool.
    pub(crate) default: TrackedQueue,
    /// `LEVELS * STREAMS_PER_LEVEL` queues, level-major.
    pub(crate) queues: Box<[TrackedQueue]>,
    /// The capture state of each queue: the default's, then one per entry of `queues`.
    capture: Box<[StateLock]>,
    next: [AtomicUsize; LEVELS],
}

impl DevicePool {
    /// The queue of a native stream id and its capture state.
    pub(crate) fn slot(&self, stream_id: u64) -> (&TrackedQueue, &StateLock) {
        let level = id::level(stream_id) as usize;
        if level >= LEVELS {
            (&self.default, &self.capture[0])
        } else {
            let i = level * STREAMS_PER_LEVEL + id::index(stream_id);
            (&self.queues[i], &self.capture[i + 1])
        }
    }

    /// Every queue of the pool, default first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &TrackedQueue> {
        std::iter::once(&self.default).chain(self.queues.iter())
    }
}

static POOLS: [OnceLock<&'static DevicePool>; MAX_DEVICES] =
    [const { OnceLock::new() }; MAX_DEVICES];
static CREATE: Mutex<()> = Mutex::new(());

/// The pool of `device` if it exists (no creation, no lock).
pub(crate) fn existing(device: usize) -> Option<&'static DevicePool> {
    POOLS.get(device).and_then(OnceLock::get).copied()
}

/// The pool of `device`, created on first call.
pub(crate) fn get(device: usize) -> Result<&'static DevicePool, StreamError> {
    match existing(device) {
        Some(p) => Ok(p),
        None => create(device),
    }
}

#[cold]
fn create(device: usize) -> Result<&'static DevicePool, StreamError> {
    let dev = xpu_device::device(device)?;
    let slot = POOLS.get(device).ok_or(StreamError::TooManyDevices {
        index: device,
        max: MAX_DEVICES,
    })?;
    let _lock = CREATE.lock();
    if let Some(p) = slot.get() {
        return Ok(p);
    }
    let hints = dev.properties().has_priority_hints;
    let options = |level: usize| QueueOptions {
        profiling: true,
        priority: hints.then(|| hint_of_level(level)),
    };
    let default = TrackedQueue::new(dev.create_queue(options(level_of(0)))?);
    let mut queues = Vec::with_capacity(LEVELS * STREAMS_PER_LEVEL);
    for level in 0..LEVELS {
        for _ in 0..STREAMS_PER_LEVEL {
            queues.push(TrackedQueue::new(dev.create_queue(options(level))?));
        }
    }
    let pool: &'static DevicePool = Box::leak(Box::new(DevicePool {
        default,
        capture: (0..=queues.len()).map(|_| StateLock::default()).collect(),
        queues: queues.into_boxed_slice(),
        next: [const { AtomicUsize::new(0) }; LEVELS],
    }));
    tracing::debug!(device, hints, "xpu: created the stream pool");
    // Cannot be set already: we hold the creation lock and checked above.
    let _ = slot.set(pool);
    Ok(pool)
}

/// A stream from the pool of `device` at `priority` (clamped to [`priority_range`]),
/// round-robin per (device, level): the k-th request of a level gets index `k mod 32`, so the
/// 33rd request returns the 1st stream again, as `torch.xpu`'s `getStreamFromPool`. Levels
/// have independent counters and distinct queues. The first call for a device creates its
/// whole pool (97 queues).
///
/// [`priority_range`]: crate::priority_range
///
/// # Errors
/// `Device(InvalidDevice)` for a bad index; queue or context creation failures on the first
/// call for the device; `BadFork` in a bad fork child.
pub fn get_stream_from_pool(priority: i32, device: usize) -> Result<Stream, StreamError> {
    check_fork()?;
    let pool = get(device)?;
    let level = level_of(priority);
    let k = pool.next[level].fetch_add(1, Ordering::Relaxed) % STREAMS_PER_LEVEL;
    Ok(Stream::from_parts(device, id::native(level, k)))
}

/// The default stream of `device`: a queue of normal priority that the pool never hands out,
/// and the initial current stream of every thread (as CUDA's default stream; torch.xpu has
/// none). Creates the device's pool on first call.
///
/// # Errors
/// As [`get_stream_from_pool`].
pub fn default_stream(device: usize) -> Result<Stream, StreamError> {
    check_fork()?;
    get(device)?;
    Ok(Stream::from_parts(device, id::DEFAULT_ID))
}
