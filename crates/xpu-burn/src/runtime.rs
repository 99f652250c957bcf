//! The backend's runtime state per device: the stream burn's work is ordered on, the device's
//! properties, and the kernels built for it (a cache over xpu-kernel's program cache).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use burn_tensor::DType;
use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use xpu::xpu_kernel::{Arg, Function, Program};
use xpu::{DeviceBuffer, DeviceProperties, LaunchExt, Stream};

use crate::dtype;
use crate::error::{Error, Result};

/// The stream every burn op on `device` is enqueued on: the device's default stream, shared
/// by all threads (burn's tensors cross threads freely, so one in-order queue per device
/// orders every producer before every consumer without events). `Backend::sync` waits for it.
///
/// # Errors
/// Initialization errors and a bad device index.
pub fn stream(device: usize) -> Result<Stream> {
    Ok(xpu::xpu_stream::default_stream(device)?)
}

/// The device's properties, read once per device.
///
/// # Errors
/// Initialization errors and a bad device index.
pub fn properties(device: usize) -> Result<Arc<DeviceProperties>> {
    static PROPS: OnceLock<RwLock<HashMap<usize, Arc<DeviceProperties>>>> = OnceLock::new();
    let map = PROPS.get_or_init(Default::default);
    if let Some(p) = map.read().get(&device) {
        return Ok(p.clone());
    }
    let p = Arc::new(xpu::get_device_properties(Some(device))?);
    map.write().insert(device, p.clone());
    Ok(p)
}

/// The kernel `name` of the program that `source` builds, for `device`, cached under `key`
/// (which must identify the source: a template name and its parameters; the kernel name is
/// part of the cache key, so one program's kernels may share `key`). `source` runs only
/// on a miss; the program goes through xpu-kernel's memory and disk caches.
///
/// The caller's kernels are cached apart from the backend's own: a key this crate's ops use
/// finds, here, only what a caller built under it, never the library's kernel, and the ops
/// never find a caller's (review h57: a caller's source cached under the key of burn's float
/// add ran in every later `a + b`). Launching the function is `unsafe`
/// ([`launch`]).
///
/// # Errors
/// A build failure (with the OpenCL build log) or a missing kernel name.
pub fn function(
    device: usize,
    key: &str,
    name: &str,
    source: impl FnOnce() -> String,
) -> Result<Function> {
    cached_function(Namespace::Caller, device, key, name, source)
}

/// [`function`] for this crate's own templates (the ops' kernels), whose `key` names the
/// template and its parameters.
///
/// # Errors
/// As [`function`].
pub(crate) fn library_function(
    device: usize,
    key: &str,
    name: &str,
    source: impl FnOnce() -> String,
) -> Result<Function> {
    cached_function(Namespace::Library, device, key, name, source)
}

/// Whose kernels a cache entry holds: the ops' own, or a caller's ([`function`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Namespace {
    Library,
    Caller,
}

/// Kernels by device and namespace, then kernel name, then key: looked up with the caller's
/// `&str`s, so a hit allocates nothing. Hashed with `rustc-hash`'s Fx hash (the keys are this
/// crate's template parameters and callers' keys; no untrusted input sizes the maps).
type FnCache = FxHashMap<(usize, Namespace), FxHashMap<String, FxHashMap<String, Function>>>;

/// The cached function of `m` for these parts, if any.
fn cached_in(
    m: &FnCache,
    device: usize,
    space: Namespace,
    key: &str,
    name: &str,
) -> Option<Function> {
    m.get(&(device, space))
        .and_then(|by_name| by_name.get(name))
        .and_then(|by_key| by_key.get(key))
        .cloned()
}

/// Inserts `f` into `m` under these parts.
fn insert_in(m: &mut FnCache, device: usize, space: Namespace, key: &str, name: &str, f: Function) {
    m.entry((device, space))
        .or_default()
        .entry(name.to_owned())
        .or_default()
        .insert(key.to_owned(), f);
}

fn cached_function(
    space: Namespace,
    device: usize,
    key: &str,
    name: &str,
    source: impl FnOnce() -> String,
) -> Result<Function> {
    static FUNCS: OnceLock<RwLock<FnCache>> = OnceLock::new();
    let map = FUNCS.get_or_init(Default::default);
    if let Some(f) = cached_in(&map.read(), device, space, key, name) {
        return Ok(f);
    }
    let src = source();
    let f = Program::build(device, &src, "")
        .and_then(|p| p.function(name))
        .inspect_err(|_| tracing::debug!("xpu-burn kernel {key} failed to build:\n{src}"))?;
    insert_in(&mut map.write(), device, space, key, name, f.clone());
    Ok(f)
}

/// Kernel metadata (shapes, strides, offsets) on the device: a read-only buffer of `long`s,
/// shared by every launch that needs the same values ([`upload_meta`] caches them).
#[derive(Debug, Clone)]
pub struct Meta(Arc<DeviceBuffer<i64>>);

impl<'a> From<&'a Meta> for Arg<'a> {
    fn from(m: &'a Meta) -> Self {
        Arg::from(&*m.0)
    }
}

/// The most metadata buffers kept per process; past it the cache starts over (a training
/// loop's shapes repeat, so a few hundred entries cover it).
const META_CACHE_ENTRIES: usize = 4096;

/// Metadata buffers by device, then values (looked up with the caller's slice: a hit
/// allocates nothing).
type MetaCache = FxHashMap<usize, FxHashMap<Vec<i64>, Meta>>;

/// The process's metadata buffers.
fn meta_cache() -> &'static parking_lot::Mutex<MetaCache> {
    static CACHE: OnceLock<parking_lot::Mutex<MetaCache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Drops the cached metadata buffers of `device` ([`upload_meta`]), as `Backend::memory_cleanup`
/// does before emptying the allocator's cache: they are allocator blocks, counted by
/// `xpu::memory_allocated`, one per distinct shape and stride set seen (up to
/// `META_CACHE_ENTRIES`). Launches that hold one keep it until they are enqueued; the allocator
/// reuses a dropped block only after the stream's work on it completed.
pub fn release_meta(device: usize) {
    // Dropped outside the lock: a block's drop goes to the allocator.
    let dropped = meta_cache().lock().remove(&device);
    drop(dropped);
}

/// `values` as a metadata buffer on `device`: uploaded once on the device's burn stream
/// (non-blocking, stream-ordered before every later launch there) and then shared by every
/// launch with the same values, so a strided op costs no upload after its first run. The
/// buffers are never written after their upload; a dropped entry's block returns to the
/// caching allocator, which reuses it only after the stream's work on it completed.
///
/// # Errors
/// Allocation and copy errors.
pub fn upload_meta(device: usize, values: &[i64]) -> Result<Meta> {
    let values = if values.is_empty() {
        &[0i64][..]
    } else {
        values
    };
    let cache = meta_cache();
    if let Some(m) = cache.lock().get(&device).and_then(|m| m.get(values)) {
        return Ok(m.clone());
    }
    let stream = stream(device)?;
    let meta = Meta(Arc::new(DeviceBuffer::from_slice(values, &stream)?));
    let mut map = cache.lock();
    let map = map.entry(device).or_default();
    if map.len() >= META_CACHE_ENTRIES {
        map.clear();
    }
    map.insert(values.to_vec(), meta.clone());
    Ok(meta)
}

/// Kernels this crate has enqueued since the process started, all devices together (one per
/// [`launch`] that enqueued one; CLBlast's matmul kernels are not counted): what an op or a
/// fused run costs in launches. A relaxed
/// atomic, so a count read while other threads launch is a lower bound.
pub fn launch_count() -> u64 {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Enqueues `function` on the device's burn stream over `global` work-items (1 to 3
/// dimensions; `local`: the work-group size, `None` for the driver's choice) with `args`.
/// Nothing is enqueued when a global size is 0.
///
/// # Safety
/// As [`xpu::xpu_kernel::Launch::enqueue`]: every access of every work-item stays inside the
/// allocations given as arguments (and inside `__local` sizes); no memory the kernel writes
/// is visible to another tensor (outputs are fresh allocations); the kernel terminates.
///
/// # Errors
/// Argument mismatches, enqueue failures; [`Error::Invalid`] for more than `i64::MAX`
/// work-items in all (the kernels index in OpenCL's 64-bit `long`: a larger count would wrap).
pub unsafe fn launch(
    device: usize,
    function: &Function,
    global: &[usize],
    local: Option<&[usize]>,
    args: &[Arg<'_>],
) -> Result<()> {
    if global.contains(&0) {
        return Ok(());
    }
    let items = global.iter().try_fold(1usize, |n, &g| n.checked_mul(g));
    if items.is_none_or(|n| i64::try_from(n).is_err()) {
        return Err(Error::Invalid(format!(
            "a launch of {global:?} work-items exceeds the kernels' 64-bit index ({} items at most)",
            i64::MAX
        )));
    }
    let stream = stream(device)?;
    let mut l = stream.launch(function, global, local)?;
    for a in args {
        l = l.arg(*a)?;
    }
    // SAFETY: the caller upholds `enqueue`'s contract (this function's `# Safety`).
    unsafe { l.enqueue()? };
    LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// A scalar operand of an op: burn's `FloatElem` or `IntElem`, widened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarValue {
    /// A floating-point value.
    F(f64),
    /// An integer value.
    I(i64),
}

impl ScalarValue {
    /// As `f64`.
    pub fn as_f64(self) -> f64 {
        match self {
            ScalarValue::F(v) => v,
            ScalarValue::I(v) => v as f64,
        }
    }

    /// As `i64` (floats truncated toward zero).
    pub fn as_i64(self) -> i64 {
        match self {
            ScalarValue::F(v) => v as i64,
            ScalarValue::I(v) => v,
        }
    }
}

/// The OpenCL C type a scalar operand of a `dtype` op is passed as (by value): the element
/// type, except `half`, passed as `float` (OpenCL C kernels may not take `half` by value
/// without `cl_khr_fp16`'s argument support on every driver).
pub fn scalar_cl_type(dtype: DType) -> Result<&'static str> {
    Ok(match dtype::cl_type(dtype)? {
        "half" => "float",
        t => t,
    })
}

/// The kernel argument for `value` as a `dtype` scalar ([`scalar_cl_type`]). An integer
/// type takes the value only when it holds it: burn's scalars are `i64` / `f64`, and a
/// narrower tensor (`I32`, `U8`, ...) would otherwise compare, clamp or divide with the value
/// wrapped to its width (review h65: an `I32` tensor's `lower_elem(1 << 32)` compared with 0).
/// As burn's NdArray backend (its element conversion refuses such a value), the op is refused.
/// A float value for an integer type is truncated toward zero first.
///
/// # Errors
/// [`Error::Invalid`] for a value the integer type cannot hold (or a float value that is not
/// finite); [`Error::DType`] for a type without an OpenCL C type.
pub fn scalar_arg(value: ScalarValue, dtype: DType) -> Result<Arg<'static>> {
    let cl = scalar_cl_type(dtype)?;
    let int = || -> Result<i64> {
        let refused = || {
            Error::Invalid(format!(
                "the scalar {} does not fit the tensor's element type {dtype:?}",
                match value {
                    ScalarValue::F(v) => v.to_string(),
                    ScalarValue::I(v) => v.to_string(),
                }
            ))
        };
        match value {
            ScalarValue::I(v) => Ok(v),
            // Within i64: [-2^63, 2^63), both ends exact in f64.
            ScalarValue::F(v) => {
                let t = v.trunc();
                #[allow(clippy::cast_precision_loss)]
                let (lo, hi) = (i64::MIN as f64, -(i64::MIN as f64));
                if t.is_finite() && t >= lo && t < hi {
                    #[allow(clippy::cast_possible_truncation)]
                    Ok(t as i64)
                } else {
                    Err(refused())
                }
            }
        }
        .and_then(|v| match cl {
            "long" => Ok(v),
            "int" => i32::try_from(v).map(i64::from).map_err(|_| refused()),
            "short" => i16::try_from(v).map(i64::from).map_err(|_| refused()),
            "char" => i8::try_from(v).map(i64::from).map_err(|_| refused()),
            "uint" => u32::try_from(v).map(i64::from).map_err(|_| refused()),
            "ushort" => u16::try_from(v).map(i64::from).map_err(|_| refused()),
            _ => {
                // ulong and uchar (bool): non-negative, and uchar at most 255.
                if v < 0 || (cl != "ulong" && v > i64::from(u8::MAX)) {
                    Err(refused())
                } else {
                    Ok(v)
                }
            }
        })
    };
    // The `as` casts below narrow values `int` checked to fit.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(match cl {
        "double" => Arg::from(value.as_f64()),
        "float" => Arg::from(value.as_f64() as f32),
        "long" => Arg::from(int()?),
        "int" => Arg::from(int()? as i32),
        "short" => Arg::from(int()? as i16),
        "char" => Arg::from(int()? as i8),
        "ulong" => Arg::from(int()? as u64),
        "uint" => Arg::from(int()? as u32),
        "ushort" => Arg::from(int()? as u16),
        _ => Arg::from(int()? as u8),
    })
}

/// Checks that `device` can compute with `dtype`: `double` needs `cl_khr_fp64` and `half`
/// needs `cl_khr_fp16` (OpenCL 3.0 §9, the optional extensions).
///
/// # Errors
/// [`Error::Unsupported`] naming the extension; [`Error::DType`] for types without an
/// OpenCL C type; [`Error::Xpu`] when the device's properties cannot be read.
pub fn check_device_supports(device: usize, dtype: DType) -> Result<()> {
    dtype::cl_type(dtype)?;
    let feature = match dtype {
        DType::F64 => "cl_khr_fp64",
        DType::F16 => "cl_khr_fp16",
        _ => return Ok(()),
    };
    let props = properties(device)?;
    let has = match dtype {
        DType::F64 => props.has_fp64,
        _ => props.has_fp16,
    };
    if has {
        Ok(())
    } else {
        Err(Error::Unsupported {
            device,
            feature,
            what: format!("{dtype:?} tensors"),
        })
    }
}
