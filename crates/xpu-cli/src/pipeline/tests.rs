//! The demo's two-stream pipeline on a device.

#[test]
fn demo_pipeline_verifies_on_the_host() {
    if !xpu_testing::have_device("the pipeline test") {
        return;
    }
    let r = super::two_stream_pipeline(0, (1 << 20) + 3).unwrap();
    assert_eq!(r.bytes, 1 << 20);
    assert_eq!(r.mismatched_bytes, 0);
    assert!(r.fill_ms > 0.0 && r.copy_ms > 0.0, "{r:?}");
    assert!(r.total_ms >= r.fill_ms && r.total_ms >= r.copy_ms, "{r:?}");
    assert!(r.to_string().contains("result checked on the host: ok"));
}
