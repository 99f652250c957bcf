//! Ordinary stream semantics as torch.cuda / torch.xpu define them (what held): pool round-robin
//! per device and priority, the current stream per thread and device, guards, synchronize scopes,
//! identity.
//!
//! Review h81: passing probes of ordinary stream semantics that match torch.cuda / torch.xpu
//! (reference `shared/reference/pytorch-runtime.md` §2).

mod common;

use std::collections::HashSet;

use xpu_device::backend::ClEvent;
use xpu_stream::{
    clamp_priority, current_stream, current_stream_here, default_stream, get_stream_from_pool,
    priority_range, set_stream, synchronize, Stream, StreamGuard, PRIORITY_HIGH, PRIORITY_LOW,
    PRIORITY_NORMAL, STREAMS_PER_LEVEL,
};

/// A user event of `s`'s device and a barrier behind it on `s`.
fn gate_on(s: &Stream) -> ClEvent {
    let gate = xpu_device::device(s.device())
        .unwrap()
        .create_user_event()
        .unwrap();
    s.enqueue_queue("review h81 gate")
        .unwrap()
        .enqueue_barrier(&[&gate])
        .unwrap();
    gate
}

/// §2.1: round-robin per (device, level), 32 per level, the 33rd request is the 1st again;
/// levels and devices have independent counters; the default stream is never handed out.
/// §2.2: clamping 10 -> 1, -10 -> -1.
#[test]
fn round_robin_per_device_and_level_wraps_at_32() {
    if !common::devices(2) {
        return;
    }
    for p in [PRIORITY_LOW, PRIORITY_NORMAL, PRIORITY_HIGH] {
        let first: Vec<Stream> = (0..STREAMS_PER_LEVEL)
            .map(|_| get_stream_from_pool(p, 0).unwrap())
            .collect();
        let distinct: HashSet<_> = first.iter().copied().collect();
        assert_eq!(distinct.len(), STREAMS_PER_LEVEL);
        assert!(!distinct.contains(&default_stream(0).unwrap()));
        let raws: HashSet<_> = first.iter().map(|s| s.as_raw().unwrap() as usize).collect();
        assert_eq!(raws.len(), STREAMS_PER_LEVEL, "distinct queues");
        let again = get_stream_from_pool(p, 0).unwrap();
        assert_eq!(again, first[0], "the 33rd request is the 1st stream");
        assert_eq!(again.as_raw().unwrap(), first[0].as_raw().unwrap());
        assert!(first.iter().all(|s| s.priority() == p));
    }
    // Device 1's counter is its own: its first normal stream has index 0, as device 0's did.
    let d1 = get_stream_from_pool(PRIORITY_NORMAL, 1).unwrap();
    let d0_first_id = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap().id(); // 34th: index 1
    assert_eq!(d1.device(), 1);
    assert_ne!(d1.id(), d0_first_id);
    assert_eq!(
        d1.id(),
        {
            // The id device 0's first normal request had: the 65th request wraps to it again.
            for _ in 0..(STREAMS_PER_LEVEL - 2) {
                get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
            }
            get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap().id()
        },
        "device 1's first stream has device 0's first index"
    );
    assert_ne!(d1, get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap());
    assert_eq!(get_stream_from_pool(10, 0).unwrap().priority(), 1);
    assert_eq!(get_stream_from_pool(-10, 0).unwrap().priority(), -1);
    assert_eq!(get_stream_from_pool(i32::MIN, 0).unwrap().priority(), -1);
    assert_eq!(priority_range(), (1, -1));
    assert_eq!((clamp_priority(10), clamp_priority(-10)), (1, -1));
    assert_eq!(default_stream(0).unwrap().priority(), 0);
}

/// §2.4: per thread and per device; `set_stream` of a device-1 stream changes neither
/// device 0's stream nor the current device; a new thread starts on the default stream of
/// every device, whatever this thread chose.
#[test]
fn current_stream_is_per_thread_and_per_device() {
    if !common::devices(2) {
        return;
    }
    let s1 = get_stream_from_pool(PRIORITY_HIGH, 1).unwrap();
    set_stream(s1);
    assert_eq!(current_stream(1).unwrap(), s1);
    assert!(current_stream(0).unwrap().is_default());
    assert_eq!(xpu_device::current_device(), 0);
    assert!(current_stream_here().unwrap().is_default());
    let other = std::thread::spawn(|| {
        let before = (current_stream(0).unwrap(), current_stream(1).unwrap());
        let mine = get_stream_from_pool(PRIORITY_LOW, 1).unwrap();
        set_stream(mine);
        (before, mine)
    })
    .join()
    .unwrap();
    assert!(other.0 .0.is_default() && other.0 .1.is_default());
    assert_eq!(
        current_stream(1).unwrap(),
        s1,
        "another thread's set_stream"
    );
    assert_ne!(other.1, s1);
}

/// §2.5: a guard for a device-1 stream switches the device and device 1's stream and leaves
/// device 0's stream alone; nested guards restore by their saved values, also when dropped
/// out of order (as torch's StreamContext: each exit sets back what its enter saw).
#[test]
fn guards_nest_across_devices_and_restore_saved_values() {
    if !common::devices(2) {
        return;
    }
    let a0 = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    let b0 = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    let c1 = get_stream_from_pool(PRIORITY_NORMAL, 1).unwrap();
    set_stream(a0);
    {
        let g = StreamGuard::new(c1).unwrap();
        assert_eq!(g.stream(), c1);
        assert_eq!(xpu_device::current_device(), 1);
        assert_eq!(
            current_stream(0).unwrap(),
            a0,
            "device 0's stream untouched"
        );
        assert_eq!(current_stream_here().unwrap(), c1);
        {
            let _inner = StreamGuard::new(b0).unwrap();
            assert_eq!(xpu_device::current_device(), 0);
            assert_eq!(current_stream(0).unwrap(), b0);
            assert_eq!(current_stream(1).unwrap(), c1);
        }
        assert_eq!(xpu_device::current_device(), 1);
        assert_eq!(current_stream(0).unwrap(), a0);
        assert_eq!(current_stream(1).unwrap(), c1);
    }
    assert_eq!(xpu_device::current_device(), 0);
    assert_eq!(current_stream(0).unwrap(), a0);
    assert!(current_stream(1).unwrap().is_default());

    // Out of order: g1 (b0 on device 0) then g2 (c1 on device 1), g1 dropped first. torch's
    // StreamContext would restore: g1 exit -> device 0 stream a0, device 0; g2 exit ->
    // device 1 stream default, device 0 stream b0 (what g2's enter saw), device 0.
    let g1 = StreamGuard::new(b0).unwrap();
    let g2 = StreamGuard::new(c1).unwrap();
    drop(g1);
    assert_eq!(current_stream(0).unwrap(), a0);
    drop(g2);
    assert_eq!(current_stream(0).unwrap(), b0);
    assert!(current_stream(1).unwrap().is_default());
    assert_eq!(xpu_device::current_device(), 0);
}

/// §2.6: `synchronize(device)` of a device with no work returns at once; a device-wide
/// synchronize of device 1 does not wait for a gated stream of device 0, and a stream
/// synchronize does not wait for another stream of its device.
#[test]
fn synchronize_waits_only_for_its_scope() {
    if !common::devices(2) {
        return;
    }
    synchronize(1).unwrap();
    let gated = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    let gate = gate_on(&gated);
    let free0 = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    let free1 = get_stream_from_pool(PRIORITY_NORMAL, 1).unwrap();
    let (returned, still_gated) = xpu_testing::returns_within(
        common::BOUND,
        || {
            free0.synchronize().unwrap();
            free1.synchronize().unwrap();
            synchronize(1).unwrap();
            !gated.query().unwrap()
        },
        || gate.set_complete().unwrap(),
    );
    assert!(
        returned,
        "a synchronize outside the gated stream's scope blocked"
    );
    assert!(still_gated, "the gated stream was still behind its gate");
    synchronize(0).unwrap();
    assert!(xpu_testing::true_within(common::BOUND, || gated
        .query()
        .unwrap()));
}

/// §2.3 / §2.7: equality and hash by (device, id); Debug names device, id, priority, queue.
#[test]
fn identity_and_debug() {
    if !common::devices(2) {
        return;
    }
    let a = get_stream_from_pool(PRIORITY_NORMAL, 0).unwrap();
    let b = get_stream_from_pool(PRIORITY_NORMAL, 1).unwrap();
    assert_eq!(a.id(), b.id(), "same index on two devices");
    assert_ne!(a, b, "different devices");
    let set: HashSet<_> = [a, b, a].into_iter().collect();
    assert_eq!(set.len(), 2);
    let dbg = format!("{b:?}");
    assert!(
        dbg.contains("device: 1") && dbg.contains("priority: 0"),
        "{dbg}"
    );
    assert!(dbg.contains(&format!("{:#x}", b.id())), "{dbg}");
    assert_ne!(default_stream(0).unwrap(), default_stream(1).unwrap());
}
