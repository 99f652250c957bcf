//! The op layer: tensor ops on [`XpuTensor`](crate::XpuTensor)s with plain Rust parameters, independent of
//! burn's traits (the glue in [`crate::backend`] maps burn's methods onto these), so a later
//! burn version (or another framework) can reuse them.
//!
//! Each op family is one OpenCL C template, specialised per element type and built through
//! xpu-kernel's program cache: [`elementwise`] (unary, binary, comparison, select, cast,
//! fill, copy), [`reduce`] (sum, prod, mean, max/min and their indices, any/all, scans),
//! [`index`] (gather, scatter, select, slice assign, masks, cat), [`matmul`], [`nn`]
//! (convolution, pooling, interpolation), [`random`].

pub mod data;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod elementwise;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod index;
pub mod layout;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod matmul;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod nn;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod random;
#[allow(unsafe_code)] // launches: each `unsafe` block argues its bounds
pub mod reduce;

/// OpenCL C functions every template may call.
pub(crate) const PRELUDE: &str = r#"
"#;
