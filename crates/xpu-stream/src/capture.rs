//! The capturing state of streams (as `cudaStreamIsCapturing`): a graph capture (in
//! `xpu-kernel`) marks its streams with a [`CaptureGuard`], and every layer that enqueues on
//! a stream outside the capture handle asks [`Stream::check_not_capturing`] (or resolves the
//! queue with [`Stream::enqueue_queue`]) first, so a command on a capturing stream is a typed
//! [`StreamError::Capturing`] instead of running at once, silently outside the graph.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::{check_fork, StreamError};
use crate::stream::{QueueRef, Stream};

/// Streams being captured: `(device, stream id)`. `ACTIVE` counts them, so the check on every
/// enqueue is one atomic load while nothing is captured.
static CAPTURING: Mutex<Option<HashSet<(usize, u64)>>> = Mutex::new(None);
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Marks a stream as capturing while it lives (RAII: dropping it, on a closure's error or
/// panic included, clears the mark, and the stream is usable as before). Created by
/// [`CaptureGuard::begin`].
#[derive(Debug)]
#[must_use = "the stream stops capturing when the guard is dropped"]
pub struct CaptureGuard {
    key: (usize, u64),
}

impl CaptureGuard {
    /// Marks `stream` as capturing.
    ///
    /// # Errors
    /// [`StreamError::BadFork`] in a bad fork child (see `xpu_device::fork`), first, before
    /// the capture registry's lock (a thread of the parent may have held it at the fork);
    /// [`StreamError::AlreadyCapturing`] when another guard holds it.
    pub fn begin(stream: &Stream) -> Result<CaptureGuard, StreamError> {
        check_fork()?;
        let key = (stream.device(), stream.id());
        let mut set = CAPTURING.lock();
        if !set.get_or_insert_with(HashSet::new).insert(key) {
            return Err(StreamError::AlreadyCapturing {
                device: key.0,
                id: key.1,
            });
        }
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        Ok(CaptureGuard { key })
    }

    /// The captured stream's `(device, id)`.
    #[must_use]
    pub fn key(&self) -> (usize, u64) {
        self.key
    }
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        // In a bad fork child the mark stays (the guard is the parent's): the registry's lock
        // may have been held at the fork.
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        let mut set = CAPTURING.lock();
        if set.as_mut().is_some_and(|s| s.remove(&self.key)) {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether a captured stream matches `pred`: false at once while nothing is captured, and
/// in a bad fork child (no lock taken there; nothing can be captured or enqueued in it).
fn any(pred: impl Fn(&(usize, u64)) -> bool) -> bool {
    if ACTIVE.load(Ordering::Acquire) == 0 || xpu_device::fork::is_in_bad_fork() {
        return false;
    }
    CAPTURING
        .lock()
        .as_ref()
        .is_some_and(|s| s.iter().any(pred))
}

/// Whether a stream of `device` is being captured (then device-wide [`crate::synchronize`] is
/// refused, as `cudaDeviceSynchronize` during a capture). False in a bad fork child, without
/// taking the capture registry's lock.
#[must_use]
pub fn device_is_capturing(device: usize) -> bool {
    any(|k| k.0 == device)
}

impl Stream {
    /// Whether a graph is capturing this stream (as `torch.cuda.is_current_stream_capturing`
    /// for a given stream). One atomic load while nothing is captured. False in a bad fork
    /// child, without taking the capture registry's lock.
    #[must_use]
    pub fn is_capturing(&self) -> bool {
        let key = (self.device(), self.id());
        any(|k| *k == key)
    }

    /// `Ok` unless the stream is being captured.
    ///
    /// # Errors
    /// [`StreamError::Capturing`] naming `operation`, when a graph captures the stream (as
    /// torch.cuda's "operation not permitted when stream is capturing"); nothing happened to
    /// the stream. `Ok` in a bad fork child (no lock taken; [`Stream::queue`] refuses there).
    pub fn check_not_capturing(&self, operation: &'static str) -> Result<(), StreamError> {
        if self.is_capturing() {
            return Err(StreamError::Capturing {
                device: self.device(),
                id: self.id(),
                operation,
            });
        }
        Ok(())
    }

    /// The queue, to enqueue `operation` directly on it: [`Stream::queue`] after
    /// [`Stream::check_not_capturing`]. Every layer's direct enqueue goes through it.
    ///
    /// # Errors
    /// [`StreamError::Capturing`]; those of [`Stream::queue`].
    #[inline]
    pub fn enqueue_queue(&self, operation: &'static str) -> Result<QueueRef, StreamError> {
        self.check_not_capturing(operation)?;
        self.queue()
    }
}
