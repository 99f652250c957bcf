//! Finding an OpenCL runtime (ICD loader + at least one platform) and installing PoCL when
//! there is none and we are allowed to.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::cmd::{which, Cmd};

/// The Debian packages that give a CPU OpenCL platform (PoCL) and the ICD loader.
pub(crate) const PACKAGES: [&str; 2] = ["pocl-opencl-icd", "ocl-icd-libopencl1"];

/// Where the ICD loader looks for vendor files when `OCL_ICD_VENDORS` is not set.
pub(crate) const SYSTEM_VENDOR_DIR: &str = "/etc/OpenCL/vendors";

/// Directories searched for `libOpenCL.so.1` when `ldconfig` is unavailable.
const LOADER_DIRS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// The outcome of looking for an OpenCL runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detection {
    /// A runtime is there; the text says what was seen.
    Found(String),
    /// No usable runtime; the text says what is missing.
    Missing(String),
}

/// Looks for an OpenCL runtime: `clinfo -l` when clinfo is installed, else the ICD loader
/// (`libOpenCL.so.1` through `ldconfig -p`) plus at least one ICD vendor file.
pub(crate) fn detect() -> Detection {
    if which("clinfo").is_some() {
        if let Some(out) = Cmd::new("clinfo").arg("-l").stdout_if_ok() {
            let platforms = parse_clinfo_list(&out);
            return if platforms.is_empty() {
                Detection::Missing("`clinfo -l` lists no OpenCL platform".to_owned())
            } else {
                Detection::Found(format!("`clinfo -l` lists {}", platforms.join(", ")))
            };
        }
    }
    let loader = find_loader();
    let vendors = vendor_files();
    match (loader, vendors.is_empty()) {
        (None, _) => Detection::Missing(
            "the OpenCL ICD loader libOpenCL.so.1 is not installed (not in `ldconfig -p`)"
                .to_owned(),
        ),
        (Some(_), true) => Detection::Missing(format!(
            "no ICD vendor file (*.icd) in {}: no OpenCL platform is registered",
            vendor_source()
        )),
        (Some(loader), false) => Detection::Found(format!(
            "loader {} and vendor file(s) {}",
            loader.display(),
            vendors
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Platform names from `clinfo -l` output (`Platform #0: NAME` lines).
pub(crate) fn parse_clinfo_list(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix("Platform #"))
        .filter_map(|rest| rest.split_once(':'))
        .map(|(_, name)| name.trim().to_owned())
        .collect()
}

/// The path of `libOpenCL.so.1` from `ldconfig -p`, else from the usual library directories.
pub(crate) fn find_loader() -> Option<PathBuf> {
    find_library("libOpenCL.so.1")
}

/// The path of shared library `name` from `ldconfig -p`, else from the usual library
/// directories ([`LOADER_DIRS`]).
fn find_library(name: &str) -> Option<PathBuf> {
    let ldconfig = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find_map(|p| Cmd::new(p).arg("-p").stdout_if_ok());
    if let Some(found) = ldconfig.as_deref().and_then(|o| parse_ldconfig(o, name)) {
        return Some(found);
    }
    LOADER_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// The path that `ldconfig -p` output gives for library `name`.
pub(crate) fn parse_ldconfig(out: &str, name: &str) -> Option<PathBuf> {
    out.lines()
        .filter(|l| l.trim_start().starts_with(&format!("{name} ")))
        .find_map(|l| l.split_once("=>").map(|(_, p)| PathBuf::from(p.trim())))
}

/// Where the loader takes its vendor files from, for messages.
fn vendor_source() -> String {
    match std::env::var("OCL_ICD_VENDORS") {
        Ok(v) if !v.is_empty() => format!("OCL_ICD_VENDORS={v}"),
        _ => SYSTEM_VENDOR_DIR.to_owned(),
    }
}

/// The ICD vendor files the loader reads: those of `$OCL_ICD_VENDORS` (a directory, or one
/// file) when it is set, else those of /etc/OpenCL/vendors.
pub(crate) fn vendor_files() -> Vec<PathBuf> {
    match std::env::var_os("OCL_ICD_VENDORS") {
        Some(v) if v.is_empty() => icd_files_in(Path::new(SYSTEM_VENDOR_DIR)),
        Some(v) if Path::new(&v).is_file() => vec![PathBuf::from(v)],
        Some(v) => icd_files_in(Path::new(&v)),
        None => icd_files_in(Path::new(SYSTEM_VENDOR_DIR)),
    }
}

/// The `*.icd` files of `dir`, sorted; empty when it cannot be read.
pub(crate) fn icd_files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "icd") && p.is_file())
        .collect();
    files.sort();
    files
}

/// Makes sure an OpenCL runtime exists. When none is found and we are root with apt-get,
/// installs PoCL and says so; otherwise fails with the exact install command.
pub(crate) fn ensure() -> Result<()> {
    let reason = match detect() {
        Detection::Found(what) => {
            println!("==> OpenCL runtime found: {what}");
            return Ok(());
        }
        Detection::Missing(reason) => reason,
    };
    let root = is_root();
    let apt = which("apt-get").is_some();
    if !(root && apt) {
        bail!(
            "no OpenCL runtime found: {reason}.\n{}",
            install_advice(root, apt)
        );
    }
    println!("==> no OpenCL runtime found: {reason}.");
    println!(
        "==> installing PoCL (a CPU OpenCL platform) and the ICD loader with apt-get, as root"
    );
    let hint = "check the network and the apt sources, or install the packages by hand";
    Cmd::new("apt-get")
        .arg("update")
        .hint(hint)
        .run_step("install-opencl")?;
    Cmd::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y"])
        .args(PACKAGES)
        .hint(hint)
        .run_step("install-opencl")?;
    match detect() {
        Detection::Found(what) => {
            println!("==> installed PoCL; OpenCL runtime found: {what}");
            Ok(())
        }
        Detection::Missing(reason) => {
            bail!(
                "installed {} but still no OpenCL runtime: {reason}",
                PACKAGES.join(" ")
            )
        }
    }
}

/// The Debian package of CLBlast, the OpenCL BLAS that the `clblast_gemm` example loads at
/// run time (no crate links it).
pub(crate) const CLBLAST_PACKAGE: &str = "libclblast1";

/// The shared library the example loads.
pub(crate) const CLBLAST_LIBRARY: &str = "libclblast.so.1";

/// Where CLBlast is, from `ldconfig -p`, else the usual library directories.
pub(crate) fn find_clblast() -> Option<PathBuf> {
    find_library(CLBLAST_LIBRARY)
}

/// Makes CLBlast available for the `clblast_gemm` example, as [`ensure`] does PoCL: found,
/// or installed with apt-get when running as root (`true`: the example must run it for
/// real); otherwise prints the install command and returns `false` (the example skips).
///
/// # Errors
/// A failed `apt-get` run as root, or CLBlast still missing after installing it.
pub(crate) fn ensure_clblast() -> Result<bool> {
    if let Some(path) = find_clblast() {
        println!("==> CLBlast found: {}", path.display());
        return Ok(true);
    }
    let root = is_root();
    if !(root && which("apt-get").is_some()) {
        let sudo = if root { "" } else { "sudo " };
        println!(
            "==> CLBlast ({CLBLAST_LIBRARY}) is not installed: the clblast_gemm example will \
             skip. Install it with:\n    {sudo}apt-get install -y {CLBLAST_PACKAGE}"
        );
        return Ok(false);
    }
    println!("==> installing CLBlast ({CLBLAST_PACKAGE}) with apt-get, as root");
    let hint = "check the network and the apt sources, or install libclblast1 by hand";
    Cmd::new("apt-get")
        .arg("update")
        .hint(hint)
        .run_step("install-clblast")?;
    Cmd::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", CLBLAST_PACKAGE])
        .hint(hint)
        .run_step("install-clblast")?;
    match find_clblast() {
        Some(path) => {
            println!("==> installed CLBlast: {}", path.display());
            Ok(true)
        }
        None => bail!("installed {CLBLAST_PACKAGE} but {CLBLAST_LIBRARY} is still not found"),
    }
}

/// What to tell a user who has to install the runtime themselves.
pub(crate) fn install_advice(root: bool, apt: bool) -> String {
    let (sudo, sudo_env) = if root {
        ("", "")
    } else {
        ("sudo ", "sudo env ")
    };
    let cmd = format!(
        "{sudo}apt-get update && {sudo_env}DEBIAN_FRONTEND=noninteractive apt-get install -y {}",
        PACKAGES.join(" ")
    );
    if apt {
        format!(
            "Install PoCL (a CPU OpenCL platform) and the ICD loader:\n    {cmd}\n\
             (or run `cargo xtask` as root with apt-get: it installs them itself)"
        )
    } else {
        format!(
            "apt-get is not available: install an OpenCL ICD loader (libOpenCL.so.1) and a \
             platform such as PoCL with your package manager. On Debian/Ubuntu:\n    {cmd}"
        )
    }
}

/// Whether this process runs as root (`id -u` is 0).
pub(crate) fn is_root() -> bool {
    Cmd::new("id")
        .arg("-u")
        .stdout_if_ok()
        .is_some_and(|s| s.trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clinfo_list_gives_platform_names() {
        let out = "Platform #0: Portable Computing Language\n \
                   `-- Device #0: pthread-haswell\nPlatform #1: NVIDIA CUDA\n \
                   `-- Device #0: NVIDIA H200\n";
        assert_eq!(
            parse_clinfo_list(out),
            vec!["Portable Computing Language", "NVIDIA CUDA"]
        );
        assert!(parse_clinfo_list("").is_empty());
    }

    #[test]
    fn ldconfig_output_gives_the_loader_path() {
        let out = "1234 libs found in cache `/etc/ld.so.cache'\n\
                   \tlibOpenCL.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libOpenCL.so.1\n\
                   \tlibOpenCL.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libOpenCL.so\n";
        assert_eq!(
            parse_ldconfig(out, "libOpenCL.so.1"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libOpenCL.so.1"))
        );
        assert_eq!(
            parse_ldconfig(out, "libOpenCL.so"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libOpenCL.so"))
        );
        assert_eq!(parse_ldconfig(out, "libnvidia-opencl.so.1"), None);
    }

    #[test]
    fn ldconfig_output_gives_clblast() {
        let out = "\tlibclblast.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libclblast.so.1\n";
        assert_eq!(
            parse_ldconfig(out, CLBLAST_LIBRARY),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libclblast.so.1"))
        );
    }

    #[test]
    fn advice_names_the_exact_packages() {
        let user = install_advice(false, true);
        assert!(user.contains(
            "sudo apt-get update && sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y \
             pocl-opencl-icd ocl-icd-libopencl1"
        ));
        let root = install_advice(true, true);
        assert!(root.contains(
            "    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
             pocl-opencl-icd ocl-icd-libopencl1"
        ));
        let no_apt = install_advice(false, false);
        assert!(no_apt.starts_with("apt-get is not available"));
        assert!(no_apt.contains("pocl-opencl-icd ocl-icd-libopencl1"));
    }

    #[test]
    fn icd_files_in_lists_only_icd_files() {
        let dir = crate::test_util::scratch_dir("icd-files");
        std::fs::write(dir.join("b.icd"), "libb.so\n").unwrap();
        std::fs::write(dir.join("a.icd"), "liba.so\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        assert_eq!(
            icd_files_in(&dir),
            vec![dir.join("a.icd"), dir.join("b.icd")]
        );
        assert!(icd_files_in(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
