//! `xpu info` and `xpu demo` as a user runs them: the real binary on the real OpenCL runtime.

mod common;

use std::process::Output;

fn xpu(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::xpu_env(args, env)
}

/// The environment of a process that finds no OpenCL implementation.
const NO_RUNTIME: &[(&str, &str)] = &[
    ("OCL_ICD_VENDORS", "/nonexistent-dir"),
    ("OCL_ICD_FILENAMES", ""),
];

#[test]
fn info_json_lists_every_device() {
    if !xpu_testing::have_device("info_json_lists_every_device") {
        return;
    }
    let out = xpu(&["info", "--json"], &[]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), xpu_device::device_count());
    assert!(v.get("error").is_none());
    for (i, d) in devices.iter().enumerate() {
        let p = xpu_device::get_device_properties(i).unwrap();
        assert_eq!(d["index"], i);
        assert_eq!(d["name"], p.name.as_str());
        assert_eq!(d["platform_name"], p.platform_name.as_str());
        assert_eq!(d["device_type"], p.device_type.as_str());
        assert_eq!(d["total_memory"], p.total_memory);
        assert!(d["total_memory"].as_u64().unwrap() > 0);
        assert!(d["max_alloc_size"].as_u64().unwrap() > 0);
        assert_eq!(d["mem_base_addr_align"], p.mem_base_addr_align);
        assert_eq!(d["supports_svm"], p.supports_svm);
    }
}

#[test]
fn info_table_has_a_line_per_device() {
    if !xpu_testing::have_device("info_table_has_a_line_per_device") {
        return;
    }
    let text = common::success(&xpu(&["info"], &[]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + xpu_device::device_count(), "{text}");
    assert!(lines[0].starts_with("#  NAME"));
    let name = xpu_device::get_device_name(0).unwrap();
    assert!(
        lines[1].starts_with("0  ") && lines[1].contains(&name),
        "{text}"
    );
}

#[test]
fn no_runtime_table_fails_with_the_install_command() {
    let out = xpu(&["info"], NO_RUNTIME);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("apt-get install pocl-opencl-icd ocl-icd-libopencl1"),
        "{err}"
    );
}

#[test]
fn no_runtime_json_has_no_devices_and_the_error() {
    let out = xpu(&["info", "--json"], NO_RUNTIME);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["devices"], serde_json::json!([]));
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("no OpenCL runtime found"));
}

#[test]
fn demo_prints_the_device_table() {
    if !xpu_testing::have_device("demo_prints_the_device_table") {
        return;
    }
    let text = common::success(&xpu(&["demo"], &[]));
    assert!(text.contains("#  NAME"), "{text}");
    assert!(text.contains(&xpu_device::get_device_name(0).unwrap()));
    let out = xpu(&["demo"], NO_RUNTIME);
    assert_eq!(out.status.code(), Some(1));
}
