//! A segment source without a device: a capacity, unique fake addresses (or a recording's,
//! see [`SimulatedSource::with_recorded_addresses`]), fault injection.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use parking_lot::Mutex;

use super::{DeviceFailure, SegmentSource, SourceError, SourceSegment};

/// The memory of a simulated segment: no bytes, only the segment's place, its address and
/// size in bytes. The address identifies the memory object (the live segments of a
/// [`SimulatedSource`] never share one) and the size bounds the ranges of a simulated copy
/// ([`SimStream::enqueue_copy`](crate::sim_stream::SimStream::enqueue_copy)). A backend whose
/// memory type can say "simulated" (`From<Simulated>`) can run its allocator on a
/// [`SimulatedSource`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Simulated {
    address: u64,
    size: u64,
}

impl Simulated {
    /// The memory of a simulated segment of `size` bytes at `address`.
    #[must_use]
    pub const fn new(address: u64, size: u64) -> Self {
        Self { address, size }
    }

    /// The segment's address.
    #[must_use]
    pub const fn address(&self) -> u64 {
        self.address
    }

    /// The segment's size, in bytes.
    #[must_use]
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// The checks of a copy of `len` bytes from this memory at `src_offset` to `dst` at
    /// `dst_offset` ([`check_copy`](crate::backend::check_copy): ranges within both, no
    /// overlap within one memory object, told apart by address).
    ///
    /// # Errors
    /// [`CopyError::OutOfRange`](crate::CopyError::OutOfRange) and
    /// [`CopyError::Overlap`](crate::CopyError::Overlap).
    pub fn check_copy_to(
        &self,
        src_offset: u64,
        dst: &Simulated,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), crate::CopyError> {
        crate::backend::check_copy(
            len,
            (src_offset, self.size),
            (dst_offset, dst.size),
            self.address == dst.address,
        )
    }
}

/// Base of the simulated address range (never 0, 2 MiB aligned).
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// Segments start at multiples of this, like device allocations.
const SEGMENT_ALIGN: u64 = 2 << 20;
/// Sub-buffer origin alignment of the simulated device, in bytes.
const BASE_ADDR_ALIGN: u64 = 512;

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

/// One segment of a recording's segment sequence (a trace's `segment_alloc` line): the
/// address a [`SimulatedSource`] gives its segment of the same rank while the sequences
/// agree ([`SimulatedSource::with_recorded_addresses`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedSegment {
    /// Device address of the recorded segment.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// The recording's segment addresses a source follows, and where it stands in them.
#[derive(Debug, Default)]
struct AddressPlan {
    /// The recording's segments, in allocation order.
    segments: Vec<RecordedSegment>,
    /// Rank of the next segment handed out (segments handed out so far).
    next: usize,
    /// Segments placed at the recording's address so far.
    followed: u64,
    /// True until the sequences part: from then on every segment gets a fresh address.
    parted: bool,
    /// Live segments: address -> end (one past the last byte).
    live: BTreeMap<u64, u64>,
}

impl AddressPlan {
    /// The recorded address for the next segment of `size` bytes, when the sequences still
    /// agree: the recording's segment of this rank has this size, its address is aligned to
    /// `align` and not 0, its end rounded up to [`SEGMENT_ALIGN`] fits in a `u64`, and its
    /// range overlaps no live segment. Otherwise the sequences have parted, for good.
    fn take(&mut self, size: u64, align: u64) -> Option<u64> {
        if self.parted {
            return None;
        }
        let planned = self.segments.get(self.next).copied().filter(|planned| {
            planned.size == size
                && planned.address != 0
                && planned.address % align == 0
                && planned
                    .address
                    .checked_add(size)
                    // The source rounds the end up to the segment alignment: it must fit too.
                    .filter(|end| end.checked_next_multiple_of(SEGMENT_ALIGN).is_some())
                    .is_some_and(|end| {
                        self.live
                            .range(..end)
                            .next_back()
                            .is_none_or(|(_, &live_end)| live_end <= planned.address)
                    })
        });
        if planned.is_none() {
            self.parted = true;
        }
        planned.map(|p| p.address)
    }
}

#[derive(Debug, Default)]
struct State {
    counters: SimulatedCounters,
    /// Fresh addresses start here: past every address handed out so far.
    next_address: u64,
    faults: BTreeSet<(u64, FaultKey)>,
    /// The recording's addresses, when the source follows one.
    plan: Option<AddressPlan>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKey {
    OutOfMemory,
    DeviceError,
}

/// A simulated device: segments succeed while their total stays within the capacity.
///
/// Addresses: by default each segment gets a fresh address, 2 MiB aligned, above every
/// address handed out before (so addresses only grow and are never reused); a segment that
/// would end past `u64::MAX` (the address range exhausted, after about 16 EiB of segments)
/// is out of memory. A source made with [`SimulatedSource::with_recorded_addresses`] gives
/// its segments a recording's addresses instead while the two segment sequences agree
/// (rule there), then fresh ones. Used by `xpu replay --simulate`, by tests and by
/// benchmarks.
/// Its segments carry `M::from(Simulated::new(address, size))` as their memory.
#[derive(Debug)]
pub struct SimulatedSource<M = Simulated> {
    device: usize,
    capacity: u64,
    max_alloc: u64,
    splits_segments: bool,
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
            splits_segments: true,
            state: Mutex::new(State {
                next_address: BASE_ADDRESS,
                ..State::default()
            }),
            memory: PhantomData,
        }
    }

    /// This source, as a device whose segments cannot be split into blocks used at once
    /// ([`SegmentSource::splits_segments`] false, as a `BufferSource` on NVIDIA's OpenCL).
    #[must_use]
    pub fn without_splitting(mut self) -> Self {
        self.splits_segments = false;
        self
    }

    /// This source, giving its segments the addresses of a recording (a trace's
    /// `segment_alloc` lines, in order) while the segment sequences agree, so that a replay
    /// breaks best-fit ties between equal free blocks (by address) as the recording did.
    ///
    /// The rule: the k-th segment this source hands out (counting successful allocations
    /// only: a failed attempt, injected or for lack of capacity, is no segment, as a failed
    /// device allocation leaves no `segment_alloc` line) gets the address of `recorded[k]`
    /// when all of these hold: every earlier segment got its recorded address; `recorded[k]`
    /// exists and has the same size; its address is not 0 and is a multiple of
    /// [`SegmentSource::base_addr_align`]; its end, rounded up to 2 MiB, fits in a `u64`;
    /// and its range overlaps no live segment of this
    /// source (the recording may have freed a segment the replay still holds). At the first
    /// segment where one fails the sequences have parted: that segment and every later one
    /// get a fresh address, 2 MiB aligned, above every address handed out so far (recorded
    /// or fresh), so a fresh segment never overlaps a live one and addresses are never
    /// reused after the parting. [`SimulatedSource::recorded_addresses_followed`] says how
    /// many segments took their recorded address.
    ///
    /// Only the segment source changes: the allocator sees addresses, as from any device.
    #[must_use]
    pub fn with_recorded_addresses(
        self,
        recorded: impl IntoIterator<Item = RecordedSegment>,
    ) -> Self {
        self.state.lock().plan = Some(AddressPlan {
            segments: recorded.into_iter().collect(),
            ..AddressPlan::default()
        });
        self
    }

    /// Segments placed at their recorded address so far (see
    /// [`SimulatedSource::with_recorded_addresses`]); `None` for a source without
    /// recorded addresses.
    #[must_use]
    pub fn recorded_addresses_followed(&self) -> Option<u64> {
        self.state.lock().plan.as_ref().map(|plan| plan.followed)
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
        BASE_ADDR_ALIGN
    }

    fn splits_segments(&self) -> bool {
        self.splits_segments
    }

    /// Simulated memory: nothing runs on it, so a free waits for nothing.
    fn free_needs_sync(&self) -> bool {
        false
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
        let recorded = state
            .plan
            .as_mut()
            .and_then(|plan| plan.take(size, BASE_ADDR_ALIGN));
        // A fresh address lies past every address handed out, so it is never reused: once
        // the address range is exhausted, the device is out of memory.
        let address = recorded.unwrap_or(state.next_address);
        let Some(next) = address
            .checked_add(size)
            .and_then(|end| end.checked_next_multiple_of(SEGMENT_ALIGN))
        else {
            return Err(SourceError::OutOfMemory);
        };
        state.next_address = state.next_address.max(next);
        if let Some(plan) = state.plan.as_mut() {
            plan.next += 1;
            plan.followed += u64::from(recorded.is_some());
            // `next` checked above: `address + size` does not overflow.
            plan.live.insert(address, address + size);
        }
        state.counters.used = used;
        state.counters.live_segments += 1;
        Ok(SourceSegment {
            address,
            size,
            memory: M::from(Simulated::new(address, size)),
        })
    }

    fn free(&self, segment: SourceSegment<M>) {
        let state = &mut *self.state.lock();
        if let Some(plan) = state.plan.as_mut() {
            plan.live.remove(&segment.address);
        }
        let counters = &mut state.counters;
        counters.used = counters.used.saturating_sub(segment.size);
        counters.live_segments = counters.live_segments.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn source(recorded: &[(u64, u64)]) -> SimulatedSource {
        SimulatedSource::new(0, 1 << 40, 1 << 40).with_recorded_addresses(
            recorded
                .iter()
                .map(|&(address, size)| RecordedSegment { address, size }),
        )
    }

    #[test]
    fn recorded_addresses_are_followed_while_the_sizes_agree_then_fresh_ones_above_all() {
        let (low, high) = (BASE_ADDRESS, BASE_ADDRESS + 64 * MIB);
        let s = source(&[(high, 20 * MIB), (low, 2 * MIB), (low + 2 * MIB, 4 * MIB)]);
        let a = s.allocate(20 * MIB).unwrap();
        let b = s.allocate(2 * MIB).unwrap();
        assert_eq!((a.address, b.address), (high, low));
        // The third recorded segment has 4 MiB, this one 6: the sequences part.
        let c = s.allocate(6 * MIB).unwrap();
        assert_eq!(c.address, high + 20 * MIB);
        let d = s.allocate(4 * MIB).unwrap();
        assert_eq!(d.address, high + 26 * MIB, "fresh after parting, for good");
        assert_eq!(s.recorded_addresses_followed(), Some(2));
    }

    #[test]
    fn a_recorded_address_overlapping_a_live_segment_parts_the_sequences() {
        let base = BASE_ADDRESS;
        // The recording freed its first segment before placing the second at the same place;
        // here the first is still live.
        let s = source(&[(base, 20 * MIB), (base + 2 * MIB, 20 * MIB)]);
        let a = s.allocate(20 * MIB).unwrap();
        let b = s.allocate(20 * MIB).unwrap();
        assert_eq!(a.address, base);
        assert_eq!(b.address, base + 20 * MIB);
        assert_eq!(s.recorded_addresses_followed(), Some(1));
    }

    #[test]
    fn a_recorded_address_freed_in_the_replay_too_is_reused() {
        let base = BASE_ADDRESS;
        let s = source(&[(base, 20 * MIB), (base, 20 * MIB)]);
        let a = s.allocate(20 * MIB).unwrap();
        s.free(a);
        let b = s.allocate(20 * MIB).unwrap();
        assert_eq!(b.address, base);
        assert_eq!(s.recorded_addresses_followed(), Some(2));
    }

    #[test]
    fn a_failed_attempt_is_no_segment_of_the_sequence() {
        let s = source(&[(BASE_ADDRESS + 8 * MIB, 2 * MIB)]);
        s.fail_nth(1, Fault::OutOfMemory);
        assert!(s.allocate(2 * MIB).is_err());
        assert_eq!(s.allocate(2 * MIB).unwrap().address, BASE_ADDRESS + 8 * MIB);
    }

    #[test]
    fn a_recorded_address_too_high_for_an_aligned_end_parts_the_sequences_instead_of_failing() {
        // 512-byte aligned and `address + size` fits in u64, but the segment's end rounded up
        // to 2 MiB does not: the rule says the sequences part (a fresh address), not OOM.
        let top = (u64::MAX - 2 * MIB - 511) & !511;
        let s = source(&[(top, 2 * MIB)]);
        let a = s.allocate(2 * MIB).expect("a fresh address after parting");
        assert_eq!(a.address, BASE_ADDRESS);
        assert_eq!(s.recorded_addresses_followed(), Some(0));
    }

    #[test]
    fn without_recorded_addresses_they_only_grow() {
        let s = SimulatedSource::<Simulated>::new(0, 1 << 40, 1 << 40);
        let a = s.allocate(3 * MIB).unwrap();
        let b = s.allocate(MIB).unwrap();
        assert_eq!(
            (a.address, b.address),
            (BASE_ADDRESS, BASE_ADDRESS + 4 * MIB)
        );
        assert_eq!(s.recorded_addresses_followed(), None);
    }
}
