//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource, StreamKey, StreamRef};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// An allocator over a simulated device of `capacity` bytes (max allocation = capacity).
pub fn sim_core(capacity: u64, config: &str) -> (DeviceCore, Arc<SimulatedSource>) {
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let config = AllocConfig::parse(config).expect("valid config");
    (DeviceCore::new(Box::new(source.clone()), config), source)
}

/// A host stream with id `id` on device 0.
pub fn stream(id: u64) -> (Arc<SimStream>, StreamRef) {
    let s = SimStream::new(StreamKey::new(0, id));
    let r = StreamRef::from(s.clone());
    (s, r)
}
