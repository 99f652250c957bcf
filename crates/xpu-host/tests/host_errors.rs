//! Zero-size and absurd-size requests, bad devices, and the process-wide functions.

mod host_common;

use host_common::have_devices;
use xpu_device::DeviceError;
use xpu_host::{
    host_allocate, host_allocate_on, host_empty_cache, host_memory_stats, HostAllocator, HostError,
    HostPtr, MAX_HOST_ALLOC,
};

#[test]
fn zero_size_is_empty_and_touches_nothing() -> Result<(), HostError> {
    // Needs no device at all.
    let alloc = HostAllocator::new();
    let mut p = alloc.allocate_on(0, 0)?;
    assert!(p.is_empty());
    assert_eq!((p.len(), p.allocated_size(), p.address()), (0, 0, 0));
    assert!(p.as_mut_slice().is_empty());
    assert!(p.pinned().is_none());
    assert!(p.recorded_streams().is_empty());
    drop(p);
    assert_eq!(alloc.memory_stats(), Default::default());
    let e = HostPtr::empty(3);
    assert_eq!(e.device(), 3);
    Ok(())
}

#[test]
fn absurd_sizes_are_typed_errors() -> Result<(), HostError> {
    if !have_devices(1, "absurd_sizes_are_typed_errors") {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let max = xpu_device::device(0)?
        .properties()
        .max_alloc_size
        .min(MAX_HOST_ALLOC);
    for size in [usize::MAX, (MAX_HOST_ALLOC + 1) as usize] {
        match alloc.allocate_on(0, size) {
            Err(HostError::TooLarge {
                device: 0,
                requested,
                rounded: 0,
                max: m,
            }) => assert_eq!((requested, m), (size as u64, max)),
            other => panic!("{size}: expected TooLarge, got {other:?}"),
        }
    }
    // Just above the device's largest allocation: rejected before any driver call.
    let above = max + 1;
    match alloc.allocate_on(0, above as usize) {
        Err(HostError::TooLarge { rounded, .. }) => assert_eq!(rounded, above.next_power_of_two()),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(alloc.memory_stats(), Default::default());
    Ok(())
}

#[test]
fn bad_device_is_a_typed_error() {
    let alloc = HostAllocator::new();
    let n = xpu_device::device_count();
    for d in [n, 1_000_000] {
        match alloc.allocate_on(d, 16) {
            Err(HostError::Device(DeviceError::InvalidDevice { index, count })) => {
                assert_eq!((index, count), (d, n));
            }
            // Without any OpenCL device, discovery itself reports why.
            Err(HostError::Device(_)) if n == 0 => {}
            other => panic!("device {d}: expected InvalidDevice, got {other:?}"),
        }
    }
}

#[test]
fn process_wide_functions_share_one_allocator() -> Result<(), HostError> {
    if !have_devices(1, "process_wide_functions_share_one_allocator") {
        return Ok(());
    }
    // The only test of this binary that uses the process-wide allocator.
    let before = host_memory_stats();
    let _g = xpu_device::DeviceGuard::new(0)?;
    let a = host_allocate(777)?;
    assert_eq!((a.device(), a.allocated_size()), (0, 1024));
    let a_addr = a.address();
    drop(a);
    let b = host_allocate_on(0, 1024)?;
    assert_eq!(b.address(), a_addr);
    let s = host_memory_stats();
    assert_eq!(s.allocation.allocated - before.allocation.allocated, 2);
    assert_eq!(s.num_host_alloc - before.num_host_alloc, 1);
    drop(b);
    host_empty_cache();
    assert_eq!(host_memory_stats().segment.current, 0);
    Ok(())
}
