//! For every entry point: called alone in a fresh process, it leaves `is_initialized()` and a
//! child forked right after in agreement — the child is a bad fork exactly when the flag is
//! true — and the expected side of that line (enumeration initializes the OpenCL driver; the
//! statistics functions touch nothing). The fork is real: xpu-device's `fork_report` forks
//! and reports what the child sees (a fixed, async-signal-safe scenario).
mod common;

use std::time::Duration;

const TEST: &str = "every_entry_point_agrees_with_a_forked_child";

/// (entry point, whether it initializes the driver).
const ENTRY_POINTS: &[(&str, bool)] = &[
    ("device_count", true),
    ("is_available", true),
    ("get_device_properties", true),
    ("xpu_device::get_device_properties", true),
    ("xpu_device::device_count", true),
    ("init", true),
    ("current_stream", true),
    ("xpu_stream::current_stream", true),
    ("allocate", true),
    ("xpu_alloc::allocate", true),
    ("memory_stats", false),
    ("memory_allocated", false),
    ("memory_summary", false),
    ("memory_snapshot", false),
    ("empty_cache", false),
    ("lazy_call", false),
];

fn call(entry: &str) {
    match entry {
        "device_count" => assert!(xpu::device_count() > 0),
        "is_available" => assert!(xpu::is_available()),
        "get_device_properties" => drop(xpu::get_device_properties(Some(0)).unwrap()),
        "xpu_device::get_device_properties" => {
            drop(xpu::xpu_device::get_device_properties(0).unwrap())
        }
        "xpu_device::device_count" => assert!(xpu::xpu_device::device_count() > 0),
        "init" => xpu::init().unwrap(),
        "current_stream" => drop(xpu::current_stream(None).unwrap()),
        "xpu_stream::current_stream" => drop(xpu::xpu_stream::current_stream(0).unwrap()),
        "allocate" => drop(xpu::allocate(1000).unwrap()),
        "xpu_alloc::allocate" => {
            let s = xpu::xpu_stream::current_stream(0).unwrap();
            drop(xpu::xpu_alloc::allocate(1000, &s).unwrap());
        }
        "memory_stats" => assert_eq!(xpu::memory_stats(None).unwrap(), Default::default()),
        "memory_allocated" => assert_eq!(xpu::memory_allocated(None).unwrap(), 0),
        "memory_summary" => drop(xpu::memory_summary(None, true).unwrap()),
        "memory_snapshot" => assert!(xpu::memory_snapshot().segments.is_empty()),
        "empty_cache" => xpu::empty_cache(),
        "lazy_call" => xpu::lazy_call(|| Ok(())).unwrap(),
        other => panic!("unknown entry point {other}"),
    }
}

fn scenario(entry: &str) {
    let bound = Duration::from_secs(20);
    assert!(!xpu::is_initialized(), "fresh process");
    assert!(
        !xpu::xpu_device::fork::fork_report(bound)
            .unwrap()
            .in_bad_fork
    );
    call(entry);
    let initialized = xpu::is_initialized();
    let child = xpu::xpu_device::fork::fork_report(bound).unwrap();
    println!(
        "ENTRY {entry}: is_initialized={initialized} child_in_bad_fork={} child_device_count={}",
        child.in_bad_fork, child.device_count
    );
    assert_eq!(
        initialized, child.in_bad_fork,
        "{entry}: the flag and the forked child disagree"
    );
    if child.in_bad_fork {
        assert!(
            child.devices_refused,
            "{entry}: the child refuses the driver"
        );
        assert_eq!(
            child.device_count,
            xpu::xpu_device::device_count().min(63),
            "{entry}: the child's device_count is the parent's, not 0"
        );
    }
}

#[test]
fn every_entry_point_agrees_with_a_forked_child() {
    if let Some(entry) = common::scenario() {
        scenario(&entry);
        return;
    }
    if !common::have_device("fork_agreement") {
        return;
    }
    let mut failures = Vec::new();
    for (entry, initializes) in ENTRY_POINTS {
        let (code, out) = common::run_scenario(TEST, entry, Duration::from_secs(60));
        let line = out
            .lines()
            .find_map(|l| l.find("ENTRY ").map(|i| &l[i..]))
            .unwrap_or("(no report)")
            .to_string();
        eprintln!("{line}");
        let expected =
            format!("ENTRY {entry}: is_initialized={initializes} child_in_bad_fork={initializes}");
        if code != Some(0) || !line.starts_with(&expected) {
            failures.push(format!(
                "{entry}: exit {code:?}, expected `{expected}`, got `{line}`\n{out}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}
