//! Review h23: the `xpu` command on bad input and its figures checked by hand. Each test
//! failed on the code it was written against (55d89da).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{failure, scratch, stderr, success, xpu, xpu_exe};

/// Runs `xpu ARGS` with at most `limit` of wall time; `None` when it was still running
/// (killed).
fn xpu_within(args: &[&std::ffi::OsStr], limit: Duration) -> Option<Output> {
    let mut cmd = Command::new(xpu_exe());
    xpu_device::pass_icd_env(&mut cmd);
    let mut child = cmd
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `xpu plot-scaling` with a throughput that is finite (`1e3 / 6e-306` = 1.67e308) but whose
/// chart headroom (x 1.15) is not: the y range became `0..inf` and plotters spun for ever
/// (review h11's fix checks the throughput, not the top of the axis). Both files, `--ours`
/// and `--torch`, went through it. Hang-detected (60 s; a valid file takes well under a
/// second).
#[test]
fn plot_scaling_whose_axis_top_overflows_is_an_error_not_a_hang() {
    let dir = scratch("review-h23-scaling");
    let fine = dir.join("fine.json");
    std::fs::write(
        &fine,
        r#"{"threads1_pair_ns": 100.0, "threads2_pair_ns": 60.0}"#,
    )
    .unwrap();
    let huge = dir.join("huge.json");
    std::fs::write(
        &huge,
        r#"{"threads1_pair_ns": 6e-306, "threads1_ns_per_pair_wall": 6e-306}"#,
    )
    .unwrap();
    let out = dir.join("o.svg");
    for (ours, torch, key) in [
        (&huge, None, "threads1_pair_ns"),
        (&fine, Some(&huge), "threads1_ns_per_pair_wall"),
    ] {
        let mut args = vec![
            "plot-scaling".as_ref(),
            "--ours".as_ref(),
            ours.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ];
        if let Some(t) = torch {
            args.extend(["--torch".as_ref(), t.as_os_str()]);
        }
        let result = xpu_within(&args, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("xpu plot-scaling ({key}) still running after 60 s"));
        let err = failure(&result);
        assert!(
            err.contains(&format!(
                "{key} is 6e-306 ns: too small for a throughput to plot"
            )),
            "{err}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A folder with one trace that PyTorch ran (its summary beside it: 40 GiB reserved) but that
/// the simulated H200 cannot replay (one allocation of 40 GiB is above its 34.95 GiB largest
/// allocation): the replay skips the failed allocation and its peak is 2 MiB.
fn oom_folder(dir: &Path) {
    std::fs::write(
        dir.join("big.trace"),
        "alloc 1 1048576 0\nalloc 2 42949672960 0\nfree_requested 2 42949672960 0\n\
         free_completed 2 42949672960 0\nfree_requested 1 1048576 0\nfree_completed 1 1048576 0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("big.trace.summary.json"),
        r#"{"max_reserved": 42951770112, "max_allocated": 42950721536, "segment_allocs": 2}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("big.exp.gz.summary.json"),
        r#"{"max_reserved": 42951770112}"#,
    )
    .unwrap();
}

/// `xpu replay-all` judged a replay whose allocations failed (out of memory) as if it had
/// run the whole trace: "within PyTorch: yes", xpu / PyTorch 0.000, and a geometric mean
/// of 0.000 over the folder. A replay that failed where PyTorch did not is not within
/// PyTorch, and its peak is no figure to divide: the row says NO with its OOMs, its ratios
/// are absent and it leaves the geometric mean out.
#[test]
fn replay_all_does_not_judge_a_replay_that_ran_out_of_memory_as_within_pytorch() {
    let dir = scratch("review-h23-oom-all");
    oom_folder(&dir);
    let v: serde_json::Value = serde_json::from_str(&success(&xpu(&[
        "replay-all",
        dir.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["ooms"], 1, "{row}");
    assert_eq!(row["within_pytorch"], false, "{row}");
    assert!(row["over_pytorch"].is_null(), "{row}");
    assert!(row["over_expandable"].is_null(), "{row}");
    assert!(v["geomean_over_expandable"].is_null(), "{v}");
    // PyTorch's reference mean is over the same traces as xpu's.
    assert!(v["pytorch_geomean_over_expandable"].is_null(), "{v}");
    let text = success(&xpu(&["replay-all", dir.to_str().unwrap()]));
    assert!(
        text.contains(
            "| big.trace | 2097152 / 1 | 42951770112 / 2 | 42951770112 | - | - | NO (1 OOM) |"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `xpu replay --compare` of the same trace said "peak reserved: matches or beats PyTorch"
/// with 2 MiB against PyTorch's 40 GiB, after an allocation failed.
#[test]
fn replay_compare_does_not_say_a_replay_that_ran_out_of_memory_beats_pytorch() {
    let dir = scratch("review-h23-oom-compare");
    oom_folder(&dir);
    let trace = dir.join("big.trace");
    let text = success(&xpu(&[
        "replay",
        trace.to_str().unwrap(),
        "--simulate",
        "--compare",
    ]));
    assert!(!text.contains("matches or beats"), "{text}");
    assert!(
        text.contains(
            "peak reserved: not comparable: 1 allocation failed (out of memory) in this replay"
        ),
        "{text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// An `XPU_ALLOC_CONF` that is not UTF-8 was taken as no configuration at all (the
/// defaults, exit 0), where any other invalid one is an error.
#[cfg(unix)]
#[test]
fn a_non_utf8_alloc_conf_is_an_error_not_the_defaults() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = scratch("review-h23-conf");
    let trace = dir.join("t.trace");
    std::fs::write(&trace, "alloc 1 512 0\n").unwrap();
    let mut cmd = Command::new(xpu_exe());
    xpu_device::pass_icd_env(&mut cmd);
    let out = cmd
        .args(["replay", trace.to_str().unwrap(), "--simulate", "--json"])
        .env(
            "XPU_ALLOC_CONF",
            std::ffi::OsStr::from_bytes(b"relocation:off\xff"),
        )
        .output()
        .unwrap();
    let err = failure(&out);
    assert!(
        err.contains("invalid XPU_ALLOC_CONF") && err.contains("not UTF-8"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A summary figure too large for a byte count (`1e300`, valid JSON) became PyTorch's peak
/// reserved of 18446744073709551615 B (the float saturated into u64), and the comparison
/// said "matches or beats PyTorch". A figure no u64 holds is no figure.
#[test]
fn a_summary_figure_beyond_u64_is_not_read_as_u64_max() {
    let dir = scratch("review-h23-summary");
    let trace = dir.join("t.trace");
    std::fs::write(
        &trace,
        "alloc 1 512 0\nfree_requested 1 512 0\nfree_completed 1 512 0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("t.trace.summary.json"),
        r#"{"max_reserved": 1e300, "max_allocated": 512, "segment_allocs": 1}"#,
    )
    .unwrap();
    let out = xpu(&[
        "replay",
        trace.to_str().unwrap(),
        "--simulate",
        "--compare",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&success(&out)).unwrap();
    assert_eq!(v["pytorch"]["peak_allocated"], 512, "{v}");
    assert!(v["pytorch"]["peak_reserved"].is_null(), "{v}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--capacity 0` replayed on a device of no memory: exit 0, every allocation an OOM, every
/// free "unmatched", all peaks 0. A simulated device of 0 bytes is a bad option.
#[test]
fn replay_refuses_a_simulated_capacity_of_zero() {
    let trace = common::bundled_trace();
    let out = xpu(&[
        "replay",
        trace.to_str().unwrap(),
        "--simulate",
        "--capacity",
        "0",
    ]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("--capacity"), "{err}");
    assert!(out.stdout.is_empty());
}
