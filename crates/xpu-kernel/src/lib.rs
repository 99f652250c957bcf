//! `xpu-kernel`: what a framework embedding xpu needs on top of streams and the caching
//! allocator: OpenCL C programs built and cached per device, `Send + Sync` kernel functions,
//! an `unsafe` launch builder on a stream that takes allocator blocks as single arguments,
//! and typed device memory.
//!
//! ```no_run
//! use xpu_kernel::{LaunchExt, Program};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! const SRC: &str = "__kernel void scale(__global float *x, float a, uint n) {
//!     size_t i = get_global_id(0); if (i < n) x[i] *= a; }";
//! let program = Program::build(0, SRC, "-cl-fast-relaxed-math")?; // cached on disk
//! let scale = program.function("scale")?; // Send + Sync, cheap Clone
//! let stream = xpu_stream::current_stream(0)?;
//! let x = xpu_alloc::allocate(1024 * 4, &stream)?; // one kernel argument
//! // SAFETY: 1024 work-items touch x[0..1024), the allocation's 4096 bytes; nothing borrows
//! // them; the kernel terminates.
//! unsafe {
//!     stream
//!         .launch(&scale, &[1024], None)?
//!         .arg(&x)?
//!         .arg(2.0f32)?
//!         .arg(1024u32)?
//!         .enqueue()?;
//! }
//! stream.synchronize()?;
//! # Ok(())
//! # }
//! ```
//!
//! `unsafe` here: this crate has no OpenCL bindings; its `unsafe fn`s are [`Launch::enqueue`]
//! and `graph::CaptureLaunch::enqueue` (the kernel is arbitrary code; they enqueue through
//! `xpu_device`'s `CommandQueue::enqueue_kernel_without_event` or a command buffer) and
//! [`ForeignCall::call`] (it hands raw handles to foreign code); its other `unsafe` blocks call
//! xpu-device's unsafe API (cached program binaries, the buffers of graph replays, CLBlast). `cargo xtask check-layers`
//! holds the crate to that: `#![deny(unsafe_code)]`, every `unsafe fn` documented with
//! `# Safety` and every `unsafe` block with a `// SAFETY:` comment, no `unsafe impl`.
//!
//! Why an "unsafe caller" crate and not a capability token: the launch layer must offer an
//! `unsafe fn` (`Launch::enqueue`: the kernel is arbitrary code), an `unsafe fn`'s body cannot call
//! `enqueue_kernel` without an `unsafe` block (`unsafe_op_in_unsafe_fn` is denied), and its tests
//! and users need `unsafe {}` to launch anyway. So the rule is explicit (xtask's
//! `UNSAFE_CALLER_CRATES`, rule (e)): each unsafe item opts in with `#[allow(unsafe_code)]`, and
//! all raw handles and FFI, `cl_khr_command_buffer`'s entry points included, stay in `xpu-device`.
//! Foreign C libraries (CLBlast) are bound there too, and `clblast_sgemm` here is their checked,
//! safe call on `ClRegion`s.
#![deny(unsafe_code)]

#[cfg(doctest)]
mod capture_brand;
mod error;
mod function;
pub mod graph;
pub mod interop;
mod launch;
mod program;

pub use error::KernelError;
pub use function::Function;
pub use interop::{
    clblast_sgemm, ClRegion, ForeignCall, ForeignExt, ForeignQueue, InteropError, RowMajorSgemm,
    SgemmDone, TempBuffer,
};
pub use launch::{Arg, KernelArgs, Launch, LaunchExt, LocalMem, Scalar};
pub use program::{KernelCache, Program, ProgramOrigin};
pub mod memory;

pub use memory::{
    DeviceBuffer, DeviceRegion, DeviceRegionMut, DeviceSlice, DeviceSliceMut, MemoryError,
    StreamMemoryExt,
};
