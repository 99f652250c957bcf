//! Host streams for device-less use: markers complete when a test-controlled gate opens.
//!
//! A [`SimStream`] models a stream's pending work as a [`SimGate`]: while the stream's current
//! gate is closed, every marker recorded on it is incomplete; opening the gate completes
//! them. [`Marker::wait`] models the device finishing the work: it opens the gate.
//! [`MarkerStream::wait_marker`] makes later markers of the waiting stream also depend on
//! the awaited marker, as a device-side wait would.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::stream::{Marker, MarkerError, MarkerStream, StreamKey, StreamRef};

/// A switch standing for a simulated stream's outstanding work (a plain flag; the device
/// counterpart, a user event holding a real queue back, is `xpu_event::Gate`).
#[derive(Debug, Default)]
pub struct SimGate {
    open: AtomicBool,
}

impl SimGate {
    /// Opens the gate: markers waiting on it complete.
    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
    }

    /// Whether the gate is open.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

/// A marker of a [`SimStream`].
#[derive(Debug, Clone)]
pub struct SimMarker {
    gate: Option<Arc<SimGate>>,
    dependencies: Vec<SimMarker>,
}

impl SimMarker {
    fn complete(&self) -> bool {
        self.gate.as_ref().is_none_or(|g| g.is_open())
            && self.dependencies.iter().all(SimMarker::complete)
    }

    fn finish(&self) {
        if let Some(gate) = &self.gate {
            gate.open();
        }
        self.dependencies.iter().for_each(SimMarker::finish);
    }
}

impl Marker for SimMarker {
    fn is_complete(&self) -> bool {
        self.complete()
    }

    fn wait(&self) -> Result<(), MarkerError> {
        self.finish();
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[derive(Debug, Default)]
struct SimState {
    gate: Option<Arc<SimGate>>,
    dependencies: Vec<SimMarker>,
    markers_recorded: u64,
    waits: u64,
}

/// A stream without a device whose work completes when the test says so.
#[derive(Debug)]
pub struct SimStream {
    key: StreamKey,
    state: Mutex<SimState>,
}

impl SimStream {
    /// A stream with key `key` and no outstanding work.
    #[must_use]
    pub fn new(key: StreamKey) -> Arc<Self> {
        Arc::new(Self {
            key,
            state: Mutex::new(SimState::default()),
        })
    }

    /// The same stream as a [`StreamRef`].
    #[must_use]
    pub fn as_ref(self: &Arc<Self>) -> StreamRef {
        self.clone()
    }

    /// Starts outstanding work: markers recorded from now on stay incomplete until the
    /// returned gate (also reachable through [`SimStream::open_gate`]) opens.
    pub fn close_gate(&self) -> Arc<SimGate> {
        let gate = Arc::new(SimGate::default());
        self.state.lock().gate = Some(gate.clone());
        gate
    }

    /// Finishes the outstanding work: opens the current gate.
    pub fn open_gate(&self) {
        if let Some(gate) = self.state.lock().gate.take() {
            gate.open();
        }
    }

    /// Markers recorded on this stream so far.
    #[must_use]
    pub fn markers_recorded(&self) -> u64 {
        self.state.lock().markers_recorded
    }

    /// Device-side waits enqueued on this stream so far.
    #[must_use]
    pub fn waits(&self) -> u64 {
        self.state.lock().waits
    }
}

impl MarkerStream for SimStream {
    fn key(&self) -> StreamKey {
        self.key
    }

    fn record_marker(&self) -> Result<Box<dyn Marker>, MarkerError> {
        let mut state = self.state.lock();
        state.markers_recorded += 1;
        state.dependencies.retain(|d| !d.complete());
        Ok(Box::new(SimMarker {
            gate: state.gate.clone(),
            dependencies: state.dependencies.clone(),
        }))
    }

    fn wait_marker(&self, marker: &dyn Marker) -> Result<(), MarkerError> {
        let marker = marker.as_any().downcast_ref::<SimMarker>().ok_or_else(|| {
            MarkerError("a SimStream can only wait for SimStream markers".to_owned())
        })?;
        let mut state = self.state.lock();
        state.waits += 1;
        if !marker.complete() {
            state.dependencies.push(marker.clone());
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), MarkerError> {
        let state = self.state.lock();
        if let Some(gate) = &state.gate {
            gate.open();
        }
        state.dependencies.iter().for_each(SimMarker::finish);
        Ok(())
    }
}
