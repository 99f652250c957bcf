//! Facade calls with huge device indices and sizes are errors (no panic), and facade calls from a
//! thread-local destructor at thread exit work.
//!
//! Review h22: facade probes that PASS on the reviewed commit (kept as regression tests).
mod common;

use std::time::Duration;

/// Passing. Out-of-range device indices (`usize::MAX`, the count itself) and huge sizes are
/// typed errors in every facade function that takes them, never a panic; a huge priority
/// clamps.
#[test]
fn huge_indices_and_sizes_are_errors() {
    if !common::have_device("huge_arguments_and_thread_exit") {
        return;
    }
    let n = xpu::device_count();
    for bad in [n, usize::MAX] {
        let msg = xpu::set_device(bad).unwrap_err().to_string();
        assert!(msg.contains("out of range"), "{msg}");
        assert!(xpu::device(bad).is_err());
        assert!(xpu::device_of(&bad).is_err());
        assert!(xpu::get_device_name(Some(bad)).is_err());
        assert!(xpu::get_device_capability(Some(bad)).is_err());
        assert!(xpu::get_device_properties(Some(bad)).is_err());
        assert!(xpu::synchronize(Some(bad)).is_err());
        assert!(xpu::current_stream(Some(bad)).is_err());
        assert!(xpu::new_stream(Some(bad), 0).is_err());
        assert!(xpu::mem_get_info(Some(bad)).is_err());
        assert!(xpu::memory_stats(Some(bad)).is_err());
        assert!(xpu::memory_stats_flat(Some(bad)).is_err());
        assert!(xpu::memory_summary(Some(bad), true).is_err());
        assert!(xpu::memory_allocated(Some(bad)).is_err());
        assert!(xpu::max_memory_reserved(Some(bad)).is_err());
        assert!(xpu::reset_peak_memory_stats(Some(bad)).is_err());
        assert!(xpu::reset_accumulated_memory_stats(Some(bad)).is_err());
        assert!(xpu::set_per_process_memory_fraction(0.5, Some(bad)).is_err());
        assert!(xpu::mem_pool(Some(bad)).is_err());
    }
    assert_eq!(xpu::current_device().unwrap(), 0, "nothing changed");
    for p in [i32::MIN, i32::MAX] {
        assert!(xpu::new_stream(None, p).is_ok());
    }
    let before = xpu::memory_allocated(None).unwrap();
    for size in [u64::MAX, u64::MAX / 2, 1 << 62] {
        assert!(xpu::allocate(size).is_err(), "{size}");
    }
    assert_eq!(
        xpu::memory_allocated(None).unwrap(),
        before,
        "nothing leaked"
    );
}

thread_local! {
    static AT_EXIT: CallsAtThreadExit = const { CallsAtThreadExit };
}

/// Calls facade functions from its `Drop`, run while the thread's other thread-locals
/// (current device and stream, the allocator's per-thread cache) are being torn down.
struct CallsAtThreadExit;

impl Drop for CallsAtThreadExit {
    fn drop(&mut self) {
        let results = [
            xpu::current_device().map(|_| ()),
            xpu::set_device(0),
            xpu::current_stream(None).map(|_| ()),
            xpu::synchronize(None),
            xpu::allocate(1000).map(drop),
            xpu::memory_stats(None).map(|_| ()),
            xpu::reset_peak_memory_stats(None),
            xpu::new_stream(None, 0).map(|_| ()),
        ];
        xpu::empty_cache();
        let _ = xpu::memory_snapshot();
        println!("thread exit calls: {results:?}");
    }
}

/// Passing. Facade calls made from a thread-local's `Drop` at thread exit (after the thread
/// allocated, so its allocator cache is torn down too) neither panic nor abort.
#[test]
fn facade_calls_from_a_thread_local_destructor() {
    common::scenario_test(
        "facade_calls_from_a_thread_local_destructor",
        "tls",
        Duration::from_secs(60),
        "thread exit done",
        || {
            std::thread::spawn(|| {
                // Registered first, so destroyed after the thread-locals the calls below
                // create (destructors run in reverse order of registration).
                AT_EXIT.with(|_| {});
                let p = xpu::allocate(4096).unwrap();
                drop(p);
                let _ = xpu::new_stream(None, 0).unwrap();
                let _ = xpu::memory_stats(None).unwrap();
            })
            .join()
            .unwrap();
            let stats = xpu::memory_stats(None).unwrap();
            assert_eq!(stats.allocated_bytes.all.current, 0, "nothing leaked");
            println!("thread exit done");
        },
    );
}
