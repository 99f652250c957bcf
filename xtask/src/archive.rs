//! `cargo xtask gpu-archive`: everything a GPU machine without cargo needs to run the test
//! suite and the benchmarks (../shared/gpu/README.md), in one directory under 64 MiB.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::{which, Cmd};
use crate::gpu::GPU_ENV_SH;
use crate::{layers, opencl_runtime};

/// The runner script template (ci/gpu-run.sh.tmpl).
const RUN_SH_TEMPLATE: &str = include_str!("../../ci/gpu-run.sh.tmpl");

/// The most the archive directory may weigh (the device tool carries 64 MiB).
pub(crate) const MAX_BYTES: u64 = 64 << 20;

/// What `build` writes into the output directory (removed first, nothing else is touched).
const OUTPUTS: [&str; 9] = [
    "tests.tar.zst",
    "xpu",
    "cargo-nextest",
    "cargo-nextest.xz",
    "cl_floor",
    "cl_floor.c",
    "torch_alloc_bench.py",
    "run.sh",
    "traces",
];

/// Release settings for small binaries: no debug info, stripped.
pub(crate) const SMALL_RELEASE: [(&str, &str); 4] = [
    ("CARGO_PROFILE_RELEASE_DEBUG", "false"),
    ("CARGO_PROFILE_RELEASE_STRIP", "true"),
    ("CARGO_PROFILE_BENCH_DEBUG", "false"),
    ("CARGO_PROFILE_BENCH_STRIP", "true"),
];

/// `out` made absolute and created, with the archive's earlier `outputs` in it removed.
pub(crate) fn prepare_out(out: &Path, outputs: &[&str]) -> Result<PathBuf> {
    let out = if out.is_absolute() {
        out.to_path_buf()
    } else {
        std::env::current_dir()?.join(out)
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    for name in outputs {
        let p = out.join(name);
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else if p.exists() {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(out)
}

/// [`SMALL_RELEASE`] as the environment of a cargo command.
pub(crate) fn small_release_envs() -> Vec<(String, String)> {
    SMALL_RELEASE
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// One of `count` parts of the test suite (`--part K/N`): the workspace's packages split so
/// that each part's archive, with the working tree beside it, fits one device call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    /// From 1.
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Part {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a part K/N with 1 <= K <= N (e.g. 1/2)");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            k.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

/// The packages whose tests the archive holds, from `cargo metadata` output: every workspace
/// package but xpu-burn (burn's suite has an archive of its own, `gpu-archive-burn`: both
/// together pass the 64 MiB a device call carries), or those of `part` (packages by test
/// targets, most first, each to the part with the fewest so far).
fn archived_packages(metadata: &serde_json::Value, part: Option<Part>) -> Vec<String> {
    let mut packages: Vec<(usize, String)> = metadata["packages"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let targets = p["targets"].as_array().map_or(0, Vec::len);
            (name != "xpu-burn").then(|| (targets, name.to_owned()))
        })
        .collect();
    let Some(part) = part else {
        let mut all: Vec<String> = packages.into_iter().map(|p| p.1).collect();
        all.sort();
        return all;
    };
    packages.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut load = vec![0usize; part.count];
    let mut mine = Vec::new();
    for (targets, name) in packages {
        let (least, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(i, l)| (*l, i))
            .unwrap_or((0, &0));
        load[least] += targets.max(1);
        if least + 1 == part.index {
            mine.push(name);
        }
    }
    mine.sort();
    mine
}

/// Builds the GPU archive into `out`: the whole suite, or one `part` of it.
pub(crate) fn build(root: &Path, out: &Path, part: Option<Part>) -> Result<()> {
    let out = prepare_out(out, &OUTPUTS)?;
    let envs = small_release_envs();
    let nextest = nextest_binary().context(
        "cargo-nextest is needed to build the archive: cargo install cargo-nextest --locked",
    )?;
    let packages = archived_packages(&layers::metadata(root)?, part);
    if let Some(part) = part {
        println!(
            "==> part {}/{} of the suite: {}",
            part.index,
            part.count,
            packages.join(" ")
        );
    }

    Cmd::cargo()
        .args(["nextest", "archive"])
        .args(packages.iter().flat_map(|p| ["-p", p.as_str()]))
        .args([
            "--release",
            // zstd's level 19 instead of its default: 41.7 -> 17.2 MiB (2026-12-03), so the
            // archive stays under the 64 MiB a call carries with the working tree beside it.
            "--zstd-level",
            "19",
            "--archive-file",
        ])
        .arg(out.join("tests.tar.zst"))
        .envs(&envs)
        .current_dir(root)
        .run_step("archive-tests")?;
    Cmd::cargo()
        .args(["build", "--release", "-p", "xpu-cli", "--bin", "xpu"])
        .envs(&envs)
        .current_dir(root)
        .run_step("build-xpu")?;
    let target_dir = layers::metadata(root)?["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata gives no target_directory")?;
    copy(&target_dir.join("release/xpu"), &out.join("xpu"))?;
    copy(&nextest, &out.join("cargo-nextest"))?;
    strip(&out.join("cargo-nextest"));
    compress_nextest(&out);

    let shared = root.join("../shared");
    build_floor(&shared.join("gpu/cl_floor.c"), &out)?;
    let torch = shared.join("gpu/torch_alloc_bench.py");
    if torch.is_file() {
        copy(&torch, &out.join("torch_alloc_bench.py"))?;
    } else {
        println!("==> {} not found: no PyTorch comparison", torch.display());
    }
    copy_traces(&shared.join("traces"), &out.join("traces"))?;

    let run_sh = out.join("run.sh");
    std::fs::write(&run_sh, render_run_sh(&remap_expr(root, &out)))
        .with_context(|| format!("cannot write {}", run_sh.display()))?;
    set_executable(&run_sh)?;
    exclude_from_git(root, &out, "/.gpu/")?;
    report_size(root, &out)
}

/// The `cargo-nextest` binary: in `PATH`, else in `$CARGO_HOME/bin` (`~/.cargo/bin`).
pub(crate) fn nextest_binary() -> Option<PathBuf> {
    which("cargo-nextest").or_else(|| {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        Some(home.join("bin/cargo-nextest")).filter(|p| p.is_file())
    })
}

#[cfg(test)]
/// What a relocated archive run needs of the workspace: the root manifest (nextest checks
/// it), the package directories (the tests' working directories) and the data they read.
const RELOCATED_TREE: [&str; 3] = ["Cargo.toml", "crates/xpu-cli", "data/traces"];

#[cfg(test)]
/// Whether a mount namespace can be made here (`unshare -rm`): then a relocated run can hide
/// the build tree, so a test that reads a build-time path fails as it would on another
/// machine.
fn can_hide_build_tree() -> bool {
    which("unshare").is_some()
        && Cmd::new("unshare")
            .args(["-rm", "true"])
            .output()
            .is_some_and(|o| o.status.success())
}

#[cfg(test)]
/// The archive's promise, checked on one package: archives the `package` tests (debug,
/// `cargo nextest archive`) into `work/archive.tar.zst`, copies what they read of the
/// workspace ([`RELOCATED_TREE`]) to `work/tree`, and runs the archive from `work/run` with
/// `--workspace-remap work/tree`, with the build tree hidden (an empty directory mounted
/// over it in a mount namespace) where `unshare -rm` works. `envs` go to the run. Returns
/// whether the build tree was hidden and the run's output.
///
/// # Errors
/// No cargo-nextest, a failed archive, or a failed run (its output in the error).
pub(crate) fn relocated_run(
    root: &Path,
    package: &str,
    work: &Path,
    envs: &[(&str, &str)],
) -> Result<(bool, String)> {
    let nextest = nextest_binary()
        .context("cargo-nextest is not installed: cargo install cargo-nextest --locked")?;
    let archive = work.join("archive.tar.zst");
    let out = Cmd::new(&nextest)
        .args(["nextest", "archive", "-p", package, "--archive-file"])
        .arg(&archive)
        .current_dir(root)
        .output()
        .context("cannot run cargo-nextest")?;
    if !out.status.success() {
        bail!(
            "cargo nextest archive -p {package} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tree = work.join("tree");
    for rel in RELOCATED_TREE {
        copy_tree(&root.join(rel), &tree.join(rel))?;
    }
    let run_dir = work.join("run");
    std::fs::create_dir_all(&run_dir)?;
    let hide = can_hide_build_tree() && !work.starts_with(root);
    let mut cmd = if hide {
        let empty = work.join("empty");
        std::fs::create_dir_all(&empty)?;
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "-rm",
            "sh",
            "-c",
            "mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"",
            "sh",
        ])
        .arg(&empty)
        .arg(root)
        .arg(&nextest);
        cmd
    } else {
        std::process::Command::new(&nextest)
    };
    cmd.args(["nextest", "run", "--no-fail-fast", "--archive-file"])
        .arg(&archive)
        .arg("--workspace-remap")
        .arg(&tree)
        .current_dir(&run_dir);
    // Nothing of this (test) process's cargo or nextest environment leaks into the run.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("NEXTEST") || key.starts_with("CARGO_") || key == "CARGO" {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd.envs(envs.iter().copied());
    let out = cmd.output().context("cannot run cargo-nextest")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("the relocated archive run failed (build tree hidden: {hide}):\n{text}");
    }
    Ok((hide, text))
}

#[cfg(test)]
/// Copies a file, or a directory recursively.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        copy(from, to)
    }
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

pub(crate) fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

/// Strips a copied binary when `strip` exists (best effort: an unstripped one still works).
/// Compresses `out/cargo-nextest` to `cargo-nextest.xz` when `xz` is installed (about 18 to
/// 4.6 MiB, 2026-12-06: the working tree a device call carries beside the archive had grown
/// to 23 MiB, and the two passed the 64 MiB); run.sh unpacks it there (`xz`, else Python's
/// `lzma`). Without `xz` the binary stays as it is.
fn compress_nextest(out: &Path) {
    if which("xz").is_none() {
        println!("==> xz not found: cargo-nextest ships uncompressed");
        return;
    }
    let ok = Cmd::new("xz")
        .args(["-9", "-f"])
        .arg(out.join("cargo-nextest"))
        .output()
        .is_some_and(|o| o.status.success());
    if !ok {
        println!("==> xz failed: cargo-nextest ships uncompressed");
    }
}

pub(crate) fn strip(path: &Path) {
    if which("strip").is_some() {
        let _ = Cmd::new("strip").arg(path).output();
    }
}

/// Builds the raw OpenCL floor (`gcc -O2 cl_floor.c -lOpenCL`) and ships its source too, so
/// run.sh can build it there when it could not be built here.
fn build_floor(source: &Path, out: &Path) -> Result<()> {
    if !source.is_file() {
        println!(
            "==> {} not found: skipping the raw OpenCL floor",
            source.display()
        );
        return Ok(());
    }
    copy(source, &out.join("cl_floor.c"))?;
    let gcc = |lib: &str| {
        Cmd::new("gcc")
            .args(["-O2"])
            .arg(source)
            .arg(lib)
            .arg("-o")
            .arg(out.join("cl_floor"))
    };
    if which("gcc").is_none() {
        println!(
            "==> gcc not found: cl_floor.c is shipped and run.sh builds it on the GPU machine"
        );
        return Ok(());
    }
    if !has_cl_headers() && opencl_runtime::is_root() && which("apt-get").is_some() {
        println!("==> the OpenCL C headers are missing: installing opencl-c-headers with apt-get");
        Cmd::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "opencl-c-headers"])
            .run_step("install-cl-headers")?;
    }
    let cmd = gcc("-lOpenCL");
    println!("==> [cl-floor] {}", cmd.display());
    let built = cmd.output().is_some_and(|o| o.status.success()) || {
        // Without the -dev package there is no libOpenCL.so: link the loader by soname.
        let cmd = gcc("-l:libOpenCL.so.1");
        println!("==> [cl-floor] {}", cmd.display());
        cmd.output().is_some_and(|o| o.status.success())
    };
    if built {
        strip(&out.join("cl_floor"));
    } else {
        println!(
            "==> could not build cl_floor here (OpenCL headers: apt-get install opencl-c-headers); \
             run.sh builds it on the GPU machine from cl_floor.c"
        );
    }
    Ok(())
}

fn has_cl_headers() -> bool {
    ["/usr/include/CL/cl.h", "/usr/local/include/CL/cl.h"]
        .iter()
        .any(|p| Path::new(p).is_file())
}

fn copy_traces(from: &Path, to: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else {
        println!("==> {} not found: no traces to replay", from.display());
        return Ok(());
    };
    std::fs::create_dir_all(to)?;
    let mut n = 0;
    for entry in entries {
        let path = entry?.path();
        let is_trace = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".trace.gz"));
        if is_trace {
            copy(&path, &to.join(path.file_name().expect("has a file name")))?;
            n += 1;
        }
    }
    println!("==> copied {n} trace(s) from {}", from.display());
    Ok(())
}

/// The shell expression run.sh uses for the workspace root: the directory above the archive
/// when it sits inside the workspace (`$HERE/..`), else the working directory.
pub(crate) fn remap_expr(root: &Path, out: &Path) -> String {
    match out.strip_prefix(root) {
        Ok(rel) if rel.components().count() > 0 => {
            let up = vec![".."; rel.components().count()].join("/");
            format!("$(cd \"$HERE/{up}\" && pwd)")
        }
        _ => "$PWD".to_owned(),
    }
}

/// run.sh: the template with ci/gpu-env.sh embedded and the workspace root expression.
pub(crate) fn render_run_sh(repo_root_expr: &str) -> String {
    embed_gpu_env(RUN_SH_TEMPLATE).replace("@REPO_ROOT@", repo_root_expr)
}

/// `template` with its `@GPU_ENV@` line replaced by ci/gpu-env.sh, indented as a function
/// body.
pub(crate) fn embed_gpu_env(template: &str) -> String {
    let env = GPU_ENV_SH
        .lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("    {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    template.replace("@GPU_ENV@", &env)
}

/// Adds `default` (`/.gpu/`, say) and the output directory, when it is another one inside the
/// workspace, to .git/info/exclude.
pub(crate) fn exclude_from_git(root: &Path, out: &Path, default: &str) -> Result<()> {
    let info = root.join(".git/info");
    if !root.join(".git").is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(&info)?;
    let exclude = info.join("exclude");
    let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
    let mut wanted = vec![default.to_owned()];
    if let Ok(rel) = out.strip_prefix(root) {
        if rel.components().count() > 0 {
            wanted.push(format!("/{}/", rel.display()));
        }
    }
    let mut changed = false;
    for line in wanted {
        if !text.lines().any(|l| l.trim() == line) {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&line);
            text.push('\n');
            changed = true;
        }
    }
    if changed {
        std::fs::write(&exclude, text)
            .with_context(|| format!("cannot write {}", exclude.display()))?;
    }
    Ok(())
}

fn dir_size(path: &Path, files: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            dir_size(&entry.path(), files)?;
        } else {
            files.push((entry.path(), meta.len()));
        }
    }
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Bytes of the files git tracks in `root` (what a device call carries beside the archive;
/// `None` when git cannot list them).
fn tracked_bytes(root: &Path) -> Option<u64> {
    let out = Cmd::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .filter(|o| o.status.success())?;
    Some(
        out.stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .filter_map(|p| std::fs::metadata(root.join(String::from_utf8_lossy(p).as_ref())).ok())
            .map(|m| m.len())
            .sum(),
    )
}

/// Prints the archive's largest files and its size beside the working tree's, and fails
/// when the two together reach what one device call carries.
pub(crate) fn report_size(root: &Path, out: &Path) -> Result<()> {
    let mut files = Vec::new();
    dir_size(out, &mut files)?;
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    let total: u64 = files.iter().map(|f| f.1).sum();
    for (path, size) in files.iter().take(6) {
        let name = path.strip_prefix(out).unwrap_or(path);
        println!("    {:>10}  {}", mib(*size), name.display());
    }
    let tree = tracked_bytes(root).unwrap_or(0);
    println!(
        "==> GPU archive {}: {} in {} files, {} with the tracked working tree (limit {})",
        out.display(),
        mib(total),
        files.len(),
        mib(total + tree),
        mib(MAX_BYTES)
    );
    if total + tree >= MAX_BYTES {
        bail!(
            "the GPU archive ({}) and the tracked working tree ({}) must stay under {} together \
             (a device call carries both): build the suite in parts, `cargo xtask gpu-archive \
             --part 1/2 --out .gpu` and `--part 2/2 --out .gpu-2`, one call each",
            mib(total),
            mib(tree),
            mib(MAX_BYTES)
        );
    }
    println!(
        "==> on the GPU machine: `bash {}/run.sh` (results under $OUT)",
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_k_of_n() {
        assert_eq!("2/3".parse::<Part>(), Ok(Part { index: 2, count: 3 }));
        for bad in ["0/2", "3/2", "1", "a/2", "1/0", ""] {
            assert!(bad.parse::<Part>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_parts_split_the_packages_by_test_targets_without_burn() {
        let package = |name: &str, targets: usize| serde_json::json!({ "name": name, "targets": vec![serde_json::json!({}); targets] });
        let metadata = serde_json::json!({ "packages": [
            package("a", 40), package("b", 30), package("c", 20), package("d", 15),
            package("xpu-burn", 90), package("e", 0),
        ]});
        assert_eq!(
            archived_packages(&metadata, None),
            ["a", "b", "c", "d", "e"]
        );
        // 40 to part 1; 30, then 20 (50), to part 2; 15 to part 1 (55); e, counted as one
        // target, to part 2 (51).
        let one = archived_packages(&metadata, Some(Part { index: 1, count: 2 }));
        let two = archived_packages(&metadata, Some(Part { index: 2, count: 2 }));
        assert_eq!(one, ["a", "d"]);
        assert_eq!(two, ["b", "c", "e"]);
    }

    #[test]
    fn run_sh_embeds_the_vendor_registration_and_the_root() {
        let script = render_run_sh("$(cd \"$HERE/..\" && pwd)");
        assert!(!script.contains("@GPU_ENV@") && !script.contains("@REPO_ROOT@"));
        assert!(script.contains("    xpu_register_nvidia_icd() {"));
        assert!(script.contains("REPO_ROOT=\"${XPU_REPO_ROOT:-$(cd \"$HERE/..\" && pwd)}\""));
        assert!(script.contains("--archive-file tests.tar.zst --workspace-remap \"$REPO_ROOT\""));
        assert!(script.contains("./xpu bench --json > \"$RESULTS/bench.json\""));
        assert!(script.contains("is not the xpu workspace (no Cargo.toml or data/traces there)"));
    }

    #[test]
    fn run_sh_names_a_missing_workspace_instead_of_running_the_tests() {
        let dir = crate::test_util::scratch_dir("run-sh-no-workspace");
        let run_sh = dir.join("run.sh");
        std::fs::write(&run_sh, render_run_sh("$PWD")).unwrap();
        let results = dir.join("results");
        let out = Cmd::new("bash")
            .arg(&run_sh)
            .arg("tests")
            .env("XPU_REPO_ROOT", dir.join("nowhere").display().to_string())
            .env("OUT", results.display().to_string())
            .output()
            .expect("bash runs");
        let log = std::fs::read_to_string(results.join("run.log")).unwrap();
        assert_eq!(out.status.code(), Some(1), "{log}");
        assert!(
            log.contains("nowhere is not the xpu workspace") && log.contains("== tests: FAILED"),
            "{log}"
        );
        assert!(!results.join("tests.log").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_sh_is_valid_bash() {
        crate::test_util::assert_valid_bash(render_run_sh("$PWD"));
    }

    /// The archive built in one folder runs from another: the xpu-cli tests (which read
    /// the trace data and run the `xpu` binary) pass from a nextest archive run elsewhere
    /// with `--workspace-remap`, the build tree hidden where a mount namespace can be made.
    /// About 15 s on two cores once the tests are built.
    #[test]
    fn archived_cli_tests_pass_from_another_directory() {
        // The check builds an archive: it needs cargo and cargo-nextest (absent where the
        // GPU archive itself runs, or under a plain `cargo test` without nextest).
        let cargo_runs = Cmd::cargo()
            .arg("--version")
            .output()
            .is_some_and(|o| o.status.success());
        if nextest_binary().is_none() || !cargo_runs {
            eprintln!("skipping: cargo and cargo-nextest are needed to build an archive");
            return;
        }
        let work = crate::test_util::scratch_dir("relocated-archive");
        let pocl = std::env::var("POCL_DEVICES").unwrap_or_else(|_| "pthread pthread".into());
        let require = std::env::var("XPU_REQUIRE_DEVICE").unwrap_or_default();
        let (hidden, text) = relocated_run(
            &crate::repo_root(),
            "xpu-cli",
            &work,
            &[("POCL_DEVICES", &pocl), ("XPU_REQUIRE_DEVICE", &require)],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
        eprintln!("build tree hidden during the run: {hidden}");
        assert!(text.contains(" passed"), "{text}");
        assert!(
            text.contains("demo_runs_and_prints_the_plot_path"),
            "{text}"
        );
        std::fs::remove_dir_all(&work).unwrap();
    }

    #[test]
    fn remap_is_relative_inside_the_workspace() {
        let root = Path::new("/w/main");
        assert_eq!(
            remap_expr(root, Path::new("/w/main/.gpu")),
            "$(cd \"$HERE/..\" && pwd)"
        );
        assert_eq!(
            remap_expr(root, Path::new("/w/main/out/gpu")),
            "$(cd \"$HERE/../..\" && pwd)"
        );
        assert_eq!(remap_expr(root, Path::new("/tmp/gpu")), "$PWD");
    }
}
