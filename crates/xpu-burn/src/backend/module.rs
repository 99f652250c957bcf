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
use crate::ops::nn::{self, ConvParams, DeformInput, DeformParams, Interpolation, Pool2d};
use crate::Xpu;

/// burn's convolution options as [`ConvParams`].
trait ToConvParams<const N: usize> {
    fn params(&self) -> ConvParams<N>;
}

impl<const N: usize> ToConvParams<N> for ConvOptions<N> {
    fn params(&self) -> ConvParams<N> {
        ConvParams::new(self.stride, self.padding, self.dilation, self.groups)
    }
}

impl<const N: usize> ToConvParams<N> for ConvTransposeOptions<N> {
    fn params(&self) -> ConvParams<N> {
        ConvParams::new(self.stride, self.padding, self.dilation, self.groups)
            .transposed(self.padding_out)
    }
}

/// A convolution method of [`ModuleOps`] (burn declares one per rank and kind; all run
/// [`nn::conv`], whose parameters say the rank and whether it is transposed).
macro_rules! conv_op {
    ($name:ident, $options:ty) => {
        fn $name(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: Option<FloatTensor<Self>>,
            options: $options,
        ) -> FloatTensor<Self> {
            or_panic(nn::conv(&x, &weight, bias.as_ref(), options.params()))
        }
    };
}

/// A deformable-convolution method of [`ModuleOps`]: burn passes its input as five tensors
/// (`x`, `offset`, `weight` and the optional `mask` and `bias`) ahead of the method's own
/// arguments; [`nn`]'s kernels take them as one [`DeformInput`], which the body gets as
/// `$input`.
macro_rules! deform_op {
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, |$input:ident| $body:expr) => {
        fn $name(
            x: FloatTensor<Self>,
            offset: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            mask: Option<FloatTensor<Self>>,
            bias: Option<FloatTensor<Self>>,
            $($arg: $ty,)*
        ) -> $ret {
            let $input = DeformInput::new(&x, &offset, &weight, mask.as_ref(), bias.as_ref());
            $body
        }
    };
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

fn pool2d(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Pool2d {
    Pool2d {
        kernel,
        stride,
        padding,
        dilation,
    }
}

/// A 2-D pooling method of [`ModuleOps`]: burn passes the window as `kernel_size`, `stride`,
/// `padding` and, for max pooling (`dilation;` in the call), `dilation` arrays, after the
/// method's input tensors `$x` and before its other arguments; [`nn`]'s kernels take the
/// window as one [`Pool2d`], which the body gets as `$window` (average pooling: dilation 1).
macro_rules! pool_op {
    ($name:ident($($x:ident),+; dilation; $($arg:ident: $ty:ty),*) -> $ret:ty, |$window:ident| $body:expr) => {
        fn $name(
            $($x: FloatTensor<Self>,)+
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            dilation: [usize; 2],
            $($arg: $ty,)*
        ) -> $ret {
            let $window = pool2d(kernel_size, stride, padding, dilation);
            $body
        }
    };
    ($name:ident($($x:ident),+; $($arg:ident: $ty:ty),*) -> $ret:ty, |$window:ident| $body:expr) => {
        fn $name(
            $($x: FloatTensor<Self>,)+
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            $($arg: $ty,)*
        ) -> $ret {
            let $window = pool2d(kernel_size, stride, padding, [1, 1]);
            $body
        }
    };
}

fn mode(o: &InterpolateOptions) -> Interpolation {
    match o.mode {
        InterpolateMode::Nearest => Interpolation::Nearest,
        InterpolateMode::Bilinear => Interpolation::Bilinear,
        InterpolateMode::Bicubic => Interpolation::Bicubic,
    }
}

impl ModuleOps<Self> for Xpu {
    conv_op!(conv2d, ConvOptions<2>);
    conv_op!(conv3d, ConvOptions<3>);
    conv_op!(conv_transpose2d, ConvTransposeOptions<2>);
    conv_op!(conv_transpose3d, ConvTransposeOptions<3>);

    deform_op!(deform_conv2d(options: DeformConvOptions<2>) -> FloatTensor<Self>, |input| {
        or_panic(nn::deform_conv2d(input, deform_params(&options)))
    });

    deform_op!(deform_conv2d_backward(
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>
    ) -> DeformConv2dBackward<Self>, |input| {
        let (x_grad, offset_grad, weight_grad, mask_grad, bias_grad) = or_panic(
            nn::deform_conv2d_backward(input, &output_grad, deform_params(&options)),
        );
        DeformConv2dBackward::new(x_grad, offset_grad, weight_grad, mask_grad, bias_grad)
    });

    pool_op!(avg_pool2d(x; count_include_pad: bool) -> FloatTensor<Self>, |window| {
        or_panic(nn::avg_pool2d(&x, window, count_include_pad))
    });

    pool_op!(avg_pool2d_backward(x, grad; count_include_pad: bool) -> FloatTensor<Self>, |window| {
        or_panic(nn::avg_pool2d_backward(&x, &grad, window, count_include_pad))
    });

    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        or_panic(nn::adaptive_avg_pool2d(&x, output_size))
    }

    fn adaptive_avg_pool2d_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        or_panic(nn::adaptive_avg_pool2d_backward(&x, &grad))
    }

    pool_op!(max_pool2d(x; dilation;) -> FloatTensor<Self>, |window| {
        or_panic(nn::max_pool2d_with_indices(&x, window)).0
    });

    pool_op!(max_pool2d_with_indices(x; dilation;) -> MaxPool2dWithIndices<Self>, |window| {
        let (output, indices) = or_panic(nn::max_pool2d_with_indices(&x, window));
        MaxPool2dWithIndices::new(output, indices)
    });

    pool_op!(max_pool2d_with_indices_backward(
        x;
        dilation;
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>
    ) -> MaxPool2dBackward<Self>, |window| {
        MaxPool2dBackward::new(or_panic(nn::max_pool2d_with_indices_backward(
            &x,
            window,
            &output_grad,
            &indices,
        )))
    });

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
