//! `event_bench` on a device: every figure is measured.

#[test]
fn bench_reports_every_figure() {
    if !xpu_testing::have_device("the event bench test") {
        return;
    }
    let figs = super::run(0).unwrap();
    let names: Vec<&str> = figs.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "current_stream_ns",
        "stream_from_pool_ns",
        "event_new_ns",
        "event_record_query_ns",
        "raw_marker_query_ns",
        "event_record_sync_ns",
        "stream_sync_idle_ns",
        "cross_stream_wait_ns",
        "event_record_query_over_raw",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(
        figs.iter().all(|(_, v)| v.is_finite() && *v > 0.0),
        "{figs:?}"
    );
}
