//! `xpu bench --json` reports the typed-upload figures next to their raw floor.

use std::process::Command;

fn xpu_exe() -> std::path::PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_xpu")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_xpu").into())
}

#[test]
fn bench_json_reports_typed_upload_against_the_raw_pinned_floor() {
    if xpu_device::device_count() == 0 {
        assert!(
            std::env::var("XPU_REQUIRE_DEVICE").as_deref() != Ok("1"),
            "XPU_REQUIRE_DEVICE=1 but no OpenCL device was found"
        );
        eprintln!("no OpenCL device found: skipping");
        return;
    }
    let out = Command::new(xpu_exe())
        .args(["bench", "--quick", "--json"])
        .output()
        .expect("xpu runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v.get("errors").is_none(), "{v}");
    assert_eq!(v["htod_typed_bytes"].as_f64(), Some(f64::from(32u32 << 20)));
    for k in [
        "htod_typed_gbps",
        "htod_typed_raw_h2d_pinned_gbps",
        "htod_typed_over_raw",
        "htod_typed_pinned_gbps",
        "htod_typed_pinned_over_raw",
    ] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
        assert!(x.is_finite() && x > 0.0, "{k} = {x}");
    }
    let ratio = v["htod_typed_gbps"].as_f64().unwrap()
        / v["htod_typed_raw_h2d_pinned_gbps"].as_f64().unwrap();
    assert!((v["htod_typed_over_raw"].as_f64().unwrap() - ratio).abs() < 1e-9);
}
