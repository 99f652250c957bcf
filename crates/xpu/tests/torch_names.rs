//! The facade's functions with torch.cuda's names that forward to a lower layer
//! (`default_stream`, `priority_range`, `caching_allocator_alloc` / `_delete`, the pinned-host
//! allocator's statistics): each gives the lower layer's answer, on a real device.

mod common;

#[test]
fn default_stream_is_every_threads_initial_current_stream() {
    if !common::have_device("torch_names") {
        return;
    }
    let default = xpu::default_stream(None).unwrap();
    assert_eq!(default, xpu::default_stream(Some(0)).unwrap());
    let initial = std::thread::spawn(|| xpu::current_stream(None).unwrap())
        .join()
        .unwrap();
    assert_eq!(initial, default);
    assert_ne!(xpu::new_stream(None, 0).unwrap(), default);
    assert!(xpu::default_stream(Some(xpu::device_count())).is_err());
}

#[test]
fn priority_range_is_low_then_high() {
    assert_eq!(xpu::priority_range(), (1, -1));
}

#[test]
fn caching_allocator_alloc_counts_until_delete() {
    if !common::have_device("torch_names") {
        return;
    }
    let stream = xpu::new_stream(None, 0).unwrap();
    let before = xpu::memory_allocated(None).unwrap();
    let a = xpu::caching_allocator_alloc(1 << 20, Some(&stream)).unwrap();
    let b = xpu::caching_allocator_alloc(4096, None).unwrap();
    assert!(!a.is_null() && !b.is_null());
    assert!(xpu::memory_allocated(None).unwrap() >= before + (1 << 20) + 4096);
    xpu::caching_allocator_delete(a).unwrap();
    xpu::caching_allocator_delete(b).unwrap();
    assert_eq!(xpu::memory_allocated(None).unwrap(), before);
    // Freed twice: the allocator no longer knows it.
    assert!(xpu::caching_allocator_delete(a).is_err());
}

#[test]
fn host_statistics_follow_pinned_allocations() {
    if !common::have_device("torch_names") {
        return;
    }
    let ptr = xpu::xpu_alloc::host_allocate(3000).unwrap();
    let stats = xpu::host_memory_stats();
    assert!(stats.allocated_bytes.current >= 3000, "{stats:?}");
    drop(ptr);
    xpu::empty_host_cache();
    xpu::reset_peak_host_memory_stats();
    xpu::reset_accumulated_host_memory_stats();
    let stats = xpu::host_memory_stats();
    assert_eq!(stats.allocated_bytes.current, 0, "{stats:?}");
    assert_eq!(stats.allocated_bytes.peak, stats.allocated_bytes.current);
}
