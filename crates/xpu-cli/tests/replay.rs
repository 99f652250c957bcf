//! `xpu replay`, `xpu demo` and `xpu bench` run as a user runs them.

mod common;

use std::path::Path;
use std::process::Output;

use common::{bundled_trace, have_device, scratch, success, xpu, xpu_env};

fn json(out: &Output) -> serde_json::Value {
    let text = success(out);
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "one JSON object: {text}"
    );
    serde_json::from_str(&text).expect("valid JSON")
}

/// `xpu replay TRACE ARGS --json`: its one JSON object.
fn replay_json(trace: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["replay", trace.to_str().unwrap()];
    all.extend_from_slice(args);
    all.push("--json");
    json(&xpu(&all))
}

#[test]
fn simulated_replay_of_the_bundled_trace_beats_pytorch() {
    let trace = bundled_trace();
    let v = replay_json(&trace, &["--simulate", "--compare"]);
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want: Vec<&str> = xpu_testing::REPLAY_REPORT_KEYS
        .iter()
        .copied()
        .chain(["pytorch"])
        .collect();
    want.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(v["trace"], "resnet18_train_small.trace.gz");
    assert_eq!(v["mode"], "simulate");
    assert_eq!(v["events"], 4622);
    assert_eq!(v["allocs"], 1532);
    assert_eq!(v["ooms"], 0);
    let peak = |k: &str| v[k].as_u64().unwrap();
    assert!(
        peak("peak_reserved") <= 411_041_792,
        "PyTorch reserved 411041792 B, we {}",
        peak("peak_reserved")
    );
    assert!(peak("segment_allocs") <= 32);
    assert!(
        peak("peak_requested") <= peak("peak_allocated")
            && peak("peak_allocated") <= peak("peak_reserved")
    );
    assert_eq!(v["pytorch"]["peak_reserved"], 411_041_792);
    assert_eq!(v["pytorch"]["segment_allocs"], 32);
}

/// `xpu replay TRACE --simulate --plot SVG ARGS`.
fn simulated_replay_plot(trace: &Path, svg: &Path, args: &[&str]) -> Output {
    let mut all = vec![
        "replay",
        trace.to_str().unwrap(),
        "--simulate",
        "--plot",
        svg.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    xpu(&all)
}

#[test]
fn replay_writes_a_plot_and_the_human_summary() {
    let dir = scratch("plot");
    let svg = dir.join("r.svg");
    let trace = bundled_trace();
    let text = success(&simulated_replay_plot(&trace, &svg, &["--compare"]));
    assert!(text.contains("peak reserved"), "{text}");
    assert!(text.contains("compared with PyTorch"), "{text}");
    assert!(text.contains("411041792"), "{text}");
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg_text.starts_with("<svg") && svg_text.contains("reserved (peak"),
        "not the plot"
    );
    // PyTorch's peak reserved as a reference line; the x axis says what it counts.
    assert!(
        svg_text.contains("PyTorch peak reserved (392.0 MiB, 411041792 B)"),
        "no PyTorch reference line"
    );
    assert!(
        svg_text.contains("trace event (the trace records no timestamps)"),
        "x axis label"
    );
    // Without --compare: no reference line.
    let plain = dir.join("plain.svg");
    success(&simulated_replay_plot(&trace, &plain, &[]));
    assert!(!std::fs::read_to_string(&plain)
        .unwrap()
        .contains("PyTorch peak reserved"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn malformed_line_is_an_error_naming_the_line() {
    let dir = scratch("bad");
    let bad = dir.join("bad.trace");
    std::fs::write(
        &bad,
        "# test\nalloc 4096 512 0\nsegment_map 1 2 0\nfree_requested 4096 five 0\n",
    )
    .unwrap();
    let out = xpu(&["replay", bad.to_str().unwrap(), "--simulate", "--json"]);
    std::fs::remove_dir_all(dir).unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no JSON on failure");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 4") && err.contains("free_requested 4096 five 0"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn device_replay_matches_the_simulated_peaks() {
    if !have_device() {
        return;
    }
    let trace = bundled_trace();
    let real = replay_json(&trace, &["--device", "0"]);
    // The simulated device splits segments as the real one does (NVIDIA's does not).
    let conf = if xpu_alloc::device_splits_segments(0).unwrap() {
        ""
    } else {
        "split_segments:False"
    };
    let sim = json(&xpu_env(
        &["replay", trace.to_str().unwrap(), "--simulate", "--json"],
        &[("XPU_ALLOC_CONF", conf)],
    ));
    assert_eq!(real["mode"], "device");
    for k in [
        "peak_requested",
        "peak_allocated",
        "peak_reserved",
        "segment_allocs",
        "segment_frees",
        "ooms",
    ] {
        assert_eq!(real[k], sim[k], "{k}");
    }
}

#[test]
fn demo_runs_and_prints_the_plot_path() {
    if !have_device() {
        return;
    }
    let dir = scratch("demo");
    let out = xpu(&["demo", "--quick", "--out", dir.to_str().unwrap()]);
    let text = success(&out);
    let svg = dir.join("resnet18_replay.svg");
    assert!(text.contains(&svg.display().to_string()), "{text}");
    assert!(svg.is_file());
    assert!(
        text.contains("real and simulated peaks agree: yes"),
        "{text}"
    );
    assert!(text.contains("xpu memory summary, device ID 0"), "{text}");
    assert!(text.contains("result checked on the host: ok"), "{text}");
    // The MLP stage: a loss curve every 10 steps, checked against the CPU.
    for step in ["step   0: loss", "step  40: loss", "step  49: loss"] {
        assert!(text.contains(step), "{text}");
    }
    assert!(
        text.contains("every step's loss within 1e-4 of the CPU: yes"),
        "{text}"
    );
    assert!(text.contains("after the training"), "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bench_quick_json_has_every_figure() {
    if !have_device() {
        return;
    }
    let v = json(&xpu_env(
        &["bench", "--quick", "--json"],
        &[("XPU_ALLOC_CONF", "max_split_size_mb:64")],
    ));
    assert!(v.get("errors").is_none(), "{v}");
    // The allocator configuration of the environment is used and reported.
    assert_eq!(v["alloc_conf"], "max_split_size_mb:64");
    // One name per figure: no duplicate `*_ratio` / `*_vs_raw` spellings of a ratio.
    let names: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert!(
        !names
            .iter()
            .any(|k| k.ends_with("_ratio") || k.ends_with("_vs_raw")),
        "{names:?}"
    );
    assert!(v["device"]["name"].is_string() && v["device"]["platform"].is_string());
    assert!(v["date"].as_str().unwrap().ends_with('Z'));
    common::assert_positive_figures(
        &v,
        &[
            "lazy_init_ms",
            "current_stream_ns",
            "event_record_query_ns",
            "raw_marker_query_ns",
            "event_record_query_over_raw",
            "cached_alloc_free_ns",
            "cached_alloc_free_8m_ns",
            "malloc_free_8m_ns",
            "cached_alloc_free_8m_over_malloc",
            "mixed64_alloc_free_ns",
            "malloc_free_ns",
            "cached_alloc_free_over_malloc",
            "mixed64_malloc_free_ns",
            "mixed64_over_malloc",
            "threads1_pair_ns",
            "threads16_pair_ns",
            "threads4_malloc_pair_ns",
            "host_cached_alloc_free_ns",
            "host_cached_alloc_free_over_malloc",
            "h2d_pinned_gbps",
            "h2d_pageable_gbps",
            "raw_h2d_pinned_gbps",
            "h2d_pinned_over_raw",
        ],
    );
}
