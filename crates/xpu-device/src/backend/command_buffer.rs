//! `cl_khr_command_buffer` (a provisional Khronos extension): a recorded sequence of commands
//! enqueued again with one call.
//!
//! The entry points are not exported by the ICD loader: they are loaded per platform with
//! `clGetExtensionFunctionAddressForPlatform` (OpenCL 3.0 §4.6, "Accessing OpenCL extension
//! functions"). The extension changed its signatures between provisional versions (0.9.5 added
//! a `properties` parameter to every recording command but the kernel one, Khronos
//! `cl_ext.h`), so [`command_buffer_support`] reads the version the device reports
//! (`CL_DEVICE_EXTENSIONS_WITH_VERSION`) and accepts only the layout implemented here,
//! versions 0.9.0 to 0.9.4 (PoCL 3.x reports 0.9.0); any other version, a device without the
//! extension or without simultaneous use gets `None`, and callers fall back to enqueueing the
//! commands one by one.
//!
//! What is recorded here, in the layout of those versions (Khronos `cl_ext.h` before 0.9.5):
//! - `clCreateCommandBufferKHR(num_queues, queues, properties, errcode_ret)`, with
//!   `CL_COMMAND_BUFFER_FLAGS_KHR` (0x1293) = `CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR` (1 << 0),
//!   so a buffer may be enqueued again while a previous enqueue is pending;
//! - `clCommandNDRangeKernelKHR(cb, queue, properties, kernel, work_dim, offset, global,
//!   local, num_sync_points, sync_points, sync_point, mutable_handle)`;
//! - `clCommandCopyBufferKHR(cb, queue, src, dst, src_offset, dst_offset, size,
//!   num_sync_points, sync_points, sync_point, mutable_handle)`;
//! - `clCommandFillBufferKHR(cb, queue, buffer, pattern, pattern_size, offset, size,
//!   num_sync_points, sync_points, sync_point, mutable_handle)`;
//! - `clFinalizeCommandBufferKHR`, `clEnqueueCommandBufferKHR(num_queues, queues, cb,
//!   num_events, events, event)`, `clReleaseCommandBufferKHR`.
//!
//! The recording `command_queue` argument is null (the base extension records to the one
//! queue the buffer was created with), and an enqueue passes no queues: a command buffer runs
//! on the queue it was created for. Queue substitution needs
//! `cl_khr_command_buffer_multi_device`, which is not used: a caller that replays on another
//! queue records another command buffer for it. Each recorded command waits on the sync point
//! of the one before, so the commands run in recording order whatever the queue's mode.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

use opencl3::kernel as clk;
use parking_lot::Mutex;

use super::queue::{check_buffer_copy, check_fill};
use super::{cl, raw, release, Buffer, ClEvent, CommandQueue, DeviceId, Kernel};
use crate::error::{ClError, DeviceError, Result};

type RawCommandBuffer = *mut c_void;
type SyncPoint = u32;

/// `CL_DEVICE_EXTENSIONS_WITH_VERSION` (OpenCL 3.0).
const DEVICE_EXTENSIONS_WITH_VERSION: u32 = 0x1060;
/// `CL_NAME_VERSION_MAX_NAME_SIZE`: the name field of a `cl_name_version`.
const NAME_VERSION_MAX_NAME_SIZE: usize = 64;
/// `CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR`.
const DEVICE_COMMAND_BUFFER_CAPABILITIES: u32 = 0x12A9;
/// `CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR`.
const DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES: u32 = 0x12AA;
/// `CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR`.
const CAPABILITY_SIMULTANEOUS_USE: u64 = 1 << 2;
/// `CL_COMMAND_BUFFER_FLAGS_KHR`.
const COMMAND_BUFFER_FLAGS: u64 = 0x1293;
/// `CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR`.
const COMMAND_BUFFER_SIMULTANEOUS_USE: u64 = 1;

type CreateFn = unsafe extern "C" fn(
    u32,
    *const raw::cl_command_queue,
    *const u64,
    *mut i32,
) -> RawCommandBuffer;
type HandleFn = unsafe extern "C" fn(RawCommandBuffer) -> i32;
type EnqueueFn = unsafe extern "C" fn(
    u32,
    *mut raw::cl_command_queue,
    RawCommandBuffer,
    u32,
    *const raw::cl_event,
    *mut raw::cl_event,
) -> i32;
/// The type of a `clCommand*KHR` recording entry point (cl_khr_command_buffer): the command
/// buffer, a queue (null: the buffer's own), the command's own arguments `$arg`, then the
/// tail every such entry point shares (`num_sync_points_in_wait_list`,
/// `sync_point_wait_list`, `sync_point`, `mutable_handle`), returning a `cl_int`; the
/// `record!` macro below passes that head and tail.
macro_rules! command_fn {
    ($($arg:ty),+) => {
        unsafe extern "C" fn(
            RawCommandBuffer,
            raw::cl_command_queue,
            $($arg,)+
            u32,
            *const SyncPoint,
            *mut SyncPoint,
            *mut *mut c_void,
        ) -> i32
    };
}
type NdRangeFn = command_fn!(
    *const u64,
    opencl3::types::cl_kernel,
    u32,
    *const usize,
    *const usize,
    *const usize
);
type CopyFn = command_fn!(raw::cl_mem, raw::cl_mem, usize, usize, usize);
type FillFn = command_fn!(raw::cl_mem, *const c_void, usize, usize, usize);
type GetAddressFn = unsafe extern "C" fn(raw::cl_platform_id, *const libc::c_char) -> *mut c_void;

/// Records one command through entry point `$f` of `$self`: `$f(buffer, null queue (the
/// buffer's own), $args..., the sync-point chain, no mutable handle)`; the caller states
/// why `$args` are valid.
macro_rules! record {
    ($self:ident, $f:ident, $name:literal, $($arg:expr),+) => {{
        let f = $self.fns.$f;
        let cb = $self.raw;
        $self.record($name, |n, list, point| {
            // SAFETY: a live command buffer in the recording state, a null queue (the base
            // extension records to the buffer's own), `$args` valid as the caller states, a
            // sync-point list of `n` entries and a slot for the new one, no mutable handle.
            unsafe { f(cb, ptr::null_mut(), $($arg),+, n, list, point, ptr::null_mut()) }
        })
    }};
}

/// The entry points of one platform.
#[derive(Debug)]
struct Fns {
    create: CreateFn,
    finalize: HandleFn,
    release: HandleFn,
    enqueue: EnqueueFn,
    nd_range: NdRangeFn,
    copy: CopyFn,
    fill: FillFn,
}

/// What a device offers of `cl_khr_command_buffer`, read at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandBufferSupport {
    /// The extension version the device reports: (major, minor, patch).
    pub version: (u32, u32, u32),
    /// `CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR`.
    pub capabilities: u64,
    /// `CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR`.
    pub required_queue_properties: u64,
}

/// `clGetExtensionFunctionAddressForPlatform`, looked up once in the OpenCL library the
/// runtime loaded (`OPENCL_DYLIB_PATH` entries first, then `libOpenCL.so.1`, as `cl3` does).
fn get_address_fn() -> Option<GetAddressFn> {
    static F: OnceLock<Option<GetAddressFn>> = OnceLock::new();
    *F.get_or_init(|| {
        let mut names: Vec<String> = std::env::var("OPENCL_DYLIB_PATH")
            .map(|v| v.split(';').map(str::to_owned).collect())
            .unwrap_or_default();
        names.push("libOpenCL.so.1".to_owned());
        for name in names {
            let Ok(c) = std::ffi::CString::new(name) else {
                continue;
            };
            // SAFETY: `c` is a NUL-terminated path; dlopen of the library the runtime already
            // loaded returns a handle to it (never unloaded: the handle is kept for the
            // process, as the runtime's own).
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
            if handle.is_null() {
                continue;
            }
            // SAFETY: a valid handle and a NUL-terminated symbol name.
            let sym = unsafe {
                libc::dlsym(handle, c"clGetExtensionFunctionAddressForPlatform".as_ptr())
            };
            if !sym.is_null() {
                // SAFETY: the OpenCL 1.2+ loader exports this symbol with this C signature
                // (OpenCL 3.0 §4.6; `CL_API_CALL` is the C convention on this target).
                return Some(unsafe { std::mem::transmute::<*mut c_void, GetAddressFn>(sym) });
            }
        }
        None
    })
}

fn load(platform: raw::cl_platform_id) -> Option<&'static Fns> {
    static CACHE: Mutex<Option<HashMap<usize, Option<&'static Fns>>>> = Mutex::new(None);
    let mut cache = CACHE.lock();
    *cache
        .get_or_insert_with(HashMap::new)
        .entry(platform as usize)
        .or_insert_with(|| {
            let get = get_address_fn()?;
            let addr = |name: &CStr| {
                // SAFETY: a platform handle from the ICD loader and a NUL-terminated name.
                let p = unsafe { get(platform, name.as_ptr()) };
                (!p.is_null()).then_some(p)
            };
            // Each entry point by name, as the function-pointer type of its field.
            macro_rules! entry {
                ($name:literal, $ty:ty) => {
                    // SAFETY: the address the platform returned for this name, whose C
                    // signature is the one of `$ty` (module docs; versions 0.9.0 to 0.9.4,
                    // checked by `command_buffer_support` before any call).
                    unsafe { std::mem::transmute::<*mut c_void, $ty>(addr($name)?) }
                };
            }
            let fns = Fns {
                create: entry!(c"clCreateCommandBufferKHR", CreateFn),
                finalize: entry!(c"clFinalizeCommandBufferKHR", HandleFn),
                release: entry!(c"clReleaseCommandBufferKHR", HandleFn),
                enqueue: entry!(c"clEnqueueCommandBufferKHR", EnqueueFn),
                nd_range: entry!(c"clCommandNDRangeKernelKHR", NdRangeFn),
                copy: entry!(c"clCommandCopyBufferKHR", CopyFn),
                fill: entry!(c"clCommandFillBufferKHR", FillFn),
            };
            Some(&*Box::leak(Box::new(fns)))
        })
}

/// The `cl_khr_command_buffer` version `device` reports, if any (from
/// `CL_DEVICE_EXTENSIONS_WITH_VERSION`: `cl_name_version` entries of a `cl_version` and a
/// 64-byte name; version = major << 22 | minor << 12 | patch, OpenCL 3.0 §3.4).
fn extension_version(device: DeviceId) -> Option<(u32, u32, u32)> {
    let bytes = device.info_bytes(DEVICE_EXTENSIONS_WITH_VERSION).ok()?;
    let entry = 4 + NAME_VERSION_MAX_NAME_SIZE;
    bytes.chunks_exact(entry).find_map(|e| {
        let name = &e[4..];
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        (&name[..len] == b"cl_khr_command_buffer").then(|| {
            let v = u32::from_ne_bytes([e[0], e[1], e[2], e[3]]);
            (v >> 22, (v >> 12) & 0x3ff, v & 0xfff)
        })
    })
}

/// Whether [`CommandBuffer`] can be used on `device`: the device reports
/// `cl_khr_command_buffer` at a version whose layout is implemented here (0.9.0 to 0.9.4), with
/// `CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR`, and its platform returns every entry
/// point. Read from the driver at each call (a few `clGetDeviceInfo` queries).
///
/// # Errors
/// None today (a failed query means "not supported"); `Result` for future checks.
pub fn command_buffer_support(device: DeviceId) -> Result<Option<CommandBufferSupport>> {
    let Some(version) = extension_version(device) else {
        return Ok(None);
    };
    if !(version.0 == 0 && version.1 == 9 && version.2 <= 4) {
        return Ok(None);
    }
    let (Ok(capabilities), Ok(required_queue_properties)) = (
        device.info_u64(DEVICE_COMMAND_BUFFER_CAPABILITIES),
        device.info_u64(DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES),
    ) else {
        return Ok(None);
    };
    if capabilities & CAPABILITY_SIMULTANEOUS_USE == 0 {
        return Ok(None);
    }
    let Ok(platform) = device.platform() else {
        return Ok(None);
    };
    if load(platform.as_raw()).is_none() {
        return Ok(None);
    }
    Ok(Some(CommandBufferSupport {
        version,
        capabilities,
        required_queue_properties,
    }))
}

/// A `cl_khr_command_buffer` of one queue: commands recorded with [`CommandBuffer::kernel`],
/// [`CommandBuffer::copy`] and [`CommandBuffer::fill`], then [`CommandBuffer::finalize`]d and
/// enqueued any number of times with [`CommandBuffer::enqueue`] (also while a previous
/// enqueue is pending: created with simultaneous use). Holds a reference to its queue, to the
/// kernels and to every buffer its commands use, so nothing it names is released while it
/// may run. `Send + Sync`: recording takes `&mut self`, and enqueueing is thread-safe
/// (OpenCL 3.0 appendix A.2).
#[derive(Debug)]
pub struct CommandBuffer {
    raw: RawCommandBuffer,
    fns: &'static Fns,
    queue: CommandQueue,
    last: Option<SyncPoint>,
    finalized: bool,
    len: usize,
    buffers: Vec<Buffer>,
    kernels: Vec<opencl3::types::cl_kernel>,
}

// SAFETY: every field is owned (the queue and buffers are `Send` wrappers, `fns` is a
// `&'static` table of function pointers) or a raw handle used only through OpenCL calls, which
// are thread-safe on command buffers and queues (OpenCL 3.0 appendix A.2); recording needs
// `&mut self`. The raw kernels are retained here and only released in `Drop`: no
// `clSetKernelArg` goes through them. An enqueue reads the recorded kernels' state (PoCL reads
// their arguments at each enqueue, see `CommandBuffer::kernel`), and the safety contract of
// `kernel` keeps those arguments unchanged while the buffer lives, so no call here races a
// write to a kernel. Dropping it on another thread releases the same references.
unsafe impl Send for CommandBuffer {}
// SAFETY: as above; `&self` only enqueues (`clEnqueueCommandBufferKHR`, allowed concurrently
// since the buffer is created with simultaneous use) or reads plain fields.
unsafe impl Sync for CommandBuffer {}

impl CommandBuffer {
    /// A command buffer recording for `queue` (`clCreateCommandBufferKHR` with simultaneous
    /// use), or `None` when its device has no usable `cl_khr_command_buffer`
    /// ([`command_buffer_support`]) or the queue lacks the properties the device requires.
    ///
    /// # Errors
    /// A failed `clGetCommandQueueInfo` or `clCreateCommandBufferKHR`.
    pub fn new(queue: &CommandQueue) -> Result<Option<CommandBuffer>> {
        let device = DeviceId::from_raw(queue.device_raw()?);
        let Some(support) = command_buffer_support(device)? else {
            return Ok(None);
        };
        if queue.properties()? & support.required_queue_properties
            != support.required_queue_properties
        {
            return Ok(None);
        }
        let Some(fns) = load(device.platform()?.as_raw()) else {
            return Ok(None);
        };
        let props = [COMMAND_BUFFER_FLAGS, COMMAND_BUFFER_SIMULTANEOUS_USE, 0];
        let q = queue.as_raw();
        let mut status = 0i32;
        // SAFETY: one live queue, a zero-terminated property list and a status slot, all
        // valid for the call.
        let raw = unsafe { (fns.create)(1, &q, props.as_ptr(), &mut status) };
        if status != 0 || raw.is_null() {
            return Err(ClError::new("clCreateCommandBufferKHR", status).into());
        }
        Ok(Some(CommandBuffer {
            raw,
            fns,
            queue: queue.clone(),
            last: None,
            finalized: false,
            len: 0,
            buffers: Vec::new(),
            kernels: Vec::new(),
        }))
    }

    /// The queue the buffer runs on.
    pub fn queue(&self) -> &CommandQueue {
        &self.queue
    }

    /// Number of recorded commands.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn recording(&self, what: &str) -> Result<()> {
        if self.finalized {
            return Err(DeviceError::InvalidArgument(format!(
                "command buffer: {what} after finalize"
            )));
        }
        Ok(())
    }

    /// Runs one recording call with the sync-point chain: waits on the previous command,
    /// stores this one's sync point.
    fn record(
        &mut self,
        function: &'static str,
        call: impl FnOnce(u32, *const SyncPoint, *mut SyncPoint) -> i32,
    ) -> Result<()> {
        let wait = self.last;
        let (n, list) = match &wait {
            Some(p) => (1, p as *const SyncPoint),
            None => (0, ptr::null()),
        };
        let mut point: SyncPoint = 0;
        let status = call(n, list, &mut point);
        if status != 0 {
            return Err(ClError::new(function, status).into());
        }
        self.last = Some(point);
        self.len += 1;
        Ok(())
    }

    /// Records a launch of `kernel` with the arguments set on it now, over `global`
    /// work-items in work-groups of `local` (`clCommandNDRangeKernelKHR`). The buffer keeps a
    /// reference to the kernel and to the buffers set as its arguments.
    ///
    /// # Safety
    /// - `kernel`'s arguments are not changed while this command buffer lives: the extension
    ///   says they are captured at recording, but PoCL 3.1 reads them at each enqueue
    ///   (observed: an argument set after recording is the one a later enqueue uses), so an
    ///   argument changed later would run unchecked;
    /// - the obligations of [`CommandQueue::enqueue_kernel`], for **every** enqueue of this
    ///   buffer, with the arguments set now and the memory contents the earlier commands and the
    ///   work ordered before each enqueue leave: every access stays inside the buffers set for
    ///   the pointer arguments and inside the `__local` sizes; no memory the kernel writes is
    ///   borrowed by Rust code while an enqueue may run, and none it reads is written by the
    ///   host meanwhile; the kernel terminates.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad dimension count or after [`CommandBuffer::finalize`];
    /// [`DeviceError::KernelArg`] for an argument never set; a failed
    /// `clCommandNDRangeKernelKHR` or `clRetainKernel`.
    pub unsafe fn kernel(
        &mut self,
        kernel: &Kernel,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<()> {
        self.recording("kernel")?;
        if global.is_empty() || global.len() > 3 || local.is_some_and(|l| l.len() != global.len()) {
            return Err(DeviceError::InvalidArgument(
                "command buffer kernel: 1 to 3 dimensions, local size of the same rank".into(),
            ));
        }
        kernel.check_all_set()?;
        // SAFETY: a live kernel handle (borrowed); the retain is released in `Drop`.
        cl("clRetainKernel", unsafe {
            clk::retain_kernel(kernel.as_raw())
        })?;
        self.kernels.push(kernel.as_raw());
        self.buffers.extend(kernel.held_buffers().cloned());
        // The kernel: live, every argument set through the checked setters (its buffers now
        // also held by `self`), work sizes valid for the call; no properties. What it does at
        // each enqueue is this function's caller's obligation.
        record!(
            self,
            nd_range,
            "clCommandNDRangeKernelKHR",
            ptr::null(),
            kernel.as_raw(),
            global.len() as u32,
            ptr::null(),
            global.as_ptr(),
            local.map_or(ptr::null(), <[usize]>::as_ptr)
        )
    }

    /// Records a copy of `len` bytes from `src[src_offset..]` to `dst[dst_offset..]`
    /// (`clCommandCopyBufferKHR`). A copy of 0 bytes (at checked offsets) records nothing,
    /// as [`CommandQueue::copy`] moves nothing (drivers disagree on size 0).
    ///
    /// # Errors
    /// `InvalidArgument` for out-of-range regions or after [`CommandBuffer::finalize`];
    /// `CL_INVALID_CONTEXT` for a buffer of another context than the command buffer's queue
    /// (checked by the runtime); a failed `clCommandCopyBufferKHR` (`CL_MEM_COPY_OVERLAP` for
    /// overlapping regions).
    pub fn copy(
        &mut self,
        src: &Buffer,
        src_offset: usize,
        dst: &Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        self.recording("copy")?;
        check_buffer_copy(len, (src, src_offset), (dst, dst_offset))?;
        if len == 0 {
            return Ok(());
        }
        self.queue
            .check_buffer_context("clCommandCopyBufferKHR", src)?;
        self.queue
            .check_buffer_context("clCommandCopyBufferKHR", dst)?;
        self.buffers.push(src.clone());
        self.buffers.push(dst.clone());
        // Two live buffers (held by `self`), checked ranges.
        record!(
            self,
            copy,
            "clCommandCopyBufferKHR",
            src.as_raw(),
            dst.as_raw(),
            src_offset,
            dst_offset,
            len
        )
    }

    /// Records a fill of `len` bytes at `offset` with a repeated `pattern`
    /// (`clCommandFillBufferKHR`); `pattern.len()` must be 1, 2, 4, ..., 128 and divide
    /// `offset` and `len`. The pattern is copied at recording. A fill of 0 bytes records
    /// nothing.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad pattern or range or after [`CommandBuffer::finalize`];
    /// `CL_INVALID_CONTEXT` for a buffer of another context than the command buffer's queue
    /// (checked by the runtime); a failed `clCommandFillBufferKHR`.
    pub fn fill(&mut self, dst: &Buffer, pattern: &[u8], offset: usize, len: usize) -> Result<()> {
        self.recording("fill")?;
        check_fill(pattern.len(), offset, len, dst.size())?;
        if len == 0 {
            return Ok(());
        }
        self.queue
            .check_buffer_context("clCommandFillBufferKHR", dst)?;
        self.buffers.push(dst.clone());
        // A live buffer (held by `self`), a pattern of `pattern.len()` bytes valid for the
        // call (the driver copies it), a checked range.
        record!(
            self,
            fill,
            "clCommandFillBufferKHR",
            dst.as_raw(),
            pattern.as_ptr().cast(),
            pattern.len(),
            offset,
            len
        )
    }

    /// Ends recording (`clFinalizeCommandBufferKHR`); the buffer can then be enqueued.
    ///
    /// # Errors
    /// `InvalidArgument` when already finalized; a failed `clFinalizeCommandBufferKHR`.
    pub fn finalize(&mut self) -> Result<()> {
        self.recording("finalize")?;
        // SAFETY: a live command buffer in the recording state.
        let status = unsafe { (self.fns.finalize)(self.raw) };
        if status != 0 {
            return Err(ClError::new("clFinalizeCommandBufferKHR", status).into());
        }
        self.finalized = true;
        Ok(())
    }

    /// Enqueues the recorded commands on the buffer's queue, after the work enqueued on it
    /// before (`clEnqueueCommandBufferKHR` with no queue list); non-blocking, and allowed while
    /// a previous enqueue is pending (simultaneous use).
    ///
    /// # Errors
    /// `InvalidArgument` before [`CommandBuffer::finalize`]; a failed
    /// `clEnqueueCommandBufferKHR`.
    pub fn enqueue(&self) -> Result<ClEvent> {
        if !self.finalized {
            return Err(DeviceError::InvalidArgument(
                "command buffer: enqueue before finalize".into(),
            ));
        }
        let mut event: raw::cl_event = ptr::null_mut();
        let _entry = super::at_exit::DriverEntry::enter("clEnqueueCommandBufferKHR")?;
        let ticket = self.queue.ticket([]);
        // SAFETY: a finalized command buffer created with simultaneous use, no queue list
        // (its own queue, kept alive by `self.queue`), no wait list, an event slot. Every
        // buffer and kernel its commands name is held by `self`; the kernels' obligations
        // were taken on by the callers of `kernel`.
        let status =
            unsafe { (self.fns.enqueue)(0, ptr::null_mut(), self.raw, 0, ptr::null(), &mut event) };
        if status != 0 {
            return Err(ClError::new("clEnqueueCommandBufferKHR", status).into());
        }
        Ok(self.queue.command_event(event, ticket))
    }
}

impl Drop for CommandBuffer {
    fn drop(&mut self) {
        // SAFETY: we own the one reference to a live command buffer; the driver keeps it
        // until its pending enqueues complete (a release does not cancel them).
        let status = unsafe { (self.fns.release)(self.raw) };
        release::note(
            "clReleaseCommandBufferKHR",
            if status == 0 { Ok(()) } else { Err(status) },
        );
        for k in self.kernels.drain(..) {
            // SAFETY: one reference taken by `kernel`.
            release::note("clReleaseKernel", unsafe { clk::release_kernel(k) });
        }
    }
}
