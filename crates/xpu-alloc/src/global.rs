//! The per-device allocators of the process and the `torch.xpu`-style functions over them.
//!
//! Each device's [`DeviceAllocator`] is created on first use with the current
//! configuration: `XPU_ALLOC_CONF` (read once, at the first use of any allocator) or the
//! last [`set_config`]. Query functions on a device whose allocator does not exist yet
//! return zeros without creating it (as PyTorch before initialization).
//!
//! In a child forked after the parent initialized OpenCL every function here returns
//! [`AllocError::BadFork`] (or does nothing, for those without a result) before taking any
//! lock or calling the driver: a thread of the parent may have held an allocator lock at the
//! fork.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use xpu_stream::Stream;

use crate::config::{AllocConfig, ConfigError};
use crate::data_ptr::{BlockView, DataPtr};
use crate::device_allocator::DeviceAllocator;
use crate::device_ptr::DevicePtr;
use crate::error::{check_fork, AllocError};
use crate::mem_pool::{next_pool_number, MemPool};
use crate::source::{SegmentMemory, SegmentSource};
use crate::stats::MemoryStats;

/// Name of the environment variable holding the allocator configuration.
pub const CONFIG_ENV: &str = "XPU_ALLOC_CONF";

struct Registry {
    slots: Vec<OnceLock<DeviceAllocator>>,
    create: Mutex<()>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        slots: (0..xpu_device::device_count())
            .map(|_| OnceLock::new())
            .collect(),
        create: Mutex::new(()),
    })
}

/// The configuration for new allocators: the environment's (or its parse error) until
/// [`set_config`] replaces it.
fn config_state() -> &'static Mutex<Result<AllocConfig, ConfigError>> {
    static C: OnceLock<Mutex<Result<AllocConfig, ConfigError>>> = OnceLock::new();
    C.get_or_init(|| {
        // A value that is not UTF-8 is an error as any other invalid one, not the defaults.
        let parsed = match std::env::var(CONFIG_ENV) {
            Ok(text) => AllocConfig::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(AllocConfig::default()),
            Err(std::env::VarError::NotUnicode(text)) => Err(ConfigError::NotUtf8 {
                text: text.to_string_lossy().into_owned(),
            }),
        };
        Mutex::new(parsed)
    })
}

fn slot(device: usize) -> Result<&'static OnceLock<DeviceAllocator>, AllocError> {
    registry()
        .slots
        .get(device)
        .ok_or(AllocError::InvalidDevice { device })
}

/// The allocator of `device`, created on first use.
///
/// # Errors
/// [`AllocError::InvalidDevice`]; [`AllocError::Config`] when `XPU_ALLOC_CONF` is invalid
/// (until [`set_config`] succeeds); [`AllocError::Device`] when the device cannot be used.
pub fn device_allocator(device: usize) -> Result<&'static DeviceAllocator, AllocError> {
    check_fork()?;
    let slot = slot(device)?;
    if let Some(a) = slot.get() {
        return Ok(a);
    }
    let _creating = registry().create.lock();
    if let Some(a) = slot.get() {
        return Ok(a);
    }
    // Built outside the configuration's lock (the device's context is created here), with
    // the configuration read now: a `set_config` may run meanwhile and miss the allocator.
    let config = config_state().lock().clone()?;
    #[cfg(test)]
    tests::run_creation_hook(device);
    let allocator = DeviceAllocator::new(device, config)?;
    // Installed under the configuration's lock, which `set_config` holds while it applies a
    // configuration to the installed allocators: a change the allocator missed is applied
    // here (the allocator has no allocation yet, so this is as if it had been built with it).
    // Nothing under the lock calls the driver or user code (`DeviceAllocator::set_config`
    // only takes the allocator's own locks; the slot is empty under `create`).
    let state = config_state().lock();
    if let Ok(current) = &*state {
        if *allocator.core().config() != *current {
            allocator.set_config(current.clone());
        }
    }
    Ok(slot.get_or_init(|| allocator))
}

pub(crate) fn existing(device: usize) -> Result<Option<&'static DeviceAllocator>, AllocError> {
    check_fork()?;
    Ok(slot(device)?.get())
}

/// Replaces the allocator configuration (same grammar as `XPU_ALLOC_CONF`; as
/// `torch.cuda.memory._set_allocator_settings`); applies to every existing allocator from
/// its next allocation, to an allocator being created by another thread meanwhile, and to
/// allocators created later. Concurrent calls apply in one order: the last one stored is
/// the one every allocator has. `memory_kind` only affects allocators created later.
///
/// # Errors
/// [`ConfigError`] naming the key and the allowed values; nothing changes then.
pub fn set_config(text: &str) -> Result<(), ConfigError> {
    let config = AllocConfig::parse(text)?;
    if xpu_device::fork::is_in_bad_fork() {
        // Nothing can allocate in a bad fork child; the locks may have been held at the fork.
        return Ok(());
    }
    // Under the configuration's lock, with which `device_allocator` installs a new allocator:
    // an allocator is either installed already (and set here) or gets `config` when
    // installed. `DeviceAllocator::set_config` runs no user code and calls no driver.
    let mut state = config_state().lock();
    for a in registry().slots.iter().filter_map(OnceLock::get) {
        a.set_config(config.clone());
    }
    *state = Ok(config);
    Ok(())
}

/// The configuration new allocators get.
///
/// # Errors
/// The parse error of `XPU_ALLOC_CONF`, until [`set_config`] succeeds.
pub fn current_config() -> Result<AllocConfig, ConfigError> {
    config_state().lock().clone()
}

/// Allocates `size` bytes on `stream`'s device for use on `stream`; freed when the
/// [`DataPtr`] drops. Size 0 gives an empty pointer.
///
/// # Errors
/// See [`DeviceAllocator::allocate`].
pub fn allocate(size: u64, stream: &Stream) -> Result<DataPtr, AllocError> {
    // `device_allocator` refuses first in a bad fork child.
    device_allocator(stream.device())?.allocate(size, stream)
}

fn current() -> Result<(usize, Stream), AllocError> {
    check_fork()?;
    let device = xpu_device::current_device();
    let stream = xpu_stream::current_stream(device)?;
    Ok((device, stream))
}

/// Allocates `size` bytes on the current device for its current stream (as PyTorch's
/// allocations do).
///
/// # Errors
/// See [`allocate`].
pub fn allocate_current(size: u64) -> Result<DataPtr, AllocError> {
    let (_, stream) = current()?;
    allocate(size, &stream)
}

/// Raw allocation on the current device and stream (as `caching_allocator_alloc`).
///
/// # Errors
/// See [`allocate`].
pub fn raw_alloc(size: u64) -> Result<DevicePtr, AllocError> {
    let (device, stream) = current()?;
    device_allocator(device)?.raw_alloc(size, &stream)
}

/// Raw allocation on `stream` (as `raw_alloc_with_stream`).
///
/// # Errors
/// See [`allocate`].
pub fn raw_alloc_with_stream(size: u64, stream: &Stream) -> Result<DevicePtr, AllocError> {
    device_allocator(stream.device())?.raw_alloc(size, stream)
}

/// Frees a pointer from [`raw_alloc`] (as `caching_allocator_delete`); null is ignored.
///
/// # Errors
/// [`AllocError::InvalidDevicePointer`] ("invalid device pointer") for any other pointer.
pub fn raw_delete(ptr: DevicePtr) -> Result<(), AllocError> {
    check_fork()?;
    if ptr.is_null() {
        return Ok(());
    }
    match existing(ptr.device()) {
        Ok(Some(a)) => a.raw_delete(ptr),
        _ => Err(AllocError::InvalidDevicePointer {
            address: ptr.address(),
        }),
    }
}

/// Runs `f` on a [`BlockView`] of a [`raw_alloc`] pointer's bytes (reads, writes, fills
/// and copies checked against the requested size). The view cannot escape `f`; `f` runs
/// without any allocator lock held (it may call the allocator) and the block stays
/// allocated until `f` returns: a [`raw_delete`] of `ptr` meanwhile takes effect then.
///
/// ```no_run
/// # fn f(ptr: xpu_alloc::DevicePtr, stream: &xpu_stream::Stream) -> Result<(), xpu_alloc::AllocError> {
/// let mut head = [0u8; 16];
/// xpu_alloc::with_raw_view(ptr, |view| view.read(stream, 0, &mut head))??;
/// # Ok(()) }
/// ```
///
/// The view cannot leave the closure (so it cannot be used after [`raw_delete`]):
/// ```compile_fail
/// # fn f(ptr: xpu_alloc::DevicePtr) {
/// let escaped = xpu_alloc::with_raw_view(ptr, |view| view); // error: borrowed data escapes
/// # }
/// ```
///
/// # Errors
/// [`AllocError::BadFork`] in a bad fork child, first; [`AllocError::InvalidDevicePointer`]
/// for a pointer not live from `raw_alloc`; [`AllocError::Unsupported`] for simulated memory.
pub fn with_raw_view<R>(
    ptr: DevicePtr,
    f: impl FnOnce(BlockView<'_>) -> R,
) -> Result<R, AllocError> {
    check_fork()?;
    match existing(ptr.device()) {
        Ok(Some(a)) if ptr.may_belong_to(a.core().id()) => {
            a.core().with_raw(ptr.address(), |d| d.view().map(f))?
        }
        _ => Err(AllocError::InvalidDevicePointer {
            address: ptr.address(),
        }),
    }
}

/// The raw `cl_mem` of the segment holding a [`raw_alloc`] pointer and the pointer's byte
/// offset in it, for kernel arguments and interop (no retain, no driver call).
///
/// Raw access (see [`DataPtr::cl_mem_and_offset`]): the handle covers the whole segment,
/// which other allocations share, and may be used only for the pointer's bytes and only
/// until [`raw_delete`]; safe code accesses the bytes through [`with_raw_view`].
///
/// # Errors
/// [`AllocError::BadFork`] in a bad fork child, first; [`AllocError::InvalidDevicePointer`]
/// for a pointer not live from `raw_alloc`; [`AllocError::Unsupported`] for simulated memory.
pub fn raw_cl_mem_and_offset(
    ptr: DevicePtr,
) -> Result<(xpu_device::backend::raw::cl_mem, u64), AllocError> {
    check_fork()?;
    match existing(ptr.device()) {
        Ok(Some(a)) if ptr.may_belong_to(a.core().id()) => a
            .core()
            .with_raw(ptr.address(), DataPtr::cl_mem_and_offset)?,
        _ => Err(AllocError::InvalidDevicePointer {
            address: ptr.address(),
        }),
    }
}

/// Marks `ptr` as used on `stream` (as `Tensor.record_stream`): its block is reused only
/// after the work enqueued on `stream` before the free completes.
///
/// # Errors
/// See [`DeviceAllocator::record_stream`].
pub fn record_stream(ptr: &DataPtr, stream: &Stream) -> Result<(), AllocError> {
    if ptr.is_empty() {
        return Ok(());
    }
    device_allocator(ptr.device())?.record_stream(ptr, stream)
}

/// Releases every cached unused segment of every device's default pool and of dropped
/// private pools (as `torch.xpu.empty_cache`, reference §4.10; see
/// [`DeviceAllocator::empty_cache`]); a no-op for devices whose allocator does not exist yet.
pub fn empty_cache() {
    if xpu_device::fork::is_in_bad_fork() {
        return;
    }
    for a in registry().slots.iter().filter_map(OnceLock::get) {
        a.empty_cache();
    }
}

/// Limits `device`'s reserved memory to `fraction` of its total (as
/// `set_per_process_memory_fraction`); creates the allocator.
///
/// # Errors
/// [`AllocError::InvalidFraction`] unless `0 < fraction <= 1`; see [`device_allocator`].
pub fn set_memory_fraction(fraction: f64, device: usize) -> Result<(), AllocError> {
    device_allocator(device)?
        .core()
        .set_memory_fraction(fraction)
}

/// The memory fraction of `device` (1.0 when unset).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn memory_fraction(device: usize) -> Result<f64, AllocError> {
    Ok(existing(device)?.map_or(1.0, |a| a.core().memory_fraction()))
}

/// Statistics of `device` (as `torch.xpu.memory_stats`); zeros before first use.
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn memory_stats(device: usize) -> Result<MemoryStats, AllocError> {
    Ok(existing(device)?
        .map(DeviceAllocator::memory_stats)
        .unwrap_or_default())
}

/// Statistics of `device` as sorted dotted keys (`allocated_bytes.all.current`, ...); empty
/// before first use (as Python's `memory_stats()`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn memory_stats_flat(device: usize) -> Result<BTreeMap<String, i64>, AllocError> {
    Ok(existing(device)?
        .map(|a| a.memory_stats().flat())
        .unwrap_or_default())
}

fn stat(device: usize, f: impl FnOnce(&MemoryStats) -> i64) -> Result<u64, AllocError> {
    Ok(u64::try_from(f(&memory_stats(device)?)).unwrap_or(0))
}

/// Bytes allocated on `device` (as `torch.xpu.memory_allocated`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn memory_allocated(device: usize) -> Result<u64, AllocError> {
    stat(device, |s| s.allocated_bytes.all.current)
}

/// Peak bytes allocated on `device` (as `torch.xpu.max_memory_allocated`): exact when one
/// thread allocates (whichever threads free) in one pool, an upper bound otherwise (see
/// [`DeviceAllocator::memory_stats`]).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn max_memory_allocated(device: usize) -> Result<u64, AllocError> {
    stat(device, |s| s.allocated_bytes.all.peak)
}

/// Bytes reserved on `device` (as `torch.xpu.memory_reserved`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn memory_reserved(device: usize) -> Result<u64, AllocError> {
    stat(device, |s| s.reserved_bytes.all.current)
}

/// Peak bytes reserved on `device` (as `torch.xpu.max_memory_reserved`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn max_memory_reserved(device: usize) -> Result<u64, AllocError> {
    stat(device, |s| s.reserved_bytes.all.peak)
}

/// Resets `device`'s peaks to the current values (as `torch.xpu.reset_peak_memory_stats`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn reset_peak_stats(device: usize) -> Result<(), AllocError> {
    if let Some(a) = existing(device)? {
        a.reset_peak_stats();
    }
    Ok(())
}

/// Zeroes `device`'s accumulated statistics (as `torch.xpu.reset_accumulated_memory_stats`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn reset_accumulated_stats(device: usize) -> Result<(), AllocError> {
    if let Some(a) = existing(device)? {
        a.reset_accumulated_stats();
    }
    Ok(())
}

/// `(free, total)` bytes of `device` (as `torch.xpu.mem_get_info`): OpenCL has no
/// free-memory query, so free is the total minus what every xpu allocator of this process
/// reserves on the device (see `xpu_device::mem_get_info`).
///
/// # Errors
/// [`AllocError::InvalidDevice`].
pub fn mem_get_info(device: usize) -> Result<(u64, u64), AllocError> {
    check_fork()?;
    slot(device)?;
    Ok(xpu_device::mem_get_info(device)?)
}

/// The constructors of [`MemPool`] that find the device's allocator in this registry (the
/// pool itself, in `mem_pool`, knows only the allocator it is built from).
impl MemPool {
    /// A new pool on `device`, drawing its segments from the device allocator's source (as
    /// `torch.cuda.MemPool()`). Id `(0, n)`.
    ///
    /// # Errors
    /// As [`device_allocator`] ([`AllocError::InvalidDevice`], a bad configuration,
    /// [`AllocError::BadFork`]).
    pub fn new(device: usize) -> Result<MemPool, AllocError> {
        Ok(device_allocator(device)?.create_pool(None, (0, next_pool_number())))
    }

    /// A new pool on `device` whose segments come from `source` (as
    /// `torch.cuda.MemPool(allocator=...)`): every segment the pool reserves is allocated
    /// from and freed to `source` (released stream-ordered as the [`SegmentSource`] contract
    /// says); they still count in the device's reserved bytes and memory fraction. Pass an
    /// `Arc` of the source to keep a handle on it. The source's segment addresses must be
    /// unique on the device among every source in use there (the default pool's included):
    /// `DevicePtr`s and snapshots name blocks by address, so a second `BufferSource` of the
    /// same device, which numbers its segments like the default one, needs an address offset.
    ///
    /// # Errors
    /// As [`MemPool::new`]; [`AllocError::Unsupported`] when `source` is of another device.
    pub fn with_source<S>(device: usize, source: S) -> Result<MemPool, AllocError>
    where
        S: SegmentSource<Memory = SegmentMemory>,
    {
        if source.device() != device {
            return Err(AllocError::Unsupported(format!(
                "a segment source of device {} for a pool of device {device}",
                source.device()
            )));
        }
        let allocator = device_allocator(device)?;
        Ok(allocator.create_pool(Some(Box::new(source)), (0, next_pool_number())))
    }

    /// A pool for a graph capture: id `(n, 0)` (torch's capture pools).
    ///
    /// # Errors
    /// As [`MemPool::new`].
    pub fn for_graph(device: usize) -> Result<MemPool, AllocError> {
        Ok(device_allocator(device)?.create_pool(None, (next_pool_number(), 0)))
    }
}

#[cfg(test)]
mod tests {
    //! The creation of a device's allocator against a concurrent [`set_config`]. A
    //! thread-local hook stands for the other thread: it runs in [`device_allocator`] after
    //! the new allocator's configuration was read and before the allocator is installed
    //! (where the device's context is created), so the interleaving is deterministic. The
    //! allocator is the process's first, so the configuration it reads is `XPU_ALLOC_CONF`'s,
    //! read then. The scenario changes the process-wide configuration and environment: it
    //! runs in a child process (this test binary, re-executed with [`SCENARIO`] and
    //! `XPU_ALLOC_CONF` set, running only this test).

    use std::cell::Cell;
    use std::process::Command;

    const SCENARIO: &str = "XPU_ALLOC_TEST_CREATION_DURING_SET_CONFIG";
    const MIB: u64 = 1 << 20;

    thread_local! {
        static CREATION_HOOK: Cell<Option<fn(usize)>> = const { Cell::new(None) };
    }

    /// Runs (once) the hook the calling thread set for its next allocator creation.
    pub(super) fn run_creation_hook(device: usize) {
        if let Some(hook) = CREATION_HOOK.with(Cell::take) {
            hook(device);
        }
    }

    #[test]
    fn an_allocator_created_during_a_config_change_gets_the_new_config() {
        const NAME: &str =
            "global::tests::an_allocator_created_during_a_config_change_gets_the_new_config";
        if std::env::var_os(SCENARIO).is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
                .env(SCENARIO, "1")
                .env(super::CONFIG_ENV, "max_split_size_mb:32")
                .output()
                .unwrap();
            let output = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "the scenario failed:\n{output}");
            assert!(
                output.contains("1 passed"),
                "the scenario did not run:\n{output}"
            );
            return;
        }
        if !xpu_testing::devices(1) {
            return;
        }
        // The first use of an allocator: the configuration is `XPU_ALLOC_CONF`'s, read now.
        CREATION_HOOK.with(|h| {
            h.set(Some(|_| super::set_config("max_split_size_mb:64").unwrap()));
        });
        let allocator = super::device_allocator(0).unwrap();
        let max_split = 64 * MIB;
        assert!(CREATION_HOOK.with(Cell::get).is_none(), "the hook ran");
        assert_eq!(super::current_config().unwrap().max_split_size, max_split);
        assert_eq!(
            allocator.core().config().max_split_size,
            max_split,
            "the allocator created meanwhile has the new configuration"
        );
        assert_eq!(
            super::memory_stats(0).unwrap().max_split_size,
            i64::try_from(max_split).unwrap()
        );
        // And applies it: a 100 MiB block is an oversize allocation.
        let stream = xpu_stream::current_stream(0).unwrap();
        let big = allocator.allocate(100 * MIB, &stream).unwrap();
        assert_eq!(allocator.memory_stats().oversize_allocations.current, 1);
        drop(big);
        allocator.empty_cache();
        assert_eq!(allocator.memory_stats().oversize_segments.current, 0);
    }
}
