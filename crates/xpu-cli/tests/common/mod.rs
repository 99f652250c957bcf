//! What the CLI tests share: the `xpu` binary and the data, found through the run-time
//! environment so the tests also pass from a nextest archive run on another machine
//! (`--workspace-remap`), where the build machine's paths do not exist.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `xpu` binary: nextest's path (`NEXTEST_BIN_EXE_xpu`, remapped in an archive run), else
/// cargo's build path.
pub fn xpu_exe() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_xpu")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_xpu")), PathBuf::from)
}

/// This crate's directory: `CARGO_MANIFEST_DIR` at run time (cargo and nextest set it; an
/// archive run with `--workspace-remap` sets the remapped path), else at build time.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The trace in `data/traces` of the workspace.
pub fn bundled_trace() -> PathBuf {
    manifest_dir().join("../../data/traces/resnet18_train_small.trace.gz")
}

/// Runs `xpu ARGS` with `env` added.
pub fn xpu_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(xpu_exe());
    // The ICD variables from before this process's first enumeration: some loaders truncate
    // `OCL_ICD_FILENAMES` in place (xpu_device::pass_icd_env).
    xpu_device::pass_icd_env(&mut cmd);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the xpu binary")
}

/// Runs `xpu ARGS`.
pub fn xpu(args: &[&str]) -> Output {
    xpu_env(args, &[])
}

/// Whether a device test may run: false (with a message) when no device is found, unless
/// `XPU_REQUIRE_DEVICE=1`, which makes that a failure (see `xpu_testing::devices`).
pub fn have_device() -> bool {
    xpu_testing::devices(1)
}

/// A fresh scratch directory under the system's temporary directory.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xpu-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A successful run's stdout as text: asserts exit status 0 (showing stdout and stderr
/// otherwise) and UTF-8 output.
pub fn success(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

/// Asserts that every figure `keys` of the JSON object `v` is a finite positive number.
pub fn assert_positive_figures(v: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
        assert!(x.is_finite() && x > 0.0, "{k} = {x}");
    }
}

/// A failed run: exit code 1, nothing on stdout, no panic; returns stderr.
pub fn failure(out: &Output) -> String {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}
