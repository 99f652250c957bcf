//! Two devices: blocks are cached per device, and a block reused after a use on another
//! device's stream carries no marker of that use.

mod host_common;

use host_common::{
    assert_reused_only_after_the_gate, device_buffer, have_devices, pattern, read_back, TestResult,
};
use xpu_event::Gate;
use xpu_host::{HostAllocator, HostBytes, HostCopy, HostError};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

#[test]
fn reuse_after_another_device_carries_no_stale_marker() -> TestResult {
    if !have_devices(2, "reuse_after_another_device_carries_no_stale_marker") {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let s0 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 1)?;
    let dev1 = device_buffer(1, 4096)?;
    let gate1 = Gate::new(1)?;

    // A block of device 0 used by a copy on device 1's stream, freed while gated.
    let mut a = alloc.allocate_on(0, 4096)?;
    let want = pattern(1, 4096);
    a.copy_from_slice(&want);
    let a_addr = a.address();
    gate1.block(&s1)?;
    s1.copy_pinned(&dev1, 0, HostBytes::From(&a), 0, 4096)?;
    assert_eq!(a.recorded_streams(), vec![s1]);
    drop(a);
    // Kept: freed, it would go into this thread's cache and serve the allocation below.
    let other = alloc.allocate_on(0, 4096)?;
    assert_ne!(other.address(), a_addr);

    gate1.open()?;
    s1.synchronize()?;
    assert_eq!(read_back(&s1, &dev1, 0, 4096)?, want);

    // Reused for device 0: the set of the earlier use is gone.
    let b = alloc.allocate_on(0, 4096)?;
    assert_eq!(b.address(), a_addr);
    assert!(b.recorded_streams().is_empty());
    drop(other);
    let gate0 = Gate::new(0)?;
    gate0.block(&s0)?;
    b.record_stream(&s0)?;
    drop(b);
    // One marker, on device 0's stream only (no stale device-1 marker).
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.pending_markers), (1, 1));
    assert_reused_only_after_the_gate(&alloc, &gate0, &s0, 4096, a_addr)
}

#[test]
fn blocks_are_cached_per_device() -> Result<(), HostError> {
    if !have_devices(2, "blocks_are_cached_per_device") {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let a = alloc.allocate_on(0, 1 << 16)?;
    let a_addr = a.address();
    assert_eq!(a.device(), 0);
    drop(a);
    // Device 1 never takes device 0's cached block: its buffer belongs to device 0's context.
    let b = alloc.allocate_on(1, 1 << 16)?;
    assert_eq!(b.device(), 1);
    assert_ne!(b.address(), a_addr);
    assert_eq!(alloc.memory_stats().num_host_alloc, 2);
    // Each device's copies work from its own blocks.
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 1)?;
    let dev1 = device_buffer(1, 1 << 16)?;
    let mut b = b;
    b.copy_from_slice(&pattern(4, 1 << 16));
    s1.copy_pinned(&dev1, 0, HostBytes::From(&b), 0, 1 << 16)?;
    let mut back = alloc.allocate_on(1, 1 << 16)?;
    s1.copy_pinned(&dev1, 0, HostBytes::Into(&mut back), 0, 1 << 16)?;
    s1.synchronize()?;
    assert_eq!(&back[..], &b[..]);
    assert_eq!(alloc.allocate_on(0, 1 << 16)?.address(), a_addr);
    Ok(())
}
