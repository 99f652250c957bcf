//! The capturing state of streams (as `cudaStreamIsCapturing`): a graph capture (in
//! `xpu-kernel`) marks its streams with a [`CaptureGuard`], and every layer that enqueues on
//! a stream outside the capture handle resolves the queue with [`Stream::enqueue_queue`]
//! (or asks [`Stream::check_not_capturing`] first, for an early error), so a command on a
//! capturing stream is a typed [`StreamError::Capturing`] instead of running at once,
//! silently outside the graph.
//!
//! # Check and enqueue are one step
//! Each stream (each queue: a pool queue or an external stream's) has its own capture
//! state: a flag behind a small reader-writer lock. [`Stream::enqueue_queue`] takes the lock
//! shared, checks the flag, and hands the queue out in a [`DirectQueue`] that holds the
//! shared lock (the *direct-enqueue permit*) until it is dropped, so the command is enqueued
//! under the permit. [`CaptureGuard::begin`] sets the flag, then takes the lock exclusively
//! once (and lets it go at once): it returns only after every direct enqueue that checked
//! the flag before it was set has released its permit, and every later check sees the flag.
//! A command racing with the beginning of a capture is therefore either refused with
//! `Capturing` or enqueued before `begin` returns, never on a stream that is already
//! capturing. The hot path is one uncontended shared lock of the stream's own state (no
//! process-wide lock).
//!
//! Deadlock freedom: the permit is taken with `read_recursive` (a thread may hold permits of
//! several streams, or two of one stream, and a reader never waits for a writer that is
//! only waiting); the exclusive lock is held for no work, so a reader waits at most for
//! other readers to leave; and the permit is held only across enqueue calls, never across a
//! driver wait (blocking transfers enqueue under it and wait after releasing it), so
//! `begin` never waits for work that waits on something its own thread holds.
//!
//! # More on the capturing state
//! `Stream::synchronize`, `query` and `as_raw` also refuse a capturing stream
//! (`StreamError::Capturing`, as `cudaStreamIsCapturing` / "operation not permitted when stream is
//! capturing"). Blocking transfers enqueue under the permit and wait after releasing it
//! (`CommandQueue::write_releasing` / `read_releasing`); `synchronize` and `query` wait outside it.
//! `begin` on a thread that itself holds a permit (a live `DirectQueue`) is
//! `StreamError::PermitHeld`, not a wait for itself. Hidden test seams, `xpu_stream::hooks` (after
//! the check, before `begin`'s wait), give the tests the exact interleavings of a command racing a
//! capture's beginning (xpu-kernel's capture race tests).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use xpu_device::backend::CommandQueue;

use crate::error::{check_fork, StreamError};
use crate::state::{Permit, StateRef};
use crate::stream::{QueueRef, Stream};

/// A stream's queue resolved for a direct enqueue by [`Stream::enqueue_queue`]: derefs to the
/// [`CommandQueue`], and holds the stream's direct-enqueue permit while it lives, so that no
/// capture of the stream begins between the capture check and the enqueue
/// ([`CaptureGuard::begin`] waits for the permit to be released). Keep it only across the
/// enqueue calls of one operation: never across a wait for device work (`finish`, a blocking
/// transfer, an event wait), user code, or a call that may begin a capture — a capture of
/// the stream begun meanwhile (on another thread) waits for it; one begun on the thread
/// holding it is refused ([`StreamError::PermitHeld`]). Not `Send`: released on the thread
/// that took it. Forgetting it (`std::mem::forget`) keeps the permit for ever: a capture of
/// the stream begun on another thread then fails with [`StreamError::PermitNotReleased`]
/// after [`PERMIT_DRAIN_LIMIT`], and every capture begun on this thread is refused.
#[must_use = "the queue is for an enqueue; the permit is released when it is dropped"]
pub struct DirectQueue {
    queue: QueueRef,
    _permit: Permit,
}

impl DirectQueue {
    /// The resolved queue, without the permit (for keeping the queue after the enqueue:
    /// e.g. an event holds the queue it was recorded on).
    #[must_use]
    pub fn queue_ref(&self) -> QueueRef {
        self.queue.clone()
    }
}

thread_local! {
    /// The direct-enqueue permits the thread holds (live [`DirectQueue`]s), so that a capture
    /// begun on the same thread is refused instead of waiting for itself.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Drop for DirectQueue {
    fn drop(&mut self) {
        // `try_with`: a permit may be dropped by a thread-local destructor.
        let _ = HELD.try_with(|h| h.set(h.get().saturating_sub(1)));
    }
}

impl Deref for DirectQueue {
    type Target = CommandQueue;
    fn deref(&self) -> &CommandQueue {
        &self.queue
    }
}

impl fmt::Debug for DirectQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// How long [`CaptureGuard::begin`] waits for the direct-enqueue permits of the stream taken
/// before it marked the stream (each is held only across enqueue calls) before it fails with
/// [`StreamError::PermitNotReleased`]: a permit held that long was forgotten
/// (`std::mem::forget` of a [`DirectQueue`]) or kept across a wait, and would otherwise make
/// the capture wait for ever.
pub const PERMIT_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Streams being captured: `(device, stream id)`, for [`device_is_capturing`]. `ACTIVE`
/// counts them, so that query is one atomic load while nothing is captured. The per-stream
/// flag, not this set, decides a direct enqueue.
static CAPTURING: Mutex<Option<HashSet<(usize, u64)>>> = Mutex::new(None);
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Marks a stream as capturing while it lives (RAII: dropping it, on a closure's error or
/// panic included, clears the mark, and the stream is usable as before). Created by
/// [`CaptureGuard::begin`].
#[must_use = "the stream stops capturing when the guard is dropped"]
pub struct CaptureGuard {
    key: (usize, u64),
    state: StateRef,
}

impl fmt::Debug for CaptureGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureGuard")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl CaptureGuard {
    /// Marks `stream` as capturing. Returns once every direct enqueue on the stream that
    /// passed its capture check before the mark was set has been enqueued (see
    /// [`DirectQueue`]): from then on no direct command reaches the stream's queue until the
    /// guard is dropped. That wait covers only enqueue calls in flight, never device work.
    ///
    /// # Errors
    /// [`StreamError::BadFork`] in a bad fork child (see `xpu_device::fork`), first, before
    /// any lock (a thread of the parent may have held one at the fork);
    /// [`StreamError::ExternalReleased`] for an external stream already unregistered;
    /// [`StreamError::AlreadyCapturing`] when another guard holds it;
    /// [`StreamError::PermitHeld`] when the calling thread holds a direct-enqueue permit of
    /// any stream (a live [`DirectQueue`]), which the capture could wait for forever (a
    /// permit this thread forgot counts as held: its captures are refused from then on);
    /// [`StreamError::PermitNotReleased`] when a permit of the stream taken by another thread
    /// is not released within [`PERMIT_DRAIN_LIMIT`] (forgotten, or kept across a wait): the
    /// stream is left not capturing.
    pub fn begin(stream: &Stream) -> Result<CaptureGuard, StreamError> {
        check_fork()?;
        let key = (stream.device(), stream.id());
        if HELD.try_with(std::cell::Cell::get).unwrap_or(0) > 0 {
            return Err(StreamError::PermitHeld {
                device: key.0,
                id: key.1,
            });
        }
        let state = stream.resolve()?.1;
        if state.lock().read_recursive().swap(true, Ordering::AcqRel) {
            return Err(StreamError::AlreadyCapturing {
                device: key.0,
                id: key.1,
            });
        }
        if CAPTURING
            .lock()
            .get_or_insert_with(HashSet::new)
            .insert(key)
        {
            ACTIVE.fetch_add(1, Ordering::AcqRel);
        }
        let guard = CaptureGuard { key, state };
        // Drain the permits taken before the flag was set: the exclusive lock is granted once
        // they are all released, and is released at once (a permit taken after that sees the
        // flag and refuses). A permit is held only across enqueue calls; one not released
        // within the limit was forgotten (or kept across a wait): the guard's drop clears
        // the mark, and the capture fails instead of waiting for ever.
        let mut drained = guard.state.lock().try_write().is_some();
        if !drained {
            hooks::run(hooks::Point::Drain);
            drained = guard
                .state
                .lock()
                .try_write_for(PERMIT_DRAIN_LIMIT)
                .is_some();
        }
        if !drained {
            drop(guard);
            return Err(StreamError::PermitNotReleased {
                device: key.0,
                id: key.1,
                waited_ms: u64::try_from(PERMIT_DRAIN_LIMIT.as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(guard)
    }

    /// The captured stream's `(device, id)`.
    #[must_use]
    pub fn key(&self) -> (usize, u64) {
        self.key
    }
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        // In a bad fork child the mark stays (the guard is the parent's): the locks may have
        // been held at the fork.
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        self.state
            .lock()
            .read_recursive()
            .store(false, Ordering::Release);
        let mut set = CAPTURING.lock();
        if set.as_mut().is_some_and(|s| s.remove(&self.key)) {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether a stream of `device` is being captured (then device-wide [`crate::synchronize`] is
/// refused, as `cudaDeviceSynchronize` during a capture). False in a bad fork child, without
/// taking the capture registry's lock.
#[must_use]
pub fn device_is_capturing(device: usize) -> bool {
    if ACTIVE.load(Ordering::Acquire) == 0 || xpu_device::fork::is_in_bad_fork() {
        return false;
    }
    CAPTURING
        .lock()
        .as_ref()
        .is_some_and(|s| s.iter().any(|k| k.0 == device))
}

impl Stream {
    /// Whether a graph is capturing this stream (as `torch.cuda.is_current_stream_capturing`
    /// for a given stream): a short shared lock of the stream's own capture state. False for
    /// a released external stream, and in a bad fork child (without any lock).
    #[must_use]
    pub fn is_capturing(&self) -> bool {
        if xpu_device::fork::is_in_bad_fork() {
            return false;
        }
        self.resolve().is_ok_and(|(_, s)| s.is_capturing())
    }

    /// `Ok` unless the stream is being captured. An early check only: the enqueue itself
    /// must go through [`Stream::enqueue_queue`], whose check is atomic with it.
    ///
    /// # Errors
    /// [`StreamError::Capturing`] naming `operation`, when a graph captures the stream (as
    /// torch.cuda's "operation not permitted when stream is capturing"); nothing happened to
    /// the stream. `Ok` in a bad fork child (no lock taken; [`Stream::queue`] refuses there).
    pub fn check_not_capturing(&self, operation: &'static str) -> Result<(), StreamError> {
        if self.is_capturing() {
            return Err(self.capturing(operation));
        }
        Ok(())
    }

    fn capturing(&self, operation: &'static str) -> StreamError {
        StreamError::Capturing {
            device: self.device(),
            id: self.id(),
            operation,
        }
    }

    /// The queue, to enqueue `operation` directly on it, with the stream's direct-enqueue
    /// permit ([`DirectQueue`]): the capture check and the enqueue made through the returned
    /// value are one step with respect to [`CaptureGuard::begin`]. Every layer's direct
    /// enqueue goes through it.
    ///
    /// # Errors
    /// `BadFork` in a bad fork child (first, no lock taken); those of [`Stream::queue`];
    /// [`StreamError::Capturing`] naming `operation` while a graph captures the stream.
    #[inline]
    pub fn enqueue_queue(&self, operation: &'static str) -> Result<DirectQueue, StreamError> {
        check_fork()?;
        let (queue, state) = self.resolve()?;
        let permit = state.permit();
        if permit.is_capturing() {
            return Err(self.capturing(operation));
        }
        hooks::run(hooks::Point::Checked);
        let _ = HELD.try_with(|h| h.set(h.get() + 1));
        Ok(DirectQueue {
            queue,
            _permit: permit,
        })
    }
}

/// Test seams at the exact interleavings of a direct enqueue and the beginning of a capture
/// (hidden from the docs; not for production use). Each hook is set for the calling thread
/// and runs once, the next time that thread reaches its point. While none was ever set, each
/// point costs one relaxed atomic load.
#[doc(hidden)]
pub mod hooks {
    use super::{AtomicBool, Ordering, RefCell};

    type Hook = Box<dyn FnOnce()>;

    static ANY: AtomicBool = AtomicBool::new(false);

    #[derive(Clone, Copy)]
    pub(super) enum Point {
        Checked,
        Drain,
    }

    thread_local! {
        static HOOKS: RefCell<[Option<Hook>; 2]> = const { RefCell::new([None, None]) };
    }

    #[inline]
    pub(super) fn run(point: Point) {
        if !ANY.load(Ordering::Relaxed) {
            return;
        }
        // `try_with`: a thread-local destructor may enqueue after the hooks are gone.
        if let Ok(Some(hook)) = HOOKS.try_with(|h| h.borrow_mut()[point as usize].take()) {
            hook();
        }
    }

    fn set(point: Point, hook: Hook) {
        ANY.store(true, Ordering::Relaxed);
        HOOKS.with(|h| h.borrow_mut()[point as usize] = Some(hook));
    }

    /// Runs `hook` on this thread's next direct enqueue
    /// ([`Stream::enqueue_queue`](crate::Stream::enqueue_queue)), between its capture check
    /// (passed) and the enqueue, while it holds the stream's permit.
    pub fn after_capture_check(hook: impl FnOnce() + 'static) {
        set(Point::Checked, Box::new(hook));
    }

    /// Runs `hook` in this thread's next [`CaptureGuard::begin`](super::CaptureGuard::begin)
    /// that has to wait for direct enqueues in flight: after the stream was marked, before
    /// the wait.
    pub fn before_capture_drain(hook: impl FnOnce() + 'static) {
        set(Point::Drain, Box::new(hook));
    }
}
