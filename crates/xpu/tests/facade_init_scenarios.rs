//! Lazy initialization and fork safety of the facade, one fresh process per scenario: facade calls
//! from a queued call, a failed enumeration, fraction edges, devices and statistics across devices,
//! the facade in a bad fork.
//!
//! Review h84: probes of lazy initialization, fork safety and the facade that PASS on the
//! reviewed commit (1c5de16), kept as regression tests. Each runs in a fresh process (a
//! scenario): initialization happens once per process. PoCL on the CPU,
//! `POCL_DEVICES="pthread pthread"` (the two-device parts skip on one device).
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xpu_testing::bad_fork;

fn scenario(test: &str, body: fn()) {
    common::scenario_test(test, "h84", Duration::from_secs(60), "SCENARIO DONE", body);
}

/// Holds. Torch §6.3 step 1 (a queued call that triggers init on the initializing thread
/// returns at once) and §6.2 (a call queued while the queue runs runs too): a queued call that
/// calls initializing facade functions (`init`, `set_device`, `allocate`, fractions,
/// `mem_get_info`, `synchronize`) neither hangs nor fails; `is_initialized()` is false inside
/// it (nothing enumerated before) and true after; a call it queues runs once; the device it
/// set is the initializing thread's.
#[test]
fn facade_calls_from_a_queued_call_do_not_hang() {
    scenario("facade_calls_from_a_queued_call_do_not_hang", || {
        let nested = Arc::new(AtomicUsize::new(0));
        let n2 = Arc::clone(&nested);
        // No enumeration before the queue runs (an enumeration outside `lazy_init` makes
        // `is_initialized` true, a documented difference).
        xpu::lazy_call(move || {
            xpu::init()?;
            assert!(!xpu::is_initialized(), "not before the queue has run");
            let last = xpu::device_count() - 1;
            xpu::set_device(last)?;
            let a = xpu::allocate(100)?;
            assert_eq!(a.device(), last);
            xpu::set_per_process_memory_fraction(0.9, None)?;
            let (free, total) = xpu::mem_get_info(None)?;
            assert!(free <= total);
            xpu::synchronize(None)?;
            assert_eq!(xpu::memory_allocated(None)?, 512);
            let n3 = Arc::clone(&n2);
            xpu::lazy_call(move || {
                n3.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })?;
            Ok(())
        })
        .unwrap();
        assert_eq!(xpu::current_device().unwrap(), xpu::device_count() - 1);
        assert!(xpu::is_initialized());
        assert_eq!(nested.load(Ordering::SeqCst), 1);
        assert!((xpu::get_per_process_memory_fraction(None).unwrap() - 0.9).abs() < 1e-12);
        println!("SCENARIO DONE");
    });
}

/// Holds. Torch §6.3: a failed native init marks nothing initialized and is raised again on
/// the next call. With `XPU_DEVICE_TYPE=banana` (a failed enumeration): every initializing
/// call fails with the same typed `Lazy(InitFailed)` error naming the variable,
/// `is_initialized()` stays false, `device_count()` is 0, the statistics answer 0 (also for
/// an index no device has, as torch's before init), and a child forked now is not a bad fork
/// (the enumeration's outcome is kept, the child never calls the driver).
#[test]
fn a_failed_enumeration_fails_every_later_init_the_same_way() {
    const TEST: &str = "a_failed_enumeration_fails_every_later_init_the_same_way";
    if common::scenario().is_some() {
        std::env::set_var("XPU_DEVICE_TYPE", "banana");
        assert_eq!(xpu::device_count(), 0);
        let first = xpu::init().unwrap_err().to_string();
        assert!(first.contains("XPU_DEVICE_TYPE"), "{first}");
        for r in [
            xpu::init(),
            xpu::current_device().map(drop),
            xpu::set_device(0),
            xpu::mem_get_info(None).map(drop),
            xpu::set_per_process_memory_fraction(0.5, None),
        ] {
            let e = r.unwrap_err();
            assert!(
                matches!(
                    e,
                    xpu::Error::Lazy(xpu::xpu_lazy::LazyError::InitFailed { .. })
                ),
                "{e:?}"
            );
            assert_eq!(e.to_string(), first);
            assert!(!e.is_bad_fork());
        }
        assert!(!xpu::is_initialized());
        assert_eq!(xpu::memory_allocated(Some(3)).unwrap(), 0);
        assert!(xpu::memory_stats_flat(None).unwrap().is_empty());
        let report = xpu::xpu_device::fork::fork_report(Duration::from_secs(10)).unwrap();
        assert!(!report.in_bad_fork, "{report:?}");
        println!("SCENARIO DONE");
        return;
    }
    if !common::have_device(TEST) {
        return;
    }
    let (code, out) = common::run_scenario(TEST, "banana", Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("SCENARIO DONE"), "{out}");
}

/// Holds. Torch §4.12 (XPU: fraction within (0, 1]): a subnormal or tiny fraction is
/// accepted and read back; an allocation then is a typed out-of-memory error (no panic, no
/// overflow in `fraction × total`); -0.0 is refused; 1.0 lifts the limit again.
#[test]
fn fraction_edges_are_typed() {
    scenario("fraction_edges_are_typed", || {
        for tiny in [5e-324, f64::MIN_POSITIVE, 1e-12] {
            xpu::set_per_process_memory_fraction(tiny, Some(0)).unwrap();
            assert_eq!(
                xpu::get_per_process_memory_fraction(Some(0))
                    .unwrap()
                    .to_bits(),
                tiny.to_bits()
            );
            let e = xpu::allocate(1).unwrap_err();
            assert!(e.is_out_of_memory(), "{e}");
        }
        assert!(xpu::set_per_process_memory_fraction(-0.0, Some(0)).is_err());
        xpu::set_per_process_memory_fraction(1.0, Some(0)).unwrap();
        assert!(xpu::allocate(1).is_ok());
        println!("SCENARIO DONE");
    });
}

/// Holds. Torch §1.2 (current device per thread, 0 in a new thread), §2.5 (a stream context
/// restores the device), §4.10 (`empty_cache` releases every device's cache), §4.13
/// (`reset_peak_memory_stats`: peak = current; 122 flat keys: nine arrays × 12, five
/// counters, two oversize stats × 4, `max_split_size`).
#[test]
fn devices_streams_and_statistics_across_devices() {
    scenario("devices_streams_and_statistics_across_devices", || {
        let n = xpu::device_count();
        let last = n - 1;
        let b = xpu::allocate(3 << 20).unwrap();
        drop(b);
        let c = xpu::allocate(1 << 20).unwrap();
        xpu::reset_peak_memory_stats(None).unwrap();
        assert_eq!(
            xpu::max_memory_allocated(None).unwrap(),
            xpu::memory_allocated(None).unwrap()
        );
        assert_eq!(
            xpu::max_memory_reserved(None).unwrap(),
            xpu::memory_reserved(None).unwrap()
        );
        drop(c);
        assert_eq!(xpu::memory_stats_flat(None).unwrap().len(), 122);
        {
            let _g = xpu::stream(xpu::new_stream(Some(last), 0).unwrap()).unwrap();
            assert_eq!(xpu::current_device().unwrap(), last);
        }
        assert_eq!(xpu::current_device().unwrap(), 0, "restored");
        xpu::set_device(last).unwrap();
        let other = std::thread::spawn(|| xpu::current_device().unwrap())
            .join()
            .unwrap();
        assert_eq!(other, 0, "a new thread starts at device 0");
        if n > 1 {
            drop(xpu::allocate(1000).unwrap());
            assert!(xpu::memory_reserved(Some(last)).unwrap() > 0);
            xpu::set_device(0).unwrap();
            xpu::empty_cache();
            assert_eq!(xpu::memory_reserved(Some(last)).unwrap(), 0);
            let (free, total) = xpu::mem_get_info(Some(last)).unwrap();
            assert_eq!(free, total, "nothing reserved on it any more");
        }
        println!("SCENARIO DONE");
    });
}

/// Holds. Torch §6.5: in a forked child of an initialized parent every device use raises.
/// The facade functions that `bad_fork.rs` does not list refuse with a bad-fork error at once
/// there too (simulated bad fork, the project's helper), the counts answer the parent's, and
/// the statistics functions without a result answer empty.
#[test]
fn the_rest_of_the_facade_refuses_in_a_bad_fork() {
    bad_fork::bad_fork_test("h84-facade", || {
        let n = xpu::device_count();
        let s = xpu::new_stream(None, 0).unwrap();
        let pool = xpu::mem_pool(None).unwrap();
        drop(xpu::allocate(1000).unwrap());
        xpu::xpu_device::fork::simulate_bad_fork();
        let calls: Vec<(&str, xpu::Result<()>)> = vec![
            ("init", xpu::init()),
            ("device", xpu::device(0).map(drop)),
            ("device_of", xpu::device_of(&s).map(drop)),
            ("get_device_name", xpu::get_device_name(None).map(drop)),
            (
                "get_device_capability",
                xpu::get_device_capability(None).map(drop),
            ),
            ("new_stream", xpu::new_stream(None, 0).map(drop)),
            ("default_stream", xpu::default_stream(None).map(drop)),
            ("stream", xpu::stream(s).map(drop)),
            ("mem_get_info", xpu::mem_get_info(None).map(drop)),
            (
                "set_per_process_memory_fraction",
                xpu::set_per_process_memory_fraction(0.5, None),
            ),
            (
                "get_per_process_memory_fraction",
                xpu::get_per_process_memory_fraction(None).map(drop),
            ),
            ("mem_pool", xpu::mem_pool(None).map(drop)),
            ("use_mem_pool", xpu::use_mem_pool(&pool).map(drop)),
            ("memory_summary", xpu::memory_summary(None, true).map(drop)),
            ("memory_stats_flat", xpu::memory_stats_flat(None).map(drop)),
            (
                "max_memory_allocated",
                xpu::max_memory_allocated(None).map(drop),
            ),
            (
                "reset_peak_memory_stats",
                xpu::reset_peak_memory_stats(None),
            ),
            (
                "reset_accumulated_memory_stats",
                xpu::reset_accumulated_memory_stats(None),
            ),
            (
                "caching_allocator_alloc",
                xpu::caching_allocator_alloc(16, None).map(drop),
            ),
        ];
        for (name, r) in calls {
            let e = r.expect_err(name);
            println!("{name} = Err({e:?})");
            assert!(e.is_bad_fork(), "{name}: {e:?}");
        }
        assert_eq!(xpu::device_count(), n, "the parent's count");
        assert!(xpu::is_available());
        assert!(!xpu::is_initialized());
        assert!(xpu::memory_snapshot().segments.is_empty());
        assert_eq!(xpu::host_memory_stats(), Default::default());
        xpu::empty_cache();
        xpu::empty_host_cache();
        drop(pool); // leaked in a bad fork
        bad_fork::done();
    });
}
