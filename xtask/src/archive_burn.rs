//! `cargo xtask gpu-archive-burn`: what a GPU machine without cargo needs to run the burn
//! backend there (burn's conformance suite on xpu, the training example on xpu and the same
//! model in PyTorch and, unless `--no-cuda`, the same training on burn's own CUDA backend),
//! in one directory under 64 MiB, apart from the main archive (`cargo xtask gpu-archive`),
//! which has no room left for it.
//!
//! The suite ships as its plain (libtest) test binary, not as a nextest archive: the binary is
//! all it needs (no workspace data, no `cargo-nextest`, whose binary alone weighs some 20
//! MiB), and one process builds each OpenCL program once for all 1,341 tests. run.sh makes up
//! for what nextest would give (a crash of one test losing the counts of all) by running the
//! tests again one at a time after a crash or hang.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::archive::{
    copy, embed_gpu_env, exclude_from_git, prepare_out, report_size, set_executable,
    small_release_envs, strip,
};
use crate::cmd::{find_executable, Cmd};

/// The runner script template (ci/gpu-burn-run.sh.tmpl).
const RUN_SH_TEMPLATE: &str = include_str!("../../ci/gpu-burn-run.sh.tmpl");

/// The PyTorch twin of the training example, relative to the workspace root.
const TORCH_SCRIPT: &str = "crates/xpu-burn/examples/train_torch.py";

/// What `build` writes into the output directory (removed first, nothing else is touched).
const OUTPUTS: [&str; 7] = [
    "burn_suite",
    "burn_suite_fusion",
    "train",
    "train_cuda",
    "train_torch.py",
    "run.sh",
    "results",
];

/// The default output directory, relative to the workspace root.
pub(crate) const DEFAULT_DIR: &str = ".gpu-burn";

/// Builds the burn GPU archive into `out`; with `cuda`, also the `train_cuda` example (the
/// same training on burn's own CUDA backend), when it builds.
pub(crate) fn build(root: &Path, out: &Path, cuda: bool) -> Result<()> {
    let out = prepare_out(out, &OUTPUTS)?;
    let envs = small_release_envs();

    // burn's suite on Xpu, then on XpuFusion (the same test file with xpu-burn's
    // `suite-fusion` feature): each is installed before the next build replaces the binary.
    for (features, step, name) in [
        (None, "build-burn-suite", "burn_suite"),
        (
            Some("suite-fusion"),
            "build-burn-suite-fusion",
            "burn_suite_fusion",
        ),
    ] {
        let cmd = Cmd::cargo()
            .args([
                "test",
                "--release",
                "-p",
                "xpu-burn",
                "--test",
                "burn_suite",
            ])
            .args(features.map(|f| ["--features", f]).into_iter().flatten())
            .args(["--no-run", "--message-format", "json-render-diagnostics"])
            .envs(&envs)
            .current_dir(root);
        let suite = executable(cmd, step, "burn_suite", "test")?;
        install(&suite, &out.join(name))?;
    }
    let train = build_example(root, &envs, "train", &[], "build-train")?;
    install(&train, &out.join("train"))?;
    copy(&root.join(TORCH_SCRIPT), &out.join("train_torch.py"))?;
    if cuda {
        build_train_cuda(root, &out, &envs);
    }

    let run_sh = out.join("run.sh");
    std::fs::write(&run_sh, render_run_sh())
        .with_context(|| format!("cannot write {}", run_sh.display()))?;
    set_executable(&run_sh)?;
    exclude_from_git(root, &out, &format!("/{DEFAULT_DIR}/"))?;
    report_size(root, &out)
}

/// Builds the `train_cuda` example (feature `cuda-compare` of xpu-burn) into `out`. A failed
/// build leaves the archive without it (run.sh then skips that step) and says why: burn's
/// CUDA backend is a comparison, not part of the project.
fn build_train_cuda(root: &Path, out: &Path, envs: &[(String, String)]) {
    let built = build_example(
        root,
        envs,
        "train_cuda",
        &["--features", "cuda-compare"],
        "build-train-cuda",
    )
    .and_then(|from| install(&from, &out.join("train_cuda")));
    if let Err(e) = built {
        println!("==> no train_cuda in the archive (burn's CUDA backend did not build): {e:#}");
    }
}

/// Builds xpu-burn's example `name` in release (with the extra cargo arguments `extra`, e.g.
/// features) as step `step`, and returns its executable.
fn build_example(
    root: &Path,
    envs: &[(String, String)],
    name: &str,
    extra: &[&str],
    step: &str,
) -> Result<PathBuf> {
    let cmd = Cmd::cargo()
        .args(["build", "--release", "-p", "xpu-burn", "--example", name])
        .args(extra.iter().copied())
        .args(["--message-format", "json-render-diagnostics"])
        .envs(envs)
        .current_dir(root);
    executable(cmd, step, name, "example")
}

/// Copies the executable `from` to `to`, strips it and marks it executable.
fn install(from: &Path, to: &Path) -> Result<()> {
    copy(from, to)?;
    strip(to);
    set_executable(to)
}

/// Runs a cargo build that prints JSON messages (`cmd`) and returns the executable it built
/// for the target called `name` of kind `kind` (`test`, `example`, `bin`).
fn executable(cmd: Cmd, step: &str, name: &str, kind: &str) -> Result<PathBuf> {
    let stdout = cmd.stdout_of_step(step)?;
    find_executable(&stdout, name, kind).with_context(|| {
        format!("step `{step}`: cargo named no executable for the {kind} target `{name}`")
    })
}

/// run.sh: the template with ci/gpu-env.sh embedded.
pub(crate) fn render_run_sh() -> String {
    embed_gpu_env(RUN_SH_TEMPLATE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_sh_embeds_the_vendor_registration() {
        let script = render_run_sh();
        assert!(!script.contains("@GPU_ENV@"));
        assert!(script.contains("    xpu_register_nvidia_icd() {"));
        assert!(script.contains("\"./$SUITE\" ${XPU_BURN_SUITE_ARGS:-} > \"$SEG\""));
        assert!(script.contains("SUITE=\"burn_suite_fusion\""));
        assert!(script.contains("--batch \"$BATCH\" --fusion"));
        assert!(script.contains("python3 train_torch.py --steps \"$STEPS_N\" --batch \"$BATCH\""));
    }

    #[test]
    fn run_sh_is_valid_bash() {
        crate::test_util::assert_valid_bash(render_run_sh());
    }

    #[test]
    fn find_executable_takes_the_named_target_of_the_kind() {
        let messages = concat!(
            "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"burn_suite\",\"kind\":[\"lib\"]},\"executable\":null}\n",
            "not json\n",
            "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"burn_suite\",\"kind\":[\"test\"]},\"executable\":\"/t/release/deps/burn_suite-1\"}\n",
            "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"train\",\"kind\":[\"example\"]},\"executable\":\"/t/release/examples/train\"}\n",
            "{\"reason\":\"build-finished\",\"success\":true}\n",
        );
        assert_eq!(
            find_executable(messages, "burn_suite", "test"),
            Some(PathBuf::from("/t/release/deps/burn_suite-1"))
        );
        assert_eq!(
            find_executable(messages, "train", "example"),
            Some(PathBuf::from("/t/release/examples/train"))
        );
        assert_eq!(find_executable(messages, "train", "test"), None);
    }

    /// A real libtest binary standing in for burn_suite: two tests pass, one fails, one is
    /// ignored, and one aborts the process when `CRASH` is set. `None` without rustc.
    fn fake_suite(dir: &Path) -> Option<PathBuf> {
        let src = dir.join("fake_suite.rs");
        std::fs::write(
            &src,
            concat!(
                "#[test] fn a_passes() {}\n",
                "#[test] fn b_fails() { panic!(\"b fails\") }\n",
                "#[test] #[ignore] fn c_is_ignored() {}\n",
                "#[test] fn d_may_crash() { if std::env::var_os(\"CRASH\").is_some() { std::process::abort() } }\n",
                "#[test] fn e_passes() {}\n",
            ),
        )
        .unwrap();
        let bin = dir.join("burn_suite");
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
        let built = Cmd::new(rustc)
            .args(["--test", "--edition", "2021", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .is_some_and(|o| o.status.success());
        built.then_some(bin)
    }

    /// The suite step of run.sh on the stand-in suite in a fresh directory named after
    /// `tag` (the process aborting in `d_may_crash` when `crash`): the exit code, run.log
    /// and burn_suite.log, and the directory (for the caller to remove). `None` (after
    /// saying so) when rustc cannot build the stand-in.
    fn suite_step(tag: &str, crash: bool) -> Option<(Option<i32>, String, String, PathBuf)> {
        let dir = crate::test_util::scratch_dir(tag);
        if fake_suite(&dir).is_none() {
            eprintln!("skipping: rustc cannot build the stand-in test binary");
            return None;
        }
        let (code, log, suite_log) = run_suite_step(&dir, crash);
        Some((code, log, suite_log, dir))
    }

    fn run_suite_step(dir: &Path, crash: bool) -> (Option<i32>, String, String) {
        let run_sh = dir.join("run.sh");
        std::fs::write(&run_sh, render_run_sh()).unwrap();
        let results = dir.join(if crash { "results-crash" } else { "results" });
        let mut cmd = Cmd::new("bash")
            .arg(&run_sh)
            .arg("suite")
            .env("OUT", results.display().to_string())
            .env("XPU_TIMEOUT_SUITE", "60")
            // No vendor file, no NVIDIA library: the registration changes nothing.
            .env(
                "XPU_ICD_SYSTEM_DIR",
                dir.join("no-icd").display().to_string(),
            )
            .env(
                "XPU_NVIDIA_OPENCL_CANDIDATES",
                "/nonexistent/libnvidia-opencl.so.1",
            );
        if crash {
            cmd = cmd.env("CRASH", "1");
        }
        let out = cmd.output().expect("bash runs");
        let read = |f: &str| std::fs::read_to_string(results.join(f)).unwrap_or_default();
        (out.status.code(), read("run.log"), read("burn_suite.log"))
    }

    #[test]
    fn suite_step_counts_from_the_libtest_summary() {
        let Some((code, log, suite_log, dir)) = suite_step("burn-suite-summary", false) else {
            return;
        };
        let counts =
            "burn suite counts: 3 passed; 1 failed; 1 ignored; 0 crashed or hung; 0 not run";
        assert_eq!(code, Some(1), "{log}");
        assert!(
            log.contains(counts) && log.contains("== suite: FAILED"),
            "{log}"
        );
        assert!(suite_log.trim_end().ends_with(counts), "{suite_log}");
        assert!(suite_log.contains("b fails"), "{suite_log}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn suite_step_names_the_test_that_crashed_and_counts_the_others() {
        let Some((code, log, suite_log, dir)) = suite_step("burn-suite-crash", true) else {
            return;
        };
        assert_eq!(code, Some(1), "{log}");
        assert!(log.contains("running the tests one at a time"), "{log}");
        assert!(log.contains("d_may_crash: crashed or hung"), "{log}");
        let counts =
            "burn suite counts: 2 passed; 1 failed; 1 ignored; 1 crashed or hung; 0 not run (of 5)";
        assert!(log.contains(counts), "{log}");
        assert!(suite_log.contains(counts), "{suite_log}");
        assert!(
            suite_log
                .trim_end()
                .ends_with("crashed or hung: d_may_crash"),
            "{suite_log}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
