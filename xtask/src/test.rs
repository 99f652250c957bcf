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

/// The burn backend's proof: the training example (a short run that must halve its loss), on
/// `Xpu` and on `XpuFusion`, then burn 0.19.1's own conformance suite on xpu (`crates/xpu-burn/tests/burn_suite.rs`),
/// in one process so that each kernel is built once, with its counts printed. The main test
/// run leaves that binary out, so the suite runs once.
pub(crate) fn run_burn(root: &Path, envs: &[(String, String)]) -> Result<()> {
    // On Xpu, then on XpuFusion (burn-fusion over xpu): the fused element-wise runs train too.
    for fusion in [&[][..], &["--fusion"][..]] {
        Cmd::cargo()
            .args([
                "run",
                "--quiet",
                "-p",
                "xpu-burn",
                "--example",
                "train",
                "--",
            ])
            .args(["--steps", "60", "--batch", "32"])
            .args(fusion)
            .envs(envs)
            .current_dir(root)
            .run_step(format!("example xpu-burn train {}", fusion.join(" ")).trim_end())?;
    }
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
/// nextest is installed, else the doctests and every test in a process of its own as nextest
/// runs them ([`crate::alone`]). `extra` goes to the runner (without nextest, to one
/// `cargo test --workspace --exclude xpu-burn`, as asked).
pub(crate) fn run_tests(root: &Path, envs: &[(String, String)], extra: &[String]) -> Result<()> {
    if nextest_installed() {
        // nextest does not run doctests: run them first, so nextest's summary closes the run.
        run_doctests(root, envs)?;
        Cmd::cargo()
            .args(["nextest", "run", "--workspace", "-E"])
            .arg(format!("not binary({BURN_SUITE})"))
            .args(extra)
            .envs(envs)
            .current_dir(root)
            .run_step("tests")
    } else {
        println!(
            "==> cargo-nextest is not installed: each test in a process of its own by xtask \
             (`cargo install cargo-nextest --locked` for nextest)"
        );
        if !extra.is_empty() {
            return Cmd::cargo()
                .args(["test", "--workspace", "--exclude", "xpu-burn"])
                .args(extra)
                .envs(envs)
                .current_dir(root)
                .run_step("tests");
        }
        run_doctests(root, envs)?;
        crate::alone::run(root, envs, &[BURN_SUITE])
    }
}

/// The workspace's doctests (nextest runs none).
fn run_doctests(root: &Path, envs: &[(String, String)]) -> Result<()> {
    Cmd::cargo()
        .args(["test", "--workspace", "--doc"])
        .envs(envs)
        .current_dir(root)
        .run_step("doctests")
}

#[cfg(test)]
mod tests {
    use super::*;

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
