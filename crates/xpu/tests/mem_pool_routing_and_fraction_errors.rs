//! Private pools through the facade follow the current device (routings to two devices' pools), and
//! bad memory fractions are errors that leave the fraction as it was.
//!
//! Review h20: facade probes of private pools that PASS on the reviewed commit (kept as
//! regression tests). They compare only figures of their own pools (the facade's tests share
//! process-global state under `cargo test`; under nextest each runs alone), so they hold
//! under both.
mod common;

/// Passing. Routings to pools of two devices nest independently: under a device guard,
/// `xpu::allocate` (current device, current stream) takes its block from the pool of the
/// current device; leaving the guard goes back to device 0's pool; a pool of device 1 counts
/// in device 1's statistics only.
#[test]
fn routings_to_two_devices_pools_follow_the_current_device() {
    if !common::have_device("mem_pool_routing_and_fraction_errors") || xpu::device_count() < 2 {
        return;
    }
    let p0 = xpu::mem_pool(Some(0)).unwrap();
    let p1 = xpu::mem_pool(Some(1)).unwrap();
    let _g0 = xpu::use_mem_pool(&p0).unwrap();
    let _g1 = xpu::use_mem_pool(&p1).unwrap();
    let a = xpu::allocate(1000).unwrap();
    assert!(p0.owns(&a), "device 0 is current");
    let b = {
        let _d = xpu::device(1).unwrap();
        xpu::allocate(1000).unwrap()
    };
    assert!(p1.owns(&b), "device 1 was current");
    assert_eq!(b.device(), 1);
    let c = xpu::allocate(1000).unwrap();
    assert!(p0.owns(&c), "back on device 0");
    assert_eq!(p0.memory_allocated(), 2048);
    assert_eq!(p1.memory_allocated(), 1024);
    assert!(xpu::memory_allocated(Some(1)).unwrap() >= 1024);
    // Peaks reset on device 1 only reach device 1's pools.
    drop(b);
    xpu::reset_peak_memory_stats(Some(1)).unwrap();
    assert_eq!(p1.memory_stats().allocated_bytes.all.peak, 0);
    assert_eq!(p0.memory_stats().allocated_bytes.all.peak, 2048);
}

/// Passing. `set_per_process_memory_fraction` refuses NaN, 0 and values above 1 with an
/// error (no panic), and leaves the fraction as it was.
#[test]
fn bad_fractions_are_errors() {
    if !common::have_device("mem_pool_routing_and_fraction_errors") {
        return;
    }
    let before = xpu::xpu_alloc::memory_fraction(0).unwrap();
    for bad in [f64::NAN, 0.0, -0.5, 1.5, f64::INFINITY] {
        assert!(xpu::set_per_process_memory_fraction(bad, Some(0)).is_err());
    }
    assert!(xpu::set_per_process_memory_fraction(0.5, Some(99)).is_err());
    assert_eq!(
        xpu::xpu_alloc::memory_fraction(0).unwrap().to_bits(),
        before.to_bits()
    );
}
