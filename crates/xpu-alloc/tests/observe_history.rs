//! History recording: off by default, and a ring buffer that keeps the newest entries. That
//! its text export replays to the recorded run's peaks is xpu-replay's
//! `tests/observe_history.rs`.

use xpu_alloc::observe::TraceAction;
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::stream::StreamKey;
use xpu_alloc::StreamRef;
use xpu_alloc::{AllocConfig, DeviceCore, SimulatedSource};

/// The simulated H200 of the replays (`xpu_replay::H200_CAPACITY`, `H200_MAX_ALLOC`):
/// 139.8 GiB, largest allocation 34.95 GiB.
const H200_CAPACITY: u64 = 150_109_106_995;
const H200_MAX_ALLOC: u64 = 37_527_276_748;

fn core() -> DeviceCore {
    DeviceCore::new(
        Box::new(SimulatedSource::new(0, H200_CAPACITY, H200_MAX_ALLOC)),
        AllocConfig::default(),
    )
}

#[test]
fn off_by_default_records_nothing() {
    let core = core();
    let s = StreamRef::from(SimStream::new(StreamKey::new(0, 0)));
    assert!(!core.memory_history().is_enabled());
    drop(core.allocate(4096, &s).unwrap());
    assert!(core.memory_history().is_empty());
}

#[test]
fn ring_buffer_keeps_the_newest_entries_in_order() {
    let core = core();
    let s = StreamRef::from(SimStream::new(StreamKey::new(0, 7)));
    drop(core.allocate(512, &s).unwrap()); // segment_alloc happens before recording
    core.memory_history().record_memory_history(true, 5);
    for i in 1..=4u64 {
        drop(core.allocate(512 * i, &s).unwrap());
    }
    let entries = core.memory_history().entries();
    assert_eq!(entries.len(), 5);
    let seen: Vec<(TraceAction, u64)> = entries.iter().map(|e| (e.action, e.size)).collect();
    // Each pair records alloc, free_requested, free_completed: 12 entries, the last 5 kept.
    assert_eq!(
        seen,
        [
            (TraceAction::FreeRequested, 1536),
            (TraceAction::FreeCompleted, 1536),
            (TraceAction::Alloc, 2048),
            (TraceAction::FreeRequested, 2048),
            (TraceAction::FreeCompleted, 2048),
        ]
    );
    assert!(entries.iter().all(|e| e.stream == 7));
    assert!(entries.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    core.memory_history().record_memory_history(false, 5);
    assert!(core.memory_history().is_empty());
}
