//! A segment source without a device: a capacity, unique fake addresses, fault injection.

use std::collections::BTreeSet;
use std::marker::PhantomData;

use parking_lot::Mutex;

use super::{DeviceFailure, SegmentSource, SourceError, SourceSegment};

/// The memory of a simulated segment: none. A backend whose memory type can say "simulated"
/// (`From<Simulated>`) can run its allocator on a [`SimulatedSource`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Simulated;

/// Base of the simulated address range (never 0, 2 MiB aligned).
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// Segments start at multiples of this, like device allocations.
const SEGMENT_ALIGN: u64 = 2 << 20;

/// What a planned fault makes the segment allocation return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// [`SourceError::OutOfMemory`] (the allocator frees cached memory and retries).
    OutOfMemory,
    /// [`SourceError::Device`] (reported to the caller at once).
    DeviceError,
}

/// What a [`SimulatedSource`] holds and has been asked so far, read under one lock
/// ([`SimulatedSource::counters`]: the figures agree with each other).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimulatedCounters {
    /// Bytes currently allocated from the device.
    pub used: u64,
    /// Segments currently allocated from the device.
    pub live_segments: u64,
    /// Segment allocation attempts so far (successful or not).
    pub attempts: u64,
}

#[derive(Debug, Default)]
struct State {
    counters: SimulatedCounters,
    next_address: u64,
    faults: BTreeSet<(u64, FaultKey)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKey {
    OutOfMemory,
    DeviceError,
}

/// A simulated device: segments succeed while their total stays within the capacity.
/// Addresses are unique and never reused; a segment that would end past `u64::MAX` (the
/// address range exhausted, after about 16 EiB of segments) is out of memory. Used by `xpu replay --simulate`, by tests and
/// by benchmarks.
/// Its segments carry `M::from(Simulated)` as their memory.
#[derive(Debug)]
pub struct SimulatedSource<M = Simulated> {
    device: usize,
    capacity: u64,
    max_alloc: u64,
    state: Mutex<State>,
    memory: PhantomData<fn() -> M>,
}

impl<M> SimulatedSource<M> {
    /// A simulated device `device` of `capacity` bytes whose largest single allocation is
    /// `max_alloc` bytes.
    #[must_use]
    pub fn new(device: usize, capacity: u64, max_alloc: u64) -> Self {
        Self {
            device,
            capacity,
            max_alloc,
            state: Mutex::new(State {
                next_address: BASE_ADDRESS,
                ..State::default()
            }),
            memory: PhantomData,
        }
    }

    /// Makes the `n`-th segment allocation from now on fail (`n = 1`: the next one).
    pub fn fail_nth(&self, n: u64, fault: Fault) {
        let mut state = self.state.lock();
        // A fault planned beyond the last attempt countable never fires.
        let at = state.counters.attempts.saturating_add(n.max(1));
        let key = match fault {
            Fault::OutOfMemory => FaultKey::OutOfMemory,
            Fault::DeviceError => FaultKey::DeviceError,
        };
        state.faults.insert((at, key));
    }

    /// The bytes and segments this device holds now and its allocation attempts so far,
    /// read at one instant.
    #[must_use]
    pub fn counters(&self) -> SimulatedCounters {
        self.state.lock().counters
    }
}

impl<M: From<Simulated> + Send + Sync + std::fmt::Debug + 'static> SegmentSource
    for SimulatedSource<M>
{
    type Memory = M;

    fn device(&self) -> usize {
        self.device
    }

    fn name(&self) -> String {
        format!("simulated device {} ({} bytes)", self.device, self.capacity)
    }

    fn total_memory(&self) -> u64 {
        self.capacity
    }

    fn max_alloc_size(&self) -> u64 {
        self.max_alloc
    }

    fn base_addr_align(&self) -> u64 {
        512
    }

    fn free_memory(&self) -> Option<u64> {
        Some(
            self.capacity
                .saturating_sub(self.state.lock().counters.used),
        )
    }

    fn allocate(&self, size: u64) -> Result<SourceSegment<M>, SourceError> {
        let mut state = self.state.lock();
        state.counters.attempts = state.counters.attempts.saturating_add(1);
        let attempt = state.counters.attempts;
        for key in [FaultKey::OutOfMemory, FaultKey::DeviceError] {
            if state.faults.remove(&(attempt, key)) {
                return Err(match key {
                    FaultKey::OutOfMemory => SourceError::OutOfMemory,
                    FaultKey::DeviceError => SourceError::Device(DeviceFailure::message(format!(
                        "injected fault on segment allocation {attempt}"
                    ))),
                });
            }
        }
        let Some(used) = state.counters.used.checked_add(size) else {
            return Err(SourceError::OutOfMemory);
        };
        if size == 0 || size > self.max_alloc || used > self.capacity {
            return Err(SourceError::OutOfMemory);
        }
        // Addresses are never reused: once the address range is exhausted, the device is
        // out of memory.
        let address = state.next_address;
        let Some(next) = size
            .checked_next_multiple_of(SEGMENT_ALIGN)
            .and_then(|span| address.checked_add(span))
        else {
            return Err(SourceError::OutOfMemory);
        };
        state.next_address = next;
        state.counters.used = used;
        state.counters.live_segments += 1;
        Ok(SourceSegment {
            address,
            size,
            memory: M::from(Simulated),
        })
    }

    fn free(&self, segment: SourceSegment<M>) {
        let counters = &mut self.state.lock().counters;
        counters.used = counters.used.saturating_sub(segment.size);
        counters.live_segments = counters.live_segments.saturating_sub(1);
    }
}
