//! Indexed reads and writes: gather, scatter (add), select, select_assign (add),
//! slice_assign, cat, and copies into a strided view.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::tensor::XpuTensor;

/// `out[..., i, ...] = t[..., indices[..., i, ...], ...]` along `dim` (output shaped as
/// `indices`), as burn's `gather`.
///
/// # Errors
/// Shape mismatches; allocation and kernel errors.
pub fn gather(dim: usize, t: &XpuTensor, indices: &XpuTensor) -> Result<XpuTensor> {
    let _ = (dim, t, indices);
    Err(Error::Invalid("gather: not implemented yet".into()))
}

/// A copy of `t` with `values` added at `indices` along `dim`, as burn's `scatter` (which
/// sums).
///
/// # Errors
/// As [`gather`].
pub fn scatter_add(dim: usize, t: &XpuTensor, indices: &XpuTensor, values: &XpuTensor) -> Result<XpuTensor> {
    let _ = (dim, t, indices, values);
    Err(Error::Invalid("scatter_add: not implemented yet".into()))
}

/// The slices of `t` at 1-D `indices` along `dim`, as burn's `select`.
///
/// # Errors
/// As [`gather`].
pub fn select(t: &XpuTensor, dim: usize, indices: &XpuTensor) -> Result<XpuTensor> {
    let _ = (t, dim, indices);
    Err(Error::Invalid("select: not implemented yet".into()))
}

/// A copy of `t` with the slices of `values` added at 1-D `indices` along `dim`, as burn's
/// `select_assign`.
///
/// # Errors
/// As [`gather`].
pub fn select_add(t: &XpuTensor, dim: usize, indices: &XpuTensor, values: &XpuTensor) -> Result<XpuTensor> {
    let _ = (t, dim, indices, values);
    Err(Error::Invalid("select_add: not implemented yet".into()))
}

/// A copy of `t` with the view `ranges` (as [`crate::ops::layout::slice`]) replaced by `value`.
///
/// # Errors
/// As [`gather`].
pub fn slice_assign(t: &XpuTensor, ranges: &[(Range<usize>, isize)], value: &XpuTensor) -> Result<XpuTensor> {
    let _ = (t, ranges, value);
    Err(Error::Invalid("slice_assign: not implemented yet".into()))
}

/// `tensors` concatenated along `dim`.
///
/// # Errors
/// As [`gather`].
pub fn cat(tensors: &[XpuTensor], dim: usize) -> Result<XpuTensor> {
    let _ = (tensors, dim);
    Err(Error::Invalid("cat: not implemented yet".into()))
}
