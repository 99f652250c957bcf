//! Host transfers: tensors from host bytes, to host bytes, and between devices.

use burn_tensor::DType;
use xpu::DeviceBuffer;

use crate::dtype;
use crate::error::Result;
use crate::ops::elementwise::contiguous;
use crate::runtime;
use crate::tensor::XpuTensor;

/// A new contiguous tensor on `device` holding `bytes` (row-major elements of `dtype`), as an
/// upload on the device's burn stream (staged through pinned memory, non-blocking).
///
/// # Errors
/// An unsupported `dtype`, a byte count that does not match the shape, allocation errors.
pub fn from_bytes(device: usize, bytes: &[u8], shape: &[usize], dtype: DType) -> Result<XpuTensor> {
    let dtype = dtype::canonical(dtype);
    crate::runtime::check_device_supports(device, dtype)?;
    let want = crate::tensor::byte_len(shape, dtype)?;
    if bytes.len() != want {
        return Err(crate::Error::Invalid(format!(
            "{} bytes for a tensor of shape {shape:?} of {dtype:?} ({want} bytes)",
            bytes.len()
        )));
    }
    if want == 0 {
        return XpuTensor::empty(device, shape, dtype);
    }
    let stream = runtime::stream(device)?;
    let buffer = DeviceBuffer::from_slice(bytes, &stream)?;
    Ok(XpuTensor::contiguous_in(buffer, device, shape, dtype))
}

/// The elements of `t` in row-major order, as bytes (blocking: waits for the stream's work
/// up to the copy).
///
/// # Errors
/// Copy and kernel errors (an earlier failed command on the stream surfaces here).
pub fn to_bytes(t: &XpuTensor) -> Result<Vec<u8>> {
    let size = dtype::size_of(t.dtype);
    let nbytes = t.numel().saturating_mul(size);
    if nbytes == 0 {
        return Ok(Vec::new());
    }
    let c = if t.is_contiguous() {
        t.clone()
    } else {
        contiguous(t)?
    };
    let start = c.offset * size;
    let stream = runtime::stream(c.device())?;
    let region = c.storage.buffer.slice(start..start + nbytes)?;
    Ok(xpu::xpu_kernel::memory::to_vec(&stream, &region)?)
}

/// `t` on `device` (itself when it is there already; else through the host).
///
/// # Errors
/// As [`to_bytes`] and [`from_bytes`].
pub fn to_device(t: &XpuTensor, device: usize) -> Result<XpuTensor> {
    if t.device() == device {
        return Ok(t.clone());
    }
    let bytes = to_bytes(t)?;
    from_bytes(device, &bytes, &t.shape, t.dtype)
}
