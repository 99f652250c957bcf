//! `xpu-bench`: what xpu's benchmarks run, defined once for every runner. A tool crate, not
//! part of the runtime: no runtime crate depends on it.
//!
//! - [`alloc`]: the allocator workload (cached pairs, mixed rounds, thread counts) on a
//!   [`xpu_alloc::DeviceCore`], run by this crate's criterion bench (`benches/alloc.rs`), its
//!   callgrind harness (`examples/pair_count.rs`) and `xpu bench` (xpu-cli's `alloc_bench`).
//! - [`launch`]: the launch layer's figures for `xpu bench` (launch vs raw `xpu-device`
//!   launch, graph replay, program cache, CLBlast through xpu vs a plain queue); the example
//!   `clblast_sgemm` prints the CLBlast figures for a chosen size.
//!
//! `unsafe` here: as any user of the launch API, [`launch`] calls `unsafe fn`s of
//! `xpu-kernel` and `xpu-device` (a launch runs arbitrary kernel code) from `unsafe {}` blocks,
//! each with a `// SAFETY:` comment and an `#[allow(unsafe_code)]` on its function; nothing
//! else unsafe (no FFI, no `unsafe fn`, no `unsafe impl`). `cargo xtask check-layers` holds the
//! crate to that.
#![deny(unsafe_code)]

pub mod alloc;
pub mod launch;
