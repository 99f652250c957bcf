//! Batched matrix multiplication.

use crate::error::{Error, Result};
use crate::tensor::XpuTensor;

/// `lhs @ rhs` over the last two dimensions, batch dimensions broadcast (as burn's
/// `matmul`), for float and integer element types.
///
/// # Errors
/// Shape mismatches; allocation and kernel errors.
pub fn matmul(lhs: &XpuTensor, rhs: &XpuTensor) -> Result<XpuTensor> {
    let _ = (lhs, rhs);
    Err(Error::Invalid("matmul: not implemented yet".into()))
}
