//! `xpu`: a GPU runtime over OpenCL with the surface of PyTorch's `torch.xpu` / `torch.cuda`.
//!
//! This facade re-exports every layer and adds free functions with torch.xpu's names. Every
//! function that needs the runtime runs [`lazy_init`] first (one atomic load once initialized).
//!
//! | layer | crate | re-exported as |
//! |---|---|---|
//! | OpenCL backend, devices, current device | `xpu-device` | [`xpu_device`], [`DeviceGuard`], [`DeviceProperties`] |
//! | streams, pools, current stream | `xpu-stream` | [`xpu_stream`], [`Stream`], [`StreamGuard`], [`ExternalStream`] |
//! | events | `xpu-event` | [`xpu_event`], [`Event`], [`EventFlags`], [`StreamExt`] |
//! | caching device and pinned-host allocators (feature `alloc`) | `xpu-alloc` (re-exporting `xpu-host` and the modules of the backend-independent `xpu-caching`) | `xpu_alloc`, `DataPtr`, `HostPtr` |
//! | programs, kernel functions, launches on streams, typed device memory (feature `kernel`) | `xpu-kernel` | `xpu_kernel`, `Program`, `Function`, `LaunchExt`, `KernelCache`, `KernelError`, `DeviceBuffer`, `DeviceSlice`, `DeviceSliceMut`, `StreamMemoryExt`, foreign OpenCL libraries: `ClRegion`, `ForeignExt`, `InteropError` |
//! | lazy init, fork safety | `xpu-lazy` | [`xpu_lazy`], [`init`], [`is_initialized`] |
//!
//! # Cargo features
//! - `alloc` (default): the caching device allocator, the pinned-host allocator and the memory
//!   functions below. Turn it off (`default-features = false`) when your framework brings its
//!   own allocator and only needs devices, streams and events.
//! - `kernel` (default, needs `alloc`): OpenCL C programs built with options and cached in
//!   memory and on disk (`XPU_KERNEL_CACHE`), `Send + Sync` kernel functions and the `unsafe`
//!   launch builder on streams (`stream.launch(&f, global, local)?.arg(&block)?...enqueue()`),
//!   allocator blocks passed as one argument each; typed device memory on the caching
//!   allocator (`DeviceBuffer<T>`, views, typed copies and fills).
//!
//! Every layer's error but `xpu_kernel::graph::GraphError` and `xpu_alloc::BlockArgError`
//! converts into [`Error`] (`From`), so `?` works on them in a function returning [`Result`].
//!
//! # First steps
//! A device, a stream, typed device memory uploaded from a `Vec` and from pinned host memory,
//! an OpenCL C kernel, a timed launch, a second stream ordered after the first by an event,
//! the download, and the allocator's statistics. The longer version, with `record_stream`
//! across streams and `empty_cache`, is the `first_steps` example
//! (`cargo run -p xpu --example first_steps`).
//!
//! ```
//! use xpu::{DeviceBuffer, Event, LaunchExt, Program, StreamExt, StreamMemoryExt};
//! # fn main() -> xpu::Result<()> {
//! # if xpu::device_count() == 0 { return Ok(()); }
//! xpu::set_device(0)?; // initializes the runtime (as every function that needs it)
//! let s1 = xpu::current_stream(None)?; // the thread's current stream on the current device
//! let s2 = xpu::new_stream(None, 0)?; // a pool stream, as torch.xpu.Stream()
//!
//! // Uploads are stream-ordered and non-blocking (a Vec is staged through pinned memory).
//! let x = DeviceBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &s1)?;
//! let mut pinned = xpu::xpu_alloc::host_allocate(4 * 4)?; // bytes, as pin_memory()
//! pinned.copy_from_slice(&[10.0f32; 4].map(f32::to_ne_bytes).concat());
//! let mut y = DeviceBuffer::<f32>::new(4, &s1)?; // contents unspecified until written
//! xpu::xpu_kernel::memory::copy_htod_pinned(&s1, &pinned, &mut y)?;
//!
//! // OpenCL C, built for the device once (cached in memory and on disk).
//! const SRC: &str = "__kernel void axpy(__global float *y, __global const float *x,
//!     float a, uint n) { size_t i = get_global_id(0); if (i < n) y[i] += a * x[i]; }";
//! let axpy = Program::build(s1.device(), SRC, "")?.function("axpy")?;
//! let (mut start, mut end) = (Event::timing(), Event::timing());
//! start.record(&s1)?;
//! // SAFETY: 4 work-items, each touching element i < 4 of `y` and `x` (4 elements each);
//! // nothing on the host borrows them; the kernel terminates.
//! unsafe { s1.launch(&axpy, &[4], None)?.args((&y, &x, 2.0f32, 4u32))?.enqueue()? };
//! end.record(&s1)?;
//!
//! s2.wait_event(&end)?; // s2's later work runs after the kernel; the host does not block
//! let y_on_s2 = s2.dtoh_sync_copy(&y)?; // blocking: returns with the bytes, after the kernel
//! assert_eq!(y_on_s2, [12.0, 14.0, 16.0, 18.0]);
//! println!("axpy: {:.3} ms", start.elapsed_time(&end)?); // both events have completed
//!
//! assert!(xpu::memory_allocated(None)? >= 2 * 16);
//! println!("{}", xpu::memory_summary(None, true)?);
//! drop((x, y));
//! xpu::empty_cache(); // returns the cached, unused segments to the driver
//! # Ok(())
//! # }
//! ```
//!
//! Logging goes through `tracing` in every layer; install any subscriber to see it.
//!
//! # torch.xpu / torch.cuda → xpu
//! | torch | xpu | initializes? |
//! |---|---|---|
//! | `is_available()` | [`is_available`] | driver only (see below) |
//! | `device_count()` | [`device_count`] | driver only (see below) |
//! | `init()`, `is_initialized()` | [`init`], [`is_initialized`] | yes / no |
//! | `current_device()` | [`current_device`] | yes |
//! | `set_device(i)` | [`set_device`] | yes |
//! | `device(i)` (context manager) | [`device()`] → [`DeviceGuard`] | yes |
//! | `device_of(obj)` | [`device_of`] (streams, events, `DataPtr`, `DeviceBuffer`) | yes |
//! | `get_device_name(i)` | [`get_device_name`] | yes |
//! | `get_device_capability(i)` | [`get_device_capability`] (a map, like torch.xpu) | yes |
//! | `get_device_properties(i)` | [`get_device_properties`] | yes |
//! | `synchronize(i)` | [`synchronize`] (external streams included, as CUDA) | yes |
//! | `current_stream(i)` | [`current_stream`] | yes |
//! | `default_stream(i)` | [`default_stream`] (every thread's initial current stream, as CUDA's) | yes |
//! | `Stream.priority_range()` | [`priority_range`] (`(1, -1)`) | no |
//! | `set_stream(s)` | [`set_stream`] (switches to the stream's device, as Python's; `xpu_stream::set_stream` keeps C++ semantics) | yes |
//! | `stream(s)` (context manager) | [`stream()`] → [`StreamGuard`] | yes |
//! | `Stream(device, priority)` | [`new_stream`], [`xpu_stream::get_stream_from_pool`] | yes |
//! | `ExternalStream(ptr)` / `get_stream_from_external` | [`ExternalStream`] (+ the backend's `unsafe CommandQueue::from_raw_borrowed`) | — |
//! | `Stream.query/synchronize/wait_event/wait_stream/record_event` | [`Stream`], [`StreamExt`] | — |
//! | `Event(enable_timing, blocking)` + record/wait/query/synchronize/elapsed_time | [`Event`], [`EventFlags`] | — |
//! | `empty_cache()` | `empty_cache` (every allocator, whoever created it; no-op while none exists) | no |
//! | `memory_stats(i)` | `memory_stats` (typed) / `memory_stats_flat` (dotted keys); empty while no allocator exists | no |
//! | `memory_summary(i, abbreviated)` | `memory_summary` | no |
//! | `memory_snapshot()` | `memory_snapshot` | no |
//! | `memory_allocated`, `max_memory_allocated`, `memory_reserved`, `max_memory_reserved` | same names (0 before init) | no |
//! | `reset_peak_memory_stats(i)` | `reset_peak_memory_stats` | no |
//! | `mem_get_info(i)` | `mem_get_info` (free = total − reserved by xpu: OpenCL has no free-memory query) | yes |
//! | `set_per_process_memory_fraction(f, i)` | `set_per_process_memory_fraction` (0 < f ≤ 1) | yes |
//! | `get_per_process_memory_fraction(i)` | [`get_per_process_memory_fraction`] | yes |
//! | `except torch.OutOfMemoryError` | [`Error::is_out_of_memory`] | no |
//! | `caching_allocator_alloc(size, device, stream)` / `caching_allocator_delete` | `caching_allocator_alloc(size, stream)` (the stream's device) / `caching_allocator_delete` | yes / no |
//! | `host_memory_stats()`, `empty_host_cache()`, `reset_peak_host_memory_stats()`, `reset_accumulated_host_memory_stats()` | same names (the pinned-host allocator) | no |
//! | `Tensor.record_stream(s)` | `xpu_alloc::record_stream` / `DataPtr::record_stream` (typed copies, `DeviceBuffer` methods and launches record a stream other than the allocation's themselves) | — |
//! | `torch.empty(n, device=d)`, `Tensor.to(d, non_blocking=True)`, `Tensor.cpu()` | `DeviceBuffer::new` / `zeroed` / `from_slice`, `StreamMemoryExt` (`htod_copy`, `dtoh_sync_copy`, ...), `DeviceBuffer::to_vec`; the rest in `xpu_kernel::memory` | — |
//! | `torch.empty(n, pin_memory=True)`, pinned `to(d, non_blocking=True)`, `to("cpu", non_blocking=True)` into pinned memory | `xpu_alloc::host_allocate` (bytes, current device) / `host_allocate_on` → `HostPtr`; `xpu_kernel::memory::copy_htod_pinned`, `copy_dtoh_pinned` (reading the `HostPtr` waits for the copy) | — |
//! | `torch.cuda.Event(enable_timing=True)` | `Event::timing()` | — |
//! | `MemPool()`, `MemPool(allocator=...)` | `mem_pool` / `MemPool::new`, `xpu_alloc::MemPool::with_source` (a `SegmentSource`) | yes / no |
//! | `use_mem_pool(pool)` | `use_mem_pool` → `MemPoolGuard` (this thread only) | yes |
//! | `pool.id`, `pool.snapshot()`, `empty_cache` of one pool | `MemPool::id`, `snapshot`, `memory_stats`, `empty_cache`, `release` | — |
//! | `graph_pool_handle()`, `graph(g, pool=...)` | `xpu_kernel::graph::graph_pool_handle`, `Graph::capture_in_pool` | — |
//!
//! # Initialization and `fork`
//! OpenCL cannot count devices without initializing its driver (there is no NVML), so the
//! first enumeration — `device_count`, `is_available`, `get_device_properties`, or any call of
//! a lower layer that needs a device — initializes the driver, and from then on
//! a child created by `fork()` is a bad fork: every entry point of every layer returns its
//! `BadFork` error there at once ([`Error::is_bad_fork`]), and `device_count` answers the
//! parent's count. Such an enumeration outside [`lazy_init`] makes [`is_initialized`] true
//! once it is complete, so the flag and the child agree (torch.xpu's `is_initialized()` stays
//! `False` after `device_count()` although the fork is already poisoned). Calls queued with
//! [`lazy_call`] run at [`lazy_init`], which every function marked "yes" runs first; as
//! torch's, [`is_initialized`] is false until that initialization has finished, its queued
//! calls included (a child forked while they run is already a bad fork). Use spawned processes (`std::process::Command`), not `fork`, once the
//! runtime was used.
//!
//! # Safety: what is `unsafe`, and why
//! Every safe function of every layer is sound for any input and any interleaving of calls
//! (no data race, use-after-free, write behind a live borrow, crash or hang). What cannot be
//! made sound is an `unsafe fn` whose `# Safety` section names the caller's obligations. They
//! live in `xpu-device`, the only crate with OpenCL FFI, and in `xpu-kernel`, whose three
//! (`Launch::enqueue`, `graph::CaptureLaunch::enqueue`, `ForeignCall::call`) call it (and in
//! xpu-burn, above the facade: `runtime::launch`). The table holds the ones a user meets
//! first; the one a framework meets first is `Launch::enqueue`, the kernel launch:
//!
//! | function | why it is `unsafe` | the caller guarantees |
//! |---|---|---|
//! | `xpu_kernel::Launch::enqueue` (`stream.launch(..)?.arg(..)?.enqueue()`) | kernel code is arbitrary | every access stays inside the allocations given as arguments (their requested sizes) and the `LocalMem` sizes; nothing it writes is borrowed on the host and nothing it reads is written by the host until it completes; it terminates |
//! | `xpu_device::backend::CommandQueue::enqueue_kernel` | kernel code is arbitrary | every access stays inside the argument buffers and `__local` sizes; nothing it writes is borrowed by Rust and nothing it reads is written by the host until its event completes; it terminates |
//! | `CommandQueue::from_raw_borrowed` / `from_raw_owned` | wraps a raw `cl_command_queue` | a valid queue (owned: one reference handed over) |
//! | `Context::from_raw_retained` / `from_raw_owned` | wraps a raw `cl_context` | a valid context (owned: one reference handed over) |
//! | `ClEvent::from_raw_retained` | wraps a raw `cl_event` | a valid event |
//! | `ClEvent::from_raw_owned` | takes over a raw `cl_event` | a valid event, one reference handed over |
//! | `xpu_kernel::ForeignCall::call` | hands a stream's raw queue and regions' `cl_mem`s to foreign code (CLBlast...) | the code touches only the declared regions (writes only `ClRegion::new_mut` ones) and the workspace, enqueues on that queue only, keeps no handle, returns `None` or an owned event of a command on that queue |
//! | `Buffer::from_raw_retained` | wraps a raw `cl_mem` | a valid buffer of at least the given size |
//! | `xpu_device::fork::run_in_forked_child` | runs code in a child forked from a multi-threaded process | the child code only does what is safe after `fork` (no lock the parent may hold, no driver call) |
//!
//! Raw interop values (`DataPtr::cl_mem_and_offset`, `raw_cl_mem_and_offset`) are plain values
//! (no retained handle): using them as handles is the raw, `unsafe` side of the line.
//! Allocator memory is reached safely through allocation-scoped views (`DataPtr::view`,
//! `with_raw_view`), and pinned host memory through accessors that wait for the copies in
//! flight on it.
//!
//! No equivalent, and why:
//! - `get_arch_list`, `is_bf16_supported`, `get_gencode_flags`: tied to ahead-of-time compiled
//!   kernels; xpu builds OpenCL C at run time. `has_fp16` / `has_fp64` are in the properties.
//! - `Event.ipc_handle`, expandable segments, pluggable allocators (process-wide
//!   `change_current_allocator`; a private pool may draw from a custom segment source):
//!   OpenCL 3.0 has no IPC handles or virtual-memory mapping to build them on. (Private
//!   pools are allocator bookkeeping: `MemPool`; CUDA graphs are `xpu_kernel::graph`:
//!   captured through a handle and replayed from a recording, allocating from a
//!   graph-private pool.)
//! - `can_device_access_peer`: OpenCL contexts here are per device; cross-device waits are
//!   supported by events (a completion callback sets a user event on the waiting device).
//! - `torch.xpu.manual_seed*` and random generators: no RNG lives in the runtime layer.
//!
//! `unsafe` in the examples: an example launches kernels as any user does, and may call foreign
//! code with `unsafe` that no safe wrapper can remove (the `clblast_gemm` example calls
//! `Clblast::sgemm` without xpu's extent check of C, to show CLBlast's own check). xtask's rule
//! (f) allows it in the users of xpu's unsafe API only (files under `crates/xpu/examples/`, never
//! this crate's `src/` or `tests/`; benches; the tool crates): `unsafe {}` blocks, each with a
//! `// SAFETY:` comment, and `unsafe extern "C" fn(..)` pointer types; no `unsafe fn` / `impl` /
//! `trait` and no `extern` blocks.
#![forbid(unsafe_code)]

mod device;
mod error;
#[cfg(feature = "alloc")]
mod memory;
mod stream;

#[cfg(feature = "alloc")]
pub use xpu_alloc;
pub use xpu_device;
pub use xpu_event;
#[cfg(feature = "kernel")]
pub use xpu_kernel;
#[cfg(feature = "kernel")]
pub use xpu_kernel::{
    ClRegion, ForeignCall, ForeignExt, ForeignQueue, Function, InteropError, KernelCache,
    KernelError, LaunchExt, Program,
};
#[cfg(feature = "kernel")]
pub use xpu_kernel::{
    DeviceBuffer, DeviceRegion, DeviceRegionMut, DeviceSlice, DeviceSliceMut, MemoryError,
    StreamMemoryExt,
};
pub use xpu_lazy;
pub use xpu_stream;

pub use device::{
    current_device, device, device_count, device_of, get_device_capability, get_device_name,
    get_device_properties, init, is_available, set_device, synchronize,
};
pub use error::{Error, Result};
#[cfg(feature = "alloc")]
pub use memory::*;
pub use stream::{current_stream, default_stream, new_stream, priority_range, set_stream, stream};
pub use xpu_device::{DeviceGuard, DeviceProperties, DeviceType, HasDevice};
pub use xpu_event::{Event, EventFlags, StreamExt};
pub use xpu_lazy::{is_in_bad_fork, is_initialized, lazy_call, lazy_init};
pub use xpu_stream::{ExternalStream, Stream, StreamGuard};
