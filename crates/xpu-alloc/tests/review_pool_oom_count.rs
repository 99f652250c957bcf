//! `num_ooms` counts the out-of-memory errors returned to the caller (as PyTorch's, bumped
//! where `malloc` raises): a private pool's allocation that fails once, then succeeds after
//! the default pool's cache is released (`MemPool::allocate`'s retry, torch's
//! `release_cached_blocks`), is no out-of-memory error. Runs in a child process: it sets
//! device 0's memory fraction.

mod common;

use std::time::Duration;

use xpu_alloc::MemPool;

use common::{fresh_stream, MIB};

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

/// A fresh stream of device 0 (leaked: the scenario's child process ends with it), once
/// [`limit_to_64_mib_above_reserved`] ran; and what device 0 reserved then.
fn limited_stream() -> (xpu_stream::Stream, u64) {
    let s = fresh_stream(0).leak();
    (s, limit_to_64_mib_above_reserved())
}

#[test]
fn a_pool_allocation_served_after_releasing_the_default_cache_counts_no_oom() {
    xpu_testing::scenario_test(
        "a_pool_allocation_served_after_releasing_the_default_cache_counts_no_oom",
        "pool-oom-count",
        Duration::from_secs(60),
        "done",
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
    xpu_testing::scenario_test(
        "a_default_pool_allocation_served_after_pool_releases_counts_no_oom",
        "device-oom-count",
        Duration::from_secs(60),
        "done",
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
    xpu_testing::scenario_test(
        "raw_alloc_is_served_after_pending_pool_releases",
        "raw-after-pool-release",
        Duration::from_secs(60),
        "done",
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
    xpu_testing::scenario_test(
        "the_oom_report_of_a_device_allocation_counts_private_pools",
        "oom-report-pools",
        Duration::from_secs(60),
        "done",
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
