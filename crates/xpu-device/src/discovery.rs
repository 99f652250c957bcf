//! Device discovery: enumerate once per process, create contexts lazily per device.
//!
//! Selection (read once, at the first call that needs devices):
//! - `XPU_DEVICE_TYPE=gpu|cpu|all`: which device types to take. Unset: all GPU devices of all
//!   platforms, or, when there is none, the CPU devices (the embedded default, PoCL).
//! - `XPU_PLATFORM=<substring>`: only platforms whose name contains it (case-insensitive).
//!
//! # Where the OpenCL runtime comes from
//! The crates link no OpenCL library: `opencl3` is built with its `dynamic` feature, so
//! `libOpenCL.so.1` (the ICD loader) is opened at run time. The loader reads vendor files
//! (`/etc/OpenCL/vendors/*.icd`, or the directory in `OCL_ICD_VENDORS`), each naming a platform
//! library. Without a loader `device_count()` returns 0 and the error says how to install one. In
//! GPU containers NVIDIA's library is often present without a vendor file: `ci/gpu-env.sh` (used by
//! `cargo xtask test-gpu` and the GPU runner) registers it through a temporary `OCL_ICD_VENDORS`
//! directory. Some ICD loaders truncate `OCL_ICD_FILENAMES` in place (`strtok` on `getenv`'s
//! string) at the first enumeration (the Khronos loader before v2026.05.29, which CUDA ships; not
//! ocl-icd), which would hide platforms from every child process. xpu writes nothing into the
//! process environment (a repair in place, like `set_var`, would be a write that std's environment
//! lock does not order against another thread's `std::env::var`): discovery keeps the ICD variables
//! as they were right before the first enumeration, and `pass_icd_env` hands them to a child
//! process (`icd_env` gives the values). What is left is the loader's own write during the first
//! enumeration: on such a loader, do not read or change the ICD variables from another thread
//! during the first device query, or register platforms through `OCL_ICD_VENDORS`.

use std::ffi::OsString;
use std::sync::OnceLock;

use crate::backend::device_id::device_type as dt;
use crate::backend::{ClEvent, CommandQueue, Context, DeviceId, Platform, QueueOptions};
use crate::error::{ClError, DeviceError, Result};
use crate::properties::DeviceProperties;

/// One device the runtime sees: its OpenCL ids, its properties and its lazily created context.
#[derive(Debug)]
pub struct Device {
    index: usize,
    platform: Platform,
    id: DeviceId,
    properties: DeviceProperties,
    context: OnceLock<std::result::Result<Context, ClError>>,
}

impl Device {
    /// The device index (position in the runtime's list).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The OpenCL platform.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The OpenCL device id.
    pub fn id(&self) -> DeviceId {
        self.id
    }

    /// The properties read at enumeration.
    pub fn properties(&self) -> &DeviceProperties {
        &self.properties
    }

    /// The device's context, created on first call (NVIDIA: ~325 ms) and shared afterwards.
    ///
    /// # Errors
    /// A failed `clCreateContext` (the failure is kept: later calls return it too).
    pub fn context(&self) -> Result<&Context> {
        match self.context.get_or_init(|| Context::new(self.id)) {
            Ok(c) => Ok(c),
            Err(e) => Err(DeviceError::OpenCl(*e)),
        }
    }

    /// True once the context exists (no context is created by asking).
    pub fn has_context(&self) -> bool {
        self.context.get().is_some_and(|c| c.is_ok())
    }

    /// A new in-order queue on this device's context.
    ///
    /// # Errors
    /// Context creation or `clCreateCommandQueueWithProperties` failures.
    pub fn create_queue(&self, options: QueueOptions) -> Result<CommandQueue> {
        CommandQueue::new(self.context()?, self.id, options)
    }

    /// A host-controlled user event on this device's context.
    ///
    /// # Errors
    /// Context creation or `clCreateUserEvent` failures.
    pub fn create_user_event(&self) -> Result<ClEvent> {
        Ok(ClEvent::user(self.context()?)?)
    }
}

/// Which device types to enumerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeSelection {
    GpuElseCpu,
    Gpu,
    Cpu,
    All,
}

fn read_env() -> Result<(TypeSelection, Option<String>)> {
    let ty = match std::env::var("XPU_DEVICE_TYPE") {
        Err(_) => TypeSelection::GpuElseCpu,
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "" => TypeSelection::GpuElseCpu,
            "gpu" => TypeSelection::Gpu,
            "cpu" => TypeSelection::Cpu,
            "all" => TypeSelection::All,
            _ => {
                return Err(DeviceError::InvalidEnv {
                    name: "XPU_DEVICE_TYPE",
                    value: v,
                    expected: "gpu, cpu or all",
                })
            }
        },
    };
    let platform = std::env::var("XPU_PLATFORM").ok().filter(|s| !s.is_empty());
    Ok((ty, platform))
}

fn enumerate() -> Result<Vec<Device>> {
    crate::fork_state::note_enumeration_started();
    // The threads the driver starts while its devices are enumerated (PoCL's workers) are
    // the exit drain's measure of progress.
    let before = crate::backend::at_exit::threads_now();
    let devices = enumerate_devices();
    crate::backend::at_exit::note_driver_threads(&before);
    devices
}

fn enumerate_devices() -> Result<Vec<Device>> {
    let (selection, platform_filter) = read_env()?;
    // The snapshot first: a child forked from the handler's installation on (a bad fork) finds
    // it, and never needs std's environment lock for `icd_env`.
    let platforms = with_icd_env_snapshot(|| {
        crate::fork_state::note_driver_touched();
        Platform::all()
    })
    .map_err(|e| {
        if e.is_runtime_missing() {
            DeviceError::NoRuntime { source: e }
        } else {
            DeviceError::OpenCl(e)
        }
    })?;
    if platforms.is_empty() {
        // Some ICD loaders answer CL_SUCCESS with no platform instead of
        // CL_PLATFORM_NOT_FOUND_KHR: the same situation, so the same error.
        return Err(DeviceError::NoRuntime {
            source: ClError::new("clGetPlatformIDs", crate::error::CODE_PLATFORM_NOT_FOUND),
        });
    }
    let mut chosen: Vec<(Platform, String)> = Vec::new();
    for p in platforms {
        let name = p.name()?;
        let keep = platform_filter
            .as_ref()
            .is_none_or(|f| name.to_lowercase().contains(&f.to_lowercase()));
        if keep {
            chosen.push((p, name));
        }
    }
    let collect = |mask: u64| -> Result<Vec<(Platform, String, DeviceId)>> {
        let mut out = Vec::new();
        for (p, name) in &chosen {
            for d in p.devices(mask)? {
                out.push((*p, name.clone(), d));
            }
        }
        Ok(out)
    };
    let found = match selection {
        TypeSelection::Gpu => collect(dt::GPU)?,
        TypeSelection::Cpu => collect(dt::CPU)?,
        TypeSelection::All => collect(dt::ALL)?,
        TypeSelection::GpuElseCpu => {
            let gpus = collect(dt::GPU)?;
            if gpus.is_empty() {
                collect(dt::CPU)?
            } else {
                gpus
            }
        }
    };
    if found.is_empty() {
        return Err(DeviceError::NoDevices {
            selection: describe_selection(selection, platform_filter.as_deref(), &chosen),
        });
    }
    let mut devices = Vec::with_capacity(found.len());
    for (index, (platform, pname, id)) in found.into_iter().enumerate() {
        devices.push(Device {
            index,
            platform,
            id,
            properties: DeviceProperties::query(id, &pname)?,
            context: OnceLock::new(),
        });
    }
    Ok(devices)
}

/// What was searched for and where, for `NoDevices`.
fn describe_selection(
    selection: TypeSelection,
    platform_filter: Option<&str>,
    searched: &[(Platform, String)],
) -> String {
    let types = match selection {
        TypeSelection::GpuElseCpu => "no GPU or CPU device",
        TypeSelection::Gpu => "no device of XPU_DEVICE_TYPE=gpu",
        TypeSelection::Cpu => "no device of XPU_DEVICE_TYPE=cpu",
        TypeSelection::All => "no device",
    };
    let names: Vec<&str> = searched.iter().map(|(_, n)| n.as_str()).collect();
    match platform_filter {
        Some(f) if names.is_empty() => format!("{types}: no platform matches XPU_PLATFORM={f}"),
        Some(f) => format!("{types} on the platforms matching XPU_PLATFORM={f} {names:?}"),
        None => format!("{types} on the platforms {names:?}"),
    }
}

/// The ICD loader's variables: the loader reads them at the first enumeration.
const ICD_ENV: [&str; 2] = ["OCL_ICD_FILENAMES", "OCL_ICD_VENDORS"];

/// The ICD loader's variables as the process had them right before its first enumeration
/// (read through `std::env`, under std's environment lock).
static ICD_ENV_BEFORE_ENUMERATION: OnceLock<Vec<(&'static str, Option<OsString>)>> =
    OnceLock::new();

/// Takes the snapshot of the ICD loader's variables (once), then runs `f`, the first platform
/// enumeration. Nothing is written to the process environment, before or after.
///
/// Why a snapshot and no repair. Some ICD loaders split `OCL_ICD_FILENAMES` with `strtok` (or
/// by writing NULs over the separators) on the very string `getenv` returned, so after the
/// first `clGetPlatformIDs` the process environment holds only the first file name
/// (`libpocl.so.2:libnvidia-opencl.so.1` becomes `libpocl.so.2`): the Khronos loader before
/// v2026.05.29 (the one CUDA ships, seen on the H200 machine; it copies the string since)
/// does; ocl-icd 2.3 does not. Writing the separators back (as xpu once did, in place) or
/// calling `setenv` / `std::env::set_var` would be a write to the environment that std's lock
/// does not order against another thread's `std::env::var` (or a C library's `getenv`): a data
/// race that safe code could reach. So xpu writes nothing: it keeps what the variables held
/// before the loader could touch them and hands that to the child processes it starts
/// ([`pass_icd_env`]; [`icd_env`] for other uses), which then see every platform. The write a
/// damaging loader itself makes during the first enumeration is the loader's: xpu cannot
/// prevent it (it happens inside `clGetPlatformIDs`) and does not add to it; on such a loader,
/// do not read `OCL_ICD_FILENAMES` from another thread while the first device query runs, or
/// register the platforms with `OCL_ICD_VENDORS` (a directory that every loader only reads,
/// as `ci/gpu-env.sh` does).
fn with_icd_env_snapshot<T>(f: impl FnOnce() -> T) -> T {
    ICD_ENV_BEFORE_ENUMERATION.get_or_init(|| {
        ICD_ENV
            .iter()
            .map(|&key| (key, std::env::var_os(key)))
            .collect()
    });
    f()
}

/// The ICD loader's variables (`OCL_ICD_FILENAMES`, `OCL_ICD_VENDORS`, each with its value or
/// `None` when unset) as a child process should get them: their values right before this
/// process's first device enumeration, or, before any enumeration, their values now. Some ICD
/// loaders truncate `OCL_ICD_FILENAMES` in place at the first enumeration (see
/// [`pass_icd_env`]); these values are whole.
pub fn icd_env() -> Vec<(&'static str, Option<OsString>)> {
    match ICD_ENV_BEFORE_ENUMERATION.get() {
        Some(saved) => saved.clone(),
        None => ICD_ENV
            .iter()
            .map(|&key| (key, std::env::var_os(key)))
            .collect(),
    }
}

/// Gives `command` the ICD loader's variables as this process had them before its first
/// device enumeration ([`icd_env`]), so that a child started after it sees every platform even
/// where the ICD loader truncated this process's `OCL_ICD_FILENAMES` in place (the Khronos
/// loader before v2026.05.29 does: `libpocl.so.2:libnvidia-opencl.so.1` becomes
/// `libpocl.so.2`). xpu never repairs this process's own environment, since any write there
/// could race with another thread's `std::env::var`. A variable that `command` already sets or
/// removes (`Command::env`, `env_remove`) is left as `command` has it; one that was unset
/// before the enumeration is left to `command`'s inheritance. Used by the child processes xpu
/// starts itself (the test helpers' re-runs, `xpu bench`'s probe).
pub fn pass_icd_env(command: &mut std::process::Command) -> &mut std::process::Command {
    let explicit: Vec<OsString> = command.get_envs().map(|(k, _)| k.to_owned()).collect();
    for (key, value) in icd_env() {
        if let Some(value) = value {
            if !explicit.iter().any(|k| k == key) {
                command.env(key, value);
            }
        }
    }
    command
}

static DEVICES: OnceLock<Result<Vec<Device>>> = OnceLock::new();

/// Every device the runtime sees, enumerated on the first call (no context is created).
///
/// The first call loads the OpenCL ICD loader, which reads `OCL_ICD_FILENAMES` and
/// `OCL_ICD_VENDORS` from the C environment. xpu itself writes nothing to the environment;
/// some loaders truncate `OCL_ICD_FILENAMES` in place there, so child processes should get the
/// values from before the enumeration through [`pass_icd_env`]. Do not change those two
/// variables from another thread while the first device query runs (the loader reads them
/// without std's lock), nor, on a loader that truncates, read them.
///
/// # Errors
/// `NoRuntime` when no OpenCL runtime is installed (with the install command),
/// `InvalidEnv` for a bad `XPU_DEVICE_TYPE`, `NoDevices` when no device matches the selection,
/// or a failed enumeration call (the outcome is kept
/// for the process); `BadFork` in a child forked after the driver was touched.
pub fn devices() -> Result<&'static [Device]> {
    if crate::fork_state::is_in_bad_fork() {
        return Err(DeviceError::BadFork);
    }
    let outcome = DEVICES.get_or_init(enumerate);
    // After the outcome is stored: a child forked from now on reads it instead of enumerating.
    crate::fork_state::note_enumerated(outcome.is_ok());
    match outcome {
        Ok(v) => Ok(v.as_slice()),
        Err(e) => Err(e.clone()),
    }
}

/// The device at `index`.
///
/// # Errors
/// `InvalidDevice { index, count }` when out of range; enumeration errors as [`devices`].
pub fn device(index: usize) -> Result<&'static Device> {
    let all = devices()?;
    all.get(index).ok_or(DeviceError::InvalidDevice {
        index,
        count: all.len(),
    })
}

/// The number of devices, as `torch.xpu.device_count`: 0 (with a `tracing` warning) when no
/// runtime is installed or enumeration fails; never an error, never creates a context.
///
/// The first call enumerates, which initializes the OpenCL driver: a child forked afterwards
/// is a bad fork (see [`crate::fork`]). In such a child this answers the parent's count
/// (copied into the child with its memory) without calling the driver or taking a lock, as
/// torch's cached `device_count` does; 0 only if the fork happened while the parent was
/// still enumerating.
pub fn device_count() -> usize {
    if crate::fork_state::is_in_bad_fork() {
        // No driver call, no lock, no logging: only the copied, completed outcome.
        return match DEVICES.get() {
            Some(Ok(d)) => d.len(),
            _ => 0,
        };
    }
    match devices() {
        Ok(d) => d.len(),
        Err(e) => {
            static WARNED: OnceLock<()> = OnceLock::new();
            WARNED.get_or_init(|| tracing::warn!(%e, "xpu: no devices"));
            0
        }
    }
}

/// `device_count() > 0`, as `torch.xpu.is_available`. Never creates a context; enumerates
/// (see [`device_count`] for what that means for `fork`).
pub fn is_available() -> bool {
    device_count() > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: &str = "XPU_DISCOVERY_TEST_CHILD";
    const FILES: &str = "libfirst-icd.so:libsecond-icd.so:libthird-icd.so";

    /// The loader's damage, simulated: `strtok(getenv("OCL_ICD_FILENAMES"), ":")` over the
    /// whole string writes a NUL over every separator, in place.
    fn strtok_in_place() {
        // SAFETY: single-threaded child; the pointer is the variable's own string.
        unsafe {
            let p = libc::getenv(c"OCL_ICD_FILENAMES".as_ptr());
            let len = std::ffi::CStr::from_ptr(p).to_bytes().len();
            for i in 0..len {
                if *p.add(i) == b':' as libc::c_char {
                    *p.add(i) = 0;
                }
            }
        }
    }

    fn getenv_ptr() -> usize {
        // SAFETY: read-only getenv of a NUL-terminated name.
        unsafe { libc::getenv(c"OCL_ICD_FILENAMES".as_ptr()) as usize }
    }

    #[test]
    fn the_first_enumeration_writes_nothing_into_the_environment_and_children_get_the_whole_icd_list(
    ) {
        if std::env::var_os(CHILD).is_some() {
            let before = getenv_ptr();
            // The enumeration, with a loader that truncates the list in place.
            with_icd_env_snapshot(strtok_in_place);
            // xpu wrote nothing afterwards: the environment holds what the loader left, in the
            // same storage (a repair would be a write racing with another thread's
            // `std::env::var`, std's lock notwithstanding).
            let now = std::env::var("OCL_ICD_FILENAMES").unwrap();
            println!("after the enumeration: OCL_ICD_FILENAMES={now:?}");
            assert_eq!(now, "libfirst-icd.so", "xpu wrote into the environment");
            assert_eq!(getenv_ptr(), before, "the variable was replaced");
            // The list from before the enumeration is kept, and a child process gets it.
            let kept: Vec<_> = icd_env()
                .into_iter()
                .filter(|(k, _)| *k == "OCL_ICD_FILENAMES")
                .collect();
            assert_eq!(kept, [("OCL_ICD_FILENAMES", Some(FILES.into()))]);
            let child = pass_icd_env(
                std::process::Command::new("sh").args(["-c", "printf %s \"$OCL_ICD_FILENAMES\""]),
            )
            .output()
            .unwrap();
            assert_eq!(String::from_utf8_lossy(&child.stdout), FILES);
            // A variable the command sets itself is left as it is.
            let child = pass_icd_env(
                std::process::Command::new("sh")
                    .args(["-c", "printf %s \"$OCL_ICD_FILENAMES\""])
                    .env("OCL_ICD_FILENAMES", "mine.so"),
            )
            .output()
            .unwrap();
            assert_eq!(String::from_utf8_lossy(&child.stdout), "mine.so");
            println!("scenario-ok");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "discovery::tests::the_first_enumeration_writes_nothing_into_the_environment_and_children_get_the_whole_icd_list",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("OCL_ICD_FILENAMES", FILES)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("scenario-ok"),
            "child: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
