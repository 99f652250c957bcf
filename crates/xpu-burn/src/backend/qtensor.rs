//! burn's `QTensorOps` on xpu: quantized tensors are not supported; every entry point fails
//! with a clear error (burn's quantization suite is not part of `testgen_all`).

use std::future::Future;

use burn_tensor::ops::{FloatTensor, IntTensor, QTensorOps, QuantizedTensor};
use burn_tensor::quantization::{QTensorPrimitive, QuantScheme, QuantizationParametersPrimitive};
use burn_tensor::{DType, Shape, Slice, TensorData, TensorMetadata};

use crate::error::{or_panic, Error};
use crate::{Xpu, XpuDevice};

/// The quantized tensor primitive: never constructed (quantization is refused).
#[derive(Debug, Clone)]
pub struct XpuQTensor {
    scheme: QuantScheme,
    shape: Vec<usize>,
}

impl TensorMetadata for XpuQTensor {
    fn dtype(&self) -> DType {
        DType::QFloat(self.scheme)
    }

    fn shape(&self) -> Shape {
        Shape::from(self.shape.clone())
    }
}

impl QTensorPrimitive for XpuQTensor {
    fn scheme(&self) -> &QuantScheme {
        &self.scheme
    }
}

/// Fails (panics with the typed error's message, as burn's methods return no `Result`): xpu
/// makes no quantized tensor, so no quantized entry point or handle can be served.
pub(crate) fn refuse<T>() -> T {
    or_panic(Err(Error::Invalid(
        "quantized tensors are not supported by the xpu backend".into(),
    )))
}

impl QTensorOps<Self> for Xpu {
    fn q_from_data(_data: TensorData, _device: &XpuDevice) -> QuantizedTensor<Self> {
        refuse()
    }

    fn quantize(
        _tensor: FloatTensor<Self>,
        _scheme: &QuantScheme,
        _qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        refuse()
    }

    fn dequantize(_tensor: QuantizedTensor<Self>) -> FloatTensor<Self> {
        refuse()
    }

    fn q_device(_tensor: &QuantizedTensor<Self>) -> XpuDevice {
        refuse()
    }

    fn q_to_device(_tensor: QuantizedTensor<Self>, _device: &XpuDevice) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_reshape(_tensor: QuantizedTensor<Self>, _shape: Shape) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_into_data(_tensor: QuantizedTensor<Self>) -> impl Future<Output = TensorData> + Send {
        let d: TensorData = refuse();
        async move { d }
    }

    fn q_expand(_tensor: QuantizedTensor<Self>, _shape: Shape) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_swap_dims(
        _tensor: QuantizedTensor<Self>,
        _dim1: usize,
        _dim2: usize,
    ) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_permute(_tensor: QuantizedTensor<Self>, _axes: &[usize]) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_flip(_tensor: QuantizedTensor<Self>, _axes: &[usize]) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_select(
        _tensor: QuantizedTensor<Self>,
        _dim: usize,
        _indices: IntTensor<Self>,
    ) -> QuantizedTensor<Self> {
        refuse()
    }

    fn q_slice(_tensor: QuantizedTensor<Self>, _slices: &[Slice]) -> QuantizedTensor<Self> {
        refuse()
    }
}
