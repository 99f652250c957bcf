//! [`XpuDevice`]: a burn device naming one xpu device (an OpenCL device index).

use burn_tensor::backend::{DeviceId, DeviceOps};

/// One xpu device, by index in xpu's device list (`xpu::device_count()`), as burn-cuda's
/// `CudaDevice { index }`. The default is device 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct XpuDevice {
    /// The xpu device index.
    pub index: usize,
}

impl XpuDevice {
    /// The device with this xpu index.
    pub fn new(index: usize) -> Self {
        XpuDevice { index }
    }
}

impl burn_tensor::backend::Device for XpuDevice {
    fn from_id(device_id: DeviceId) -> Self {
        XpuDevice {
            index: device_id.index_id as usize,
        }
    }

    fn to_id(&self) -> DeviceId {
        DeviceId {
            type_id: 0,
            index_id: self.index as u32,
        }
    }

    fn device_count(_type_id: u16) -> usize {
        xpu::device_count()
    }
}

impl DeviceOps for XpuDevice {}
