//! The facade's memory functions report and release what the allocators hold, whoever
//! created them: here only the lower layer (`xpu_alloc::allocate`) was used.
mod common;

#[test]
fn facade_memory_functions_see_allocators_created_by_lower_layers() {
    if !common::have_device("memory_lower_layers") {
        return;
    }
    let stream = xpu::xpu_stream::current_stream(0).unwrap();
    let p = xpu::xpu_alloc::allocate(1000, &stream).unwrap();
    // One small-pool segment, or the block itself where segments are not split.
    let segment = if xpu::xpu_alloc::device_splits_segments(0).unwrap() {
        2 << 20
    } else {
        1024
    };
    assert_eq!(xpu::memory_reserved(Some(0)).unwrap(), segment);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), 1024);
    assert_eq!(xpu::max_memory_reserved(Some(0)).unwrap(), segment);
    assert_eq!(
        xpu::memory_stats(Some(0))
            .unwrap()
            .reserved_bytes
            .all
            .current,
        i64::try_from(segment).unwrap()
    );
    assert_eq!(
        xpu::memory_stats_flat(Some(0)).unwrap()["allocation.all.current"],
        1
    );
    drop(p);
    assert_eq!(xpu::memory_reserved(Some(0)).unwrap(), segment, "cached");
    xpu::empty_cache();
    assert_eq!(
        xpu::xpu_alloc::memory_reserved(0).unwrap(),
        0,
        "the facade's empty_cache released the lower layer's cached segment"
    );
    assert_eq!(xpu::memory_reserved(Some(0)).unwrap(), 0);
}
