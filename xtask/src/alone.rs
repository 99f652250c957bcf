//! Without cargo-nextest: every test of the workspace in a process of its own, as nextest runs
//! them, several processes at a time. A test binary's tests share one process under plain
//! `cargo test`, and many of this workspace's tests read or set process-wide state (the
//! device allocators and their statistics and snapshots, a memory fraction, the allocator's
//! configuration, lazy initialization, exit behaviour), so they are written for nextest's
//! process per test: under `cargo test` a test that counts the device's segments saw its
//! neighbour's (`xpu-alloc`'s `dropped_pool_teardown_snapshot`, 5 of 5 runs). The binaries
//! that nextest's configuration runs alone (`.config/nextest.toml`, the `binary(...)` names
//! of its override) run after the others, one test at a time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{ensure, Context, Result};

use crate::cmd::{artifacts, Cmd};

/// One test: its binary (the executable, cargo's target name) and the package directory that
/// `cargo test` runs it from.
#[derive(Debug)]
struct OneTest {
    exe: PathBuf,
    dir: PathBuf,
    binary: String,
    name: String,
}

/// Builds every test target of the workspace and runs each test but those of the binaries
/// `skip` names (burn's suite, which the burn step ran) in a process of its own with `envs`;
/// the summary names every failed test.
///
/// # Errors
/// A failed build or listing, or any failed test.
pub(crate) fn run(root: &Path, envs: &[(String, String)], skip: &[&str]) -> Result<()> {
    let messages = Cmd::cargo()
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format",
            "json-render-diagnostics",
        ])
        .envs(envs)
        .current_dir(root)
        .stdout_of_step("build tests")?;
    let (mut tests, mut skipped) = (Vec::new(), 0usize);
    for (exe, dir, binary) in test_executables(&messages) {
        if skip.contains(&binary.as_str()) {
            continue;
        }
        let list = |ignored: bool| {
            Cmd::new(&exe)
                .args(["--list", "--format", "terse"])
                .args(ignored.then_some("--ignored"))
                .envs(envs)
                .env("CARGO_MANIFEST_DIR", dir.display().to_string())
                .current_dir(&dir)
                .stdout_if_ok()
                .with_context(|| format!("listing the tests of {}", exe.display()))
        };
        let (all, ignored) = (list(false)?, list(true)?);
        let ignored: BTreeSet<&str> = test_names(&ignored).collect();
        skipped += ignored.len();
        tests.extend(
            test_names(&all)
                .filter(|name| !ignored.contains(name))
                .map(|name| OneTest {
                    exe: exe.clone(),
                    dir: dir.clone(),
                    binary: binary.clone(),
                    name: name.to_owned(),
                }),
        );
    }
    let alone = binaries_run_alone(root)?;
    let (solo, shared): (Vec<OneTest>, Vec<OneTest>) =
        tests.into_iter().partition(|t| alone.contains(&t.binary));
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    println!(
        "==> [tests] {} tests, each in a process of its own ({workers} at a time; the {} tests of the binaries nextest runs alone: one at a time, after the others)",
        shared.len() + solo.len(),
        solo.len()
    );
    let failed = Mutex::new(Vec::new());
    run_each(&shared, workers, envs, &failed);
    run_each(&solo, 1, envs, &failed);
    let failed = failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    println!(
        "==> tests: {} run, {} failed, {skipped} ignored (not run)",
        shared.len() + solo.len(),
        failed.len()
    );
    ensure!(failed.is_empty(), "tests failed: {}", failed.join(", "));
    Ok(())
}

/// Runs `tests` on `workers` threads, each test with `--exact` in a process of its own;
/// prints a failed test's output and adds `binary::name` to `failed`.
fn run_each(
    tests: &[OneTest],
    workers: usize,
    envs: &[(String, String)],
    failed: &Mutex<Vec<String>>,
) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| loop {
                let Some(t) = tests.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                let out = Cmd::new(&t.exe)
                    .args(["--exact", t.name.as_str()])
                    .envs(envs)
                    .env("CARGO_MANIFEST_DIR", t.dir.display().to_string())
                    .current_dir(&t.dir)
                    .output();
                let ok = out.as_ref().is_some_and(|o| o.status.success());
                if !ok {
                    let text = out.map_or_else(
                        || "could not start".to_owned(),
                        |o| {
                            format!(
                                "{}\n{}\n{}",
                                o.status,
                                String::from_utf8_lossy(&o.stdout),
                                String::from_utf8_lossy(&o.stderr)
                            )
                        },
                    );
                    println!("FAIL {} {}\n{text}", t.binary, t.name);
                    failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("{}::{}", t.binary, t.name));
                }
            });
        }
    });
}

/// The test names of a libtest `--list --format terse` output.
fn test_names(list: &str) -> impl Iterator<Item = &str> {
    list.lines().filter_map(|l| l.strip_suffix(": test"))
}

/// The test executables in cargo's JSON messages: (executable, package directory, target
/// name), one per test target (unit tests of a library or binary, integration tests).
fn test_executables(messages: &str) -> Vec<(PathBuf, PathBuf, String)> {
    let mut seen = BTreeSet::new();
    artifacts(messages)
        .filter(|m| m["profile"]["test"] == true)
        .filter_map(|m| {
            let exe = PathBuf::from(m["executable"].as_str()?);
            let dir = Path::new(m["manifest_path"].as_str()?)
                .parent()?
                .to_path_buf();
            let name = m["target"]["name"].as_str()?.to_owned();
            seen.insert(exe.clone()).then_some((exe, dir, name))
        })
        .collect()
}

/// The binaries that nextest's configuration runs alone: the `binary(NAME)` terms of
/// `.config/nextest.toml` (its one override, `threads-required = "num-test-threads"`).
///
/// # Errors
/// The file cannot be read.
fn binaries_run_alone(root: &Path) -> Result<BTreeSet<String>> {
    let path = root.join(".config/nextest.toml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(binary_terms(&text))
}

/// The names inside `binary(...)` in `text`.
fn binary_terms(text: &str) -> BTreeSet<String> {
    text.split("binary(")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binaries run alone are the ones nextest's configuration names, and each is a test
    /// file of the workspace (a rename would otherwise let an exit test run beside others).
    #[test]
    fn the_binaries_run_alone_are_nextests_and_exist() {
        let root = crate::repo_root();
        let names = binaries_run_alone(&root).unwrap();
        assert!(names.contains("exit_drain_and_cap"), "{names:?}");
        assert!(names.len() >= 6, "{names:?}");
        for name in &names {
            let found = std::fs::read_dir(root.join("crates"))
                .unwrap()
                .filter_map(Result::ok)
                .any(|c| c.path().join(format!("tests/{name}.rs")).is_file());
            assert!(found, "no test file {name}.rs in any crate");
        }
    }

    #[test]
    fn binary_terms_are_read_from_a_filter() {
        let names = binary_terms("filter = 'binary(a_b) | binary( c ) | test(x)'");
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a_b", "c"]);
    }
}
