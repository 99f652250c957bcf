//! burn's `ModuleOps` on xpu: convolution, pooling and interpolation (kernels in
//! [`crate::ops::nn`]). The convolutions' backward passes keep burn's default
//! implementations (transposed convolutions and convolutions of swapped tensors, which run
//! on these kernels).

use burn_tensor::ops::{
    ConvOptions, ConvTransposeOptions, DeformConv2dBackward, DeformConvOptions, FloatTensor,
    IntTensor, InterpolateMode, InterpolateOptions, MaxPool2dBackward, MaxPool2dWithIndices,
    ModuleOps,
};

use crate::error::or_panic;
use crate::ops::nn::{self, ConvParams, DeformParams, Interpolation};
use crate::Xpu;

fn conv_params<const N: usize>(o: &ConvOptions<N>) -> ConvParams<N> {
    ConvParams {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        padding_out: [0; N],
        groups: o.groups,
    }
}

fn conv_t_params<const N: usize>(o: &ConvTransposeOptions<N>) -> ConvParams<N> {
    ConvParams {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        padding_out: o.padding_out,
        groups: o.groups,
    }
}

fn deform_params(o: &DeformConvOptions<2>) -> DeformParams {
    DeformParams {
        stride: o.stride,
        padding: o.padding,
        dilation: o.dilation,
        weight_groups: o.weight_groups,
        offset_groups: o.offset_groups,
    }
}

fn mode(o: &InterpolateOptions) -> Interpolation {
    match o.mode {
        InterpolateMode::Nearest => Interpolation::Nearest,
        InterpolateMode::Bilinear => Interpolation::Bilinear,
        InterpolateMode::Bicubic => Interpolation::Bicubic,
    }
}

impl ModuleOps<Self> for Xpu {
    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        or_panic(nn::conv(&x, &weight, bias.as_ref(), conv_params(&options)))
    }

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        or_panic(nn::deform_conv2d(
            &x,
            &offset,
            &weight,
            mask.as_ref(),
            bias.as_ref(),
            deform_params(&options),
        ))
    }

    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let (x_grad, offset_grad, weight_grad, mask_grad, bias_grad) =
            or_panic(nn::deform_conv2d_backward(
                &x,
                &offset,
                &weight,
                mask.as_ref(),
                bias.as_ref(),
                &output_grad,
                deform_params(&options),
            ));
        DeformConv2dBackward::new(x_grad, offset_grad, weight_grad, mask_grad, bias_grad)
    }

    fn conv3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        or_panic(nn::conv(&x, &weight, bias.as_ref(), conv_params(&options)))
    }

    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        or_panic(nn::conv_transpose(
            &x,
            &weight,
            bias.as_ref(),
            conv_t_params(&options),
        ))
    }

    fn conv_transpose3d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        or_panic(nn::conv_transpose(
            &x,
            &weight,
            bias.as_ref(),
            conv_t_params(&options),
        ))
    }

    fn avg_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
    ) -> FloatTensor<Self> {
        or_panic(nn::avg_pool2d(
            &x,
            kernel_size,
            stride,
            padding,
            count_include_pad,
        ))
    }

    fn avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        count_include_pad: bool,
    ) -> FloatTensor<Self> {
        or_panic(nn::avg_pool2d_backward(
            &x,
            &grad,
            kernel_size,
            stride,
            padding,
            count_include_pad,
        ))
    }

    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        or_panic(nn::adaptive_avg_pool2d(&x, output_size))
    }

    fn adaptive_avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(nn::adaptive_avg_pool2d_backward(&x, &grad))
    }

    fn max_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
    ) -> FloatTensor<Self> {
        or_panic(nn::max_pool2d_with_indices(
            &x,
            kernel_size,
            stride,
            padding,
            dilation,
        ))
        .0
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
    ) -> MaxPool2dWithIndices<Self> {
        let (output, indices) = or_panic(nn::max_pool2d_with_indices(
            &x,
            kernel_size,
            stride,
            padding,
            dilation,
        ));
        MaxPool2dWithIndices::new(output, indices)
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        MaxPool2dBackward::new(or_panic(nn::max_pool2d_with_indices_backward(
            &x,
            kernel_size,
            stride,
            padding,
            dilation,
            &output_grad,
            &indices,
        )))
    }

    fn interpolate(
        x: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        or_panic(nn::interpolate(&x, output_size, mode(&options)))
    }

    fn interpolate_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        output_size: [usize; 2],
        options: InterpolateOptions,
    ) -> FloatTensor<Self> {
        or_panic(nn::interpolate_backward(
            &x,
            &grad,
            output_size,
            mode(&options),
        ))
    }
}
