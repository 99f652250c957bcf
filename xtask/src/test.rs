//! `cargo xtask test`: runtime check, fmt, clippy, check-layers, rustdoc, the loom models,
//! then every test.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cmd::Cmd;
use crate::{layers, opencl_runtime};

/// PoCL's device list that gives two CPU devices, for the multi-device tests.
pub(crate) const TWO_POCL_DEVICES: &str = "pthread pthread";

/// The whole local suite, failing fast at the first failed step.
pub(crate) fn run(root: &Path, extra: &[String]) -> Result<()> {
    opencl_runtime::ensure()?;
    Cmd::cargo()
        .args(["fmt", "--all", "--check"])
        .current_dir(root)
        .hint("run `cargo fmt --all` to fix it (no rustfmt? `rustup component add rustfmt`)")
        .run_step("fmt")?;
    Cmd::cargo()
        .args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(root)
        .hint("fix the warnings above (no clippy? `rustup component add clippy`)")
        .run_step("clippy")?;
    println!("==> [check-layers] cargo xtask check-layers");
    layers::check(root).context("step `check-layers` failed")?;
    let rustdocflags = match std::env::var("RUSTDOCFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} -D warnings"),
        _ => "-D warnings".to_owned(),
    };
    Cmd::cargo()
        .env("RUSTDOCFLAGS", rustdocflags)
        .args(["doc", "--workspace", "--no-deps"])
        .current_dir(root)
        .hint("fix the rustdoc warnings above (broken links, missing docs)")
        .run_step("doc")?;
    run_loom(root)?;
    let mut envs = vec![("XPU_REQUIRE_DEVICE".to_owned(), "1".to_owned())];
    match std::env::var("POCL_DEVICES") {
        Ok(devices) => println!("==> POCL_DEVICES is set ({devices:?}): keeping it"),
        Err(_) => envs.push(("POCL_DEVICES".to_owned(), TWO_POCL_DEVICES.to_owned())),
    }
    // CI runs as root with apt-get: CLBlast is installed there and the example must run it.
    if opencl_runtime::ensure_clblast()? {
        envs.push(("XPU_REQUIRE_CLBLAST".to_owned(), "1".to_owned()));
    }
    run_examples(root, &envs)?;
    run_burn(root, &envs)?;
    run_tests(root, &envs, extra)
}

/// The loom models of xpu-caching's block state word (`allocator::place_cell::loom_tests`),
/// built with `--cfg loom` in release mode in their own target directory (`target/loom`), so
/// the flag does not invalidate the main build. About a minute from cold on two cores (the
/// build; the models run in about 3 s).
pub(crate) fn run_loom(root: &Path) -> Result<()> {
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} --cfg loom"),
        _ => "--cfg loom".to_owned(),
    };
    Cmd::cargo()
        .env("RUSTFLAGS", rustflags)
        .env(
            "CARGO_TARGET_DIR",
            root.join("target/loom").display().to_string(),
        )
        .args([
            "test",
            "-p",
            "xpu-caching",
            "--lib",
            "--release",
            LOOM_TESTS,
            "--",
            "--test-threads=1",
        ])
        .current_dir(root)
        .hint("a loom model failed: see its interleaving above (LOOM_LOG=trace for details)")
        .run_step("loom")
}

/// The test filter naming xpu-caching's loom models (built only under `--cfg loom`).
pub(crate) const LOOM_TESTS: &str = "allocator::place_cell::loom_tests";

/// The burn backend's proof: the training example (a short run that must halve its loss),
/// then burn 0.19.1's own conformance suite on xpu (`crates/xpu-burn/tests/burn_suite.rs`),
/// in one process so that each kernel is built once, with its counts printed. The main test
/// run leaves that binary out, so the suite runs once.
pub(crate) fn run_burn(root: &Path, envs: &[(String, String)]) -> Result<()> {
    Cmd::cargo()
        .args([
            "run",
            "--quiet",
            "-p",
            "xpu-burn",
            "--example",
            "train",
            "--",
            "--steps",
            "60",
            "--batch",
            "32",
        ])
        .envs(envs)
        .current_dir(root)
        .run_step("example xpu-burn train")?;
    Cmd::cargo()
        .args(["test", "-p", "xpu-burn", "--test", BURN_SUITE])
        .envs(envs)
        .current_dir(root)
        .run_step("burn conformance suite (burn_tensor + burn_autodiff testgen_all)")?;
    // burn marks 12 of its tests `#[ignore]`; these 4 pass on xpu, so they run too (the other
    // 8 test burn-autodiff's own cumprod backward, which divides by zero on every backend:
    // crates/xpu-burn/tests/EXCLUDED.md).
    Cmd::cargo()
        .args([
            "test",
            "-p",
            "xpu-burn",
            "--test",
            BURN_SUITE,
            "--",
            "--ignored",
            "--exact",
        ])
        .args(BURN_IGNORED_THAT_PASS)
        .envs(envs)
        .current_dir(root)
        .run_step("burn's ignored tests that pass on xpu")
}

/// Tests burn 0.19.1 marks `#[ignore]` that pass on xpu (run by [`run_burn`]).
pub(crate) const BURN_IGNORED_THAT_PASS: [&str; 4] = [
    "tests::tensor::aggregation::tests::test_prod_dim_int",
    "tests::tensor::aggregation::tests::test_prod_int",
    "tests::tensor::cast::tests::cast_int_precision",
    "tests::tensor::roll::tests::test_roll_empty",
];

/// The test binary holding burn's conformance suite.
pub(crate) const BURN_SUITE: &str = "burn_suite";

/// Runs every example of the facade crate (`crates/xpu/examples/*.rs`), so the documented
/// entry points keep working. Runs before the tests, so the test runner's summary stays last.
pub(crate) fn run_examples(root: &Path, envs: &[(String, String)]) -> Result<()> {
    let dir = root.join("crates/xpu/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    for name in names {
        Cmd::cargo()
            .args(["run", "--quiet", "--package", "xpu", "--example", &name])
            .envs(envs)
            .current_dir(root)
            .run_step(&format!("example {name}"))?;
    }
    Ok(())
}

/// Whether `cargo nextest` is installed.
pub(crate) fn nextest_installed() -> bool {
    Cmd::cargo()
        .args(["nextest", "--version"])
        .stdout_if_ok()
        .is_some()
}

/// Every test of the workspace with `envs` set: cargo-nextest plus the doctests when
/// nextest is installed, else `cargo test`. `extra` goes to the runner.
pub(crate) fn run_tests(root: &Path, envs: &[(String, String)], extra: &[String]) -> Result<()> {
    if nextest_installed() {
        // nextest does not run doctests: run them first, so nextest's summary closes the run.
        Cmd::cargo()
            .args(["test", "--workspace", "--doc"])
            .envs(envs)
            .current_dir(root)
            .run_step("doctests")?;
        Cmd::cargo()
            .args(["nextest", "run", "--workspace", "-E"])
            .arg(format!("not binary({BURN_SUITE})"))
            .args(extra)
            .envs(envs)
            .current_dir(root)
            .run_step("tests")
    } else {
        println!(
            "==> cargo-nextest is not installed: using cargo test \
             (`cargo install cargo-nextest --locked` for nextest)"
        );
        Cmd::cargo()
            .args(["test", "--workspace", "--exclude", "xpu-burn"])
            .args(extra)
            .envs(envs)
            .current_dir(root)
            .run_step("tests")?;
        if !extra.is_empty() {
            return Ok(());
        }
        run_burn_tests_alone(root, envs)
    }
}

/// Without nextest: xpu-burn's own tests (every target but burn's suite, which `run_burn`
/// ran), each in a process of its own as nextest runs them: several set process-wide state
/// (a memory fraction, the allocator's configuration) that the others must not see.
fn run_burn_tests_alone(root: &Path, envs: &[(String, String)]) -> Result<()> {
    let names = burn_test_targets(root)?;
    let mut build = Cmd::cargo().args([
        "test",
        "-p",
        "xpu-burn",
        "--no-run",
        "--message-format",
        "json-render-diagnostics",
    ]);
    for name in &names {
        build = build.args(["--test", name.as_str()]);
    }
    let messages = build
        .envs(envs)
        .current_dir(root)
        .stdout_of_step("build xpu-burn tests")?;
    // cargo test runs a package's tests from the package's directory.
    let dir = root.join("crates/xpu-burn");
    let (mut ran, mut failed) = (0, Vec::new());
    for name in &names {
        let exe = crate::cmd::find_executable(&messages, name, "test")
            .with_context(|| format!("cargo named no executable for xpu-burn's test `{name}`"))?;
        let list = Cmd::new(&exe)
            .args(["--list", "--format", "terse"])
            .envs(envs)
            .current_dir(&dir)
            .stdout_of_step(&format!("list {name}"))?;
        for test in list.lines().filter_map(|l| l.strip_suffix(": test")) {
            ran += 1;
            let one = Cmd::new(&exe)
                .args(["--exact", test])
                .envs(envs)
                .current_dir(&dir)
                .run_step(&format!("xpu-burn {name} {test}"));
            if one.is_err() {
                failed.push(format!("{name}::{test}"));
            }
        }
    }
    println!("==> xpu-burn tests: {ran} run, {} failed", failed.len());
    anyhow::ensure!(
        failed.is_empty(),
        "xpu-burn tests failed: {}",
        failed.join(", ")
    );
    Ok(())
}

/// The integration-test targets of xpu-burn (`crates/xpu-burn/tests/*.rs`) but
/// [`BURN_SUITE`], sorted.
///
/// # Errors
/// The tests directory cannot be read.
pub(crate) fn burn_test_targets(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("crates/xpu-burn/tests");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                if stem != BURN_SUITE {
                    names.push(stem.to_owned());
                }
            }
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback without nextest runs xpu-burn's own test files, all but burn's suite.
    #[test]
    fn the_burn_targets_are_every_test_file_but_the_suite() {
        let names = burn_test_targets(&crate::repo_root()).unwrap();
        assert!(!names.iter().any(|n| n == BURN_SUITE), "{names:?}");
        for expected in ["casts", "robustness", "relocation"] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} missing: {names:?}"
            );
        }
    }

    /// The loom step's filter names a module that exists: a rename would otherwise make the
    /// step run no model and pass.
    #[test]
    fn the_loom_filter_names_the_loom_models() {
        let module = LOOM_TESTS.replace("::", "/");
        let file = crate::repo_root().join(format!("crates/xpu-caching/src/{module}.rs"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains("loom::model"),
            "{} holds no loom model",
            file.display()
        );
    }
}
