//! Reductions along a dimension or over all elements, with indices (argmax/argmin), and
//! scans (cumulative sum, product, max, min).

use burn_tensor::DType;

use crate::error::{Error, Result};
use crate::tensor::XpuTensor;

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Arithmetic mean (integer tensors: the sum divided by the count, truncated).
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Maximum of absolute values.
    MaxAbs,
    /// Index of the first maximum.
    ArgMax,
    /// Index of the first minimum.
    ArgMin,
    /// Whether any element is non-zero (bool output).
    Any,
    /// Whether all elements are non-zero (bool output).
    All,
}

/// A scan (cumulative op) along a dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOp {
    /// Cumulative sum.
    Sum,
    /// Cumulative product.
    Prod,
    /// Cumulative maximum.
    Max,
    /// Cumulative minimum.
    Min,
}

/// `op` along `dim`; the output keeps `dim` with size 1 and has element type `out`
/// (the input's type for values, an int type for indices, `Bool` for any/all).
///
/// # Errors
/// A dimension out of range; allocation and kernel errors.
pub fn reduce_dim(t: &XpuTensor, dim: usize, op: ReduceOp, out: DType) -> Result<XpuTensor> {
    let _ = (t, dim, op, out);
    Err(Error::Invalid("reduce_dim: not implemented yet".into()))
}

/// `op` over all elements: a tensor of shape `[1]` of type `out`.
///
/// # Errors
/// As [`reduce_dim`].
pub fn reduce_all(t: &XpuTensor, op: ReduceOp, out: DType) -> Result<XpuTensor> {
    let _ = (t, op, out);
    Err(Error::Invalid("reduce_all: not implemented yet".into()))
}

/// The maximum (`max == true`) or minimum along `dim` and the index of its first occurrence
/// (of type `index`), both keeping `dim` with size 1.
///
/// # Errors
/// As [`reduce_dim`].
pub fn extreme_with_indices(
    t: &XpuTensor,
    dim: usize,
    max: bool,
    index: DType,
) -> Result<(XpuTensor, XpuTensor)> {
    let _ = (t, dim, max, index);
    Err(Error::Invalid(
        "extreme_with_indices: not implemented yet".into(),
    ))
}

/// `op` accumulated along `dim` (same shape and type as `t`).
///
/// # Errors
/// As [`reduce_dim`].
pub fn scan(t: &XpuTensor, dim: usize, op: ScanOp) -> Result<XpuTensor> {
    let _ = (t, dim, op);
    Err(Error::Invalid("scan: not implemented yet".into()))
}
