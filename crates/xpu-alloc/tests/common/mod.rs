//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod relocation;

use std::path::PathBuf;
use std::sync::Arc;

use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{AllocConfig, DataPtr, DeviceCore, SimulatedSource, StreamKey, StreamRef};
use xpu_stream::{ExternalStream, Stream};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// A stream of `device` on a queue of its own, so gating it never holds back another test's
/// stream.
pub fn fresh_stream(device: usize) -> ExternalStream {
    ExternalStream::new(xpu_testing::fresh_queue(device), device).unwrap()
}

/// A [`fresh_stream`] of device 0, leaked (registered until the process exits); `None` (the
/// test is skipped) without a device ([`xpu_testing::devices`]).
pub fn device_stream() -> Option<Stream> {
    device_streams().map(|[s]| s)
}

/// `N` [`fresh_stream`]s of device 0, as [`device_stream`].
pub fn device_streams<const N: usize>() -> Option<[Stream; N]> {
    xpu_testing::devices(1).then(|| std::array::from_fn(|_| fresh_stream(0).leak()))
}

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

/// Allocates a block of each of `mib` (in MiB) on `s`, in order, and returns them live.
pub fn allocate_mib(core: &DeviceCore, s: &StreamRef, mib: &[u64]) -> Vec<xpu_alloc::DataPtr> {
    mib.iter()
        .map(|m| core.allocate(m * MIB, s).unwrap())
        .collect()
}

/// The idle-segment scene of the release-policy tests: 12, 14 and 16 MiB blocks allocated on
/// `s` then freed, so 42 MiB stay cached in three idle segments.
pub fn cache_three_idle_segments(core: &DeviceCore, s: &StreamRef) {
    drop(allocate_mib(core, s, &[12, 14, 16]));
}

/// The segment sizes, in MiB, in snapshot order.
pub fn segment_sizes_mib(core: &DeviceCore) -> Vec<u64> {
    core.snapshot().iter().map(|s| s.size / MIB).collect()
}

/// Empties `core`'s cache and asserts that nothing stays reserved: the source holds no bytes
/// and no segment, and the allocator reserves nothing.
pub fn assert_empty_cache_releases_everything(core: &DeviceCore, source: &SimulatedSource) {
    core.empty_cache();
    let held = source.counters();
    assert_eq!(
        (held.used, held.live_segments, core.memory_reserved()),
        (0, 0, 0)
    );
}

/// This crate's directory: `CARGO_MANIFEST_DIR` at run time (cargo and nextest set it; a
/// nextest archive run with `--workspace-remap` sets the remapped path), else at build time.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// Fills `ptr` with `byte` on `stream` (non-blocking through a view: a stream other than the
/// allocation stream is recorded on the block).
pub fn fill(ptr: &DataPtr, stream: &Stream, byte: u8) {
    let len = usize::try_from(ptr.size()).unwrap();
    ptr.view().unwrap().fill(stream, &[byte], 0, len).unwrap();
}

/// The bytes of `ptr`, read on `stream` (a blocking read through a view).
pub fn read(ptr: &DataPtr, stream: &Stream) -> Vec<u8> {
    let mut out = vec![0; usize::try_from(ptr.size()).unwrap()];
    ptr.view().unwrap().read(stream, 0, &mut out).unwrap();
    out
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants) yielding its high 31 bits:
/// reproducible pseudo-random draws for the tests.
pub fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    }
}

/// (reserved bytes, segments, active bytes, requested bytes) of device 0 (reviews h87, h88).
pub type Figures = (i64, i64, i64, i64);

/// The device-0 [`Figures`] from `memory_stats(0)` and from `memory_snapshot()`.
pub fn stats_and_snapshot() -> (Figures, Figures) {
    let st = xpu_alloc::memory_stats(0).unwrap();
    let snap = xpu_alloc::memory_snapshot();
    let segs: Vec<_> = snap.segments.iter().filter(|s| s.device == 0).collect();
    let sum = |f: fn(&&xpu_alloc::observe::SegmentDict) -> u64| -> i64 {
        i64::try_from(segs.iter().map(f).sum::<u64>()).unwrap()
    };
    (
        (
            st.reserved_bytes.all.current,
            st.segment.all.current,
            st.active_bytes.all.current,
            st.requested_bytes.all.current,
        ),
        (
            sum(|s| s.total_size),
            i64::try_from(segs.len()).unwrap(),
            sum(|s| s.active_size),
            sum(|s| s.requested_size),
        ),
    )
}
