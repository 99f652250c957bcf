//! The out-of-memory sequence, its error, never-fitting requests, the memory fraction and
//! fault injection on segment allocation.

mod common;

use common::{
    assert_empty_cache_releases_everything, cache_three_idle_segments, sim_core, stream, GIB, MIB,
};
use xpu_alloc::{AllocError, Fault};

#[test]
fn oom_error_reports_every_figure() {
    let (core, _) = sim_core(64 * MIB, "");
    let (_, s) = stream(0);
    let _a = core.allocate(40 * MIB, &s).unwrap();
    let small = core.allocate(MIB, &s).unwrap();
    drop(small);
    let err = core.allocate(30 * MIB, &s).unwrap_err();
    let AllocError::OutOfMemory(r) = &err else {
        panic!("expected OutOfMemory, got {err:?}")
    };
    assert_eq!(
        (r.device, r.requested, r.segment_size, r.total),
        (0, 30 * MIB, 30 * MIB, 64 * MIB)
    );
    // The cached 2 MiB small segment was released by the last retry.
    assert_eq!(
        (
            r.free,
            r.allocated,
            r.reserved,
            r.reserved_unallocated(),
            r.allowed
        ),
        (24 * MIB, 40 * MIB, 40 * MIB, 0, None)
    );
    assert_eq!(
        err.to_string(),
        "XPU out of memory. Tried to allocate 30.00 MiB (a segment of 30.00 MiB). Device 0 has a total capacity of \
         64.00 MiB of which 24.00 MiB is free. Of the allocated memory 40.00 MiB is allocated by the xpu allocator, \
         and 0 bytes is reserved by the xpu allocator but unallocated. Call `empty_cache` to release all unoccupied \
         cached memory."
    );
    let st = core.memory_stats();
    assert_eq!(
        (
            st.num_ooms,
            st.num_alloc_retries,
            st.num_sync_all_streams,
            st.num_device_free
        ),
        (1, 1, 1, 1)
    );
    // Still usable.
    assert!(core.allocate(20 * MIB, &s).is_ok());
}

#[test]
fn release_and_retry_serves_a_request_that_fits_after_flushing() {
    let (core, source) = sim_core(64 * MIB, "");
    let (_, s) = stream(0);
    let a = core.allocate(40 * MIB, &s).unwrap();
    drop(a);
    let b = core.allocate(50 * MIB, &s).unwrap();
    assert_eq!(b.allocated_size(), 50 * MIB);
    let st = core.memory_stats();
    assert_eq!(
        (
            st.num_alloc_retries,
            st.num_ooms,
            st.num_device_alloc,
            st.num_device_free
        ),
        (1, 0, 2, 1)
    );
    assert_eq!(source.counters().used, 50 * MIB);
}

#[test]
fn never_fitting_requests_are_a_distinct_error() {
    let (core, source) = sim_core(64 * MIB, "");
    let (_, s) = stream(0);
    assert!(
        matches!(core.allocate(64 * MIB + 1, &s), Err(AllocError::TooLarge { requested, max, .. }) if requested == 64 * MIB + 1 && max == 64 * MIB)
    );
    assert!(matches!(
        core.allocate(u64::MAX, &s),
        Err(AllocError::TooLarge { .. })
    ));
    assert!(matches!(
        core.allocate(1 << 61, &s),
        Err(AllocError::TooLarge { .. })
    ));
    assert_eq!(
        source.counters().attempts,
        0,
        "no device call for a request that can never fit"
    );
    assert_eq!(core.memory_stats().num_ooms, 0);
    // Rounding past the largest allocation.
    let source = std::sync::Arc::new(xpu_alloc::SimulatedSource::new(0, GIB, 10 * MIB + 100));
    let core = xpu_alloc::DeviceCore::new(Box::new(source), Default::default());
    assert!(matches!(
        core.allocate(10 * MIB + 1, &s),
        Err(AllocError::TooLarge { .. })
    ));
    // A segment larger than the max allocation is clamped to the request.
    assert_eq!(
        core.allocate(10 * MIB, &s).unwrap().allocated_size(),
        10 * MIB
    );
}

#[test]
fn memory_fraction_limits_reserved_memory() {
    let (core, _) = sim_core(64 * MIB, "");
    let (_, s) = stream(0);
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        assert!(
            matches!(
                core.set_memory_fraction(bad),
                Err(AllocError::InvalidFraction { .. })
            ),
            "{bad}"
        );
    }
    assert_eq!(core.memory_fraction(), 1.0);
    core.set_memory_fraction(0.5).unwrap();
    assert_eq!(core.memory_fraction(), 0.5);
    let _a = core.allocate(20 * MIB, &s).unwrap();
    let err = core.allocate(20 * MIB, &s).unwrap_err();
    let AllocError::MemoryFractionExceeded(r) = &err else {
        panic!("expected MemoryFractionExceeded, got {err:?}")
    };
    assert_eq!(
        (r.allowed, r.reserved, r.free),
        (Some(32 * MIB), 20 * MIB, 44 * MIB)
    );
    assert!(err.to_string().contains("32.00 MiB allowed; "), "{err}");
    core.set_memory_fraction(1.0).unwrap();
    assert!(core.allocate(20 * MIB, &s).is_ok());
}

#[test]
fn oom_fault_on_segment_allocation_is_retried_after_release() {
    let (core, source) = sim_core(GIB, "");
    let (_, s) = stream(0);
    source.fail_nth(1, Fault::OutOfMemory);
    let p = core.allocate(MIB, &s).unwrap();
    let st = core.memory_stats();
    assert_eq!(
        (st.num_alloc_retries, st.num_ooms, st.num_device_alloc),
        (1, 0, 1)
    );
    assert_eq!(source.counters().attempts, 2);
    drop(p);
}

#[test]
fn device_fault_is_reported_and_leaks_nothing() {
    let (core, source) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let keep = core.allocate(MIB, &s).unwrap();
    source.fail_nth(1, Fault::DeviceError);
    let err = core.allocate(30 * MIB, &s).unwrap_err();
    assert!(
        matches!(&err, AllocError::Source(m) if m.to_string().contains("injected fault")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "device error: injected fault on segment allocation 2"
    );
    assert_eq!(source.counters().live_segments, 1);
    assert_eq!(core.memory_reserved(), 2 * MIB);
    let again = core.allocate(30 * MIB, &s).unwrap();
    drop((keep, again));
    assert_empty_cache_releases_everything(&core, &source);
}

#[test]
fn fault_injection_at_every_point_keeps_the_allocator_consistent() {
    for n in 1..12 {
        for fault in [Fault::OutOfMemory, Fault::DeviceError] {
            let (core, source) = sim_core(128 * MIB, "");
            let (_, s0) = stream(0);
            let (_, s1) = stream(1);
            source.fail_nth(n, fault);
            let mut live = Vec::new();
            for (i, size) in [
                512u64,
                3 * MIB,
                700_000,
                25 * MIB,
                12 * MIB,
                4096,
                40 * MIB,
                MIB,
            ]
            .iter()
            .cycle()
            .take(24)
            .enumerate()
            {
                let s = if i % 3 == 0 { &s1 } else { &s0 };
                match core.allocate(*size, s) {
                    Ok(p) => live.push(p),
                    Err(AllocError::Source(_) | AllocError::OutOfMemory(_)) => {}
                    Err(e) => panic!("unexpected {e:?}"),
                }
                if i % 4 == 3 {
                    live.remove(0);
                }
            }
            let reserved: u64 = core.snapshot().iter().map(|s| s.size).sum();
            assert_eq!(reserved, source.counters().used);
            assert_eq!(core.memory_reserved(), source.counters().used);
            drop(live);
            core.empty_cache();
            let held = source.counters();
            assert_eq!(
                (held.used, held.live_segments),
                (0, 0),
                "fault {fault:?} at {n}"
            );
            assert_eq!(core.memory_allocated(), 0);
        }
    }
}

#[test]
fn raw_interface() {
    let (core, _) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let key = xpu_alloc::StreamKey::new(0, 0);
    let a = core.raw_alloc(1000, key, || s.clone()).unwrap();
    assert_ne!(a, 0);
    assert_eq!(core.with_raw(a, |p| p.allocated_size()).unwrap(), 1024);
    assert_eq!(core.memory_allocated(), 1024);
    core.raw_delete(a).unwrap();
    assert_eq!(core.memory_allocated(), 0);
    let err = core.raw_delete(a).unwrap_err();
    assert_eq!(err, AllocError::InvalidDevicePointer { address: a });
    assert_eq!(err.to_string(), format!("invalid device pointer: {a:#x}"));
    assert!(core.raw_delete(0).is_ok());
    assert_eq!(core.raw_alloc(0, key, || s.clone()).unwrap(), 0);
}

#[test]
fn empty_cache_keeps_split_segments_with_live_blocks() {
    let (core, source) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let a = core.allocate(1000, &s).unwrap();
    let b = core.allocate(30 * MIB, &s).unwrap();
    drop(b);
    core.empty_cache();
    assert_eq!(source.counters().live_segments, 1);
    assert_eq!(core.memory_reserved(), 2 * MIB);
    drop(a);
    core.empty_cache();
    assert_eq!(source.counters().live_segments, 0);
}

/// Three cached whole blocks (12, 14, 16 MiB) then a 30 MiB request on a 100 MiB device.
fn gc_run(config: &str, fraction: Option<f64>) -> xpu_alloc::MemoryStats {
    let (core, _) = sim_core(100 * MIB, config);
    if let Some(f) = fraction {
        core.set_memory_fraction(f).unwrap();
    }
    let (_, s) = stream(0);
    cache_three_idle_segments(&core, &s);
    let _big = core.allocate(30 * MIB, &s).unwrap();
    core.memory_stats()
}

#[test]
fn garbage_collection_releases_old_cached_blocks_above_the_threshold() {
    // Reserved 42 MiB > 0.5 x 80 MiB allowed: the cached blocks (all of the mean age) go.
    let st = gc_run(
        "garbage_collection_threshold:0.5,release_policy:on_oom",
        Some(0.8),
    );
    assert_eq!(
        (st.num_device_free, st.reserved_bytes.all.current),
        (3, 30 * MIB as i64)
    );
    // No collection without a threshold, or without a fraction below 1.
    let st = gc_run("release_policy:on_oom", Some(0.8));
    assert_eq!(
        (st.num_device_free, st.reserved_bytes.all.current),
        (0, 72 * MIB as i64)
    );
    let st = gc_run(
        "garbage_collection_threshold:0.5,release_policy:on_oom",
        None,
    );
    assert_eq!(st.num_device_free, 0);
    // Under the threshold nothing is collected.
    let st = gc_run(
        "garbage_collection_threshold:0.9,release_policy:on_oom",
        Some(0.8),
    );
    assert_eq!(st.num_device_free, 0);
}
