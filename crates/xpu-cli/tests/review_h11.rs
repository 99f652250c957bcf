//! Review h11: bad input files must give errors, never hangs.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{scratch, xpu_exe};

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
