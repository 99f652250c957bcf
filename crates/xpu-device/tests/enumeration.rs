//! Discovery, properties and the capability map on the real OpenCL device.

mod common;

use xpu_device::{DeviceError, DeviceType};

const POCL: &str = "Portable Computing Language";

#[test]
fn devices_are_indexed_and_named() {
    if !common::have_devices(1) {
        return;
    }
    let all = xpu_device::devices().unwrap();
    assert_eq!(all.len(), xpu_device::device_count());
    assert!(xpu_device::is_available());
    for (i, d) in all.iter().enumerate() {
        assert_eq!(d.index(), i);
        assert!(std::ptr::eq(xpu_device::device(i).unwrap(), d));
        let p = d.properties();
        assert!(!p.name.is_empty(), "device {i} has an empty name");
        assert!(!p.vendor.is_empty());
        assert_eq!(xpu_device::get_device_name(i).unwrap(), p.name);
        assert_eq!(p.platform_name, d.platform().name().unwrap());
        assert_eq!(d.id().platform().unwrap(), d.platform());
        if p.platform_name == POCL {
            assert_eq!(p.device_type, DeviceType::Cpu, "PoCL exposes CPU devices");
        }
    }
}

#[test]
fn distinct_devices_have_distinct_ids() {
    if !common::have_devices(2) {
        return;
    }
    let all = xpu_device::devices().unwrap();
    assert_ne!(all[0].id(), all[1].id());
}

#[test]
fn properties_are_consistent() {
    if !common::have_devices(1) {
        return;
    }
    for i in 0..xpu_device::device_count() {
        let p = xpu_device::get_device_properties(i).unwrap();
        assert!(p.total_memory > 0, "total_memory");
        assert!(p.max_alloc_size > 0 && p.max_alloc_size <= p.total_memory);
        assert!(
            p.mem_base_addr_align.is_power_of_two(),
            "mem_base_addr_align {} is not a power of two",
            p.mem_base_addr_align
        );
        // OpenCL reports bits, at least the size of the largest built-in type (long16 = 128
        // bytes, int16 = 64 bytes in the embedded profile); the runtime converts to bytes.
        assert!(
            (64..=1 << 20).contains(&p.mem_base_addr_align),
            "{} bytes",
            p.mem_base_addr_align
        );
        assert!(p.max_compute_units > 0);
        assert!(p.max_work_group_size > 0);
        assert!(p.profiling_timer_resolution_ns > 0);
        assert!(
            p.opencl_version.starts_with("OpenCL "),
            "opencl_version {:?}",
            p.opencl_version
        );
        assert!(!p.driver_version.is_empty());
        assert!(["cpu", "gpu", "accelerator", "other"].contains(&p.device_type.as_str()));
        if p.extensions.iter().any(|e| e == "cl_khr_device_uuid") {
            let uuid = p
                .uuid
                .as_deref()
                .expect("uuid reported with cl_khr_device_uuid");
            assert_eq!(uuid.len(), 32);
            assert!(uuid.chars().all(|c| c.is_ascii_hexdigit()));
        } else {
            assert_eq!(p.uuid, None);
        }
        assert_eq!(p.has_fp16, p.extensions.iter().any(|e| e == "cl_khr_fp16"));
    }
}

#[test]
fn capability_map_holds_every_flag() {
    if !common::have_devices(1) {
        return;
    }
    let p = xpu_device::get_device_properties(0).unwrap();
    let caps = xpu_device::get_device_capability(0).unwrap();
    assert_eq!(caps["has_fp16"], p.has_fp16);
    assert_eq!(caps["has_fp64"], p.has_fp64);
    assert_eq!(caps["supports_svm"], p.supports_svm);
    assert_eq!(caps["has_priority_hints"], p.has_priority_hints);
    assert_eq!(caps["is_gpu"], p.device_type == DeviceType::Gpu);
    for e in &p.extensions {
        assert_eq!(caps.get(&format!("ext:{e}")), Some(&true), "{e}");
    }
    assert_eq!(caps.len(), 5 + p.extensions.len());
}

#[test]
fn out_of_range_index_is_invalid_device() {
    if !common::have_devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    let want = DeviceError::InvalidDevice { index: n, count: n };
    assert_eq!(xpu_device::get_device_properties(n).unwrap_err(), want);
    assert_eq!(xpu_device::get_device_name(n).unwrap_err(), want);
    assert_eq!(xpu_device::get_device_capability(n).unwrap_err(), want);
    assert_eq!(
        xpu_device::device(n).unwrap_err().to_string(),
        format!("device {n} is out of range: {n} device(s) available")
    );
}
