//! Discovery settings read once per process (`XPU_DEVICE_TYPE`, `XPU_PLATFORM`) and the missing
//! runtime. Each case runs this test binary again as a child process with its own environment;
//! the child runs only `probe`, which prints what discovery found.

mod common;

use std::collections::HashMap;
use std::process::Command;

const CHILD: &str = "XPU_TEST_PROBE_CHILD";

/// The child's side: prints `probe:key=value` lines. Ignored in normal runs (it only reports).
#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn probe() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    println!("probe:count={}", xpu_device::device_count());
    // After the enumeration: what a child process started with `pass_icd_env` gets (some
    // loaders truncate this process's own copy in place; xpu does not write it back).
    if std::env::var_os("OCL_ICD_FILENAMES").is_some() {
        let child = xpu_device::pass_icd_env(
            Command::new("sh").args(["-c", "printf %s \"$OCL_ICD_FILENAMES\""]),
        )
        .output()
        .expect("run sh");
        println!(
            "probe:child_icd_filenames={}",
            String::from_utf8_lossy(&child.stdout)
        );
    }
    match xpu_device::devices() {
        Ok(devs) => {
            let types: Vec<&str> = devs
                .iter()
                .map(|d| d.properties().device_type.as_str())
                .collect();
            let platforms: Vec<&str> = devs
                .iter()
                .map(|d| d.properties().platform_name.as_str())
                .collect();
            println!("probe:types={}", types.join(","));
            println!("probe:platforms={}", platforms.join("|"));
        }
        Err(e) => {
            let debug = format!("{e:?}");
            let kind = debug.split(['{', '(', ' ']).next().unwrap_or_default();
            println!("probe:kind={kind}");
            println!("probe:error={}", e.to_string().replace('\n', " "));
        }
    }
}

/// Asserts that the probe `r` found no device: count 0, error kind `kind`, and an error
/// message containing `hint`.
fn assert_no_device(r: &HashMap<String, String>, kind: &str, hint: &str) {
    assert_eq!(r["count"], "0");
    assert_eq!(r["kind"], kind);
    assert!(r["error"].contains(hint), "{}", r["error"]);
}

/// Runs `probe` in a child with `set` added to and `remove` taken from this environment.
fn run_probe(set: &[(&str, &str)], remove: &[&str]) -> HashMap<String, String> {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    // The ICD variables from before this process's first enumeration (`have_devices`
    // enumerated): some loaders truncate `OCL_ICD_FILENAMES` in place.
    xpu_device::pass_icd_env(&mut cmd);
    cmd.args([
        "--exact",
        "probe",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1");
    for k in remove {
        cmd.env_remove(k);
    }
    for (k, v) in set {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map: HashMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.split_once("probe:").map(|(_, kv)| kv))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(map.contains_key("count"), "no probe output: {stdout}");
    map
}

#[test]
fn bogus_device_type_is_invalid_env() {
    let r = run_probe(&[("XPU_DEVICE_TYPE", "bogus")], &[]);
    assert_eq!(r["count"], "0");
    assert_eq!(r["kind"], "InvalidEnv");
    assert_eq!(
        r["error"],
        "invalid value \"bogus\" for XPU_DEVICE_TYPE: expected gpu, cpu or all"
    );
}

#[test]
fn missing_runtime_says_how_to_install_one() {
    // No vendor ICD where the loader looks: the same as no OpenCL implementation installed.
    let r = run_probe(
        &[
            ("OCL_ICD_VENDORS", "/nonexistent-dir"),
            ("OCL_ICD_FILENAMES", ""),
        ],
        &[],
    );
    assert_no_device(
        &r,
        "NoRuntime",
        "apt-get install pocl-opencl-icd ocl-icd-libopencl1",
    );
}

#[test]
fn platform_filter_is_a_case_insensitive_substring() {
    if !common::have_devices(1) {
        return;
    }
    let base = run_probe(&[], &["XPU_PLATFORM"]);
    let platforms: Vec<&str> = base
        .get("platforms")
        .unwrap_or_else(|| panic!("the probe found no device: {base:?}"))
        .split('|')
        .collect();
    let first = platforms[0];
    let expected = platforms.iter().filter(|p| **p == first).count();
    let r = run_probe(&[("XPU_PLATFORM", &first.to_uppercase())], &[]);
    assert_eq!(r["count"], expected.to_string());
    assert!(r["platforms"].split('|').all(|p| p == first));

    let none = run_probe(&[("XPU_PLATFORM", "no-such-platform-xyz")], &[]);
    assert_no_device(&none, "NoDevices", "XPU_PLATFORM=no-such-platform-xyz");
}

#[test]
fn device_type_selects_cpu_or_all() {
    if !common::have_devices(1) {
        return;
    }
    let base = run_probe(&[], &["XPU_DEVICE_TYPE", "XPU_PLATFORM"]);
    let base_count: usize = base["count"].parse().unwrap();
    let all = run_probe(&[("XPU_DEVICE_TYPE", "all")], &["XPU_PLATFORM"]);
    assert!(all["count"].parse::<usize>().unwrap() >= base_count);
    let cpu = run_probe(&[("XPU_DEVICE_TYPE", "CPU")], &["XPU_PLATFORM"]);
    match cpu.get("types") {
        Some(types) => assert!(types.split(',').all(|t| t == "cpu"), "{types}"),
        None => assert_eq!(cpu["kind"], "NoDevices"), // a GPU machine without an OpenCL CPU
    }
    let gpu = run_probe(&[("XPU_DEVICE_TYPE", "gpu")], &["XPU_PLATFORM"]);
    match gpu.get("types") {
        Some(types) => assert!(types.split(',').all(|t| t == "gpu"), "{types}"),
        None => assert_eq!(gpu["kind"], "NoDevices"), // PoCL: CPU devices only
    }
}

#[test]
fn a_child_process_started_after_enumeration_gets_the_whole_icd_file_list() {
    if !common::have_devices(1) {
        return;
    }
    // A list of two files (the second one missing): the loader reads both, and a child started
    // afterwards with `pass_icd_env` gets both (some loaders truncate the process's own copy
    // in place, which xpu does not write back).
    let files = "libpocl.so.2:/nonexistent/libno-such-icd.so";
    let r = run_probe(&[("OCL_ICD_FILENAMES", files)], &["XPU_PLATFORM"]);
    assert_eq!(r["child_icd_filenames"], files);
}
