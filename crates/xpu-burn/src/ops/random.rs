//! Random tensors.

use burn_tensor::{DType, Distribution};

use crate::error::{Error, Result};
use crate::tensor::XpuTensor;

/// Sets the seed of the device's generator.
pub fn seed(device: usize, seed: u64) {
    let _ = (device, seed);
}

/// A tensor of `shape` and `dtype` sampled from `distribution`.
///
/// # Errors
/// Allocation and kernel errors.
pub fn random(
    device: usize,
    shape: &[usize],
    distribution: Distribution,
    dtype: DType,
) -> Result<XpuTensor> {
    let _ = (device, shape, distribution, dtype);
    Err(Error::Invalid("random: not implemented yet".into()))
}
