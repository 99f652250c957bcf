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
//!   are made without copies.
//! - Order: all work of a device is enqueued on its default stream ([`runtime::stream`]);
//!   `Backend::sync` synchronizes it; reads to the host wait for it.
//! - Kernels: OpenCL C templates specialised per element type ([`ops`]), built once per
//!   device through xpu-kernel's program cache (memory and disk).
//!
//! Layers: [`ops`] is the op layer (plain Rust parameters, no burn traits); [`backend`] is the
//! glue that implements burn's traits on it.

#![deny(unsafe_code)]

pub mod backend;
pub mod device;
pub mod dtype;
pub mod error;
pub mod ops;
#[allow(unsafe_code)] // `launch`, the one unsafe fn: kernels are arbitrary code
pub mod runtime;
pub mod tensor;

pub use backend::Xpu;
pub use device::XpuDevice;
pub use error::{Error, Result};
pub use tensor::XpuTensor;
