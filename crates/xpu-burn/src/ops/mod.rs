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
pub mod fused;
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

/// The OpenCL C walk over a strided view's coordinates, shared by the element-wise, matmul,
/// index and line ([`reduce`]) kernels: `FOR_COORDS(pos) ... END_COORDS` runs its statements
/// for each dimension `d` of the `rank` sizes at `shape` (both in scope), last first, with
/// `c` the coordinate of row-major position `pos` along `d`. The sizes must be non-zero (a
/// non-empty shape).
pub(crate) const FOR_COORDS: &str = r#"
#define FOR_COORDS(pos) \
  { long rem_ = (pos); \
    for (int d = rank - 1; d >= 0; d--) { \
      long c = rem_ % shape[d]; \
      rem_ /= shape[d];
#define END_COORDS }}
"#;

/// OpenCL C functions every template may call.
pub(crate) const PRELUDE: &str = r#"
"#;
