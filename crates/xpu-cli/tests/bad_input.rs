//! Every bad input gets a clear answer: malformed traces, a closed stdout, a bad device
//! selection, missing output directories, a bad allocator configuration (one that is not
//! UTF-8 too); bad input files give an error, never a hang (figures whose plot axis is
//! infinite or overflows); a replay that ran out of memory is never judged within or better
//! than PyTorch, a summary figure beyond `u64` is not read as `u64::MAX`, and a simulated
//! capacity of zero is refused.
//!
//! The tests after the first section came from reviews h11 and h23 (files `review_h11.rs`
//! and `review_h23.rs`, merged here unchanged; their docs follow).
//!
//! ## From `review_h11.rs`
//!
//! Review h11: bad input files must give errors, never hangs.
//!
//! ## From `review_h23.rs`
//!
//! Review h23: the `xpu` command on bad input and its figures checked by hand. Each test
//! failed on the code it was written against (55d89da).

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    bundled_trace, failure, have_device, scratch, stderr, success, xpu, xpu_env, xpu_exe,
};

/// `xpu replay FILE --simulate --json` of a trace with `text`.
fn replay_text(dir: &Path, name: &str, text: &str) -> std::process::Output {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    xpu(&["replay", path.to_str().unwrap(), "--simulate", "--json"])
}

#[test]
fn replay_rejects_lines_that_are_not_trace_lines() {
    let dir = scratch("not-trace-lines");
    let cases = [
        (
            "tabs",
            "alloc 1 512 0\nalloc\t1\t2\t3\n",
            2,
            "alloc\t1\t2\t3",
            "tabs",
        ),
        (
            "upper",
            "# h\nalloc 1 512 0\nALLOC 1 2 3\n",
            3,
            "ALLOC 1 2 3",
            "did you mean `alloc`",
        ),
        (
            "unknown-action-three-fields",
            "alloc 1 512 0\noom 1 2\n",
            2,
            "oom 1 2",
            "3 fields, not 4",
        ),
        (
            "prose",
            "alloc 1 512 0\nthis is not a trace\n",
            2,
            "this is not a trace",
            "fields",
        ),
    ];
    for (name, text, line, shown, why) in cases {
        let out = replay_text(&dir, name, text);
        let err = failure(&out);
        assert!(out.stdout.is_empty(), "{name}: no JSON on failure");
        assert!(
            err.contains(&format!("malformed trace line {line}: '{shown}'")) && err.contains(why),
            "{name}: {err}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn replay_rejects_an_empty_trace_and_one_without_allocations() {
    let dir = scratch("empty-trace");
    let err = failure(&replay_text(&dir, "empty", ""));
    assert!(err.contains("the trace is empty"), "{err}");
    let err = failure(&replay_text(&dir, "header", "# only a header\n"));
    assert!(err.contains("the trace is empty"), "{err}");
    let err = failure(&replay_text(
        &dir,
        "no-alloc",
        "segment_alloc 1 2097152 0\nsegment_free 1 2097152 0\n",
    ));
    assert!(
        err.contains("the trace has no `alloc` line (2 event lines)"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn replay_reports_skipped_actions_and_frees_of_unknown_addresses() {
    let dir = scratch("skipped");
    let text = "alloc 1 512 0\noom 0 0 0\nsegment_map 5 6 0\noom 0 0 0\n\
                free_requested 99 512 0\nfree_completed 99 512 0\n\
                free_requested 1 512 0\nfree_completed 1 512 0\n";
    let out = replay_text(&dir, "t", text);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["skipped"],
        serde_json::json!({"oom": 2, "segment_map": 1})
    );
    assert_eq!(v["unmatched_frees"], 1);
    assert_eq!(v["events"], 8);
    let path = dir.join("t");
    let out = xpu(&["replay", path.to_str().unwrap(), "--simulate"]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("skipped lines      3 (oom 2, segment_map 1)"),
        "{summary}"
    );
    assert!(summary.contains("unmatched frees    1 "), "{summary}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A recorded move (`move_from` then `move_to`) renames the live block: its free at the new
/// address matches. A `move_to` without its `move_from` and a `move_from` of an unknown
/// address are counted and ignored.
#[test]
fn replay_reads_moves_as_renames_and_counts_the_unmatched() {
    let dir = scratch("moves");
    let text = "alloc 1 512 0\nmove_from 1 512 0\nmove_to 7 512 0\n\
                move_to 8 512 0\nmove_from 99 512 0\n\
                free_requested 7 512 0\nfree_completed 7 512 0\n";
    let out = replay_text(&dir, "t", text);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            &v["allocs"],
            &v["moves"],
            &v["unmatched_moves"],
            &v["unmatched_frees"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(0)
        )
    );
    assert_eq!(v["skipped"], serde_json::json!({}));
    let path = dir.join("t");
    let out = xpu(&["replay", path.to_str().unwrap(), "--simulate"]);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("recorded moves     1 "), "{summary}");
    assert!(summary.contains("unmatched moves    2 "), "{summary}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Runs `xpu ARGS` with stdout and stderr on a pipe whose reader is already closed (a FIFO
/// opened and closed by bash before `exec`), so that the first write fails with `EPIPE`.
fn run_with_closed_stdout(args: &[&str]) -> std::process::ExitStatus {
    let dir = scratch("closed-pipe");
    let script = "f=\"$1/fifo\"; shift; mkfifo \"$f\" || exit 90; exec 3<>\"$f\"; exec 4>\"$f\"; \
                  exec 3<&-; rm \"$f\"; exec \"$@\" >&4 2>&4 4>&-";
    let status = xpu_device::pass_icd_env(&mut Command::new("bash"))
        .arg("-c")
        .arg(script)
        .arg("closed-pipe")
        .arg(&dir)
        .arg(xpu_exe())
        .args(args)
        .status()
        .expect("bash runs");
    std::fs::remove_dir_all(dir).unwrap();
    status
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    // The device table goes to stdout, then the failure to stderr: both pipes are closed.
    let status = run_with_closed_stdout(&["demo", "--trace", "/nonexistent/nope.gz"]);
    assert_ne!(status.code(), Some(101), "panicked: {status}");
    assert_ne!(status.code(), Some(90), "no mkfifo");
    // The closed stdout ends the command first, quietly: exit code 0.
    if have_device() {
        assert_eq!(status.code(), Some(0), "{status}");
    }
    let status =
        run_with_closed_stdout(&["replay", &bundled_trace().to_string_lossy(), "--simulate"]);
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn an_invalid_device_type_is_the_error_without_colour_codes() {
    let trace = bundled_trace();
    for args in [
        vec!["replay", trace.to_str().unwrap()],
        vec!["replay", trace.to_str().unwrap(), "--device", "0"],
        vec!["bench", "--quick"],
    ] {
        let out = xpu_env(&args, &[("XPU_DEVICE_TYPE", "banana")]);
        let err = failure(&out);
        assert!(
            err.contains("invalid value \"banana\" for XPU_DEVICE_TYPE: expected gpu, cpu or all"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("no such device"), "{args:?}: {err}");
        assert!(
            !err.contains('\u{1b}'),
            "{args:?}: escape codes on a pipe: {err:?}"
        );
    }
}

#[test]
fn out_of_range_devices_have_one_wording() {
    if !have_device() {
        return;
    }
    let count = xpu_device::device_count();
    let want = format!("device 9 is out of range: {count} device(s) available");
    let trace = bundled_trace();
    for args in [
        vec!["replay", trace.to_str().unwrap(), "--device", "9"],
        vec!["bench", "--quick", "--device", "9"],
    ] {
        let err = failure(&xpu(&args));
        assert!(err.contains(&want), "{args:?}: {err}");
    }
}

#[test]
fn plot_and_snapshot_need_an_existing_directory() {
    let dir = scratch("missing-dir");
    let missing = dir.join("not/there");
    let trace = bundled_trace();
    for (option, file) in [("--plot", "r.svg"), ("--snapshot", "s.pickle")] {
        let target = missing.join(file);
        let out = xpu(&[
            "replay",
            trace.to_str().unwrap(),
            "--simulate",
            option,
            target.to_str().unwrap(),
        ]);
        let err = failure(&out);
        assert!(
            err.contains(&format!(
                "the directory {} does not exist",
                missing.display()
            )),
            "{option}: {err}"
        );
        assert!(!missing.exists(), "{option} created the directory");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_invalid_allocator_configuration_is_rejected_by_bench_and_replay() {
    let trace = bundled_trace();
    for args in [
        vec!["bench", "--quick", "--json"],
        vec!["replay", trace.to_str().unwrap(), "--simulate", "--json"],
    ] {
        let out = xpu_env(&args, &[("XPU_ALLOC_CONF", "nope:1")]);
        let err = failure(&out);
        assert!(
            err.contains("invalid XPU_ALLOC_CONF 'nope:1'"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = xpu(&["bench", "--quick", "--config", "nope:1"]);
    assert!(failure(&out).contains("invalid --config 'nope:1'"));
}

// ---- Formerly review_h11.rs ----

/// `xpu plot-scaling` with a figure that is positive but so small that its throughput
/// (`1e3 / ns`) is infinite (`1e-320`, a subnormal: valid JSON) never returns: the curve's
/// `ns > 0.0` filter lets it through, the y range becomes `0..inf`, and plotters loops for
/// ever drawing it (found spinning at 100 % CPU after 10 minutes). Hang-detected: the command
/// gets 60 s (a valid file takes well under a second) and must end with an error.
#[test]
fn plot_scaling_of_a_figure_with_infinite_throughput_is_an_error_not_a_hang() {
    let dir = scratch("review-h11-plot-scaling");
    let ours = dir.join("ours.json");
    std::fs::write(
        &ours,
        r#"{"threads1_pair_ns": 1e-320, "threads2_pair_ns": 100.0}"#,
    )
    .unwrap();
    let out = dir.join("o.svg");
    let mut child = Command::new(xpu_exe())
        .args(["plot-scaling", "--ours"])
        .arg(&ours)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::fs::remove_dir_all(&dir).unwrap();
    let status = status.expect("xpu plot-scaling still running after 60 s (hang)");
    assert!(!status.success(), "an infinite figure must be refused");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("threads1_pair_ns is 1e-320 ns: too small for a throughput to plot"),
        "{stderr}"
    );
}

// ---- Formerly review_h23.rs ----

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
