//! The `xpu` command's figures checked by hand: tiny handwritten traces in both modes, JSON against
//! the human summary, the simulated against the device replay, a truncated gzip trace wherever it
//! is cut, and replay-all's geometric mean.
//!
//! Review h23's probes of the `xpu` command (passing when written): figures of tiny
//! handwritten traces checked by hand, JSON against the human summary, the simulated
//! against the device replay, a truncated gzip trace, and replay-all's geometric mean.

mod common;

use common::{bundled_trace, failure, have_device, scratch, success, xpu};

/// Stream 0: 3,000,000 B (rounded to 3,000,320, a 20 MiB large segment), 600 B (1,024 B, a
/// 2 MiB small segment); the first freed; stream 1: 3,000,000 B (stream 0's free block is
/// not its own: a second 20 MiB segment); stream 0: 12,000,000 B (12,000,256 B, split from
/// its free 20 MiB block). Peak allocated 1,024 + 3,000,320 + 12,000,256; reserved 42 MiB.
const HAND: &str = "alloc 1 3000000 0\nalloc 2 600 0\nfree_requested 1 3000000 0\n\
                    free_completed 1 3000000 0\nalloc 3 3000000 1\nalloc 4 12000000 0\n";

#[test]
fn a_handwritten_trace_gives_the_figures_worked_out_by_hand_in_both_modes() {
    let dir = scratch("review-h23-hand");
    let trace = dir.join("hand.trace");
    std::fs::write(&trace, HAND).unwrap();
    let path = trace.to_str().unwrap();
    let mut modes = vec![vec!["--simulate"]];
    if have_device() {
        modes.push(vec![]);
    }
    for mode in modes {
        let args = [&["replay", path, "--json"][..], &mode].concat();
        let v: serde_json::Value = serde_json::from_str(&success(&xpu(&args))).unwrap();
        let figures = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
        assert_eq!(figures("peak_requested"), 15_000_600, "{mode:?}");
        assert_eq!(figures("peak_allocated"), 15_001_600, "{mode:?}");
        assert_eq!(figures("peak_reserved"), 44_040_192, "{mode:?}");
        assert_eq!(figures("segment_allocs"), 3, "{mode:?}");
        assert_eq!((figures("allocs"), figures("events")), (4, 6), "{mode:?}");
        assert_eq!(figures("ooms"), 0, "{mode:?}");
        let args = [&["replay", path][..], &mode].concat();
        let text = success(&xpu(&args));
        for line in [
            "peak allocated       14.3 MiB (15001600 B)",
            "peak reserved          42 MiB (44040192 B)",
            "segments           3 allocated, 0 freed",
            "events             6 (4 allocations)",
        ] {
            assert!(text.contains(line), "{mode:?}: {line}\n{text}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A gzip trace cut anywhere, in its deflate stream or its trailer, is an error.
#[test]
fn a_truncated_gzip_trace_is_an_error_wherever_it_is_cut() {
    let dir = scratch("review-h23-trunc");
    let bytes = std::fs::read(bundled_trace()).unwrap();
    for keep in [
        1,
        5,
        1000,
        bytes.len() / 2,
        bytes.len() - 8,
        bytes.len() - 1,
    ] {
        let path = dir.join(format!("cut{keep}.trace.gz"));
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let out = xpu(&["replay", path.to_str().unwrap(), "--simulate", "--json"]);
        let err = failure(&out);
        assert!(err.contains("replaying"), "{keep}: {err}");
        assert!(out.stdout.is_empty(), "{keep}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Two traces, one at 2x its expandable figure and one at 1x: replay-all's geometric mean is
/// sqrt(2); PyTorch's default is 2x expandable on both: 2.
#[test]
fn replay_all_geometric_means_by_hand() {
    let dir = scratch("review-h23-geomean");
    let one = "alloc 1 512 0\nfree_requested 1 512 0\nfree_completed 1 512 0\n";
    for (name, torch, expandable) in [("a", 2_097_152, 1_048_576), ("b", 4_194_304, 2_097_152)] {
        std::fs::write(dir.join(format!("{name}.trace")), one).unwrap();
        std::fs::write(
            dir.join(format!("{name}.trace.summary.json")),
            format!(r#"{{"max_reserved": {torch}, "max_allocated": 512, "segment_allocs": 1}}"#),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{name}.exp.gz.summary.json")),
            format!(r#"{{"max_reserved": {expandable}}}"#),
        )
        .unwrap();
    }
    let v: serde_json::Value = serde_json::from_str(&success(&xpu(&[
        "replay-all",
        dir.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    let ours = v["geomean_over_expandable"].as_f64().unwrap();
    let theirs = v["pytorch_geomean_over_expandable"].as_f64().unwrap();
    assert!((ours - 2f64.sqrt()).abs() < 1e-12, "{ours}");
    assert!((theirs - 2.0).abs() < 1e-12, "{theirs}");
    assert_eq!(v["rows"][0]["over_expandable"], 2.0);
    assert_eq!(v["rows"][1]["over_expandable"], 1.0);
    assert_eq!(v["rows"][1]["over_pytorch"], 0.5);
    let text = success(&xpu(&["replay-all", dir.to_str().unwrap()]));
    assert!(
        text.contains("over 2 traces: xpu 1.414, PyTorch default 2.000"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
