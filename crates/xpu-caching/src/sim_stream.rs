//! Host streams for device-less use: markers complete when a test-controlled gate opens.
//!
//! A [`SimStream`] models a stream's pending work as a [`SimGate`]: while the stream's current
//! gate is closed, every marker recorded on it is incomplete; opening the gate completes
//! them. Waiting for a marker models the device finishing the work: it opens the gate.
//! [`SimStream::wait_marker`] makes later markers of the waiting stream also depend on
//! the awaited marker, as a device-side wait would. [`SimStream::enqueue_copy`] checks a
//! copy's ranges and counts it, moving no byte. [`SimBackend`] is the simulated
//! backend: these streams and markers, and [`Simulated`] memory from a
//! [`SimulatedSource`](crate::SimulatedSource).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::error::CopyError;
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
    /// Copies enqueued on the stream ([`SimStream::enqueue_copy`]; copies of 0 bytes and
    /// refused ones are not counted).
    pub copies: u64,
    /// Bytes of those copies.
    pub copied_bytes: u64,
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

    /// The markers recorded, the device-side waits and the copies enqueued on this stream so
    /// far.
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

    /// A simulated copy of `len` bytes from `src` at byte `src_offset` to `dst` at byte
    /// `dst_offset` ([`Backend::enqueue_copy`] of [`SimBackend`]): the ranges are checked
    /// against the segments' sizes ([`Simulated::check_copy_to`]; one memory object when the addresses are
    /// equal), then the copy is counted ([`SimStreamCounters::copies`]). No byte moves (the
    /// memory has none) and nothing waits; a copy of 0 bytes is not counted.
    ///
    /// # Errors
    /// [`CopyError::OutOfRange`] and [`CopyError::Overlap`], as [`Simulated::check_copy_to`] (nothing is
    /// counted then).
    pub fn enqueue_copy(
        &self,
        src: &Simulated,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        src.check_copy_to(src_offset, dst, dst_offset, len)?;
        if len > 0 {
            let counters = &mut self.state.lock().counters;
            counters.copies += 1;
            counters.copied_bytes += len;
        }
        Ok(())
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
/// (segments from a [`SimulatedSource`](crate::SimulatedSource)). No operation fails but a
/// copy whose ranges [`check_copy`](crate::backend::check_copy) refuses.
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

    /// [`SimStream::enqueue_copy`]: the ranges checked against the segments' sizes, no byte
    /// moved.
    fn enqueue_copy(
        stream: &Arc<SimStream>,
        src: &Simulated,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), CopyError> {
        stream.enqueue_copy(src, src_offset, dst, dst_offset, len)
    }
}

crate::thread_caches!(SimBackend);

#[cfg(test)]
mod tests {
    use super::{SimBackend, SimStream, SimStreamCounters};
    use crate::backend::Backend;
    use crate::error::{CopyEnd, CopyError};
    use crate::source::{SegmentSource, Simulated, SimulatedSource};
    use crate::stream::StreamKey;

    #[test]
    fn a_simulated_copy_checks_its_ranges_against_the_segments_and_counts_only_what_it_enqueues() {
        let source = SimulatedSource::<Simulated>::new(0, 1 << 30, 1 << 30);
        let a = source.allocate(4 << 20).expect("segment");
        let b = source.allocate(2 << 20).expect("segment");
        assert_eq!(a.memory, Simulated::new(a.address, 4 << 20));
        assert_ne!(a.memory.address(), b.memory.address());
        let s = SimStream::new(StreamKey::new(0, 1));
        let copy = |src: &Simulated, so, dst: &Simulated, d, len| {
            SimBackend::enqueue_copy(&s, src, so, dst, d, len)
        };

        // Between segments, up to the last byte of each; disjoint ranges of one segment.
        copy(&a.memory, (4 << 20) - 512, &b.memory, (2 << 20) - 512, 512).expect("in range");
        copy(&a.memory, 0, &a.memory, 1 << 20, 1 << 20).expect("disjoint");
        // 0 bytes: checked, not counted.
        copy(&a.memory, 4 << 20, &b.memory, 0, 0).expect("empty");

        // Out of the destination segment (2 MiB), though inside the source (4 MiB).
        assert_eq!(
            copy(&a.memory, 0, &b.memory, 1 << 20, (1 << 20) + 1),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Destination,
                offset: 1 << 20,
                len: (1 << 20) + 1,
                size: 2 << 20,
            })
        );
        assert!(matches!(
            copy(&a.memory, 0, &b.memory, 5 << 20, 0),
            Err(CopyError::OutOfRange {
                end: CopyEnd::Destination,
                ..
            })
        ));
        // Overlapping ranges of one segment, also through an equal copy of its memory
        // (the address is the object's identity).
        let a_again = a.memory;
        assert_eq!(
            copy(&a.memory, 0, &a_again, 4096, 8192),
            Err(CopyError::Overlap {
                src_offset: 0,
                dst_offset: 4096,
                len: 8192
            })
        );
        assert_eq!(
            s.counters(),
            SimStreamCounters {
                copies: 2,
                copied_bytes: 512 + (1 << 20),
                ..SimStreamCounters::default()
            }
        );
        source.free(a);
        source.free(b);
    }
}
