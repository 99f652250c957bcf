//! A [burn](https://burn.dev) 0.19.1 backend on xpu: burn's tensors, `nn` modules, optimizers
//! and `Autodiff<Xpu>` on any OpenCL device.
//!
//! ```no_run
//! use burn_tensor::Tensor;
//! use xpu_burn::{Xpu, XpuDevice};
//!
//! let device = XpuDevice::default();
//! let a = Tensor::<Xpu, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &device);
//! let b = a.clone().matmul(a.transpose());
//! println!("{}", b);
//! ```
//!
//! - Storage: every tensor is a block of xpu's caching allocator ([`tensor::Storage`]), so
//!   `xpu::memory_stats`, `memory_summary` and snapshots show burn's tensors; shape, strides
//!   and offset live on the host, and views (reshape, permute, slice, expand, flip, unfold)
//!   are made without copies. Blocks share segments on every platform, NVIDIA included: a
//!   kernel gets a block as its segment's buffer plus a byte offset, never as a sub-buffer.
//! - Order: all work of a device is enqueued on its default stream ([`runtime::stream`]);
//!   `Backend::sync` synchronizes it; reads to the host wait for it.
//! - Kernels: OpenCL C templates specialised per element type ([`ops`]), built once per
//!   device through xpu-kernel's program cache (memory and disk).
//!
//! Layers: [`ops`] is the op layer (plain Rust parameters, no burn traits); [`backend`] is the
//! glue that implements burn's traits on it; [`fusion`] makes [`XpuFusion`], burn-fusion's
//! decorator over [`Xpu`], whose runs of element-wise ops are one kernel each (burn's Adam
//! step: one launch a parameter instead of fourteen).
//!
//! # Inside the backend
//! - `ops`, the op layer: an `XpuTensor` is an `Arc` of one caching-allocator block plus the
//!   host-side shape, element strides and offset (views without copies). One OpenCL C template per
//!   op family (`elementwise`: any broadcast expression over strided inputs; `reduce`; `index`;
//!   `matmul`; `nn`; `random`), specialised per element type through `#define`s, built once per
//!   device through xpu-kernel's program cache (`runtime::function`) and launched through
//!   `runtime::launch`, the crate's one `unsafe fn` (each call site argues its bounds). No burn
//!   traits here, so another burn version or framework can reuse it.
//! - `backend`, the glue: burn's `FloatTensorOps`, `IntTensorOps`, `BoolTensorOps`, `ModuleOps`...
//!   mapped onto `ops`. burn's methods return tensors, not results, so an op's typed error (out of
//!   memory with the allocator's report, a build log, a missing `cl_khr_fp64`) becomes a panic
//!   carrying its message.
//!
//! Order and sharing: every op of a device is enqueued on the device's default stream, so producers
//! precede consumers whatever thread runs them; `Backend::sync` synchronizes that stream; reading a
//! tensor to the host waits for it. Ops never write a storage another tensor can see (assigning ops
//! write a fresh copy), so shared views are safe across threads.
//!
//! Proof: burn's own conformance suite, unmodified (`tests/burn_suite.rs`:
//! `burn_tensor::testgen_all!()` and `burn_autodiff::testgen_all!()`). `cargo xtask test` runs it
//! as its own step and prints its counts; `tests/EXCLUDED.md` lists what does not run and why. The
//! device is `XpuDevice { index }`.

#![deny(unsafe_code)]

pub mod backend;
pub mod device;
pub mod dtype;
pub mod error;
pub mod fusion;
pub mod ops;
#[allow(unsafe_code)] // `launch`, the one unsafe fn: kernels are arbitrary code
pub mod runtime;
pub mod tensor;

pub use device::XpuDevice;
pub use error::{Error, Result};
pub use fusion::XpuFusion;
pub use tensor::XpuTensor;

/// burn's backend on xpu: tensors in xpu's caching allocator, ops as OpenCL C kernels
/// enqueued on each device's default stream. `f32` floats (f64 and f16 where the device has
/// `cl_khr_fp64` / `cl_khr_fp16`), `i64` ints, bools as bytes.
///
/// Errors (out of memory with the allocator's report, a kernel build failure with the build
/// log, a missing device feature) surface as panics carrying the typed error's message:
/// burn 0.19's backend methods return tensors, not results. Its `Backend` implementation is
/// the glue in [`backend`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Xpu;
