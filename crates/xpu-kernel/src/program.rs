//! [`Program`]: OpenCL C built for one device, cached in memory per (device, source, options)
//! and on disk through program binaries ([`KernelCache`]).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use xpu_device::backend;

use crate::error::KernelError;
use crate::function::Function;

/// The first bytes of a cache file (format version 1).
const MAGIC: &[u8; 8] = b"XPUKBIN2";

/// Where built programs are kept between processes: a directory of program binaries
/// (`clGetProgramInfo(CL_PROGRAM_BINARIES)`, loaded again with `clCreateProgramWithBinary`,
/// OpenCL 3.0 §5.8.1), plus the process-wide in-memory cache.
///
/// Each file is named after a 64-bit FNV-1a hash of its key and holds the full key (device
/// name, driver version, platform, OpenCL version, build options, source) before the binary:
/// and the binary's FNV-1a checksum (drivers do not all survive a damaged binary: PoCL 5
/// crashes on a truncated one). A file whose key differs (hash collision), that cannot be
/// read, whose checksum does not match, or whose binary the driver refuses is ignored and the program compiled from source (then the file rewritten). Files
/// are written to a temporary name and renamed, so a concurrent reader never sees half a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    dir: Option<PathBuf>,
    memory: bool,
}

impl KernelCache {
    /// The cache the environment selects: `XPU_KERNEL_CACHE=<dir>`, off with
    /// `XPU_KERNEL_CACHE=0`; unset or empty: `$XDG_CACHE_HOME/xpu/kernels`, else
    /// `$HOME/.cache/xpu/kernels` (no disk cache when neither is set). In-memory caching on.
    pub fn from_env() -> KernelCache {
        let dir = match std::env::var_os("XPU_KERNEL_CACHE") {
            Some(v) if v == "0" => None,
            Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(|x| PathBuf::from(x).join("xpu").join("kernels"))
                .or_else(|| {
                    std::env::var_os("HOME")
                        .filter(|v| !v.is_empty())
                        .map(|h| PathBuf::from(h).join(".cache").join("xpu").join("kernels"))
                }),
        };
        KernelCache { dir, memory: true }
    }

    /// A disk cache in `dir` (created when first written), with in-memory caching.
    pub fn at(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache {
            dir: Some(dir.into()),
            memory: true,
        }
    }

    /// No disk cache (in-memory caching on).
    pub fn disabled() -> KernelCache {
        KernelCache {
            dir: None,
            memory: true,
        }
    }

    /// Whether the process-wide in-memory cache is used (default true). `false` makes every
    /// build go to the disk cache or the compiler, as a new process would.
    #[must_use]
    pub fn memory(mut self, on: bool) -> KernelCache {
        self.memory = on;
        self
    }

    /// The disk cache directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

/// Where a [`Program`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramOrigin {
    /// Compiled from OpenCL C source.
    Compiled,
    /// Loaded from a program binary of the disk cache.
    DiskCache,
}

/// OpenCL C built for one device. A cheap `Clone` (`Arc` inside), `Send + Sync`; functions
/// ([`Program::function`]) keep it alive. Dropping the last handle in a bad fork child (see
/// `xpu_device::fork`) leaks the program instead of releasing it (`clReleaseProgram`): it is
/// the parent's driver object.
#[derive(Debug, Clone)]
pub struct Program {
    inner: Arc<ProgramInner>,
}

#[derive(Debug)]
pub(crate) struct ProgramInner {
    pub(crate) device: usize,
    pub(crate) raw: backend::Program,
    origin: ProgramOrigin,
}

type MemKey = (usize, String, String);
type Slot = Arc<Mutex<Option<Program>>>;

fn memory_cache() -> &'static Mutex<HashMap<MemKey, Slot>> {
    static CACHE: OnceLock<Mutex<HashMap<MemKey, Slot>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

impl Program {
    /// Builds OpenCL C `source` for device `device` with build `options` (`-D N=4`,
    /// `-cl-std=CL2.0`, `-cl-fast-relaxed-math`...; `-cl-kernel-arg-info` is always appended,
    /// for argument checks), through the in-memory and disk caches of
    /// [`KernelCache::from_env`]: the same (device, source, options) is compiled once per
    /// process, and once per machine while the disk cache holds it.
    ///
    /// # Errors
    /// [`KernelError::Device`]: a bad device index, context creation, or
    /// [`xpu_device::DeviceError::Build`] with the compiler log; [`KernelError::BadFork`] in
    /// a bad fork child.
    pub fn build(device: usize, source: &str, options: &str) -> Result<Program, KernelError> {
        crate::error::check_fork()?;
        Program::build_with_cache(device, source, options, &KernelCache::from_env())
    }

    /// As [`Program::build`] with an explicit cache.
    ///
    /// # Errors
    /// As [`Program::build`].
    pub fn build_with_cache(
        device: usize,
        source: &str,
        options: &str,
        cache: &KernelCache,
    ) -> Result<Program, KernelError> {
        crate::error::check_fork()?;
        if !cache.memory {
            return build_uncached(device, source, options, cache);
        }
        let slot = memory_cache()
            .lock()
            .entry((device, source.to_owned(), options.to_owned()))
            .or_default()
            .clone();
        // Per-key lock: other keys build concurrently; the same key is built once.
        let mut slot = slot.lock();
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let p = build_uncached(device, source, options, cache)?;
        *slot = Some(p.clone());
        Ok(p)
    }

    /// The kernel function `name` of this program (`clCreateKernel`).
    ///
    /// # Errors
    /// [`KernelError::Device`] with `CL_INVALID_KERNEL_NAME` when the program has no such
    /// kernel; [`KernelError::BadFork`] in a bad fork child.
    pub fn function(&self, name: &str) -> Result<Function, KernelError> {
        crate::error::check_fork()?;
        Function::new(self.clone(), name)
    }

    /// The device index the program was built for.
    pub fn device(&self) -> usize {
        self.inner.device
    }

    /// Whether the program was compiled or loaded from the disk cache.
    pub fn origin(&self) -> ProgramOrigin {
        self.inner.origin
    }

    /// The program binary (`CL_PROGRAM_BINARIES`), as the disk cache stores it.
    ///
    /// # Errors
    /// A failed `clGetProgramInfo`; [`KernelError::BadFork`] in a bad fork child.
    pub fn binary(&self) -> Result<Vec<u8>, KernelError> {
        crate::error::check_fork()?;
        Ok(self.inner.raw.binary()?)
    }

    pub(crate) fn raw(&self) -> &backend::Program {
        &self.inner.raw
    }
}

impl Drop for Program {
    /// In a bad fork child the shared state is leaked (one more reference, never dropped),
    /// so that the last handle makes no driver call.
    fn drop(&mut self) {
        if xpu_device::fork::is_in_bad_fork() {
            std::mem::forget(Arc::clone(&self.inner));
        }
    }
}

fn build_uncached(
    device: usize,
    source: &str,
    options: &str,
    cache: &KernelCache,
) -> Result<Program, KernelError> {
    let dev = xpu_device::device(device)?;
    let ctx = dev.context()?;
    let props = dev.properties();
    // `abi`: the version of `Program::build`'s source rewriting (offset parameters); raised
    // when the rewriting of some source changes, so that no binary of the old one is loaded.
    let key = format!(
        "device={}\0driver={}\0platform={}\0opencl={}\0abi=offset-params-2\0options={}\0source={}",
        props.name,
        props.driver_version,
        props.platform_name,
        props.opencl_version,
        options,
        source
    );
    let file = cache
        .dir
        .as_ref()
        .map(|d| d.join(format!("{:016x}.bin", fnv1a64(key.as_bytes()))));
    if let Some(file) = &file {
        if let Some(binary) = read_entry(file, &key) {
            // SAFETY: `read_entry` returns a binary only when the entry's key (device, driver,
            // platform, OpenCL version, options, source) equals ours and its checksum matches
            // the bytes, i.e. exactly what `Program::binary` returned for this device and
            // driver when the entry was written.
            #[allow(unsafe_code)]
            let loaded = unsafe { backend::Program::from_binary(ctx, dev.id(), &binary, options) };
            match loaded {
                Ok(raw) => {
                    return Ok(Program {
                        inner: Arc::new(ProgramInner {
                            device,
                            raw,
                            origin: ProgramOrigin::DiskCache,
                        }),
                    })
                }
                Err(e) => tracing::warn!(
                    "kernel cache entry {} refused ({e}); compiling from source",
                    file.display()
                ),
            }
        }
    }
    let raw = backend::Program::build_with_options(ctx, dev.id(), source, options)?;
    if let Some(file) = &file {
        match raw.binary() {
            Ok(binary) => {
                if let Err(e) = write_entry(file, &key, &binary) {
                    tracing::warn!("kernel cache: cannot write {}: {e}", file.display());
                }
            }
            Err(e) => tracing::warn!("kernel cache: no program binary ({e})"),
        }
    }
    Ok(Program {
        inner: Arc::new(ProgramInner {
            device,
            raw,
            origin: ProgramOrigin::Compiled,
        }),
    })
}

/// 64-bit FNV-1a (stable across Rust versions and platforms, unlike std's `DefaultHasher`).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The binary of the cache file `file` when it holds exactly `key`; `None` otherwise.
fn read_entry(file: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = fs::read(file).ok()?;
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    if rest.len() < len || &rest[..len] != key.as_bytes() {
        return None;
    }
    let (sum, binary) = rest[len..].split_first_chunk::<8>()?;
    // Drivers do not all survive a damaged binary (PoCL crashes on a truncated one): only a
    // binary whose checksum matches reaches clCreateProgramWithBinary.
    (!binary.is_empty() && u64::from_le_bytes(*sum) == fnv1a64(binary)).then(|| binary.to_vec())
}

fn write_entry(file: &Path, key: &str, binary: &[u8]) -> std::io::Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let dir = file.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = file.with_extension(format!(
        "tmp.{}.{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&(key.len() as u64).to_le_bytes())?;
        f.write_all(key.as_bytes())?;
        f.write_all(&fnv1a64(binary).to_le_bytes())?;
        f.write_all(binary)?;
        f.sync_all()?;
        fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn cache_entries_round_trip_and_refuse_other_keys_and_garbage() {
        let dir = std::env::temp_dir().join(format!("xpu-kcache-unit-{}", std::process::id()));
        let file = dir.join("x.bin");
        write_entry(&file, "key", b"binary").unwrap();
        assert_eq!(read_entry(&file, "key").as_deref(), Some(&b"binary"[..]));
        assert_eq!(read_entry(&file, "other"), None);
        let mut bytes = fs::read(&file).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&file, &bytes).unwrap();
        assert_eq!(
            read_entry(&file, "key"),
            None,
            "a damaged binary is refused"
        );
        fs::write(&file, b"XPUKBIN2\xff\xff").unwrap();
        assert_eq!(read_entry(&file, "key"), None);
        fs::write(&file, b"garbage").unwrap();
        assert_eq!(read_entry(&file, "key"), None);
        let _ = fs::remove_dir_all(&dir);
    }
}
