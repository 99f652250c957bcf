//! Every bad input gets a clear answer: malformed traces, a closed stdout, a bad device
//! selection, missing output directories, a bad allocator configuration.

mod common;

use std::path::Path;
use std::process::Command;

use common::{bundled_trace, failure, have_device, scratch, xpu, xpu_env, xpu_exe};

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
