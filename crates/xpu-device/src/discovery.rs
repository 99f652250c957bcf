//! Device discovery: enumerate once per process, create contexts lazily per device.
//!
//! Selection (read once, at the first call that needs devices):
//! - `XPU_DEVICE_TYPE=gpu|cpu|all`: which device types to take. Unset: all GPU devices of all
//!   platforms, or, when there is none, the CPU devices (the embedded default, PoCL).
//! - `XPU_PLATFORM=<substring>`: only platforms whose name contains it (case-insensitive).

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
    let (selection, platform_filter) = read_env()?;
    crate::fork_state::note_driver_touched();
    let platforms = with_icd_env_preserved(Platform::all).map_err(|e| {
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

/// ICD loader variables that the loader may damage in place while it enumerates platforms.
const ICD_ENV: [&std::ffi::CStr; 2] = [c"OCL_ICD_FILENAMES", c"OCL_ICD_VENDORS"];

/// An ICD loader variable as the process had it before the first enumeration.
struct IcdVar {
    key: &'static std::ffi::CStr,
    /// Where `getenv` found the value: the bytes the loader may overwrite.
    at: *mut libc::c_char,
    value: Vec<u8>,
}

impl IcdVar {
    fn snapshot(key: &'static std::ffi::CStr) -> Option<IcdVar> {
        // SAFETY: `key` is NUL-terminated; the environment is only read (see
        // `with_icd_env_preserved` for the threads constraint, the loader's own).
        let at = unsafe { libc::getenv(key.as_ptr()) };
        if at.is_null() {
            return None;
        }
        // SAFETY: getenv returned a NUL-terminated string; it is copied at once.
        let value = unsafe { std::ffi::CStr::from_ptr(at) }.to_bytes().to_vec();
        Some(IcdVar { key, at, value })
    }

    /// Puts back the bytes the loader overwrote with NULs, in place. Does nothing when the
    /// variable was replaced meanwhile (another storage) or changed in another way.
    fn repair_in_place(&self) -> bool {
        // SAFETY: as in `snapshot`.
        let now = unsafe { libc::getenv(self.key.as_ptr()) };
        if now != self.at {
            return false;
        }
        // SAFETY: the same storage as before the enumeration, which held `value.len()` bytes
        // and its NUL: every byte read here lies inside that string.
        let byte = |i: usize| unsafe { self.at.add(i).cast::<u8>().read() };
        let damaged: Vec<usize> = (0..self.value.len())
            .filter(|&i| byte(i) != self.value[i])
            .collect();
        if damaged.is_empty() || damaged.iter().any(|&i| byte(i) != 0) {
            return false;
        }
        for i in damaged {
            // SAFETY: inside the variable's own string (above), which the C library hands out
            // writable; the loader wrote a NUL at exactly this byte during the enumeration.
            unsafe { self.at.add(i).cast::<u8>().write(self.value[i]) };
        }
        true
    }
}

/// Runs the first platform enumeration and then repairs the ICD loader's variables.
///
/// Some ICD loaders split `OCL_ICD_FILENAMES` with `strtok` on the very string `getenv`
/// returned, so after the first `clGetPlatformIDs` the process environment holds only the first
/// file name (`libpocl.so.2:libnvidia-opencl.so.1` becomes `libpocl.so.2`). Every child process
/// started afterwards (a user's subprocess, a test's helper) would then miss the other
/// platforms: seen on the GPU machine, where NVIDIA's driver vanished for every child. (On the
/// H200 machine, CUDA's `libOpenCL.so.1`, the Khronos loader, does this; ocl-icd 2.3 does not.
/// The in-place repair below was checked there: a child process then sees the whole list.)
///
/// The repair never calls `setenv`/`std::env::set_var`, which may reallocate the environment
/// while another thread's C code reads it (why Rust 2024 made `set_var` unsafe): it writes back
/// the separators the loader overwrote with NULs, byte for byte, into the same storage, right
/// after the loader wrote them, inside the one-time enumeration. Constraint, documented for
/// users: like the ICD loader itself, the first device query reads (and the loader may write)
/// the ICD variables without std's environment lock, so do not change `OCL_ICD_FILENAMES` or
/// `OCL_ICD_VENDORS` from another thread while the first device query runs (set them before
/// using the runtime, or pass them to child processes with `Command::env`).
fn with_icd_env_preserved<T>(f: impl FnOnce() -> T) -> T {
    let saved: Vec<IcdVar> = ICD_ENV.iter().filter_map(|k| IcdVar::snapshot(k)).collect();
    let out = f();
    for var in &saved {
        if var.repair_in_place() {
            tracing::debug!(
                key = ?var.key,
                "repaired an ICD loader variable truncated in place by enumeration"
            );
        }
    }
    out
}

static DEVICES: OnceLock<Result<Vec<Device>>> = OnceLock::new();

/// Every device the runtime sees, enumerated on the first call (no context is created).
///
/// The first call loads the OpenCL ICD loader, which reads `OCL_ICD_FILENAMES` and
/// `OCL_ICD_VENDORS` from the C environment (some loaders truncate the first one in place; the
/// runtime repairs it in place, never with `set_var`). Do not change those two variables from
/// another thread while the first device query runs.
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
    fn icd_variables_truncated_by_the_loader_are_repaired_in_place_without_set_var() {
        if std::env::var_os(CHILD).is_some() {
            let before = getenv_ptr();
            with_icd_env_preserved(strtok_in_place);
            // The value is whole again, and in the same storage: no setenv reallocated it.
            assert_eq!(std::env::var("OCL_ICD_FILENAMES").unwrap(), FILES);
            assert_eq!(
                getenv_ptr(),
                before,
                "the variable was replaced, not repaired"
            );
            // Not damaged: nothing to do, nothing written.
            with_icd_env_preserved(|| ());
            assert_eq!(getenv_ptr(), before);
            println!("scenario-ok");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "discovery::tests::icd_variables_truncated_by_the_loader_are_repaired_in_place_without_set_var",
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
