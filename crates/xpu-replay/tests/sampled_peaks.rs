//! The replay engine's sampled peaks equal the allocator's own peak figures on the repository's
//! traces.
//!
//! Review h23's probes of the replay engine (passing when written).

use std::path::PathBuf;
use std::sync::Arc;

use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource, StreamKey, StreamRef};
use xpu_replay::{
    self as replay, ReplayOptions, ReplayTarget, StreamFactory, H200_CAPACITY, H200_MAX_ALLOC,
};

fn traces() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/traces");
    let mut out = Vec::new();
    for d in [dir.clone(), dir.join("validation")] {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.to_string_lossy().ends_with(".trace.gz") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The replay samples its peaks after each event; the allocator's own statistics track them
/// at every change. They agree on the repository's traces (default configuration, simulated
/// H200 with fresh addresses).
#[test]
fn sampled_peaks_equal_the_allocators_own_peaks() {
    for path in traces() {
        let core = DeviceCore::new(
            Box::new(SimulatedSource::new(0, H200_CAPACITY, H200_MAX_ALLOC)),
            AllocConfig::default(),
        );
        let streams: StreamFactory =
            Arc::new(|s| StreamRef::from(SimStream::new(StreamKey::new(0, u64::from(s)))));
        let options = ReplayOptions {
            target: ReplayTarget::Core {
                core: core.clone(),
                name: "sim".to_owned(),
                streams,
            },
            ..ReplayOptions::default()
        };
        let r = replay::run(&path, &options).unwrap().report;
        let stats = core.memory_stats();
        eprintln!(
            "{}: sampled {} / {}, stats {} / {}",
            r.trace,
            r.peak_allocated,
            r.peak_reserved,
            stats.allocated_bytes.all.peak,
            stats.reserved_bytes.all.peak
        );
        assert_eq!(
            (r.peak_allocated, r.peak_reserved),
            (
                u64::try_from(stats.allocated_bytes.all.peak).unwrap(),
                u64::try_from(stats.reserved_bytes.all.peak).unwrap()
            ),
            "{}",
            r.trace
        );
    }
}
