//! The burn glue: [`Xpu`] implements burn 0.19.1's `Backend` by mapping each method onto the
//! op layer ([`crate::ops`]).

mod activation;
mod bool;
mod common;
mod extra;
mod float;
mod int;
mod module;
mod qtensor;
mod transaction;

pub use qtensor::XpuQTensor;

use burn_tensor::backend::Backend;

use crate::device::XpuDevice;
use crate::tensor::XpuTensor;

/// burn's backend on xpu: tensors in xpu's caching allocator, ops as OpenCL C kernels
/// enqueued on each device's default stream. `f32` floats (f64 and f16 where the device has
/// `cl_khr_fp64` / `cl_khr_fp16`), `i64` ints, bools as bytes.
///
/// Errors (out of memory with the allocator's report, a kernel build failure with the build
/// log, a missing device feature) surface as panics carrying the typed error's message:
/// burn 0.19's backend methods return tensors, not results.
#[derive(Clone, Copy, Debug, Default)]
pub struct Xpu;

impl Backend for Xpu {
    type Device = XpuDevice;

    type FloatTensorPrimitive = XpuTensor;
    type FloatElem = f32;

    type IntTensorPrimitive = XpuTensor;
    type IntElem = i64;

    type BoolTensorPrimitive = XpuTensor;
    type BoolElem = bool;

    type QuantizedTensorPrimitive = XpuQTensor;

    fn name(device: &Self::Device) -> String {
        match xpu::get_device_name(Some(device.index)) {
            Ok(n) => format!("xpu<{n}>"),
            Err(_) => format!("xpu<{}>", device.index),
        }
    }

    fn seed(device: &Self::Device, seed: u64) {
        crate::ops::random::seed(device.index, seed);
    }

    fn sync(device: &Self::Device) {
        crate::error::or_panic(
            crate::runtime::stream(device.index).and_then(|s| s.synchronize().map_err(Into::into)),
        );
    }

    fn memory_cleanup(_device: &Self::Device) {
        xpu::empty_cache();
    }
}
