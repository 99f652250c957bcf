//! The out-of-memory sequence, its error, never-fitting requests, the memory fraction and
//! fault injection on segment allocation; `num_ooms` counts only the errors returned (an
//! attempt served after a release and retry is none), private pools included.

mod common;

use std::time::Duration;

use xpu_alloc::{AllocError, Fault, MemPool};

use common::{
    assert_empty_cache_releases_everything, cache_three_idle_segments, fresh_stream, sim_core,
    stream, GIB, MIB,
};

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

// `num_ooms` counts the out-of-memory errors returned to the caller (as PyTorch's, bumped
// where `malloc` raises): a private pool's allocation that fails once, then succeeds after
// the default pool's cache is released (`MemPool::allocate`'s retry, torch's
// `release_cached_blocks`), is no out-of-memory error. Runs in a child process: it sets
// device 0's memory fraction.

/// Sets device 0's memory fraction to leave room for 64 MiB more than it reserves now;
/// returns what it reserves now.
fn limit_to_64_mib_above_reserved() -> u64 {
    let (_, total) = xpu_alloc::mem_get_info(0).unwrap();
    let base = xpu_alloc::memory_reserved(0).unwrap();
    #[allow(clippy::cast_precision_loss)]
    let fraction = ((base + 64 * MIB) as f64 + 0.5) / total as f64;
    xpu_alloc::set_memory_fraction(fraction, 0).unwrap();
    base
}

/// Runs `body` as scenario `scenario` of test `test` in a child process (this test binary
/// re-run, 60 s at most), which must print `done` at its end.
fn in_child(test: &str, scenario: &str, body: fn()) {
    xpu_testing::scenario_test(test, scenario, Duration::from_secs(60), "done", body);
}

/// A fresh stream of device 0 (leaked: the scenario's child process ends with it), once
/// [`limit_to_64_mib_above_reserved`] ran; and what device 0 reserved then.
fn limited_stream() -> (xpu_stream::Stream, u64) {
    let s = fresh_stream(0).leak();
    (s, limit_to_64_mib_above_reserved())
}

#[test]
fn a_pool_allocation_served_after_releasing_the_default_cache_counts_no_oom() {
    in_child(
        "a_pool_allocation_served_after_releasing_the_default_cache_counts_no_oom",
        "pool-oom-count",
        || {
            let (s, base) = limited_stream();
            // 40 MiB cached by the default pool.
            drop(xpu_alloc::allocate(40 * MIB, &s).unwrap());
            assert_eq!(xpu_alloc::memory_reserved(0).unwrap(), base + 40 * MIB);
            let pool = MemPool::new(0).unwrap();
            // 40 MiB more would pass the fraction: the default cache is released, then the
            // pool's segment fits.
            let block = pool.allocate(40 * MIB, &s).unwrap();
            assert_eq!(block.size(), 40 * MIB);
            let stats = xpu_alloc::memory_stats(0).unwrap();
            assert_eq!(stats.num_ooms, 0, "no out-of-memory error was returned");
            assert_eq!(pool.memory_stats().num_ooms, 0);
            // A real failure is counted once.
            let err = pool.allocate(60 * MIB, &s).unwrap_err();
            assert!(
                matches!(err, xpu_alloc::AllocError::MemoryFractionExceeded(_)),
                "{err}"
            );
            assert_eq!(xpu_alloc::memory_stats(0).unwrap().num_ooms, 1);
            println!("done");
        },
    );
}

/// Device 0 limited to 64 MiB above what it reserves now, with a dropped pool's 40 MiB
/// segment whose release is pending (held by a gate on the pool's stream); `allocate`
/// 40 MiB then fails once out of memory, and the gate opens once the retry waits for the
/// pending releases (`pool_release_waiters`). Recording of the device allocator's history
/// is on. Returns what `allocate` returned and the stream to allocate on.
fn with_a_pending_pool_release<T: Send + 'static>(
    allocate: impl FnOnce(&xpu_stream::Stream) -> T,
) -> (T, xpu_stream::ExternalStream) {
    let (ext_s, ext_g) = (fresh_stream(0), fresh_stream(0));
    let (s, g) = (ext_s.stream(), ext_g.stream());
    let base = limit_to_64_mib_above_reserved();
    let pool = MemPool::new(0).unwrap();
    let held = pool.allocate(40 * MIB, &g).unwrap();
    let gate = std::sync::Arc::new(xpu_event::Gate::new(0).unwrap());
    gate.block(&g).unwrap();
    drop(pool);
    drop(held); // the pool's segment is released once g's work (held back) is done
    assert_eq!(xpu_alloc::memory_reserved(0).unwrap(), base + 40 * MIB);
    let core = xpu_alloc::device_allocator(0).unwrap().core().clone();
    core.memory_history().record_memory_history(true, 1000);
    let opener = {
        let gate = std::sync::Arc::clone(&gate);
        std::thread::spawn(move || {
            // The failed first attempt leaves no trace (no `num_ooms`, no `oom` entry): its
            // retry waiting for the releases is the sign.
            while xpu_alloc::pool_release_waiters() == 0 {
                std::thread::yield_now();
            }
            gate.open().unwrap();
        })
    };
    let result = allocate(&s);
    opener.join().unwrap();
    (result, ext_s)
}

/// The device allocator's retry: its first attempt fails out of memory while a dropped
/// pool's segment release is pending, it waits for the releases and the retry succeeds: no
/// out-of-memory error was returned, none is counted.
#[test]
fn a_default_pool_allocation_served_after_pool_releases_counts_no_oom() {
    in_child(
        "a_default_pool_allocation_served_after_pool_releases_counts_no_oom",
        "device-oom-count",
        || {
            let (block, s) =
                with_a_pending_pool_release(|s| xpu_alloc::allocate(40 * MIB, s).unwrap());
            assert_eq!(block.size(), 40 * MIB);
            let stats = xpu_alloc::memory_stats(0).unwrap();
            assert_eq!(stats.num_ooms, 0, "no out-of-memory error was returned");
            let ooms = || {
                let core = xpu_alloc::device_allocator(0).unwrap().core().clone();
                let entries = core.memory_history().entries();
                entries
                    .into_iter()
                    .filter(|e| e.action == xpu_alloc::TraceAction::Oom)
                    .count()
            };
            assert_eq!(
                ooms(),
                0,
                "no oom history entry for an attempt the retry served"
            );
            // A real failure is counted once, and traced once.
            let err = xpu_alloc::allocate(60 * MIB, &s.stream()).unwrap_err();
            assert!(
                matches!(err, xpu_alloc::AllocError::MemoryFractionExceeded(_)),
                "{err}"
            );
            assert_eq!(xpu_alloc::memory_stats(0).unwrap().num_ooms, 1);
            assert_eq!(ooms(), 1, "the error returned is traced");
            println!("done");
        },
    );
}

/// `raw_alloc` retries as `allocate` does: served once the pending pool releases are done.
#[test]
fn raw_alloc_is_served_after_pending_pool_releases() {
    in_child(
        "raw_alloc_is_served_after_pending_pool_releases",
        "raw-after-pool-release",
        || {
            let (ptr, _s) =
                with_a_pending_pool_release(|s| xpu_alloc::raw_alloc_with_stream(40 * MIB, s));
            let ptr = ptr.expect("served after the pool's release");
            assert_eq!(xpu_alloc::memory_stats(0).unwrap().num_ooms, 0);
            xpu_alloc::raw_delete(ptr).unwrap();
            println!("done");
        },
    );
}

/// The out-of-memory report of a device allocation gives the device's figures, private pools
/// included (as torch's message, whose statistics count private pools): a default-pool
/// request refused by the memory fraction because a private pool reserves 40 MiB reports
/// those 40 MiB, not the default pool's 0.
#[test]
fn the_oom_report_of_a_device_allocation_counts_private_pools() {
    in_child(
        "the_oom_report_of_a_device_allocation_counts_private_pools",
        "oom-report-pools",
        || {
            let (s, _) = limited_stream();
            let pool = MemPool::new(0).unwrap();
            let live = pool.allocate(40 * MIB, &s).unwrap();
            let device = xpu_alloc::memory_stats(0).unwrap();
            let err = xpu_alloc::allocate(40 * MIB, &s).unwrap_err();
            let xpu_alloc::AllocError::MemoryFractionExceeded(report) = err else {
                panic!("{err}");
            };
            assert_eq!(
                (report.allocated, report.reserved),
                (
                    u64::try_from(device.allocated_bytes.all.current).unwrap(),
                    u64::try_from(device.reserved_bytes.all.current).unwrap()
                ),
                "the device's figures: {report}"
            );
            assert!(report.reserved >= 40 * MIB, "{report}");
            // The pool's own report too.
            let err = pool.allocate(40 * MIB, &s).unwrap_err();
            let xpu_alloc::AllocError::MemoryFractionExceeded(report) = err else {
                panic!("{err}");
            };
            assert!(
                report.reserved >= 40 * MIB && report.allocated >= 40 * MIB,
                "{report}"
            );
            drop(live);
            println!("done");
        },
    );
}
