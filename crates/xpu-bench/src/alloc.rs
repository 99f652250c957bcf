//! The allocator benchmark workload, defined once for its three runners: this crate's criterion
//! bench (`benches/alloc.rs`), its callgrind harness (`examples/pair_count.rs`) and
//! `xpu bench --json` (xpu-cli's `alloc_bench`, which also times it on a device and through
//! `malloc`). Only the work is here; timing and reporting belong to the runners.
//!
//! - a pair ([`Workload::pair`]): one allocate + free of one size on one stream, served from
//!   the cache after the first;
//! - a mixed round ([`mixed_round`]): [`MIXED_LIVE`] live blocks of [`MIXED_SIZES`] (cycled),
//!   then frees of the even then the odd ones;
//! - threads: [`THREADS`] threads, each making pairs on a stream of its own.

use std::hint::black_box;

use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{AllocConfig, AllocError, DeviceCore, SimulatedSource, StreamKey, StreamRef};

/// The thread counts of the threaded figures (one stream per thread).
pub const THREADS: [usize; 5] = [1, 2, 4, 8, 16];

/// Sizes of the mixed workload (bytes), cycled over [`MIXED_LIVE`] blocks.
pub const MIXED_SIZES: [u64; 8] = [
    512,
    4 << 10,
    96 << 10,
    1 << 20,
    3 << 20,
    700,
    12 << 20,
    256 << 10,
];

/// How many blocks a mixed round holds live at once.
pub const MIXED_LIVE: usize = 64;

/// One mixed round through `allocate` (called with each size in bytes): [`MIXED_LIVE`]
/// blocks of [`MIXED_SIZES`] cycled, then the even ones dropped, then the odd ones.
///
/// # Errors
/// The first error of `allocate` (the blocks allocated so far are dropped).
pub fn mixed_round<T, E>(mut allocate: impl FnMut(u64) -> Result<T, E>) -> Result<(), E> {
    let mut live = Vec::with_capacity(MIXED_LIVE);
    for i in 0..MIXED_LIVE {
        live.push(Some(allocate(MIXED_SIZES[i % MIXED_SIZES.len()])?));
    }
    for start in [0, 1] {
        for slot in live.iter_mut().skip(start).step_by(2) {
            drop(slot.take());
        }
    }
    Ok(())
}

/// A device's caching allocator and one stream per thread of the largest [`THREADS`] count.
pub struct Workload {
    core: DeviceCore,
    streams: Vec<(StreamKey, StreamRef)>,
}

impl Workload {
    /// The workload on `core`, thread `t` allocating on `streams[t]` (at least
    /// `THREADS[THREADS.len() - 1]` of them for the threaded figures).
    #[must_use]
    pub fn new(core: DeviceCore, streams: Vec<(StreamKey, StreamRef)>) -> Self {
        Self { core, streams }
    }

    /// A simulated 64 GiB device 0 configured by `config` (the cached path makes no device
    /// call), with simulated streams.
    #[must_use]
    pub fn simulated(config: AllocConfig) -> Self {
        let source = SimulatedSource::new(0, 64 << 30, 64 << 30);
        let core = DeviceCore::new(Box::new(source), config);
        let streams = (0..THREADS[THREADS.len() - 1] as u64)
            .map(|i| {
                let key = StreamKey::new(0, i);
                (key, StreamRef::from(SimStream::new(key)))
            })
            .collect();
        Self::new(core, streams)
    }

    /// One allocate + free of `size` bytes on stream `stream` (the address escapes, so the
    /// pair is not optimized away).
    ///
    /// # Errors
    /// The allocation's error.
    ///
    /// # Panics
    /// When `stream` is not below the number of streams given.
    pub fn pair(&self, stream: usize, size: u64) -> Result<(), AllocError> {
        let (key, s) = &self.streams[stream];
        let p = self.core.allocate_with(size, *key, || s.clone())?;
        black_box(p.address());
        drop(p);
        Ok(())
    }

    /// One [`mixed_round`] on stream 0.
    ///
    /// # Errors
    /// The first allocation error.
    pub fn mixed_round(&self) -> Result<(), AllocError> {
        let (key, s) = &self.streams[0];
        mixed_round(|size| self.core.allocate_with(size, *key, || s.clone()))
    }
}
