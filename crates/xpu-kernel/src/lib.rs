//! `xpu-kernel`: what a framework embedding xpu needs on top of streams and the caching
//! allocator: OpenCL C programs built and cached per device, `Send + Sync` kernel functions,
//! an `unsafe` launch builder on a stream that takes allocator blocks as single arguments,
//! and typed device memory.
//!
//! `unsafe` here: this crate has no OpenCL bindings and no raw handles; its only `unsafe` is
//! [`Launch::enqueue`] (an `unsafe fn`, since the kernel is arbitrary code) and the one call
//! to `xpu_device`'s `CommandQueue::enqueue_kernel` inside it. `cargo xtask check-layers`
//! holds the crate to that: `#![deny(unsafe_code)]`, every `unsafe fn` documented with
//! `# Safety` and every `unsafe` block with a `// SAFETY:` comment, no `unsafe impl`.
#![deny(unsafe_code)]

mod error;
mod function;
mod launch;
mod program;

pub use error::KernelError;
pub use function::Function;
pub use launch::{Arg, Launch, LaunchExt, LocalMem, Scalar};
pub use program::{KernelCache, Program, ProgramOrigin};
