//! `xpu-kernel`: what a framework embedding xpu needs on top of streams and the caching
//! allocator: OpenCL C programs built and cached per device, `Send + Sync` kernel functions,
//! an `unsafe` launch builder on a stream that takes allocator blocks as single arguments,
//! and typed device memory.
#![forbid(unsafe_code)]

pub mod memory;

pub use memory::{
    DeviceBuffer, DeviceRegion, DeviceRegionMut, DeviceSlice, DeviceSliceMut, MemoryError,
    StreamMemoryExt,
};
