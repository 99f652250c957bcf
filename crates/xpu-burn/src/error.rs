//! The backend's error: every failure of an op, typed, with the layer it came from.

use thiserror::Error;

/// Why an op of the xpu backend failed.
///
/// burn 0.19's backend methods return tensors, not results, so the glue in [`crate::backend`]
/// turns an error into a panic carrying this message (burn's own convention: its backends
/// panic on bad shapes too). The op layer ([`crate::ops`]) returns it as a value.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the runtime: out of memory (with the allocator's report), a failed
    /// enqueue, a kernel that failed to build (with the OpenCL build log), a bad fork...
    #[error(transparent)]
    Xpu(#[from] xpu::Error),
    /// The device lacks a feature the op needs (the OpenCL extension is named).
    #[error("device {device} lacks {feature}, needed for {what}")]
    Unsupported {
        /// The device index.
        device: usize,
        /// The missing OpenCL property, e.g. `cl_khr_fp64`.
        feature: &'static str,
        /// The op or element type that needs it.
        what: String,
    },
    /// An element type this backend does not store (bf16, quantized tensors).
    #[error("element type {0:?} is not supported by the xpu backend")]
    DType(burn_tensor::DType),
    /// Input that burn itself does not check and the op cannot serve.
    #[error("{0}")]
    Invalid(String),
}

impl From<xpu::xpu_kernel::KernelError> for Error {
    fn from(e: xpu::xpu_kernel::KernelError) -> Self {
        Error::Xpu(e.into())
    }
}

impl From<xpu::xpu_kernel::MemoryError> for Error {
    fn from(e: xpu::xpu_kernel::MemoryError) -> Self {
        Error::Xpu(e.into())
    }
}

impl From<xpu::xpu_stream::StreamError> for Error {
    fn from(e: xpu::xpu_stream::StreamError) -> Self {
        Error::Xpu(e.into())
    }
}

/// The op layer's result.
pub type Result<T> = std::result::Result<T, Error>;

/// Unwraps an op's result for burn's infallible API: an error becomes a panic with its full
/// message (an out-of-memory error carries the allocator's report).
#[track_caller]
pub(crate) fn or_panic<T>(r: Result<T>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{}", failure_text(&e)),
    }
}

/// The message an op's error gives burn's user: what [`or_panic`] panics with, and what a
/// failed fused run stores for its results (`fusion::handle`).
pub(crate) fn failure_text(e: &Error) -> String {
    format!("xpu backend: {e}")
}
