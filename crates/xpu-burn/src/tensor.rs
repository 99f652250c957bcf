//! [`XpuTensor`]: the primitive behind burn's float, int and bool tensors on xpu — a block of
//! xpu's caching allocator, and the shape, strides and offset of a view of it, on the host.

use std::sync::Arc;

use burn_tensor::{DType, Shape, TensorMetadata};
use xpu::DeviceBuffer;

use crate::dtype;
use crate::error::{Error, Result};

/// The device memory of one or more tensors: one allocation of xpu's caching allocator (so
/// `xpu::memory_stats`, `memory_summary` and snapshots show burn's tensors), on the device's
/// burn stream ([`crate::runtime::stream`]). Freed when the last view drops; the allocator
/// reuses the block only after the stream's work on it completed.
#[derive(Debug)]
pub struct Storage {
    pub(crate) buffer: DeviceBuffer<u8>,
    pub(crate) device: usize,
}

impl Storage {
    /// Bytes of the allocation.
    pub fn bytes(&self) -> usize {
        self.buffer.len()
    }

    /// The device index.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The allocation (a kernel argument covering all of it).
    pub fn buffer(&self) -> &DeviceBuffer<u8> {
        &self.buffer
    }
}

/// A tensor on an xpu device: a strided view (element strides, possibly 0 for broadcast
/// dimensions or negative for flipped ones, and an element offset) of a shared [`Storage`].
///
/// Views are made without copies (reshape of a contiguous tensor, permute, swap_dims,
/// expand, slice, flip, unfold); ops never write a storage that another tensor can see (an
/// op that assigns into a tensor writes a fresh copy), so sharing is safe. `Send + Sync`:
/// the storage is an allocator block, read by stream-ordered commands only.
#[derive(Debug, Clone)]
pub struct XpuTensor {
    pub(crate) storage: Arc<Storage>,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<isize>,
    pub(crate) offset: usize,
    pub(crate) dtype: DType,
}

/// The number of elements of `shape`, saturating at `usize::MAX` (a view may be broadcast to
/// a shape whose element count overflows `usize`: `expand` makes it without memory, and every
/// op that would allocate or walk it fails in [`XpuTensor::empty`] instead of wrapping).
pub fn elem_count(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    shape.iter().fold(1usize, |n, &s| n.saturating_mul(s))
}

/// The bytes of a contiguous tensor of `shape` with elements of `dtype`.
///
/// # Errors
/// [`Error::Invalid`] when the element or byte count does not fit `usize`: no allocation can
/// hold it (burn does not check shapes for overflow; a wrapped size would allocate a block
/// smaller than the kernels then address).
pub fn byte_len(shape: &[usize], dtype: DType) -> Result<usize> {
    let elem = dtype::size_of(dtype);
    let overflow = || {
        Error::Invalid(format!(
            "a tensor of shape {shape:?} of {dtype:?} ({elem}-byte elements) needs more than \
             usize::MAX bytes"
        ))
    };
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(elem, |n, &s| n.checked_mul(s))
        .ok_or_else(overflow)
}

/// The lowest and highest element positions a view of `shape` and `strides` from `offset`
/// reaches: `Some(None)` for a view without elements, `None` when the ranks differ or a
/// position does not fit `i128`.
fn view_reach(shape: &[usize], strides: &[isize], offset: isize) -> Option<Option<(i128, i128)>> {
    if shape.len() != strides.len() {
        return None;
    }
    if shape.contains(&0) {
        return Some(None);
    }
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let span = (n as i128 - 1).checked_mul(s as i128)?;
        if span < 0 {
            lo = lo.checked_add(span)?;
        } else {
            hi = hi.checked_add(span)?;
        }
    }
    Some(Some((lo, hi)))
}

/// Row-major (C order) element strides of `shape`.
///
/// Total: the running product saturates at `isize::MAX` instead of overflowing. That happens
/// only for a shape with no element (a 0 dimension beside dimensions whose product exceeds
/// `isize::MAX`, which burn accepts: the element counts of a reshape match at 0), whose
/// strides are never used to address an element; a shape with elements has a byte count
/// that fits ([`byte_len`]), so its strides are exact.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for d in (0..shape.len()).rev() {
        strides[d] = acc;
        acc = acc.saturating_mul(isize::try_from(shape[d].max(1)).unwrap_or(isize::MAX));
    }
    strides
}

impl XpuTensor {
    /// A new, uninitialized, contiguous tensor of `shape` and `dtype` on `device` (a fresh
    /// allocation of at least one byte).
    ///
    /// # Errors
    /// Out of memory and other allocation errors; an unsupported `dtype`; [`Error::Invalid`]
    /// for a shape whose byte count overflows `usize` ([`byte_len`]).
    pub fn empty(device: usize, shape: &[usize], dtype: DType) -> Result<XpuTensor> {
        let dtype = dtype::canonical(dtype);
        crate::runtime::check_device_supports(device, dtype)?;
        let bytes = byte_len(shape, dtype)?.max(1);
        let stream = crate::runtime::stream(device)?;
        let buffer = DeviceBuffer::<u8>::new(bytes, &stream)?;
        Ok(XpuTensor::contiguous_in(buffer, device, shape, dtype))
    }

    /// A contiguous tensor of `shape` and `dtype` from offset 0 of `buffer` (on `device`,
    /// holding at least the shape's elements), its storage's only owner.
    pub(crate) fn contiguous_in(
        buffer: DeviceBuffer<u8>,
        device: usize,
        shape: &[usize],
        dtype: DType,
    ) -> XpuTensor {
        XpuTensor {
            storage: Arc::new(Storage { buffer, device }),
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
            dtype,
        }
    }

    /// A view of the same storage with another shape, strides and offset (elements).
    ///
    /// # Errors
    /// [`Error::Invalid`] when the view would reach an element outside its storage (a negative
    /// position or one past the allocation's end; review h57: a view built wrongly is read by
    /// kernels, which would read or write beside the block), or when `strides` and `shape`
    /// differ in length. Every view of the op layer is made here, so none escapes the check.
    pub(crate) fn view(
        &self,
        shape: Vec<usize>,
        strides: Vec<isize>,
        offset: isize,
    ) -> Result<XpuTensor> {
        let elems = self.storage.bytes() / dtype::size_of(self.dtype);
        let reach = view_reach(&shape, &strides, offset);
        let inside = match reach {
            // No element: nothing is addressed (the offset is kept as it is, clamped).
            Some(None) => true,
            Some(Some((lo, hi))) => lo >= 0 && hi < elems as i128,
            None => false,
        };
        if !inside {
            return Err(Error::Invalid(format!(
                "a view (shape {shape:?}, strides {strides:?}, offset {offset}) reaches outside                  its storage of {elems} {:?} elements",
                self.dtype
            )));
        }
        Ok(XpuTensor {
            storage: self.storage.clone(),
            shape,
            strides,
            offset: usize::try_from(offset).unwrap_or(0),
            dtype: self.dtype,
        })
    }

    /// The device index.
    pub fn device(&self) -> usize {
        self.storage.device
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.shape
    }

    /// The element strides.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// The element offset of the view into its storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The element type.
    pub fn elem_type(&self) -> DType {
        self.dtype
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The number of elements, saturating at `usize::MAX` ([`elem_count`]: only a broadcast
    /// view can have more).
    pub fn numel(&self) -> usize {
        elem_count(&self.shape)
    }

    /// Whether the view is row-major contiguous (any offset). An empty view is: it addresses
    /// no element, whatever its strides (a fresh `[2, 0, 3]` tensor has the strides
    /// [`contiguous_strides`] gives, `[3, 3, 1]`, which no non-empty row-major walk has).
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut acc = 1isize;
        for d in (0..self.shape.len()).rev() {
            if self.shape[d] != 1 && self.strides[d] != acc {
                return false;
            }
            acc *= self.shape[d] as isize;
        }
        true
    }
}

impl TensorMetadata for XpuTensor {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> Shape {
        Shape::from(self.shape.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::view_reach;

    #[test]
    fn a_view_reaches_its_lowest_and_highest_elements() {
        // [2, 3] from offset 1, row-major: 1 ..= 1 + 3 + 2.
        assert_eq!(view_reach(&[2, 3], &[3, 1], 1), Some(Some((1, 6))));
        // Flipped rows: offset 3 with stride -3 reaches 0 ..= 5.
        assert_eq!(view_reach(&[2, 3], &[-3, 1], 3), Some(Some((0, 5))));
        // Review h57's repeated flip: offset 9, stride -1 over 4 elements: 6 ..= 9.
        assert_eq!(view_reach(&[4], &[-1], 9), Some(Some((6, 9))));
        // Broadcast (stride 0) reaches one element however long.
        assert_eq!(view_reach(&[usize::MAX], &[0], 2), Some(Some((2, 2))));
        // No element: nothing reached; ranks that differ: refused.
        assert_eq!(view_reach(&[0, 5], &[5, 1], 7), Some(None));
        assert_eq!(view_reach(&[2], &[1, 1], 0), None);
        // A span past i128: refused, not wrapped.
        let huge = [usize::MAX, usize::MAX, usize::MAX, usize::MAX];
        let far = [isize::MAX, isize::MAX, isize::MAX, isize::MAX];
        assert_eq!(view_reach(&huge, &far, 0), None);
    }
}
