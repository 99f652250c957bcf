//! The burn glue: [`Xpu`] implements burn 0.19.1's `Backend` by mapping each method onto the
//! op layer ([`crate::ops`]).

mod activation;
mod bool;
mod common;
mod extra;
mod float;
mod int;
mod module;
pub(crate) mod qtensor;
mod transaction;

pub use qtensor::XpuQTensor;

use burn_tensor::backend::Backend;

use crate::device::XpuDevice;
use crate::tensor::XpuTensor;
use crate::Xpu;

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

    fn memory_cleanup(device: &Self::Device) {
        crate::runtime::release_meta(device.index);
        xpu::empty_cache();
    }
}
