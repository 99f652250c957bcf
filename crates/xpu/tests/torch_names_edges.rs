//! Edges of the facade functions with torch.cuda's names (`default_stream`, `priority_range`,
//! `caching_allocator_alloc` / `_delete`, the pinned-host statistics after a thread exits).
//!
//! Review h43: what held in today's facade functions (`default_stream`, `priority_range`,
//! `caching_allocator_alloc` / `_delete`, the pinned-host statistics). PoCL 3.1 on the CPU.

mod common;

/// Zero bytes give the null pointer (deleted as a no-op, twice); another device's stream
/// allocates there and not on the current device; a double delete and a pointer of a device
/// past the count are "invalid device pointer"; `default_stream` of a bad index is
/// `InvalidDevice`, and on a thread whose current device is 1 it is device 1's default stream
/// and that thread's initial current stream.
#[test]
fn facade_allocation_and_default_stream_edges() {
    if !common::have_device("torch_names_edges") {
        return;
    }
    let zero = xpu::caching_allocator_alloc(0, None).unwrap();
    assert!(zero.is_null());
    xpu::caching_allocator_delete(zero).unwrap();
    xpu::caching_allocator_delete(zero).unwrap();
    assert!(xpu::caching_allocator_alloc(u64::MAX, None).is_err());
    assert!(xpu::default_stream(Some(99)).is_err());
    if xpu::device_count() < 2 {
        return;
    }
    let s1 = xpu::new_stream(Some(1), 0).unwrap();
    let (b0, b1) = (
        xpu::memory_allocated(Some(0)).unwrap(),
        xpu::memory_allocated(Some(1)).unwrap(),
    );
    let p = xpu::caching_allocator_alloc(4096, Some(&s1)).unwrap();
    assert_eq!(p.device(), 1);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), b0);
    assert!(xpu::memory_allocated(Some(1)).unwrap() >= b1 + 4096);
    xpu::caching_allocator_delete(p).unwrap();
    assert!(xpu::caching_allocator_delete(p).is_err());
    let forged = xpu::xpu_alloc::DevicePtr::new(7, p.address());
    assert!(xpu::caching_allocator_delete(forged).is_err());
    let (default, current) = std::thread::spawn(|| {
        xpu::set_device(1).unwrap();
        (
            xpu::default_stream(None).unwrap(),
            xpu::current_stream(None).unwrap(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(default.device(), 1);
    assert_eq!(default, current);
}

/// Pinned blocks allocated on a thread that exits (one freed there, one handed back): the
/// statistics count both, the exited thread's cached block goes back with `empty_host_cache`
/// once the other is dropped (current allocations, segments and reserved bytes 0), and the
/// resets zero the peaks and accumulations.
#[test]
fn host_statistics_after_a_thread_exits() {
    if !common::have_device("torch_names_edges") {
        return;
    }
    let kept = std::thread::spawn(|| {
        let p = xpu::xpu_alloc::host_allocate(5000).unwrap();
        let q = xpu::xpu_alloc::host_allocate(70000).unwrap();
        drop(p);
        q
    })
    .join()
    .unwrap();
    let live = xpu::host_memory_stats();
    assert_eq!(live.allocation.current, 1, "{live:?}");
    drop(kept);
    xpu::empty_host_cache();
    let after = xpu::host_memory_stats();
    assert_eq!(after.allocation.current, 0, "{after:?}");
    assert_eq!(after.segment.current, 0, "{after:?}");
    assert_eq!(after.reserved_bytes.current, 0, "{after:?}");
    xpu::reset_peak_host_memory_stats();
    xpu::reset_accumulated_host_memory_stats();
    let reset = xpu::host_memory_stats();
    assert_eq!(reset.allocated_bytes.peak, 0, "{reset:?}");
    assert_eq!(reset.num_host_alloc, 0, "{reset:?}");
}
