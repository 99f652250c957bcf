//! `cargo xtask test-gpu`: the test suite on a GPU OpenCL platform, with NVIDIA's OpenCL
//! library registered through a temporary `OCL_ICD_VENDORS` directory when needed.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::cmd::{which, Cmd};
use crate::{opencl_runtime, test};

/// ci/gpu-env.sh: the vendor-file registration, shared with the GPU runner script.
pub(crate) const GPU_ENV_SH: &str = include_str!("../../ci/gpu-env.sh");

/// Registers NVIDIA's OpenCL library when no vendor file names it (through ci/gpu-env.sh),
/// echoing what it did; returns the environment to set (`OCL_ICD_VENDORS`), if any.
pub(crate) fn register_nvidia_icd() -> Result<Vec<(String, String)>> {
    let cmd = Cmd::new("bash").arg("-c").arg(GPU_ENV_SH).arg("gpu-env.sh");
    let out = cmd
        .output()
        .context("cannot run bash for the ICD vendor registration (ci/gpu-env.sh)")?;
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        println!("==> {line}");
    }
    if !out.status.success() {
        bail!("ci/gpu-env.sh failed: {}", out.status);
    }
    Ok(parse_export(&String::from_utf8_lossy(&out.stdout))
        .map(|dir| vec![("OCL_ICD_VENDORS".to_owned(), dir)])
        .unwrap_or_default())
}

/// The value of an `export OCL_ICD_VENDORS='...'` line printed by ci/gpu-env.sh.
pub(crate) fn parse_export(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| {
        let quoted = l.trim().strip_prefix("export OCL_ICD_VENDORS=")?;
        let inner = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
        Some(inner.replace(r"'\''", "'"))
    })
}

/// One OpenCL device as `clinfo --raw` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClDevice {
    pub(crate) platform: String,
    pub(crate) name: String,
    pub(crate) is_gpu: bool,
}

/// The devices in `clinfo --raw` output (`[TAG/N] CL_DEVICE_NAME ...` and
/// `[TAG/N] CL_DEVICE_TYPE CL_DEVICE_TYPE_GPU` lines; `[TAG/*] CL_PLATFORM_NAME ...`).
pub(crate) fn parse_clinfo_raw(out: &str) -> Vec<ClDevice> {
    let mut platforms: Vec<(String, String)> = Vec::new();
    let mut devices: Vec<(String, ClDevice)> = Vec::new();
    for line in out.lines() {
        let line = line.trim();
        let Some((tag, rest)) = line.strip_prefix('[').and_then(|l| l.split_once(']')) else {
            continue;
        };
        let rest = rest.trim_start();
        let (key, value) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let value = value.trim();
        let (platform_tag, index) = tag.split_once('/').unwrap_or((tag, ""));
        if index == "*" && key == "CL_PLATFORM_NAME" {
            platforms.push((platform_tag.to_owned(), value.to_owned()));
            continue;
        }
        if index.is_empty() || index == "*" {
            continue;
        }
        let position = devices.iter().position(|(t, _)| t == tag);
        let entry = match position {
            Some(p) => &mut devices[p].1,
            None => {
                devices.push((
                    tag.to_owned(),
                    ClDevice {
                        platform: platform_tag.to_owned(),
                        name: String::new(),
                        is_gpu: false,
                    },
                ));
                &mut devices.last_mut().expect("just pushed").1
            }
        };
        match key {
            "CL_DEVICE_NAME" => entry.name = value.to_owned(),
            "CL_DEVICE_TYPE" => entry.is_gpu = value.contains("CL_DEVICE_TYPE_GPU"),
            _ => {}
        }
    }
    for (_, device) in &mut devices {
        if let Some((_, name)) = platforms.iter().find(|(t, _)| *t == device.platform) {
            device.platform.clone_from(name);
        }
    }
    devices.into_iter().map(|(_, d)| d).collect()
}

fn describe(devices: &[ClDevice]) -> String {
    if devices.is_empty() {
        return "no OpenCL device at all".to_owned();
    }
    devices
        .iter()
        .map(|d| {
            let kind = if d.is_gpu { "GPU" } else { "not a GPU" };
            format!("{} on {} ({kind})", d.name, d.platform)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The suite on a GPU: registration, a GPU check through clinfo, then every test.
pub(crate) fn test_gpu(root: &Path, extra: &[String]) -> Result<()> {
    let mut envs = register_nvidia_icd()?;
    if which("clinfo").is_some() {
        let out = Cmd::new("clinfo")
            .arg("--raw")
            .envs(&envs)
            .stdout_if_ok()
            .unwrap_or_default();
        let devices = parse_clinfo_raw(&out);
        let gpus: Vec<&ClDevice> = devices.iter().filter(|d| d.is_gpu).collect();
        if gpus.is_empty() {
            bail!(
                "no GPU OpenCL platform found: `clinfo --raw` sees {}. Install the GPU's OpenCL \
                 driver (NVIDIA: libnvidia-opencl.so.1, registered by an ICD vendor file)",
                describe(&devices)
            );
        }
        let names: Vec<String> = gpus
            .iter()
            .map(|d| format!("{} on {}", d.name, d.platform))
            .collect();
        println!("==> GPU OpenCL device(s): {}", names.join("; "));
    } else {
        if opencl_runtime::find_loader().is_none() {
            bail!(
                "no GPU OpenCL platform found: the OpenCL ICD loader libOpenCL.so.1 is not \
                 installed (Debian/Ubuntu: apt-get install ocl-icd-libopencl1)"
            );
        }
        println!(
            "==> clinfo is not installed, so no GPU check up front: with XPU_REQUIRE_DEVICE=1 \
             the device tests fail if they find no GPU (apt-get install clinfo to check first)"
        );
    }
    envs.push(("XPU_DEVICE_TYPE".to_owned(), "gpu".to_owned()));
    envs.push(("XPU_REQUIRE_DEVICE".to_owned(), "1".to_owned()));
    test::run_tests(root, &envs, extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::scratch_dir;

    #[test]
    fn export_lines_are_unquoted() {
        assert_eq!(
            parse_export("export OCL_ICD_VENDORS='/tmp/xpu-icd.abc'\n"),
            Some("/tmp/xpu-icd.abc".to_owned())
        );
        assert_eq!(
            parse_export(r"export OCL_ICD_VENDORS='/tmp/it'\''s'"),
            Some("/tmp/it's".to_owned())
        );
        assert_eq!(parse_export(""), None);
    }

    #[test]
    fn clinfo_raw_output_gives_gpus_and_their_platforms() {
        let out = "Number of platforms                               2\n\
            [NV/*]      CL_PLATFORM_NAME                          NVIDIA CUDA\n\
            [POCL/*]    CL_PLATFORM_NAME                          Portable Computing Language\n\
            [NV/0]      CL_DEVICE_NAME                            NVIDIA H200\n\
            [NV/0]      CL_DEVICE_TYPE                            CL_DEVICE_TYPE_GPU\n\
            [POCL/0]    CL_DEVICE_NAME                            pthread-haswell-AMD EPYC\n\
            [POCL/0]    CL_DEVICE_TYPE                            CL_DEVICE_TYPE_CPU\n";
        let devices = parse_clinfo_raw(out);
        assert_eq!(
            devices,
            vec![
                ClDevice {
                    platform: "NVIDIA CUDA".to_owned(),
                    name: "NVIDIA H200".to_owned(),
                    is_gpu: true
                },
                ClDevice {
                    platform: "Portable Computing Language".to_owned(),
                    name: "pthread-haswell-AMD EPYC".to_owned(),
                    is_gpu: false
                },
            ]
        );
        assert_eq!(
            describe(&devices[1..]),
            "pthread-haswell-AMD EPYC on Portable Computing Language (not a GPU)"
        );
        assert!(parse_clinfo_raw("").is_empty());
    }

    /// Runs ci/gpu-env.sh (as `bash -c`, like `register_nvidia_icd`) on a fake layout.
    fn run_script(system: &Path, candidates: &str, vendors: Option<&Path>) -> (String, String) {
        let mut cmd = Cmd::new("bash")
            .arg("-c")
            .arg(GPU_ENV_SH)
            .arg("gpu-env.sh")
            .env("XPU_ICD_SYSTEM_DIR", system.display().to_string())
            .env("XPU_NVIDIA_OPENCL_CANDIDATES", candidates)
            .env("OCL_ICD_VENDORS", "")
            .env("OCL_ICD_FILENAMES", "")
            .env("XPU_NVIDIA_OPENCL_LIB", "");
        if let Some(v) = vendors {
            cmd = cmd.env("OCL_ICD_VENDORS", v.display().to_string());
        }
        let out = cmd.output().expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn the_script_registers_an_unnamed_nvidia_library_next_to_existing_vendors() {
        let dir = scratch_dir("gpu-env");
        let system = dir.join("vendors");
        std::fs::create_dir_all(&system).unwrap();
        std::fs::write(system.join("pocl.icd"), "libpocl.so.2\n").unwrap();
        let lib = dir.join("libnvidia-opencl.so.1");
        std::fs::write(&lib, "").unwrap();
        let candidates = format!("{}/missing.so {}", dir.display(), lib.display());

        let (stdout, stderr) = run_script(&system, &candidates, None);
        let registered = parse_export(&stdout).expect("an export line");
        let registered = Path::new(&registered);
        assert!(
            stderr.contains("registered NVIDIA OpenCL library"),
            "{stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(registered.join("xpu-nvidia.icd")).unwrap(),
            format!("{}\n", lib.display())
        );
        // The existing vendor stays visible (OCL_ICD_VENDORS replaces /etc/OpenCL/vendors).
        assert_eq!(
            std::fs::read_to_string(registered.join("pocl.icd")).unwrap(),
            "libpocl.so.2\n"
        );

        // Run again with the new directory: already registered, nothing printed to export.
        let (stdout, stderr) = run_script(&system, &candidates, Some(registered));
        assert_eq!(stdout, "");
        assert!(stderr.contains("already registered"), "{stderr}");

        std::fs::remove_dir_all(registered).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_script_leaves_things_alone_without_a_library_or_when_named() {
        let dir = scratch_dir("gpu-env-none");
        let system = dir.join("vendors");
        std::fs::create_dir_all(&system).unwrap();
        let (stdout, stderr) = run_script(&system, "/nonexistent/libnvidia-opencl.so.1", None);
        assert_eq!(stdout, "");
        assert!(stderr.contains("no NVIDIA OpenCL library"), "{stderr}");

        std::fs::write(system.join("nvidia.icd"), "libnvidia-opencl.so.1\n").unwrap();
        let lib = dir.join("libnvidia-opencl.so.1");
        std::fs::write(&lib, "").unwrap();
        let (stdout, stderr) = run_script(&system, &lib.display().to_string(), None);
        assert_eq!(stdout, "");
        assert!(stderr.contains("already registered by"), "{stderr}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
