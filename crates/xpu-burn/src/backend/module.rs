//! burn's `ModuleOps` on xpu: convolution, pooling and interpolation (kernels in
//! [`crate::ops::nn`]).

use burn_tensor::ops::{
    ConvOptions, ConvTransposeOptions, DeformConv2dBackward, DeformConvOptions, FloatTensor,
    IntTensor, InterpolateOptions, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps,
};

use crate::error::{or_panic, Error};
use crate::Xpu;

fn todo<T>(what: &str) -> T {
    or_panic(Err(Error::Invalid(format!("{what}: not implemented yet"))))
}

impl ModuleOps<Self> for Xpu {
    fn conv2d(
        _x: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _bias: Option<FloatTensor<Self>>,
        _options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        todo("conv2d")
    }

    fn deform_conv2d(
        _x: FloatTensor<Self>,
        _offset: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _mask: Option<FloatTensor<Self>>,
        _bias: Option<FloatTensor<Self>>,
        _options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        todo("deform_conv2d")
    }

    fn deform_conv2d_backward(
        _x: FloatTensor<Self>,
        _offset: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _mask: Option<FloatTensor<Self>>,
        _bias: Option<FloatTensor<Self>>,
        _output_grad: FloatTensor<Self>,
        _options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        todo("deform_conv2d_backward")
    }

    fn conv3d(
        _x: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _bias: Option<FloatTensor<Self>>,
        _options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        todo("conv3d")
    }

    fn conv_transpose2d(
        _x: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _bias: Option<FloatTensor<Self>>,
        _options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        todo("conv_transpose2d")
    }

    fn conv_transpose3d(
        _x: FloatTensor<Self>,
        _weight: FloatTensor<Self>,
        _bias: Option<FloatTensor<Self>>,
        _options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        todo("conv_transpose3d")
    }

    fn avg_pool2d(
        _x: FloatTensor<Self>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _count_include_pad: bool,
    ) -> FloatTensor<Self> {
        todo("avg_pool2d")
    }

    fn avg_pool2d_backward(
        _x: FloatTensor<Self>,
        _grad: FloatTensor<Self>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _count_include_pad: bool,
    ) -> FloatTensor<Self> {
        todo("avg_pool2d_backward")
    }

    fn adaptive_avg_pool2d(_x: FloatTensor<Self>, _output_size: [usize; 2]) -> FloatTensor<Self> {
        todo("adaptive_avg_pool2d")
    }

    fn adaptive_avg_pool2d_backward(
        _x: FloatTensor<Self>,
        _grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        todo("adaptive_avg_pool2d_backward")
    }

    fn max_pool2d(
        _x: FloatTensor<Self>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
    ) -> FloatTensor<Self> {
        todo("max_pool2d")
    }

    fn max_pool2d_with_indices(
        _x: FloatTensor<Self>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
    ) -> MaxPool2dWithIndices<Self> {
        todo("max_pool2d_with_indices")
    }

    fn max_pool2d_with_indices_backward(
        _x: FloatTensor<Self>,
        _kernel_size: [usize; 2],
        _stride: [usize; 2],
        _padding: [usize; 2],
        _dilation: [usize; 2],
        _output_grad: FloatTensor<Self>,
        _indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        todo("max_pool2d_with_indices_backward")
    }

    fn interpolate(
        _x: FloatTensor<Self>,
        _output_size: [usize; 2],
        _options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        todo("interpolate")
    }

    fn interpolate_backward(
        _x: FloatTensor<Self>,
        _grad: FloatTensor<Self>,
        _output_size: [usize; 2],
        _options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        todo("interpolate_backward")
    }
}
