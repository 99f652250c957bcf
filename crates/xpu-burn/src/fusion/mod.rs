//! Operation fusion: [`XpuFusion`] is burn-fusion's decorator on [`Xpu`], so a chain of
//! element-wise float ops (burn's Adam step, an activation after a bias add, their
//! gradients) runs as one kernel instead of one launch per op.
//!
//! burn-fusion records each op as burn's IR ([`burn_ir::OperationIr`]) and asks this
//! backend's optimization builders ([`elementwise::ElementwiseBuilder`]) which runs of ops
//! they can take; what no builder takes runs op by op on [`Xpu`], unchanged. The builder here
//! takes runs of `f32` element-wise ops whose results share one shape (arithmetic with
//! tensors or scalars, and the unary math functions but `ceil` and `trunc`; inputs from
//! outside the run may broadcast to the shape or be strided views) and executes them through
//! the op layer's [`crate::ops::fused`] chains. A run it cannot resolve at run time (a
//! missing handle, shapes beyond a chain's limits) runs op by op instead, so fusion never
//! changes which values an op computes.
//!
//! ```no_run
//! use burn_tensor::Tensor;
//! use xpu_burn::{XpuDevice, XpuFusion};
//!
//! let device = XpuDevice::default();
//! let x = Tensor::<XpuFusion, 1>::from_floats([1.0, 2.0, 3.0], &device);
//! // One launch for the three ops.
//! let y = (x.clone() * 2.0 + 1.0).sqrt();
//! println!("{y}");
//! ```

pub mod elementwise;

use burn_fusion::{FusionBackend, FusionRuntime, OptimizationBuilder};
use burn_ir::{BackendIr, TensorHandle};
use burn_tensor::ops::{BoolTensor, FloatTensor, FloatTensorOps, IntTensor, QuantizedTensor};

use crate::backend::qtensor::refuse;
use crate::backend::XpuQTensor;
use crate::tensor::XpuTensor;
use crate::{Xpu, XpuDevice};

use elementwise::{ElementwiseBuilder, ElementwiseOptimization, ElementwiseState};

/// burn's backend on xpu with operation fusion (burn-fusion's `Fusion` over [`Xpu`]).
pub type XpuFusion = burn_fusion::Fusion<Xpu>;

/// The fusion runtime of [`Xpu`]: its handles are [`XpuTensor`]s, its one optimization the
/// element-wise chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct XpuFusionRuntime;

impl FusionRuntime for XpuFusionRuntime {
    type OptimizationState = ElementwiseState;
    type Optimization = ElementwiseOptimization;
    type FusionHandle = XpuTensor;
    type FusionDevice = XpuDevice;
    /// Bools are bytes on xpu.
    type BoolRepr = u8;

    fn optimizations(
        _device: XpuDevice,
    ) -> Vec<Box<dyn OptimizationBuilder<ElementwiseOptimization>>> {
        vec![Box::new(ElementwiseBuilder::new())]
    }
}

impl BackendIr for Xpu {
    type Handle = XpuTensor;

    fn float_tensor(handle: TensorHandle<XpuTensor>) -> FloatTensor<Self> {
        handle.handle
    }

    fn int_tensor(handle: TensorHandle<XpuTensor>) -> IntTensor<Self> {
        handle.handle
    }

    fn bool_tensor(handle: TensorHandle<XpuTensor>) -> BoolTensor<Self> {
        handle.handle
    }

    fn quantized_tensor(_handle: TensorHandle<XpuTensor>) -> QuantizedTensor<Self> {
        refuse()
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> XpuTensor {
        tensor
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> XpuTensor {
        tensor
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> XpuTensor {
        tensor
    }

    fn quantized_tensor_handle(_tensor: XpuQTensor) -> XpuTensor {
        refuse()
    }
}

impl FusionBackend for Xpu {
    type FusionRuntime = XpuFusionRuntime;
    type FullPrecisionBackend = Xpu;

    fn cast_float(tensor: FloatTensor<Self>, dtype: burn_tensor::DType) -> XpuTensor {
        Xpu::float_cast(tensor, dtype.into())
    }
}
