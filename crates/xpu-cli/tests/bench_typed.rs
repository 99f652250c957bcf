//! `xpu bench --json` reports the typed-upload figures next to their raw floor.

mod common;

#[test]
fn bench_json_reports_typed_upload_against_the_raw_pinned_floor() {
    if !common::have_device() {
        return;
    }
    let out = common::xpu(&["bench", "--quick", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v.get("errors").is_none(), "{v}");
    assert_eq!(v["htod_typed_bytes"].as_f64(), Some(f64::from(32u32 << 20)));
    common::assert_positive_figures(
        &v,
        &[
            "htod_typed_gbps",
            "htod_typed_raw_h2d_pinned_gbps",
            "htod_typed_over_raw",
            "htod_typed_pinned_gbps",
            "htod_typed_pinned_over_raw",
        ],
    );
    let ratio = v["htod_typed_gbps"].as_f64().unwrap()
        / v["htod_typed_raw_h2d_pinned_gbps"].as_f64().unwrap();
    assert!((v["htod_typed_over_raw"].as_f64().unwrap() - ratio).abs() < 1e-9);
}
