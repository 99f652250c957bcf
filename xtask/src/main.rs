//! Project automation for xpu: `cargo xtask <command>` (see `cargo xtask --help`).
//!
//! Depends on neither the project crates nor OpenCL, so it builds and runs on a machine
//! without an OpenCL runtime (and installs one when allowed).
#![forbid(unsafe_code)]

mod alone;
mod archive;
mod archive_burn;
mod cmd;
mod gpu;
mod layers;
mod opencl_runtime;
mod test;

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Project automation for the xpu workspace.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make sure an OpenCL runtime exists (installs PoCL, and CLBlast, as root with apt-get),
    /// then run fmt, clippy, check-layers, rustdoc, xpu-caching's loom models (`--cfg loom`,
    /// target/loom), the facade's examples, xpu-burn's training example and burn's
    /// conformance suite, and every other test with XPU_REQUIRE_DEVICE=1 and two PoCL devices. Arguments after `--` go to the test runner (cargo nextest run / cargo test).
    Test {
        /// Extra arguments for the test runner.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run the test suite on a GPU OpenCL platform (XPU_DEVICE_TYPE=gpu, XPU_REQUIRE_DEVICE=1),
    /// registering NVIDIA's OpenCL library first when no ICD vendor file names it.
    /// Arguments after `--` go to the test runner.
    TestGpu {
        /// Extra arguments for the test runner.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Check the crate layering, that only xpu-device uses OpenCL and `unsafe`, and that
    /// every `unsafe` block there has a `// SAFETY:` comment.
    CheckLayers,
    /// Build the tests (a nextest archive), the `xpu` binary, the raw OpenCL floor and a
    /// runner script into DIR, for a GPU machine without cargo.
    GpuArchive {
        /// Output directory [default: .gpu in the workspace root].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Only part K of N of the suite (K/N, e.g. 1/2): the workspace's packages split in
        /// N, so that each part's archive fits one device call beside the working tree.
        #[arg(long, value_name = "K/N")]
        part: Option<archive::Part>,
    },
    /// Build burn's conformance suite on xpu (the burn_suite test binary), the burn training
    /// example, its PyTorch twin, the same example on burn's CUDA backend (train_cuda) and a
    /// runner script into DIR, for a GPU machine without cargo (apart from gpu-archive, which
    /// has no room for them).
    GpuArchiveBurn {
        /// Output directory [default: .gpu-burn in the workspace root].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Leave out train_cuda (it builds burn's CUDA backend: minutes).
        #[arg(long)]
        no_cuda: bool,
    },
    /// Make sure an OpenCL runtime exists, then run `xpu demo` in release mode.
    /// Arguments after `--` go to `xpu demo`.
    Demo {
        /// Extra arguments for `xpu demo`.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

/// The workspace root (the parent of the xtask package).
pub(crate) fn repo_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join("Cargo.toml").is_file() && d.ends_with("xtask"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

fn run(cli: Cli) -> Result<()> {
    let root = repo_root();
    match cli.command {
        Command::Test { args } => test::run(&root, &args),
        Command::TestGpu { args } => gpu::test_gpu(&root, &args),
        Command::CheckLayers => layers::check(&root),
        Command::GpuArchive { out, part } => {
            let out = out.unwrap_or_else(|| root.join(".gpu"));
            archive::build(&root, &out, part)
        }
        Command::GpuArchiveBurn { out, no_cuda } => {
            let out = out.unwrap_or_else(|| root.join(archive_burn::DEFAULT_DIR));
            archive_burn::build(&root, &out, !no_cuda)
        }
        Command::Demo { args } => {
            opencl_runtime::ensure()?;
            cmd::Cmd::cargo()
                .args([
                    "run",
                    "--release",
                    "-p",
                    "xpu-cli",
                    "--bin",
                    "xpu",
                    "--",
                    "demo",
                ])
                .args(args)
                .current_dir(&root)
                .run_step("demo")
        }
    }
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh, empty directory under the system temp dir, unique per call.
    pub(crate) fn scratch_dir(tag: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtask-test-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch dir");
        dir
    }

    /// Asserts that `bash -n` accepts `script` (it parses; nothing runs).
    pub(crate) fn assert_valid_bash(script: String) {
        let out = crate::cmd::Cmd::new("bash")
            .args(["-n", "-c"])
            .arg(script)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn extra_args_after_double_dash_reach_the_runner() {
        let cli = Cli::try_parse_from(["xtask", "test", "--", "-p", "xpu-device", "--no-capture"])
            .unwrap();
        match cli.command {
            Command::Test { args } => assert_eq!(args, ["-p", "xpu-device", "--no-capture"]),
            other => panic!("parsed as {other:?}"),
        }
        let cli = Cli::try_parse_from(["xtask", "gpu-archive", "--out", "/tmp/g"]).unwrap();
        match cli.command {
            Command::GpuArchive { out, part } => {
                assert_eq!(out, Some(PathBuf::from("/tmp/g")));
                assert_eq!(part, None);
            }
            other => panic!("parsed as {other:?}"),
        }
        let cli = Cli::try_parse_from(["xtask", "gpu-archive", "--part", "2/2"]).unwrap();
        match cli.command {
            Command::GpuArchive { part, .. } => {
                assert_eq!(part, Some(archive::Part { index: 2, count: 2 }));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["xtask", "gpu-archive", "--part", "3/2"]).is_err());
        let cli = Cli::try_parse_from(["xtask", "gpu-archive-burn", "--out", "/tmp/b"]).unwrap();
        match cli.command {
            Command::GpuArchiveBurn { out, no_cuda } => {
                assert_eq!(out, Some(PathBuf::from("/tmp/b")));
                assert!(!no_cuda);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn repo_root_holds_the_workspace_manifest() {
        let root = repo_root();
        assert!(root.join("Cargo.toml").is_file(), "{}", root.display());
        assert!(root.join("xtask").is_dir());
    }
}
