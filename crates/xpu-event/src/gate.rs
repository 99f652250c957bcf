//! A host-controlled [`Gate`]: deterministic ordering of device work, for tests.
//!
//! Public API (re-exported as `xpu_event::Gate`), not test-only support: users need it to
//! hold a stream's work back in their own tests without relying on timing, as the
//! workspace's tests do (the allocator's `record_stream` tests, the host allocator's reuse
//! tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

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
/// points return `BadFork` and dropping does nothing), so a failing test never leaves a queue
/// blocked for ever (which would hang every later `synchronize`). A gate never stays closed
/// longer than its limit ([`GATE_OPEN_LIMIT`] unless made with [`Gate::with_open_limit`]): a
/// watchdog thread opens it then, with a warning, so that a gate forgotten with
/// `std::mem::forget`, or a blocked stream synchronized on the thread that would open the
/// gate, holds its streams back for that long, not for ever.
#[derive(Debug)]
pub struct Gate {
    device: usize,
    /// Shared with the watchdog (weakly), and leaked in a bad fork child (see `Drop`).
    shared: Arc<GateShared>,
}

/// A gate's user event and whether it was opened.
#[derive(Debug)]
struct GateShared {
    event: ClEvent,
    open: AtomicBool,
}

impl GateShared {
    /// Opens the gate unless it was opened before.
    fn open(&self) -> Result<(), EventError> {
        if !self.open.swap(true, Ordering::AcqRel) {
            self.event.set_complete()?;
        }
        Ok(())
    }
}

/// How long a gate made with [`Gate::new`] stays closed at most before the watchdog opens it.
pub const GATE_OPEN_LIMIT: Duration = Duration::from_secs(120);

/// The gates not yet opened, each with the instant the watchdog opens it.
struct Watch {
    gates: Vec<(Instant, Weak<GateShared>)>,
    /// Whether the watchdog thread runs.
    started: bool,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    gates: Vec::new(),
    started: false,
});
static WATCH_CHANGED: Condvar = Condvar::new();

/// Hands `gate` to the watchdog, to be opened at `deadline` if nothing opened it before;
/// starts the watchdog thread on first use.
fn watch(gate: &Arc<GateShared>, deadline: Instant) {
    let mut watch = WATCH.lock();
    watch.gates.push((deadline, Arc::downgrade(gate)));
    if !watch.started {
        let spawned = std::thread::Builder::new()
            .name("xpu-gate-watchdog".into())
            .spawn(watchdog);
        match spawned {
            Ok(_) => watch.started = true,
            Err(e) => tracing::warn!(error = %e, "cannot start the gates' watchdog thread"),
        }
    }
    WATCH_CHANGED.notify_one();
}

/// The watchdog: opens each gate still closed at its deadline, and forgets the gates opened
/// or dropped meanwhile.
fn watchdog() {
    let mut watch = WATCH.lock();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        watch.gates.retain(|(deadline, gate)| {
            let Some(gate) = gate.upgrade() else {
                return false;
            };
            if gate.open.load(Ordering::Acquire) {
                return false;
            }
            if *deadline <= now {
                due.push(gate);
                return false;
            }
            true
        });
        let next = watch.gates.iter().map(|g| g.0).min();
        if !due.is_empty() {
            // No lock held while the driver is called.
            MutexGuard::unlocked(&mut watch, || {
                for gate in due {
                    tracing::warn!("a gate was not opened within its limit; the watchdog opens it");
                    if let Err(e) = gate.open() {
                        tracing::warn!(error = %e, "the watchdog could not open a gate");
                    }
                }
            });
            continue;
        }
        match next {
            Some(at) => {
                WATCH_CHANGED.wait_until(&mut watch, at);
            }
            None => WATCH_CHANGED.wait(&mut watch),
        }
    }
}

impl Gate {
    /// A closed gate on `device`'s context.
    ///
    /// # Errors
    /// `Device` errors for a bad index or a failed `clCreateUserEvent`; `BadFork` in a bad
    /// fork child.
    pub fn new(device: usize) -> Result<Gate, EventError> {
        Self::with_open_limit(device, GATE_OPEN_LIMIT)
    }

    /// A closed gate on `device`'s context that the watchdog opens after `limit` if nothing
    /// opened it before (see [`Gate`]). A limit too large for an [`Instant`]
    /// (`Duration::MAX`) means never: such a gate forgotten holds its streams for ever.
    ///
    /// # Errors
    /// As [`Gate::new`].
    pub fn with_open_limit(device: usize, limit: Duration) -> Result<Gate, EventError> {
        crate::event::check_fork()?;
        let event = xpu_device::device(device)?.create_user_event()?;
        let shared = Arc::new(GateShared {
            event,
            open: AtomicBool::new(false),
        });
        // A limit past what an `Instant` holds: never opened by the watchdog.
        if let Some(deadline) = Instant::now().checked_add(limit) {
            watch(&shared, deadline);
        }
        Ok(Gate { device, shared })
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
            .enqueue_barrier(&[&self.shared.event])?;
        Ok(())
    }

    /// Opens the gate: blocked streams proceed. Opening twice is a no-op.
    ///
    /// # Errors
    /// A failed `clSetUserEventStatus`; `BadFork` in a bad fork child (the gate stays as
    /// it was: the user event belongs to the parent's driver state).
    pub fn open(&self) -> Result<(), EventError> {
        crate::event::check_fork()?;
        self.shared.open()
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
        self.shared.open.load(Ordering::Acquire)
    }

    /// The user event, for wait lists of other commands.
    pub fn as_cl_event(&self) -> &ClEvent {
        &self.shared.event
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // In a bad fork child the user event is the parent's driver state: it is leaked.
        if xpu_device::fork::is_in_bad_fork() {
            // A reference that is never dropped: the field's drop does not release it.
            std::mem::forget(Arc::clone(&self.shared));
            return;
        }
        let _ = self.shared.open();
    }
}
