//! Memory functions before initialization answer zero / empty and initialize nothing; after an
//! allocation they report exact figures.
mod common;

#[test]
fn memory_functions_are_safe_before_init() {
    assert_eq!(xpu::memory_allocated(None).unwrap(), 0);
    assert_eq!(xpu::max_memory_reserved(None).unwrap(), 0);
    assert!(xpu::memory_stats_flat(None).unwrap().is_empty());
    assert_eq!(
        xpu::memory_stats(None).unwrap().allocated_bytes.all.current,
        0
    );
    xpu::empty_cache();
    xpu::reset_peak_memory_stats(None).unwrap();
    assert!(xpu::memory_snapshot().segments.is_empty());
    assert!(
        !xpu::is_initialized(),
        "none of these initialize the runtime"
    );
    if !common::have_device("memory_before_init") {
        return;
    }
    let p = xpu::allocate(1000).unwrap();
    assert!(xpu::is_initialized());
    assert_eq!(
        xpu::memory_allocated(None).unwrap(),
        1024,
        "rounded to 512-byte blocks"
    );
    let segment = if xpu::xpu_alloc::device_splits_segments(0).unwrap() {
        2 << 20
    } else {
        1024
    };
    assert_eq!(
        xpu::memory_reserved(None).unwrap(),
        segment,
        "one small-pool segment, or the block itself where segments are not split"
    );
    let flat = xpu::memory_stats_flat(None).unwrap();
    assert_eq!(flat["allocation.all.current"], 1);
    assert_eq!(flat["requested_bytes.all.current"], 1000);
    drop(p);
    assert_eq!(xpu::memory_allocated(None).unwrap(), 0);
    assert_eq!(
        xpu::memory_reserved(None).unwrap(),
        segment,
        "cached, not released"
    );
    xpu::empty_cache();
    assert_eq!(xpu::memory_reserved(None).unwrap(), 0);
    assert_eq!(xpu::max_memory_reserved(None).unwrap(), segment);
    let err = xpu::set_per_process_memory_fraction(1.5, None).unwrap_err();
    assert!(err.to_string().contains("1.5"), "{err}");
}
