//! Contexts are created lazily, on a device's first use. A single test in its own binary: no
//! other test of this process may touch a device before it looks.

mod common;

use xpu_device::backend::QueueOptions;

#[test]
fn contexts_are_created_on_first_use_only() {
    if !common::have_devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    // None of these needs a context.
    assert!(xpu_device::is_available());
    for i in 0..n {
        xpu_device::get_device_properties(i).unwrap();
        xpu_device::get_device_capability(i).unwrap();
        xpu_device::mem_get_info(i).unwrap();
        xpu_device::set_device(i).unwrap();
        drop(xpu_device::DeviceGuard::new(i).unwrap());
    }
    let all = xpu_device::devices().unwrap();
    assert!(
        all.iter().all(|d| !d.has_context()),
        "a context was created early"
    );

    let q = all[0]
        .create_queue(QueueOptions::default())
        .expect("queue on device 0");
    assert!(all[0].has_context());
    if n > 1 {
        assert!(
            !all[1].has_context(),
            "device 1 got a context from device 0's use"
        );
    }
    // One context per device, shared by every later use.
    let ctx = all[0].context().unwrap().as_raw();
    assert_eq!(all[0].context().unwrap().as_raw(), ctx);
    assert_eq!(q.context_raw().unwrap(), ctx);
    assert_eq!(q.device_raw().unwrap(), all[0].id().as_raw());
    assert!(q.is_in_order().unwrap());
    assert!(!q.has_profiling().unwrap());
}
