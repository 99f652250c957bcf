//! Views without copies — reshape (of a contiguous tensor), permute, swap_dims, expand,
//! slice (any step), flip, unfold — and the ops built from them by one copy.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::ops::elementwise::contiguous;
use crate::tensor::{contiguous_strides, XpuTensor};

/// `t` with `shape` (same element count): a view when `t` is contiguous, else a copy.
///
/// # Errors
/// [`Error::Invalid`] when the element counts differ; copy errors.
pub fn reshape(t: &XpuTensor, shape: &[usize]) -> Result<XpuTensor> {
    let n = crate::tensor::elem_count(shape);
    if n != t.numel() {
        return Err(Error::Invalid(format!(
            "cannot reshape {:?} into {shape:?}",
            t.shape
        )));
    }
    let base = if t.is_contiguous() {
        t.clone()
    } else {
        contiguous(t)?
    };
    base.view(
        shape.to_vec(),
        contiguous_strides(shape),
        base.offset as isize,
    )
}

/// The view with dimensions in the order `axes` (`out.shape[i] = t.shape[axes[i]]`).
///
/// # Errors
/// [`Error::Invalid`] when `axes` is not a permutation of the dimensions.
pub fn permute(t: &XpuTensor, axes: &[usize]) -> Result<XpuTensor> {
    let rank = t.shape.len();
    let mut seen = vec![false; rank];
    if axes.len() != rank
        || axes
            .iter()
            .any(|&a| a >= rank || std::mem::replace(&mut seen[a], true))
    {
        return Err(Error::Invalid(format!(
            "{axes:?} is not a permutation of {rank} dimensions"
        )));
    }
    let shape = axes.iter().map(|&a| t.shape[a]).collect();
    let strides = axes.iter().map(|&a| t.strides[a]).collect();
    t.view(shape, strides, t.offset as isize)
}

/// The view with dimensions `a` and `b` swapped.
///
/// # Errors
/// [`Error::Invalid`] for a dimension out of range.
pub fn swap_dims(t: &XpuTensor, a: usize, b: usize) -> Result<XpuTensor> {
    let mut axes: Vec<usize> = (0..t.shape.len()).collect();
    if a >= axes.len() || b >= axes.len() {
        return Err(Error::Invalid(format!(
            "swap_dims({a}, {b}) of a rank-{} tensor",
            axes.len()
        )));
    }
    axes.swap(a, b);
    permute(t, &axes)
}

/// The view of `t` broadcast to `shape` (size-1 and missing leading dims get stride 0).
///
/// # Errors
/// [`Error::Invalid`] when `t` does not broadcast to `shape`.
pub fn expand(t: &XpuTensor, shape: &[usize]) -> Result<XpuTensor> {
    if shape.len() < t.shape.len() {
        return Err(Error::Invalid(format!(
            "cannot expand {:?} to {shape:?}",
            t.shape
        )));
    }
    let pad = shape.len() - t.shape.len();
    let mut strides = vec![0isize; shape.len()];
    for d in 0..shape.len() {
        if d < pad {
            continue;
        }
        let n = t.shape[d - pad];
        if n == shape[d] {
            strides[d] = t.strides[d - pad];
        } else if n != 1 {
            return Err(Error::Invalid(format!(
                "cannot expand {:?} to {shape:?}",
                t.shape
            )));
        }
    }
    t.view(shape.to_vec(), strides, t.offset as isize)
}

/// The view of the elements `ranges[d]` stepped by `step` along each dimension `d` (missing
/// trailing dimensions are whole). A negative step walks the range backward from its last
/// element (as burn's `Slice`).
///
/// # Errors
/// [`Error::Invalid`] for more ranges than dimensions, a range past the size, or step 0.
pub fn slice(t: &XpuTensor, ranges: &[(Range<usize>, isize)]) -> Result<XpuTensor> {
    if ranges.len() > t.shape.len() {
        return Err(Error::Invalid(format!(
            "{} slices for a rank-{} tensor",
            ranges.len(),
            t.shape.len()
        )));
    }
    let mut shape = t.shape.clone();
    let mut strides = t.strides.clone();
    let mut offset = t.offset as isize;
    for (d, (r, step)) in ranges.iter().enumerate() {
        if *step == 0 || r.end > t.shape[d] {
            return Err(Error::Invalid(format!(
                "slice {r:?} step {step} of dimension {d} of size {}",
                t.shape[d]
            )));
        }
        let len = r.end.saturating_sub(r.start);
        let n = len.div_ceil(step.unsigned_abs());
        shape[d] = n;
        if n == 0 {
            continue;
        }
        let first = if *step > 0 { r.start } else { r.end - 1 };
        offset += first as isize * t.strides[d];
        // One element: its stride addresses nothing (a step past the dimension may not fit).
        strides[d] = if n == 1 {
            t.strides[d]
        } else {
            t.strides[d].checked_mul(*step).ok_or_else(|| {
                Error::Invalid(format!("slice step {step} of dimension {d} overflows"))
            })?
        };
    }
    t.view(shape, strides, offset)
}

/// The view with `axes` reversed, one flip per occurrence (an axis named twice is flipped
/// back: burn's `Tensor::flip` refuses repeated axes, its backend trait does not).
///
/// # Errors
/// [`Error::Invalid`] for an axis out of range.
pub fn flip(t: &XpuTensor, axes: &[usize]) -> Result<XpuTensor> {
    let mut strides = t.strides.clone();
    let mut offset = t.offset as isize;
    for &a in axes {
        if a >= t.shape.len() {
            return Err(Error::Invalid(format!(
                "flip axis {a} of a rank-{} tensor",
                t.shape.len()
            )));
        }
        if t.shape[a] > 0 {
            // The stride as flipped so far (review h57: the original stride, once per
            // occurrence, moved a repeated axis's view outside its storage).
            offset += (t.shape[a] as isize - 1) * strides[a];
        }
        strides[a] = -strides[a];
    }
    t.view(t.shape.clone(), strides, offset)
}

/// The windows of `size` elements every `step` along `dim`, as a view: `dim` becomes the
/// window count (`(n - size) / step + 1`, or 0 when `size > n`) and a new last dimension of
/// `size` elements is appended (as burn's `unfold`).
///
/// # Errors
/// [`Error::Invalid`] for a dimension out of range or step 0.
pub fn unfold(t: &XpuTensor, dim: usize, size: usize, step: usize) -> Result<XpuTensor> {
    if dim >= t.shape.len() || step == 0 {
        return Err(Error::Invalid(format!(
            "unfold(dim {dim}, size {size}, step {step}) of {:?}",
            t.shape
        )));
    }
    let n = t.shape[dim];
    let windows = if size > n { 0 } else { (n - size) / step + 1 };
    let mut shape = t.shape.clone();
    let mut strides = t.strides.clone();
    shape[dim] = windows;
    // One window (or none): its stride addresses nothing, and a step past the dimension may
    // not fit (review h57: `unfold(0, 1, 2^62)` overflowed).
    strides[dim] = if windows <= 1 {
        t.strides[dim]
    } else {
        isize::try_from(step)
            .ok()
            .and_then(|s| t.strides[dim].checked_mul(s))
            .ok_or_else(|| {
                Error::Invalid(format!("unfold step {step} of {:?} overflows", t.shape))
            })?
    };
    shape.push(size);
    strides.push(t.strides[dim]);
    t.view(shape, strides, t.offset as isize)
}
