//! A host-controlled [`Gate`]: deterministic ordering of device work, for tests.
//!
//! Public API (re-exported as `xpu_event::Gate`), not test-only support: users need it to
//! hold a stream's work back in their own tests without relying on timing, as the
//! workspace's tests do (the allocator's `record_stream` tests, the host allocator's reuse
//! tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use xpu_device::backend::ClEvent;
use xpu_stream::Stream;

use crate::error::EventError;

/// A user event (`clCreateUserEvent`) that streams can be made to wait on: work enqueued on a
/// blocked stream after [`Gate::block`] does not start before [`Gate::open`].
///
/// ```
/// use xpu_event::{Gate, StreamExt};
/// # fn main() -> Result<(), xpu_event::EventError> {
/// # if xpu_device::device_count() == 0 { return Ok(()); }
/// let s = xpu_stream::get_stream_from_pool(0, 0)?;
/// let gate = Gate::new(0)?;
/// gate.block(&s)?;
/// let e = s.record_event()?;
/// assert!(!e.query()?); // held back by the gate
/// gate.open()?;
/// e.synchronize()?;
/// assert!(e.query()?);
/// # Ok(()) }
/// ```
///
/// Dropping an unopened gate opens it (except in a bad fork child, where the gate's entry
/// points return `BadFork` and dropping does nothing), so a failing test never leaves a queue blocked forever
/// (which would hang every later `synchronize`). Never `synchronize` a blocked stream (or its
/// device) before opening the gate from another thread: that waits forever.
#[derive(Debug)]
pub struct Gate {
    device: usize,
    /// Shared only to leak it in a bad fork child (see `Drop`).
    event: Arc<ClEvent>,
    open: AtomicBool,
}

impl Gate {
    /// A closed gate on `device`'s context.
    ///
    /// # Errors
    /// `Device` errors for a bad index or a failed `clCreateUserEvent`; `BadFork` in a bad
    /// fork child.
    pub fn new(device: usize) -> Result<Gate, EventError> {
        crate::event::check_fork()?;
        let event = Arc::new(xpu_device::device(device)?.create_user_event()?);
        Ok(Gate {
            device,
            event,
            open: AtomicBool::new(false),
        })
    }

    /// The gate's device.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Makes `stream`'s later work wait for the gate (a barrier with the user event in its wait
    /// list). A no-op for the stream once the gate is open.
    ///
    /// # Errors
    /// `GateDevice` for a stream of another device; a failed enqueue; `BadFork` in a bad
    /// fork child.
    pub fn block(&self, stream: &Stream) -> Result<(), EventError> {
        crate::event::check_fork()?;
        if stream.device() != self.device {
            return Err(EventError::GateDevice {
                gate: self.device,
                stream: stream.device(),
            });
        }
        stream
            .enqueue_queue("gate wait")?
            .enqueue_barrier(&[&self.event])?;
        Ok(())
    }

    /// Opens the gate: blocked streams proceed. Opening twice is a no-op.
    ///
    /// # Errors
    /// A failed `clSetUserEventStatus`; `BadFork` in a bad fork child (the gate stays as
    /// it was: the user event belongs to the parent's driver state).
    pub fn open(&self) -> Result<(), EventError> {
        crate::event::check_fork()?;
        if !self.open.swap(true, Ordering::AcqRel) {
            self.event.set_complete()?;
        }
        Ok(())
    }

    /// Runs `body` on this thread while a helper thread opens the gate as soon as the
    /// process holds more live OpenCL events than when this was called (the runtime
    /// recorded a marker to wait on: `body` waits for work behind the gate), once `body`
    /// returned (it did not wait), or after 60 s (never a hang, whatever else moves the
    /// process's event count). For tests that a call waits for queued work, without sleeps:
    /// `body` checks, when it returns, whether the gated work is complete.
    ///
    /// # Errors
    /// The helper's [`Gate::open`] error (`body`'s value is then lost).
    pub fn open_when_waited_on<R>(&self, body: impl FnOnce() -> R) -> Result<R, EventError> {
        let events_before = xpu_device::live_objects().events;
        let returned = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let opener = scope.spawn(|| {
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while xpu_device::live_objects().events <= events_before
                    && !returned.load(Ordering::Acquire)
                    && std::time::Instant::now() < give_up
                {
                    std::thread::yield_now();
                }
                self.open()
            });
            let value = body();
            returned.store(true, Ordering::Release);
            match opener.join() {
                Ok(opened) => opened.map(|()| value),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// True once opened.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// The user event, for wait lists of other commands.
    pub fn as_cl_event(&self) -> &ClEvent {
        &self.event
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // In a bad fork child the user event is the parent's driver state: it is leaked.
        if xpu_device::fork::is_in_bad_fork() {
            // A reference that is never dropped: the field's drop does not release it.
            std::mem::forget(Arc::clone(&self.event));
            return;
        }
        if !self.open.swap(true, Ordering::AcqRel) {
            let _ = self.event.set_complete();
        }
    }
}
