//! `except torch.OutOfMemoryError:` has one check here, [`xpu::Error::is_out_of_memory`],
//! whatever layer the failure comes through (review h27's note: an out-of-memory error came in
//! several shapes). Own test binary: it sets the device's memory fraction.

mod common;

/// An allocation over the memory fraction (the allocator's report), a typed buffer that cannot
/// fit (through typed memory), a request beyond the largest allocation and a driver's
/// allocation-failure code are out of memory; a bad device index or a bad fraction are not.
#[test]
fn is_out_of_memory_answers_for_every_shape_of_an_oom() {
    if !common::have_device("is_out_of_memory_answers_for_every_shape_of_an_oom") {
        return;
    }
    xpu::set_per_process_memory_fraction(0.001, Some(0)).unwrap();
    let (_, total) = xpu::mem_get_info(Some(0)).unwrap();
    // Far over the fraction (a thousandth of the device), far under the largest allocation.
    let over = (total / 250).min(1 << 30);
    let err = xpu::allocate(over).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    let s = xpu::current_stream(Some(0)).unwrap();
    let elements = usize::try_from(over / 4).unwrap();
    let err: xpu::Error = xpu::DeviceBuffer::<f32>::new(elements, &s)
        .unwrap_err()
        .into();
    assert!(err.is_out_of_memory(), "{err}");
    // A request beyond the device's largest allocation is out of memory too, as torch
    // reports one beyond the device's capacity (a smaller one may fit).
    let err = xpu::allocate(u64::MAX / 2).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    let err: xpu::Error = xpu::xpu_device::ClError::new("clCreateBuffer", -4).into();
    assert!(err.is_out_of_memory(), "{err}");
    let err = xpu::set_per_process_memory_fraction(2.0, Some(0)).unwrap_err();
    assert!(!err.is_out_of_memory(), "{err}");
    let err = xpu::memory_allocated(Some(xpu::device_count())).unwrap_err();
    assert!(!err.is_out_of_memory(), "{err}");
    xpu::set_per_process_memory_fraction(1.0, Some(0)).unwrap();
}
