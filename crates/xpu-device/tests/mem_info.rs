//! `mem_get_info` and the reserved-bytes bookkeeping. Only one test touches the counters, so
//! tests of this binary running in parallel never race on them.

mod common;

use xpu_device::{mem_get_info, note_reserved, reserved_by_runtime, DeviceError};

#[test]
fn free_is_total_minus_reserved() {
    if !common::have_devices(1) {
        return;
    }
    let total = xpu_device::get_device_properties(0).unwrap().total_memory;
    assert_eq!(mem_get_info(0).unwrap(), (total, total));
    assert_eq!(reserved_by_runtime(0), 0);

    note_reserved(0, 3 << 20);
    assert_eq!(reserved_by_runtime(0), 3 << 20);
    assert_eq!(mem_get_info(0).unwrap(), (total - (3 << 20), total));
    if xpu_device::device_count() > 1 {
        // Per device: device 1 is not affected.
        assert_eq!(reserved_by_runtime(1), 0);
        let t1 = xpu_device::get_device_properties(1).unwrap().total_memory;
        assert_eq!(mem_get_info(1).unwrap(), (t1, t1));
    }
    note_reserved(0, -(1 << 20));
    assert_eq!(mem_get_info(0).unwrap().0, total - (2 << 20));

    // More reserved than the device has: free saturates at 0.
    note_reserved(0, total as i64);
    assert_eq!(mem_get_info(0).unwrap(), (0, total));
    note_reserved(0, -(total as i64) - (2 << 20));
    assert_eq!(mem_get_info(0).unwrap(), (total, total));

    // Unknown devices are ignored.
    let n = xpu_device::device_count();
    note_reserved(n, 1 << 20);
    assert_eq!(reserved_by_runtime(n), 0);
}

#[test]
fn mem_get_info_rejects_a_bad_index() {
    if !common::have_devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    assert_eq!(
        mem_get_info(n + 3).unwrap_err(),
        DeviceError::InvalidDevice {
            index: n + 3,
            count: n
        }
    );
}
