//! Host streams for device-less use: markers complete when a test-controlled gate opens.
//!
//! A [`SimStream`] models a stream's pending work as a [`SimGate`]: while the stream's current
//! gate is closed, every marker recorded on it is incomplete; opening the gate completes
//! them. Waiting for a marker models the device finishing the work: it opens the gate.
//! [`SimStream::wait_marker`] makes later markers of the waiting stream also depend on
//! the awaited marker, as a device-side wait would. [`SimBackend`] is the simulated
//! backend: these streams and markers, and [`Simulated`] memory from a
//! [`SimulatedSource`](crate::SimulatedSource).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::source::Simulated;
use crate::stream::{MarkerError, StreamKey};

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

impl SimMarker {
    /// Whether the marked work has finished.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.complete()
    }

    /// Finishes the marked work (opens its gates) and returns.
    pub fn wait(&self) {
        self.finish();
    }
}

/// What has been enqueued on a [`SimStream`] so far, read under one lock
/// ([`SimStream::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStreamCounters {
    /// Markers recorded on the stream.
    pub markers_recorded: u64,
    /// Device-side waits enqueued on the stream.
    pub waits: u64,
}

#[derive(Debug, Default)]
struct SimState {
    gate: Option<Arc<SimGate>>,
    dependencies: Vec<SimMarker>,
    counters: SimStreamCounters,
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

    /// The markers recorded and the device-side waits enqueued on this stream so far.
    #[must_use]
    pub fn counters(&self) -> SimStreamCounters {
        self.state.lock().counters
    }
}

impl SimStream {
    /// The stream's identity.
    #[must_use]
    pub fn key(&self) -> StreamKey {
        self.key
    }

    /// Records a marker after the stream's outstanding work (incomplete while the current
    /// gate, or a marker the stream waits for, is not done).
    #[must_use]
    pub fn record_marker(&self) -> SimMarker {
        let mut state = self.state.lock();
        state.counters.markers_recorded += 1;
        state.dependencies.retain(|d| !d.complete());
        SimMarker {
            gate: state.gate.clone(),
            dependencies: state.dependencies.clone(),
        }
    }

    /// Makes markers recorded from now on depend on `marker` too (a device-side wait).
    pub fn wait_marker(&self, marker: &SimMarker) {
        let mut state = self.state.lock();
        state.counters.waits += 1;
        if !marker.complete() {
            state.dependencies.push(marker.clone());
        }
    }

    /// Finishes all outstanding work of the stream.
    pub fn synchronize(&self) {
        let state = self.state.lock();
        if let Some(gate) = &state.gate {
            gate.open();
        }
        state.dependencies.iter().for_each(SimMarker::finish);
    }
}

/// The simulated backend: [`SimStream`]s, their [`SimMarker`]s and [`Simulated`] memory
/// (segments from a [`SimulatedSource`](crate::SimulatedSource)). No operation fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimBackend;

impl Backend for SimBackend {
    type Memory = Simulated;
    type Stream = Arc<SimStream>;
    type Marker = SimMarker;

    fn stream_key(stream: &Arc<SimStream>) -> StreamKey {
        stream.key()
    }

    fn record_marker(stream: &Arc<SimStream>) -> Result<SimMarker, MarkerError> {
        Ok(stream.record_marker())
    }

    fn marker_complete(marker: &SimMarker) -> bool {
        marker.is_complete()
    }

    fn wait(marker: &SimMarker) -> Result<(), MarkerError> {
        marker.wait();
        Ok(())
    }

    fn stream_wait(stream: &Arc<SimStream>, marker: &SimMarker) -> Result<(), MarkerError> {
        stream.wait_marker(marker);
        Ok(())
    }

    fn synchronize(stream: &Arc<SimStream>) -> Result<(), MarkerError> {
        stream.synchronize();
        Ok(())
    }
}

crate::thread_caches!(SimBackend);
