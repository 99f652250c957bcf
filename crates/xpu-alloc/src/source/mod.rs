//! The segment sources of the device allocator: the seam ([`SegmentSource`], from
//! `xpu-caching`) with this crate's memory type [`SegmentMemory`], the OpenCL
//! [`BufferSource`] and the simulated source over the same memory type.

mod buffer;

pub use buffer::BufferSource;
pub use xpu_caching::source::{
    DeviceFailure, Fault, HookedSource, SegmentSource, Simulated, SimulatedCounters, SourceError,
    SourceHooks,
};

/// The memory behind one segment, as the source created it.
#[derive(Debug)]
pub enum SegmentMemory {
    /// No real memory (simulated source).
    Simulated,
    /// An OpenCL buffer.
    Buffer(xpu_device::backend::Buffer),
}

impl From<Simulated> for SegmentMemory {
    fn from(_: Simulated) -> Self {
        Self::Simulated
    }
}

/// One segment of this crate's sources.
pub type SourceSegment = xpu_caching::source::SourceSegment<SegmentMemory>;

/// A simulated device whose segments are [`SegmentMemory::Simulated`] (see
/// [`xpu_caching::source::SimulatedSource`]).
pub type SimulatedSource = xpu_caching::source::SimulatedSource<SegmentMemory>;

/// A segment source of this crate's memory type, as a [`crate::DeviceCore`] holds it.
pub type DynSource = dyn SegmentSource<Memory = SegmentMemory>;
