//! Convolution, pooling and interpolation: direct OpenCL C kernels, one work-item per output
//! element (or, for the backward passes, per input element: gather form, no atomics), except
//! the deformable convolution's input gradient, which scatters with atomic adds.
//!
//! Every op takes NCHW (NCDHW for 3-D) tensors of a float type. `f32` and `f64` compute in
//! their own type; `f16` inputs compute in `f32` and are converted back. Inputs are made
//! contiguous first, so each kernel indexes plain row-major buffers whose sizes the host
//! code checked against the shapes it passes.
//!
//! Semantics follow burn 0.19.1's `ModuleOps` (the reference backend's definitions): output
//! sizes as `burn_tensor::ops::conv::calculate_conv_output_size` and
//! `calculate_conv_transpose_output_size`; max-pool indices are flattened `h * W + w`
//! positions within each `(n, c)` plane; bilinear and bicubic interpolation map output
//! coordinate `o` to input coordinate `o * (in - 1) / max(out - 1, 1)` (align-corners);
//! nearest maps `o` to `floor(o * in / out)`.

use burn_tensor::DType;
use xpu::xpu_kernel::{Arg, Function};

use crate::dtype;
use crate::error::{Error, Result};
use crate::ops::elementwise::{cast, contiguous, full};
use crate::runtime::{self, ScalarValue};
use crate::tensor::XpuTensor;

/// The interpolation of [`interpolate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// The input element at `floor(o * in / out)`.
    Nearest,
    /// Bilinear, align-corners.
    Bilinear,
    /// Bicubic (Keys' kernel, `a = -0.75`, as torch), align-corners, edges clamped.
    Bicubic,
}

/// Parameters of an N-d (N ≤ 3) convolution, padded to 3 spatial dimensions.
#[derive(Debug, Clone, Copy)]
pub struct ConvParams<const N: usize> {
    /// Stride per spatial dimension (non-zero).
    pub stride: [usize; N],
    /// Zero padding on both sides, per spatial dimension.
    pub padding: [usize; N],
    /// Dilation per spatial dimension (non-zero).
    pub dilation: [usize; N],
    /// Extra size added to one side of a transposed convolution's output (ignored otherwise).
    pub padding_out: [usize; N],
    /// Channel groups (non-zero, dividing both channel counts).
    pub groups: usize,
}

/// Parameters of a deformable 2-D convolution.
#[derive(Debug, Clone, Copy)]
pub struct DeformParams {
    /// Stride (non-zero).
    pub stride: [usize; 2],
    /// Zero padding on both sides.
    pub padding: [usize; 2],
    /// Dilation (non-zero).
    pub dilation: [usize; 2],
    /// Groups of the weight (non-zero, dividing both channel counts).
    pub weight_groups: usize,
    /// Groups of the offsets and mask (non-zero, dividing the input channels).
    pub offset_groups: usize,
}

/// The gradients of [`deform_conv2d_backward`]: input, offset, weight, mask (when a mask was
/// given), bias (when a bias was given).
pub type DeformGrads = (
    XpuTensor,
    XpuTensor,
    XpuTensor,
    Option<XpuTensor>,
    Option<XpuTensor>,
);

fn invalid<T>(msg: String) -> Result<T> {
    Err(Error::Invalid(msg))
}

/// The type kernels compute in for `dtype` (`f16` computes in `f32`).
fn compute_dtype(dtype: DType) -> Result<DType> {
    match dtype::canonical(dtype) {
        DType::F64 => Ok(DType::F64),
        DType::F32 | DType::F16 => Ok(DType::F32),
        other => Err(Error::DType(other)),
    }
}

/// `t` as a contiguous tensor (offset 0) of `dtype`.
fn prep(t: &XpuTensor, dtype: DType) -> Result<XpuTensor> {
    let t = cast(t, dtype)?;
    contiguous(&t)
}

/// Back to the caller's type (`f16` results were computed in `f32`).
fn finish(t: XpuTensor, dtype: DType) -> Result<XpuTensor> {
    let dtype = dtype::canonical(dtype);
    if t.dtype == dtype {
        Ok(t)
    } else {
        cast(&t, dtype)
    }
}

fn dims<const D: usize>(t: &XpuTensor, what: &str) -> Result<[usize; D]> {
    <[usize; D]>::try_from(t.shape.as_slice()).or_else(|_| {
        invalid(format!(
            "{what} must have {D} dimensions, got shape {:?}",
            t.shape
        ))
    })
}

fn check_same_device(device: usize, ts: &[&XpuTensor]) -> Result<()> {
    for t in ts {
        if t.device() != device {
            return invalid(format!(
                "tensors on devices {} and {device} in one op",
                t.device()
            ));
        }
    }
    Ok(())
}

/// `(in + 2 pad - dil (k - 1) - 1) / stride + 1`, or an error when the window does not fit.
fn conv_out(
    what: &str,
    size: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Result<usize> {
    if stride == 0 || dil == 0 {
        return invalid(format!("{what}: stride and dilation must be non-zero"));
    }
    let span = dil
        .checked_mul(k.saturating_sub(1))
        .and_then(|s| s.checked_add(1))
        .ok_or_else(|| Error::Invalid(format!("{what}: kernel too large")))?;
    let padded = size
        .checked_add(pad.saturating_mul(2))
        .ok_or_else(|| Error::Invalid(format!("{what}: padding too large")))?;
    if k == 0 || padded < span {
        return invalid(format!(
            "{what}: kernel of size {k} (dilation {dil}) does not fit input of size {size} with padding {pad}"
        ));
    }
    Ok((padded - span) / stride + 1)
}

/// The common header of every kernel of this file, for compute type `t`.
const COMMON: &str = r#"
static inline T bilinear_zero(__global const T *img, long H, long W, T y, T x) {
  if (!(y > (T)-1 && y < (T)H && x > (T)-1 && x < (T)W)) return (T)0;
  T yl = floor(y), xl = floor(x);
  long y0 = (long)yl, x0 = (long)xl, y1 = y0 + 1, x1 = x0 + 1;
  T ly = y - yl, lx = x - xl, hy = (T)1 - ly, hx = (T)1 - lx;
  /* Integer bounds as well: (T)H may round above H for huge sizes. */
  bool iy0 = y0 >= 0 && y0 < H, iy1 = y1 >= 0 && y1 < H;
  bool ix0 = x0 >= 0 && x0 < W, ix1 = x1 >= 0 && x1 < W;
  T v1 = (iy0 && ix0) ? img[y0 * W + x0] : (T)0;
  T v2 = (iy0 && ix1) ? img[y0 * W + x1] : (T)0;
  T v3 = (iy1 && ix0) ? img[y1 * W + x0] : (T)0;
  T v4 = (iy1 && ix1) ? img[y1 * W + x1] : (T)0;
  return hy * hx * v1 + hy * lx * v2 + ly * hx * v3 + ly * lx * v4;
}
"#;

/// The kernel `name` of template `body`, for compute type `dtype`.
fn build_kernel(device: usize, dtype: DType, name: &str, body: &'static str) -> Result<Function> {
    let t = dtype::cl_type(dtype)?;
    let key = format!("nn|{name}|{t}");
    runtime::function(device, &key, name, || {
        let mut s = dtype::pragmas(&[t]);
        s.push_str(&format!("#define T {t}\n"));
        s.push_str(crate::ops::PRELUDE);
        s.push_str(COMMON);
        s.push_str(body);
        s
    })
}

fn meta(device: usize, values: &[usize]) -> Result<runtime::Meta> {
    let v: Vec<i64> = values.iter().map(|&x| x as i64).collect();
    runtime::upload_meta(device, &v)
}

// ---------------------------------------------------------------------------------------------
// Convolution and transposed convolution (3 spatial dimensions; 1-D and 2-D pad with size-1
// dimensions).

const CONV: &str = r#"
__kernel void conv(__global T *out, __global const T *x, __global const T *w,
                   __global const T *bias, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long C = p[1], D = p[2], H = p[3], W = p[4], CO = p[5], OD = p[6], OH = p[7], OW = p[8];
  long KD = p[9], KH = p[10], KW = p[11], SD = p[12], SH = p[13], SW = p[14];
  long PD = p[15], PH = p[16], PW = p[17], DD = p[18], DH = p[19], DW = p[20], G = p[21];
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long od = t % OD; t /= OD;
  long oc = t % CO; long b = t / CO;
  long cig = C / G, cog = CO / G; long g = oc / cog;
  T acc = p[22] ? bias[oc] : (T)0;
  for (long c = 0; c < cig; c++) {
    __global const T *xp = x + (b * C + g * cig + c) * D * H * W;
    __global const T *wp = w + (oc * cig + c) * KD * KH * KW;
    for (long kd = 0; kd < KD; kd++) {
      long id = od * SD - PD + kd * DD;
      if (id < 0 || id >= D) continue;
      for (long kh = 0; kh < KH; kh++) {
        long ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (long kw = 0; kw < KW; kw++) {
          long iw = ow * SW - PW + kw * DW;
          if (iw < 0 || iw >= W) continue;
          acc += xp[(id * H + ih) * W + iw] * wp[(kd * KH + kh) * KW + kw];
        }
      }
    }
  }
  out[i] = acc;
}
"#;

const CONV_T: &str = r#"
__kernel void conv_t(__global T *out, __global const T *x, __global const T *w,
                     __global const T *bias, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long C = p[1], D = p[2], H = p[3], W = p[4], CO = p[5], OD = p[6], OH = p[7], OW = p[8];
  long KD = p[9], KH = p[10], KW = p[11], SD = p[12], SH = p[13], SW = p[14];
  long PD = p[15], PH = p[16], PW = p[17], DD = p[18], DH = p[19], DW = p[20], G = p[21];
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long od = t % OD; t /= OD;
  long oc = t % CO; long b = t / CO;
  long cig = C / G, cog = CO / G; long g = oc / cog, o = oc % cog;
  T acc = p[22] ? bias[oc] : (T)0;
  for (long c = 0; c < cig; c++) {
    long ic = g * cig + c;
    __global const T *xp = x + (b * C + ic) * D * H * W;
    __global const T *wp = w + (ic * cog + o) * KD * KH * KW;
    for (long kd = 0; kd < KD; kd++) {
      long td = od + PD - kd * DD;
      if (td < 0 || td % SD != 0) continue;
      long id = td / SD;
      if (id >= D) continue;
      for (long kh = 0; kh < KH; kh++) {
        long th = oh + PH - kh * DH;
        if (th < 0 || th % SH != 0) continue;
        long ih = th / SH;
        if (ih >= H) continue;
        for (long kw = 0; kw < KW; kw++) {
          long tw = ow + PW - kw * DW;
          if (tw < 0 || tw % SW != 0) continue;
          long iw = tw / SW;
          if (iw >= W) continue;
          acc += xp[(id * H + ih) * W + iw] * wp[(kd * KH + kh) * KW + kw];
        }
      }
    }
  }
  out[i] = acc;
}
"#;

/// Pads an N-d (N ≤ 3) spatial shape to 3 dimensions with leading 1s.
fn pad3<const N: usize>(v: [usize; N], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - N..].copy_from_slice(&v);
    out
}

/// The N-d convolution (N = 1, 2 or 3) of `x` `[batch, c_in, spatial...]` with `weight`
/// `[c_out, c_in / groups, kernel...]`, plus `bias` `[c_out]`: `[batch, c_out, out...]`,
/// each output size `(in + 2 pad - dil (k - 1) - 1) / stride + 1` (as torch.nn.functional.conv1d / conv2d / conv3d).
///
/// # Errors
/// [`Error::Invalid`] for shapes that do not match (ranks, channel counts, groups, a kernel
/// larger than the padded input, zero strides or dilations); dtype, allocation and kernel errors.
pub fn conv<const N: usize>(
    x: &XpuTensor,
    weight: &XpuTensor,
    bias: Option<&XpuTensor>,
    p: ConvParams<N>,
) -> Result<XpuTensor> {
    conv_impl(x, weight, bias, p, false)
}

/// The N-d transposed convolution (N = 1, 2 or 3) of `x` `[batch, c_in, spatial...]` with
/// `weight` `[c_in, c_out / groups, kernel...]`, plus `bias` `[c_out]`: `[batch, c_out,
/// out...]`, each output size `(in - 1) stride + dil (k - 1) + 1 + padding_out - 2 pad`
/// (as torch.nn.functional.conv_transpose1d / 2d / 3d).
///
/// # Errors
/// As [`conv`]; also when the padding exceeds the output.
pub fn conv_transpose<const N: usize>(
    x: &XpuTensor,
    weight: &XpuTensor,
    bias: Option<&XpuTensor>,
    p: ConvParams<N>,
) -> Result<XpuTensor> {
    conv_impl(x, weight, bias, p, true)
}

fn conv_impl<const N: usize>(
    x: &XpuTensor,
    weight: &XpuTensor,
    bias: Option<&XpuTensor>,
    p: ConvParams<N>,
    transposed: bool,
) -> Result<XpuTensor> {
    let what = if transposed { "conv_transpose" } else { "conv" };
    if N == 0 || N > 3 {
        return invalid(format!(
            "{what}: {N} spatial dimensions (1 to 3 are supported)"
        ));
    }
    let device = x.device();
    check_same_device(device, &[weight])?;
    if let Some(b) = bias {
        check_same_device(device, &[b])?;
    }
    if x.shape.len() != N + 2 || weight.shape.len() != N + 2 {
        return invalid(format!(
            "{what}{N}d: input {:?} and weight {:?} must have {} dimensions",
            x.shape,
            weight.shape,
            N + 2
        ));
    }
    let (batch, c_in) = (x.shape[0], x.shape[1]);
    let g = p.groups;
    if g == 0 || c_in % g != 0 {
        return invalid(format!(
            "{what}{N}d: {g} groups do not divide {c_in} input channels"
        ));
    }
    let c_out = if transposed {
        if weight.shape[0] != c_in {
            return invalid(format!(
                "{what}{N}d: weight {:?} must have {c_in} input channels first",
                weight.shape
            ));
        }
        weight.shape[1] * g
    } else {
        if weight.shape[1] * g != c_in {
            return invalid(format!(
                "{what}{N}d: weight {:?} must have {} channels per group ({c_in} / {g})",
                weight.shape,
                c_in / g
            ));
        }
        weight.shape[0]
    };
    if c_out % g != 0 {
        return invalid(format!(
            "{what}{N}d: {g} groups do not divide {c_out} output channels"
        ));
    }
    if let Some(b) = bias {
        if b.numel() != c_out || b.shape.len() != 1 {
            return invalid(format!("{what}{N}d: bias {:?} must be [{c_out}]", b.shape));
        }
    }
    let mut out_sp = [0usize; N];
    for (d, o) in out_sp.iter_mut().enumerate() {
        let (size, k) = (x.shape[2 + d], weight.shape[2 + d]);
        let (s, pad, dil) = (p.stride[d], p.padding[d], p.dilation[d]);
        *o = if transposed {
            if s == 0 || dil == 0 {
                return invalid(format!("{what}{N}d: stride and dilation must be non-zero"));
            }
            if k == 0 || size == 0 {
                0
            } else {
                // (size - 1) stride + dil (k - 1) + 1 + padding_out - 2 pad
                let full = (size - 1)
                    .checked_mul(s)
                    .and_then(|v| v.checked_add(dil.checked_mul(k - 1)?))
                    .and_then(|v| v.checked_add(1))
                    .and_then(|v| v.checked_add(p.padding_out[d]))
                    .ok_or_else(|| Error::Invalid(format!("{what}{N}d: output too large")))?;
                full.checked_sub(pad.saturating_mul(2)).ok_or_else(|| {
                    Error::Invalid(format!("{what}{N}d: padding {pad} exceeds the output"))
                })?
            }
        } else {
            conv_out(&format!("{what}{N}d"), size, k, s, pad, dil)?
        };
    }
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let wc = prep(weight, dtype)?;
    let bc = bias.map(|b| prep(b, dtype)).transpose()?;

    let mut out_shape = vec![batch, c_out];
    out_shape.extend_from_slice(&out_sp);
    let out = XpuTensor::empty(device, &out_shape, dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, x.dtype);
    }
    let in3 = pad3(<[usize; N]>::try_from(&x.shape[2..]).unwrap_or([1; N]), 1);
    let k3 = pad3(
        <[usize; N]>::try_from(&weight.shape[2..]).unwrap_or([1; N]),
        1,
    );
    let o3 = pad3(out_sp, 1);
    let s3 = pad3(p.stride, 1);
    let p3 = pad3(p.padding, 0);
    let d3 = pad3(p.dilation, 1);
    let mut m = vec![batch, c_in];
    m.extend_from_slice(&in3);
    m.push(c_out);
    m.extend_from_slice(&o3);
    m.extend_from_slice(&k3);
    m.extend_from_slice(&s3);
    m.extend_from_slice(&p3);
    m.extend_from_slice(&d3);
    m.push(g);
    m.push(bc.is_some() as usize);
    let meta = meta(device, &m)?;
    let name = if transposed { "conv_t" } else { "conv" };
    let f = build_kernel(device, dtype, name, if transposed { CONV_T } else { CONV })?;
    let bias_buf = bc.as_ref().unwrap_or(&xc);
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(wc.storage.buffer()),
        Arg::from(bias_buf.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` work-items, one per element of the fresh contiguous `out` (`n` elements of
    // `T`); item `i` writes `out[i]` only. `x` and `weight` are contiguous from offset 0 with
    // the shapes checked above ([batch, c_in, D, H, W] and [c_out, c_in/g, KD, KH, KW], or
    // [c_in, c_out/g, ...] transposed), so every read `x[(b*C + ic)*DHW + (id*H + ih)*W + iw]`
    // has b < batch, ic < c_in, and the spatial indices are checked in [0, size) before the
    // read; weight indices are < c_out (c_in) * per-group channels * kernel volume. `bias` is
    // read at oc < c_out only when present (checked [c_out]). Divisors (OW, OH, OD, c_out,
    // groups, c_out/groups, strides) are non-zero: n > 0 makes every output size non-zero and
    // the host checked groups and strides. The loops are bounded by the channel and kernel
    // counts, so the kernel terminates. The metadata buffer holds the 23 longs it reads.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, x.dtype)
}

// ---------------------------------------------------------------------------------------------
// Pooling.

const AVG_POOL: &str = r#"
__kernel void avg_pool(__global T *out, __global const T *x, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5];
  long SH = p[6], SW = p[7], PH = p[8], PW = p[9], inc = p[10];
  long ow = i % OW; long t = i / OW; long oh = t % OH; long nc = t / OH;
  __global const T *xp = x + nc * H * W;
  T sum = (T)0; long cnt = 0;
  for (long kh = 0; kh < KH; kh++) {
    long ih = oh * SH - PH + kh;
    if (ih < 0 || ih >= H) continue;
    for (long kw = 0; kw < KW; kw++) {
      long iw = ow * SW - PW + kw;
      if (iw < 0 || iw >= W) continue;
      sum += xp[ih * W + iw];
      cnt++;
    }
  }
  if (inc) cnt = KH * KW;
  out[i] = sum / (T)cnt;
}

__kernel void avg_pool_bwd(__global T *gx, __global const T *gy, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5];
  long SH = p[6], SW = p[7], PH = p[8], PW = p[9], inc = p[10];
  long iw = i % W; long t = i / W; long ih = t % H; long nc = t / H;
  long lo_h = ih + PH - KH + 1, lo_w = iw + PW - KW + 1;
  long oh0 = lo_h <= 0 ? 0 : (lo_h + SH - 1) / SH;
  long ow0 = lo_w <= 0 ? 0 : (lo_w + SW - 1) / SW;
  long oh1 = min((ih + PH) / SH, OH - 1), ow1 = min((iw + PW) / SW, OW - 1);
  T acc = (T)0;
  for (long oh = oh0; oh <= oh1; oh++) {
    long h0 = max(oh * SH - PH, 0L), h1 = min(oh * SH - PH + KH, H);
    for (long ow = ow0; ow <= ow1; ow++) {
      long w0 = max(ow * SW - PW, 0L), w1 = min(ow * SW - PW + KW, W);
      long cnt = inc ? KH * KW : (h1 - h0) * (w1 - w0);
      acc += gy[(nc * OH + oh) * OW + ow] / (T)cnt;
    }
  }
  gx[i] = acc;
}
"#;

fn pool_out(
    what: &str,
    x: [usize; 4],
    k: [usize; 2],
    s: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
) -> Result<[usize; 2]> {
    Ok([
        conv_out(what, x[2], k[0], s[0], pad[0], dil[0])?,
        conv_out(what, x[3], k[1], s[1], pad[1], dil[1])?,
    ])
}

fn check_grad(what: &str, grad: &XpuTensor, expected: &[usize]) -> Result<()> {
    if grad.shape != expected {
        return invalid(format!(
            "{what}: output gradient {:?} must have the output's shape {expected:?}",
            grad.shape
        ));
    }
    Ok(())
}

/// 2-D average pooling of `x` `[batch, channels, H, W]` (as torch.nn.functional.avg_pool2d,
/// `ceil_mode = false`): the mean over each window's elements inside the input, divided by
/// the kernel area when `count_include_pad`.
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4, a zero stride or a kernel larger than the
/// padded input; dtype, allocation and kernel errors.
pub fn avg_pool2d(
    x: &XpuTensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    count_include_pad: bool,
) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "avg_pool2d input")?;
    let [oh, ow] = pool_out("avg_pool2d", xs, kernel, stride, padding, [1, 1])?;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let out = XpuTensor::empty(device, &[xs[0], xs[1], oh, ow], dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, x.dtype);
    }
    let m = [
        xs[2],
        xs[3],
        oh,
        ow,
        kernel[0],
        kernel[1],
        stride[0],
        stride[1],
        padding[0],
        padding[1],
        count_include_pad as usize,
    ];
    let meta = meta(device, &m)?;
    let f = build_kernel(device, dtype, "avg_pool", AVG_POOL)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `out[i]` of the fresh `[B, C, OH, OW]` output;
    // it reads `x[nc*H*W + ih*W + iw]` with nc < B*C (i / (OH*OW)) and ih, iw checked in
    // [0, H) x [0, W) — inside the contiguous `x`. OW, OH are non-zero (n > 0); the division
    // by `cnt` is a float division. Loops bounded by the kernel size. Meta: 11 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, x.dtype)
}

/// The gradient of [`avg_pool2d`] with respect to `x`, given the output gradient `grad`.
///
/// # Errors
/// As [`avg_pool2d`]; [`Error::Invalid`] when `grad` is not of the output's shape.
pub fn avg_pool2d_backward(
    x: &XpuTensor,
    grad: &XpuTensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    count_include_pad: bool,
) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "avg_pool2d input")?;
    let [oh, ow] = pool_out("avg_pool2d_backward", xs, kernel, stride, padding, [1, 1])?;
    check_grad("avg_pool2d_backward", grad, &[xs[0], xs[1], oh, ow])?;
    let device = x.device();
    check_same_device(device, &[grad])?;
    let dtype = compute_dtype(grad.dtype)?;
    let gc = prep(grad, dtype)?;
    let out = XpuTensor::empty(device, &xs, dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, grad.dtype);
    }
    let m = [
        xs[2],
        xs[3],
        oh,
        ow,
        kernel[0],
        kernel[1],
        stride[0],
        stride[1],
        padding[0],
        padding[1],
        count_include_pad as usize,
    ];
    let meta = meta(device, &m)?;
    let f = build_kernel(device, dtype, "avg_pool_bwd", AVG_POOL)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `gx[i]` of the fresh `[B, C, H, W]` output; it
    // reads `gy[(nc*OH + oh)*OW + ow]` with nc < B*C and oh in [0, OH), ow in [0, OW) (the
    // loop bounds are clamped to OH-1 / OW-1 and start at >= 0) — inside the contiguous
    // grad checked to be [B, C, OH, OW]. Divisors W, H (n > 0) and the strides (checked
    // non-zero) are non-zero; `cnt` divides floats. Loops bounded by OH, OW. Meta: 11 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, grad.dtype)
}

const ADAPTIVE: &str = r#"
__kernel void adaptive_pool(__global T *out, __global const T *x, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3];
  long ow = i % OW; long t = i / OW; long oh = t % OH; long nc = t / OH;
  long h0 = (oh * H) / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
  long w0 = (ow * W) / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
  __global const T *xp = x + nc * H * W;
  T sum = (T)0;
  for (long ih = h0; ih < h1; ih++)
    for (long iw = w0; iw < w1; iw++)
      sum += xp[ih * W + iw];
  out[i] = sum / (T)((h1 - h0) * (w1 - w0));
}

__kernel void adaptive_pool_bwd(__global T *gx, __global const T *gy, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3];
  long iw = i % W; long t = i / W; long ih = t % H; long nc = t / H;
  T acc = (T)0;
  /* Only outputs (ih*OH)/H <= oh <= ((ih+1)*OH)/H can cover row ih (likewise columns); the
     exact test below decides. */
  long oh_end = min(OH, (ih + 1) * OH / H + 1), ow_end = min(OW, (iw + 1) * OW / W + 1);
  for (long oh = (ih * OH) / H; oh < oh_end; oh++) {
    long h0 = (oh * H) / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
    if (ih < h0 || ih >= h1) continue;
    for (long ow = (iw * OW) / W; ow < ow_end; ow++) {
      long w0 = (ow * W) / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
      if (iw < w0 || iw >= w1) continue;
      acc += gy[(nc * OH + oh) * OW + ow] / (T)((h1 - h0) * (w1 - w0));
    }
  }
  gx[i] = acc;
}
"#;

/// 2-D adaptive average pooling of `x` `[batch, channels, H, W]` to `output_size` (as
/// torch.nn.functional.adaptive_avg_pool2d): output `o` averages input rows
/// `floor(o H / OH) .. ceil((o + 1) H / OH)`, likewise columns.
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4; dtype, allocation and kernel errors.
pub fn adaptive_avg_pool2d(x: &XpuTensor, output_size: [usize; 2]) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "adaptive_avg_pool2d input")?;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let [oh, ow] = output_size;
    let out = XpuTensor::empty(device, &[xs[0], xs[1], oh, ow], dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, x.dtype);
    }
    let meta = meta(device, &[xs[2], xs[3], oh, ow])?;
    let f = build_kernel(device, dtype, "adaptive_pool", ADAPTIVE)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `out[i]` (fresh [B, C, OH, OW]); it reads rows
    // h0 <= ih < h1 <= H and columns w0 <= iw < w1 <= W of plane nc < B*C (h1 = ceil((oh+1)
    // H / OH) <= H since oh < OH) — inside the contiguous `x`. OH, OW non-zero (n > 0); the
    // final division is a float division. Loops bounded by H and W. Meta: 4 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, x.dtype)
}

/// The gradient of [`adaptive_avg_pool2d`] with respect to `x` (of `x`'s shape), given the
/// output gradient `grad` `[batch, channels, OH, OW]`.
///
/// # Errors
/// [`Error::Invalid`] for mismatched ranks, batch or channels; dtype, allocation and kernel
/// errors.
pub fn adaptive_avg_pool2d_backward(x: &XpuTensor, grad: &XpuTensor) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "adaptive_avg_pool2d input")?;
    let gs = dims::<4>(grad, "adaptive_avg_pool2d gradient")?;
    if gs[0] != xs[0] || gs[1] != xs[1] {
        return invalid(format!(
            "adaptive_avg_pool2d_backward: gradient {gs:?} does not match input {xs:?}"
        ));
    }
    let device = x.device();
    check_same_device(device, &[grad])?;
    let dtype = compute_dtype(grad.dtype)?;
    let gc = prep(grad, dtype)?;
    let out = XpuTensor::empty(device, &xs, dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, grad.dtype);
    }
    let meta = meta(device, &[xs[2], xs[3], gs[2], gs[3]])?;
    let f = build_kernel(device, dtype, "adaptive_pool_bwd", ADAPTIVE)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `gx[i]` (fresh, x's shape); it reads
    // `gy[(nc*OH + oh)*OW + ow]` for nc < B*C, oh < OH, ow < OW — inside the contiguous grad
    // of shape [B, C, OH, OW]. Integer divisors: W, H (n > 0) and OH, OW, only inside loops
    // that run when they are non-zero. Loops bounded by OH and OW. Meta: 4 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, grad.dtype)
}

const MAX_POOL: &str = r#"
__kernel void max_pool(__global T *out, __global long *idx, __global const T *x,
                       __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5];
  long SH = p[6], SW = p[7], PH = p[8], PW = p[9], DH = p[10], DW = p[11];
  long ow = i % OW; long t = i / OW; long oh = t % OH; long nc = t / OH;
  __global const T *xp = x + nc * H * W;
  T m = (T)(-INFINITY); long mi = -1;
  for (long kh = 0; kh < KH; kh++) {
    long ih = oh * SH - PH + kh * DH;
    if (ih < 0 || ih >= H) continue;
    for (long kw = 0; kw < KW; kw++) {
      long iw = ow * SW - PW + kw * DW;
      if (iw < 0 || iw >= W) continue;
      T v = xp[ih * W + iw];
      if (mi < 0 || v > m || (isnan(v) && !isnan(m))) { m = v; mi = ih * W + iw; }
    }
  }
  out[i] = m;
  idx[i] = mi;
}

__kernel void max_pool_bwd(__global T *gx, __global const T *gy, __global const long *idx,
                           __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3], KH = p[4], KW = p[5];
  long SH = p[6], SW = p[7], PH = p[8], PW = p[9], DH = p[10], DW = p[11];
  long iw = i % W; long t = i / W; long ih = t % H; long nc = t / H;
  long pos = ih * W + iw;
  T acc = (T)0;
  for (long kh = 0; kh < KH; kh++) {
    long th = ih + PH - kh * DH;
    if (th < 0 || th % SH != 0) continue;
    long oh = th / SH;
    if (oh >= OH) continue;
    for (long kw = 0; kw < KW; kw++) {
      long tw = iw + PW - kw * DW;
      if (tw < 0 || tw % SW != 0) continue;
      long ow = tw / SW;
      if (ow >= OW) continue;
      long o = (nc * OH + oh) * OW + ow;
      if (idx[o] == pos) acc += gy[o];
    }
  }
  gx[i] = acc;
}
"#;

/// 2-D max pooling of `x` `[batch, channels, H, W]` with the index of each maximum (as
/// torch.nn.functional.max_pool2d with `return_indices`, `ceil_mode = false`): the output
/// and an `i64` tensor of the same shape holding `h * W + w` of the maximum within its
/// `(n, c)` plane (the first maximum in window order; NaN counts as a maximum).
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4, a zero stride or dilation, or a kernel larger
/// than the padded input; dtype, allocation and kernel errors.
pub fn max_pool2d_with_indices(
    x: &XpuTensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Result<(XpuTensor, XpuTensor)> {
    let xs = dims::<4>(x, "max_pool2d input")?;
    let [oh, ow] = pool_out("max_pool2d", xs, kernel, stride, padding, dilation)?;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let shape = [xs[0], xs[1], oh, ow];
    let out = XpuTensor::empty(device, &shape, dtype)?;
    let idx = XpuTensor::empty(device, &shape, DType::I64)?;
    let n = out.numel();
    if n > 0 {
        let m = [
            xs[2],
            xs[3],
            oh,
            ow,
            kernel[0],
            kernel[1],
            stride[0],
            stride[1],
            padding[0],
            padding[1],
            dilation[0],
            dilation[1],
        ];
        let meta = meta(device, &m)?;
        let f = build_kernel(device, dtype, "max_pool", MAX_POOL)?;
        let args = [
            Arg::from(out.storage.buffer()),
            Arg::from(idx.storage.buffer()),
            Arg::from(xc.storage.buffer()),
            Arg::from(&meta),
            Arg::from(n as i64),
        ];
        // SAFETY: `n` items, item `i` writes only `out[i]` and `idx[i]` (both fresh, `n`
        // elements of T / long); it reads `x[nc*H*W + ih*W + iw]` with nc < B*C and ih, iw
        // checked in [0, H) x [0, W) — inside the contiguous `x`. OW, OH non-zero (n > 0).
        // Loops bounded by the kernel size. Meta: 12 longs.
        unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    }
    Ok((finish(out, x.dtype)?, idx))
}

/// The gradient of max pooling with respect to `x`: each output gradient goes to the input
/// position its index names (indices as [`max_pool2d_with_indices`] returns them; an index
/// that names no position of its window contributes nothing).
///
/// # Errors
/// As [`max_pool2d_with_indices`]; [`Error::Invalid`] when `grad` or `indices` is not of the
/// output's shape.
pub fn max_pool2d_with_indices_backward(
    x: &XpuTensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    grad: &XpuTensor,
    indices: &XpuTensor,
) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "max_pool2d input")?;
    let [oh, ow] = pool_out("max_pool2d_backward", xs, kernel, stride, padding, dilation)?;
    let oshape = [xs[0], xs[1], oh, ow];
    check_grad("max_pool2d_backward", grad, &oshape)?;
    check_grad("max_pool2d_backward (indices)", indices, &oshape)?;
    let device = x.device();
    check_same_device(device, &[grad, indices])?;
    let dtype = compute_dtype(grad.dtype)?;
    let gc = prep(grad, dtype)?;
    let ic = prep(indices, DType::I64)?;
    let out = XpuTensor::empty(device, &xs, dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, grad.dtype);
    }
    let m = [
        xs[2],
        xs[3],
        oh,
        ow,
        kernel[0],
        kernel[1],
        stride[0],
        stride[1],
        padding[0],
        padding[1],
        dilation[0],
        dilation[1],
    ];
    let meta = meta(device, &m)?;
    let f = build_kernel(device, dtype, "max_pool_bwd", MAX_POOL)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(ic.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `gx[i]` (fresh, x's shape); it reads `gy[o]`
    // and `idx[o]` with o = (nc*OH + oh)*OW + ow, nc < B*C, oh < OH, ow < OW (checked before
    // the read; th, tw checked >= 0) — inside the contiguous grad and indices, both checked
    // to be [B, C, OH, OW]. Index values are only compared, never used to address memory.
    // Divisors W, H (n > 0) and strides (checked non-zero) are non-zero. Loops bounded by
    // the kernel size. Meta: 12 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, grad.dtype)
}

// ---------------------------------------------------------------------------------------------
// Interpolation.

const INTERP: &str = r#"
static inline T cubic1(T x) { const T a = (T)-0.75; return ((a + 2) * x - (a + 3)) * x * x + 1; }
static inline T cubic2(T x) { const T a = (T)-0.75; return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

/* The weight of input index `j` in the value at output index `o` (of `out` along an axis of
   `in` input elements). */
static inline T axis_weight(int mode, long o, long in, long out, long j) {
  if (mode == 0) return (o * in) / out == j ? (T)1 : (T)0;
  T ratio = (T)(in - 1) / (T)max(out - 1, 1L);
  T f = ratio * (T)o;
  T f0 = floor(f);
  long i0 = min(max((long)f0, 0L), in - 1);
  T t = f - f0;
  T w = (T)0;
  if (mode == 1) {
    long i1 = min(i0 + 1, in - 1);
    if (t == (T)0) i1 = i0;
    if (i0 == j) w += (T)1 - t;
    if (i1 == j) w += t;
  } else {
    long taps[4] = { max(i0 - 1, 0L), i0, min(i0 + 1, in - 1), min(i0 + 2, in - 1) };
    T c[4] = { cubic2(t + 1), cubic1(t), cubic1((T)1 - t), cubic2((T)2 - t) };
    for (int k = 0; k < 4; k++) if (taps[k] == j) w += c[k];
  }
  return w;
}

/* A range [lo, hi) of output indices outside which input index `j` has weight 0: nearest
   maps o to floor(o in / out); the others sample around f = o (in - 1) / max(out - 1, 1) with
   taps within distance 2 of f (clamped taps land on 0 or in - 1, also within 3 of f), so
   only |f - j| < 3 matters; one extra index each side absorbs rounding. */
static inline void axis_range(int mode, long j, long in, long out, long *lo, long *hi) {
  if (mode == 0) {
    *lo = (j * out + in - 1) / in;
    *hi = min(out, ((j + 1) * out + in - 1) / in);
    return;
  }
  if (in <= 1) { *lo = 0; *hi = out; return; }
  T ratio = (T)(in - 1) / (T)max(out - 1, 1L);
  T a = floor((T)(j - 3) / ratio) - 1, b = ceil((T)(j + 3) / ratio) + 2;
  *lo = a < 0 ? 0 : (a > (T)out ? out : (long)a);
  *hi = b < 0 ? 0 : (b > (T)out ? out : (long)b);
}

__kernel void interp(__global T *out, __global const T *x, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3]; int mode = (int)p[4];
  long ow = i % OW; long t = i / OW; long oh = t % OH; long nc = t / OH;
  __global const T *xp = x + nc * H * W;
  if (mode == 0) {
    out[i] = xp[((oh * H) / OH) * W + (ow * W) / OW];
    return;
  }
  T ry = (T)(H - 1) / (T)max(OH - 1, 1L), rx = (T)(W - 1) / (T)max(OW - 1, 1L);
  T fy = ry * (T)oh, fx = rx * (T)ow;
  T fy0 = floor(fy), fx0 = floor(fx);
  long y0 = min(max((long)fy0, 0L), H - 1), x0 = min(max((long)fx0, 0L), W - 1);
  T ty = fy - fy0, tx = fx - fx0;
  if (mode == 1) {
    long y1 = min((long)ceil(fy), H - 1), x1 = min((long)ceil(fx), W - 1);
    y1 = max(y1, 0L); x1 = max(x1, 0L);
    out[i] = xp[y0 * W + x0] * ((T)1 - tx) * ((T)1 - ty) + xp[y0 * W + x1] * tx * ((T)1 - ty)
           + xp[y1 * W + x0] * ((T)1 - tx) * ty + xp[y1 * W + x1] * tx * ty;
    return;
  }
  long ys[4] = { max(y0 - 1, 0L), y0, min(y0 + 1, H - 1), min(y0 + 2, H - 1) };
  long xs[4] = { max(x0 - 1, 0L), x0, min(x0 + 1, W - 1), min(x0 + 2, W - 1) };
  T cy[4] = { cubic2(ty + 1), cubic1(ty), cubic1((T)1 - ty), cubic2((T)2 - ty) };
  T cx[4] = { cubic2(tx + 1), cubic1(tx), cubic1((T)1 - tx), cubic2((T)2 - tx) };
  T acc = (T)0;
  for (int a = 0; a < 4; a++) {
    T row = (T)0;
    for (int b = 0; b < 4; b++) row += xp[ys[a] * W + xs[b]] * cx[b];
    acc += row * cy[a];
  }
  out[i] = acc;
}

__kernel void interp_bwd(__global T *gx, __global const T *gy, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  long H = p[0], W = p[1], OH = p[2], OW = p[3]; int mode = (int)p[4];
  long iw = i % W; long t = i / W; long ih = t % H; long nc = t / H;
  __global const T *g = gy + nc * OH * OW;
  T acc = (T)0;
  long oh0, oh1, ow0, ow1;
  axis_range(mode, ih, H, OH, &oh0, &oh1);
  axis_range(mode, iw, W, OW, &ow0, &ow1);
  for (long oh = oh0; oh < oh1; oh++) {
    T wy = axis_weight(mode, oh, H, OH, ih);
    if (wy == (T)0) continue;
    T row = (T)0;
    for (long ow = ow0; ow < ow1; ow++) {
      T wx = axis_weight(mode, ow, W, OW, iw);
      if (wx != (T)0) row += wx * g[oh * OW + ow];
    }
    acc += wy * row;
  }
  gx[i] = acc;
}
"#;

fn interp_mode(mode: Interpolation) -> usize {
    match mode {
        Interpolation::Nearest => 0,
        Interpolation::Bilinear => 1,
        Interpolation::Bicubic => 2,
    }
}

/// Resizes `x` `[batch, channels, H, W]` to `[batch, channels, OH, OW]` (`output_size`)
/// with `mode` (the mapping of output to input coordinates is in the module docs).
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4 or an empty input plane resized to a
/// non-empty one; dtype, allocation and kernel errors.
pub fn interpolate(
    x: &XpuTensor,
    output_size: [usize; 2],
    mode: Interpolation,
) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "interpolate input")?;
    let [oh, ow] = output_size;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let out = XpuTensor::empty(device, &[xs[0], xs[1], oh, ow], dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, x.dtype);
    }
    if xs[2] == 0 || xs[3] == 0 {
        return invalid(format!(
            "interpolate: cannot resize an empty input {xs:?} to {output_size:?}"
        ));
    }
    let xc = prep(x, dtype)?;
    let meta = meta(device, &[xs[2], xs[3], oh, ow, interp_mode(mode)])?;
    let f = build_kernel(device, dtype, "interp", INTERP)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `out[i]` (fresh [B, C, OH, OW]); it reads plane
    // nc < B*C of the contiguous `x` (H, W >= 1, checked) at rows/columns that are clamped to
    // [0, H-1] x [0, W-1] (nearest: (o*in)/out < in since o < out). OH, OW non-zero (n > 0),
    // max(out-1, 1) >= 1. Loops: 4x4 taps. Meta: 5 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, x.dtype)
}

/// The gradient of [`interpolate`] with respect to `x` (of `x`'s shape), given the output
/// gradient `grad` `[batch, channels, OH, OW]`.
///
/// # Errors
/// [`Error::Invalid`] when `grad` is not `[batch, channels, output_size...]`; dtype,
/// allocation and kernel errors.
pub fn interpolate_backward(
    x: &XpuTensor,
    grad: &XpuTensor,
    output_size: [usize; 2],
    mode: Interpolation,
) -> Result<XpuTensor> {
    let xs = dims::<4>(x, "interpolate input")?;
    check_grad(
        "interpolate_backward",
        grad,
        &[xs[0], xs[1], output_size[0], output_size[1]],
    )?;
    let device = x.device();
    check_same_device(device, &[grad])?;
    let dtype = compute_dtype(grad.dtype)?;
    let gc = prep(grad, dtype)?;
    let out = XpuTensor::empty(device, &xs, dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, grad.dtype);
    }
    let meta = meta(
        device,
        &[
            xs[2],
            xs[3],
            output_size[0],
            output_size[1],
            interp_mode(mode),
        ],
    )?;
    let f = build_kernel(device, dtype, "interp_bwd", INTERP)?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `gx[i]` (fresh, x's shape); it reads
    // `gy[nc*OH*OW + oh*OW + ow]` with nc < B*C, oh < OH, ow < OW — inside the contiguous
    // grad checked to be [B, C, OH, OW]. Integer divisors: W, H (n > 0), and OH / OW in
    // `axis_weight`, only called inside loops that run when they are non-zero. Loops bounded
    // by OH and OW. Meta: 5 longs.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, grad.dtype)
}

// ---------------------------------------------------------------------------------------------
// Deformable convolution.

const DEFORM: &str = r#"
#define PARAMS \
  long B = p[0], C = p[1], H = p[2], W = p[3], CO = p[4], OH = p[5], OW = p[6]; \
  long KH = p[7], KW = p[8], SH = p[9], SW = p[10], PH = p[11], PW = p[12]; \
  long DH = p[13], DW = p[14], G = p[15], OG = p[16], HM = p[17], HB = p[18]; \
  long cig = C / G, cog = CO / G, cpo = C / OG; \
  (void)B; (void)HB; (void)cog; (void)cpo; (void)HM;

/* The sampling position of kernel tap (ky, kx) of offset group og at output (b, oh, ow). */
#define SAMPLE_POS(b, og, ky, kx, oh, ow) \
  long k_ = ((og) * KH + (ky)) * KW + (kx); \
  T sy = (T)((oh) * SH + (ky) * DH) - (T)PH + off[(((b) * OG * KH * KW * 2 + k_ * 2) * OH + (oh)) * OW + (ow)]; \
  T sx = (T)((ow) * SW + (kx) * DW) - (T)PW + off[(((b) * OG * KH * KW * 2 + k_ * 2 + 1) * OH + (oh)) * OW + (ow)]; \
  T mv = HM ? mask[(((b) * OG * KH * KW + k_) * OH + (oh)) * OW + (ow)] : (T)1;

__kernel void deform(__global T *out, __global const T *x, __global const T *off,
                     __global const T *mask, __global const T *w, __global const T *bias,
                     __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long oc = t % CO; long b = t / CO;
  long g = oc / cog;
  T acc = HB ? bias[oc] : (T)0;
  for (long c = 0; c < cig; c++) {
    long ic = g * cig + c; long og = ic / cpo;
    __global const T *img = x + (b * C + ic) * H * W;
    for (long ky = 0; ky < KH; ky++) {
      for (long kx = 0; kx < KW; kx++) {
        SAMPLE_POS(b, og, ky, kx, oh, ow)
        acc += w[((oc * cig + c) * KH + ky) * KW + kx] * mv * bilinear_zero(img, H, W, sy, sx);
      }
    }
  }
  out[i] = acc;
}

/* col[ic, ky, kx, b, oh, ow] = sum over the group's output channels of w * grad_out. */
__kernel void deform_cols(__global T *col, __global const T *w, __global const T *gy,
                          __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long b = t % B; t /= B;
  long kx = t % KW; t /= KW; long ky = t % KH; long ic = t / KH;
  long g = ic / cig, c = ic % cig;
  T acc = (T)0;
  for (long o = 0; o < cog; o++) {
    long oc = g * cog + o;
    acc += w[((oc * cig + c) * KH + ky) * KW + kx] * gy[((b * CO + oc) * OH + oh) * OW + ow];
  }
  col[i] = acc;
}

static inline T coord_weight(__global const T *img, long H, long W, T y, T x, int is_y) {
  /* Outside this range (or NaN) no corner is inside the image: every value would be 0. */
  if (!(y > (T)-2 && y < (T)H + 1 && x > (T)-2 && x < (T)W + 1)) return (T)0;
  T yl = floor(y), xl = floor(x);
  long y0 = (long)yl, x0 = (long)xl, y1 = y0 + 1, x1 = x0 + 1;
  bool vyl = y0 >= 0 && y0 < H, vyh = y1 >= 0 && y1 < H;
  bool vxl = x0 >= 0 && x0 < W, vxh = x1 >= 0 && x1 < W;
  T bl = (vyl && vxl) ? img[y0 * W + x0] : (T)0;
  T br = (vyl && vxh) ? img[y0 * W + x1] : (T)0;
  T tl = (vyh && vxl) ? img[y1 * W + x0] : (T)0;
  T tr = (vyh && vxh) ? img[y1 * W + x1] : (T)0;
  if (is_y) { T dx = x - xl; return dx * (tr - br) + ((T)1 - dx) * (tl - bl); }
  T dy = y - yl;
  return dy * (tr - tl) + ((T)1 - dy) * (br - bl);
}

/* Offset gradient [B, OG*KH*KW*2, OH, OW]. */
__kernel void deform_offset_grad(__global T *go, __global const T *x, __global const T *off,
                                 __global const T *mask, __global const T *col,
                                 __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH;
  long ch = t % (OG * KH * KW * 2); long b = t / (OG * KH * KW * 2);
  int dir = (int)(ch % 2); long k = ch / 2;
  long kx = k % KW; long ky = (k / KW) % KH; long og = k / (KW * KH);
  SAMPLE_POS(b, og, ky, kx, oh, ow)
  T acc = (T)0;
  for (long c = og * cpo; c < (og + 1) * cpo; c++) {
    __global const T *img = x + (b * C + c) * H * W;
    T cv = col[(((c * KH + ky) * KW + kx) * B + b) * OH * OW + oh * OW + ow];
    acc += mv * coord_weight(img, H, W, sy, sx, dir == 0) * cv;
  }
  go[i] = acc;
}

/* Mask gradient [B, OG*KH*KW, OH, OW]. */
__kernel void deform_mask_grad(__global T *gm, __global const T *x, __global const T *off,
                               __global const T *mask, __global const T *col,
                               __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH;
  long k = t % (OG * KH * KW); long b = t / (OG * KH * KW);
  long kx = k % KW; long ky = (k / KW) % KH; long og = k / (KW * KH);
  SAMPLE_POS(b, og, ky, kx, oh, ow)
  (void)mv;
  T acc = (T)0;
  for (long c = og * cpo; c < (og + 1) * cpo; c++) {
    __global const T *img = x + (b * C + c) * H * W;
    T cv = col[(((c * KH + ky) * KW + kx) * B + b) * OH * OW + oh * OW + ow];
    acc += cv * bilinear_zero(img, H, W, sy, sx);
  }
  gm[i] = acc;
}

/* Weight gradient [CO, C/G, KH, KW]. */
__kernel void deform_weight_grad(__global T *gw, __global const T *x, __global const T *off,
                                 __global const T *mask, __global const T *gy,
                                 __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long kx = i % KW; long t = i / KW; long ky = t % KH; t /= KH; long c = t % cig; long oc = t / cig;
  long g = oc / cog; long ic = g * cig + c; long og = ic / cpo;
  T acc = (T)0;
  for (long b = 0; b < B; b++) {
    __global const T *img = x + (b * C + ic) * H * W;
    for (long oh = 0; oh < OH; oh++) {
      for (long ow = 0; ow < OW; ow++) {
        SAMPLE_POS(b, og, ky, kx, oh, ow)
        acc += gy[((b * CO + oc) * OH + oh) * OW + ow] * mv * bilinear_zero(img, H, W, sy, sx);
      }
    }
  }
  gw[i] = acc;
}

/* Bias gradient [CO]. */
__kernel void deform_bias_grad(__global T *gb, __global const T *gy, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  T acc = (T)0;
  for (long b = 0; b < B; b++)
    for (long j = 0; j < OH * OW; j++)
      acc += gy[(b * CO + i) * OH * OW + j];
  gb[i] = acc;
}

#ifdef DOUBLE_ATOMICS
static inline void atomic_add_t(volatile __global T *p, T v) {
  union { ulong u; double f; } o, nw;
  do { o.f = *p; nw.f = o.f + v; }
  while (atom_cmpxchg((volatile __global ulong *)p, o.u, nw.u) != o.u);
}
#else
static inline void atomic_add_t(volatile __global T *p, T v) {
  union { uint u; float f; } o, nw;
  do { o.f = *p; nw.f = o.f + v; }
  while (atomic_cmpxchg((volatile __global uint *)p, o.u, nw.u) != o.u);
}
#endif

/* Input gradient: each column element scatters into the (up to 4) input pixels its sample
   interpolated; `gx` starts zeroed. */
__kernel void deform_input_grad(__global T *gx, __global const T *off, __global const T *mask,
                                __global const T *col, __global const long *p, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long b = t % B; t /= B;
  long kx = t % KW; t /= KW; long ky = t % KH; long ic = t / KH;
  long og = ic / cpo;
  SAMPLE_POS(b, og, ky, kx, oh, ow)
  T cv = col[i];
  T fy = floor(sy), fx = floor(sx);
  for (int dy = -1; dy <= 1; dy++) {
    for (int dx = -1; dx <= 1; dx++) {
      T yp = fy + (T)dy, xp = fx + (T)dx;
      if (yp >= 0 && yp < (T)H && xp >= 0 && xp < (T)W && fabs(sy - yp) < (T)1 && fabs(sx - xp) < (T)1) {
        /* yp, xp are in [0, H] x [0, W] here, so the conversions are defined; the integer
           test covers (T)H rounding above H. */
        long iy = (long)yp, ix = (long)xp;
        if (iy >= H || ix >= W) continue;
        T wgt = ((T)1 - fabs(sy - yp)) * ((T)1 - fabs(sx - xp));
        atomic_add_t(gx + ((b * C + ic) * H + iy) * W + ix, mv * wgt * cv);
      }
    }
  }
}
"#;

/// Selects the `double` compare-exchange (`cl_khr_int64_base_atomics`) in [`DEFORM`].
const DEFORM_F64: &str = "#define DOUBLE_ATOMICS 1\n";

/// Shapes of a deformable convolution, checked.
struct DeformShape {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    co: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
}

fn deform_check(
    x: &XpuTensor,
    offset: &XpuTensor,
    weight: &XpuTensor,
    mask: Option<&XpuTensor>,
    bias: Option<&XpuTensor>,
    p: &DeformParams,
) -> Result<DeformShape> {
    let [b, c, h, w] = dims::<4>(x, "deform_conv2d input")?;
    let [co, cig, kh, kw] = dims::<4>(weight, "deform_conv2d weight")?;
    let (g, og) = (p.weight_groups, p.offset_groups);
    if g == 0 || og == 0 || c % g != 0 || c % og != 0 || co % g != 0 || cig * g != c {
        return invalid(format!(
            "deform_conv2d: input {:?}, weight {:?}, {g} weight groups and {og} offset groups do not match",
            x.shape, weight.shape
        ));
    }
    let oh = conv_out(
        "deform_conv2d",
        h,
        kh,
        p.stride[0],
        p.padding[0],
        p.dilation[0],
    )?;
    let ow = conv_out(
        "deform_conv2d",
        w,
        kw,
        p.stride[1],
        p.padding[1],
        p.dilation[1],
    )?;
    let taps = og * kh * kw;
    if offset.shape != [b, 2 * taps, oh, ow] {
        return invalid(format!(
            "deform_conv2d: offset {:?} must be {:?}",
            offset.shape,
            [b, 2 * taps, oh, ow]
        ));
    }
    if let Some(m) = mask {
        if m.shape != [b, taps, oh, ow] {
            return invalid(format!(
                "deform_conv2d: mask {:?} must be {:?}",
                m.shape,
                [b, taps, oh, ow]
            ));
        }
    }
    if let Some(bi) = bias {
        if bi.shape != [co] {
            return invalid(format!("deform_conv2d: bias {:?} must be [{co}]", bi.shape));
        }
    }
    let device = x.device();
    check_same_device(device, &[offset, weight])?;
    for t in mask.iter().chain(bias.iter()) {
        check_same_device(device, &[t])?;
    }
    Ok(DeformShape {
        b,
        c,
        h,
        w,
        co,
        oh,
        ow,
        kh,
        kw,
    })
}

fn deform_meta(
    device: usize,
    s: &DeformShape,
    p: &DeformParams,
    has_mask: bool,
    has_bias: bool,
) -> Result<runtime::Meta> {
    meta(
        device,
        &[
            s.b,
            s.c,
            s.h,
            s.w,
            s.co,
            s.oh,
            s.ow,
            s.kh,
            s.kw,
            p.stride[0],
            p.stride[1],
            p.padding[0],
            p.padding[1],
            p.dilation[0],
            p.dilation[1],
            p.weight_groups,
            p.offset_groups,
            has_mask as usize,
            has_bias as usize,
        ],
    )
}

fn deform_kernel(device: usize, dtype: DType, name: &str) -> Result<Function> {
    let t = dtype::cl_type(dtype)?;
    let key = format!("nn|{name}|{t}");
    runtime::function(device, &key, name, || {
        let mut s = dtype::pragmas(&[t]);
        if t == "double" {
            s.push_str("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n");
            s.push_str(DEFORM_F64);
        }
        s.push_str(&format!("#define T {t}\n"));
        s.push_str(crate::ops::PRELUDE);
        s.push_str(COMMON);
        s.push_str(DEFORM);
        s
    })
}

/// The deformable 2-D convolution (as torchvision.ops.deform_conv2d) of `x` `[B, C, H, W]`
/// with `weight` `[CO, C / weight_groups, KH, KW]`: kernel tap `(ky, kx)` of offset group
/// `og` at output `(oh, ow)` samples its input plane bilinearly (zero outside) at
/// `(oh stride + ky dil - pad + offset[b, 2 k, oh, ow], ... + offset[b, 2 k + 1, oh, ow])`,
/// `k = (og KH + ky) KW + kx`, scaled by `mask[b, k, oh, ow]` when given, plus `bias`.
///
/// # Errors
/// [`Error::Invalid`] for shapes that do not match; dtype, allocation and kernel errors.
pub fn deform_conv2d(
    x: &XpuTensor,
    offset: &XpuTensor,
    weight: &XpuTensor,
    mask: Option<&XpuTensor>,
    bias: Option<&XpuTensor>,
    p: DeformParams,
) -> Result<XpuTensor> {
    let s = deform_check(x, offset, weight, mask, bias, &p)?;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let out = XpuTensor::empty(device, &[s.b, s.co, s.oh, s.ow], dtype)?;
    let n = out.numel();
    if n == 0 {
        return finish(out, x.dtype);
    }
    let xc = prep(x, dtype)?;
    let oc = prep(offset, dtype)?;
    let wc = prep(weight, dtype)?;
    let mc = mask.map(|m| prep(m, dtype)).transpose()?;
    let bc = bias.map(|b| prep(b, dtype)).transpose()?;
    let meta = deform_meta(device, &s, &p, mc.is_some(), bc.is_some())?;
    let f = deform_kernel(device, dtype, "deform")?;
    let args = [
        Arg::from(out.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(oc.storage.buffer()),
        Arg::from(mc.as_ref().unwrap_or(&oc).storage.buffer()),
        Arg::from(wc.storage.buffer()),
        Arg::from(bc.as_ref().unwrap_or(&wc).storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `out[i]` (fresh [B, CO, OH, OW]). All inputs
    // are contiguous with the shapes `deform_check` verified: it reads `w` at
    // [oc, c < C/G, ky < KH, kx < KW], `off` at [b, 2k(+1) < 2*OG*KH*KW, oh, ow], `mask` (only
    // when present, flag HM) at [b, k, oh, ow], `bias` (only when present) at [oc], and the
    // input plane (b, ic < C) through `bilinear_zero`, which reads only rows in [0, H) and
    // columns in [0, W) (the sample must lie in (-1, H) x (-1, W); NaN fails the test).
    // Integer divisors are non-zero: OW, OH, CO (n > 0); G, OG (checked); CO/G (CO > 0 and
    // G divides it); C/OG is only divided by inside the channel loop, which runs only when
    // C/G > 0, i.e. C > 0, and OG divides C. Loops bounded by the channel and kernel counts.
    // The metadata buffer holds the 19 longs PARAMS reads.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };
    finish(out, x.dtype)
}

/// The gradients of [`deform_conv2d`] given the output gradient `grad` `[B, CO, OH, OW]`:
/// input, offset, weight, mask (when given) and bias (when given).
///
/// # Errors
/// As [`deform_conv2d`]; [`Error::Invalid`] when `grad` is not of the output's shape.
#[allow(clippy::too_many_arguments)]
pub fn deform_conv2d_backward(
    x: &XpuTensor,
    offset: &XpuTensor,
    weight: &XpuTensor,
    mask: Option<&XpuTensor>,
    bias: Option<&XpuTensor>,
    grad: &XpuTensor,
    p: DeformParams,
) -> Result<DeformGrads> {
    let s = deform_check(x, offset, weight, mask, bias, &p)?;
    check_grad("deform_conv2d_backward", grad, &[s.b, s.co, s.oh, s.ow])?;
    let device = x.device();
    check_same_device(device, &[grad])?;
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let oc = prep(offset, dtype)?;
    let wc = prep(weight, dtype)?;
    let mc = mask.map(|m| prep(m, dtype)).transpose()?;
    let gc = prep(grad, dtype)?;
    let meta = deform_meta(device, &s, &p, mc.is_some(), bias.is_some())?;
    let mbuf = mc.as_ref().unwrap_or(&oc);

    // Columns: [C, KH, KW, B, OH, OW].
    let col = XpuTensor::empty(device, &[s.c, s.kh, s.kw, s.b, s.oh, s.ow], dtype)?;
    let n_col = col.numel();
    let f = deform_kernel(device, dtype, "deform_cols")?;
    let args = [
        Arg::from(col.storage.buffer()),
        Arg::from(wc.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n_col as i64),
    ];
    // SAFETY: `n_col` items, item `i` writes only `col[i]` (fresh [C, KH, KW, B, OH, OW]); it
    // reads `w` at [g*CO/G + o < CO, c < C/G, ky, kx] and `gy` at [b < B, oc < CO, oh, ow],
    // inside the contiguous weight and gradient (shapes checked). Divisors OW, OH, B, KW, KH
    // (n_col > 0), C/G (ic < C so C > 0, G divides C) are non-zero. Loop bounded by CO/G.
    unsafe { runtime::launch(device, &f, &[n_col], None, &args)? };

    // Offset gradient.
    let go = XpuTensor::empty(device, &offset.shape, dtype)?;
    let n = go.numel();
    let f = deform_kernel(device, dtype, "deform_offset_grad")?;
    let args = [
        Arg::from(go.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(oc.storage.buffer()),
        Arg::from(mbuf.storage.buffer()),
        Arg::from(col.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `go[i]` (fresh, offset's shape
    // [B, 2*OG*KH*KW, OH, OW]); it reads `off`/`mask` at [b, k(*2+1), oh, ow] of the
    // checked shapes, `col` at [c < C, ky, kx, b, oh, ow] (c < (og+1)*C/OG <= C), and input
    // planes (b, c) only where `coord_weight` found the row/column in [0, H) x [0, W).
    // Divisors OW, OH, OG*KH*KW*2, KW, KH (n > 0) are non-zero. Loop bounded by C/OG.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };

    // Mask gradient.
    let gm = match &mc {
        Some(m) => {
            let gm = XpuTensor::empty(device, &m.shape, dtype)?;
            let n = gm.numel();
            let f = deform_kernel(device, dtype, "deform_mask_grad")?;
            let args = [
                Arg::from(gm.storage.buffer()),
                Arg::from(xc.storage.buffer()),
                Arg::from(oc.storage.buffer()),
                Arg::from(m.storage.buffer()),
                Arg::from(col.storage.buffer()),
                Arg::from(&meta),
                Arg::from(n as i64),
            ];
            // SAFETY: as the offset gradient's launch: item `i` writes only `gm[i]` (fresh,
            // mask's shape [B, OG*KH*KW, OH, OW]); reads of `off`, `mask`, `col` and the
            // input are at checked-shape indices, input reads through `bilinear_zero`
            // (rows/columns in range). Divisors non-zero as n > 0. Loop bounded by C/OG.
            unsafe { runtime::launch(device, &f, &[n], None, &args)? };
            Some(finish(gm, x.dtype)?)
        }
        None => None,
    };

    // Weight gradient.
    let gw = XpuTensor::empty(device, &weight.shape, dtype)?;
    let n = gw.numel();
    let f = deform_kernel(device, dtype, "deform_weight_grad")?;
    let args = [
        Arg::from(gw.storage.buffer()),
        Arg::from(xc.storage.buffer()),
        Arg::from(oc.storage.buffer()),
        Arg::from(mbuf.storage.buffer()),
        Arg::from(gc.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n as i64),
    ];
    // SAFETY: `n` items, item `i` writes only `gw[i]` (fresh, weight's shape
    // [CO, C/G, KH, KW]); reads `gy` at [b < B, oc < CO, oh < OH, ow < OW], `off`/`mask`
    // at [b, k, oh, ow] with k < OG*KH*KW (og = ic / (C/OG) < OG), and the input plane
    // (b, ic < C) through `bilinear_zero` (in range). Divisors KW, KH, C/G, CO/G, C/OG are
    // non-zero (n > 0, divisibility checked). Loops bounded by B, OH, OW.
    unsafe { runtime::launch(device, &f, &[n], None, &args)? };

    // Bias gradient.
    let gb = match bias {
        Some(bi) => {
            let gb = XpuTensor::empty(device, &bi.shape, dtype)?;
            let n = gb.numel();
            let f = deform_kernel(device, dtype, "deform_bias_grad")?;
            let args = [
                Arg::from(gb.storage.buffer()),
                Arg::from(gc.storage.buffer()),
                Arg::from(&meta),
                Arg::from(n as i64),
            ];
            // SAFETY: `n` = CO items, item `i` writes only `gb[i]` (fresh [CO]); it reads
            // `gy[(b*CO + i)*OH*OW + j]` for b < B, j < OH*OW — inside the contiguous
            // gradient [B, CO, OH, OW]. PARAMS' divisions: G, OG non-zero (checked). Loops
            // bounded by B and OH*OW.
            unsafe { runtime::launch(device, &f, &[n], None, &args)? };
            Some(finish(gb, x.dtype)?)
        }
        None => None,
    };

    // Input gradient (scatter with atomic adds into a zeroed buffer).
    let gx = full(device, &x.shape, ScalarValue::F(0.0), dtype)?;
    let f = deform_kernel(device, dtype, "deform_input_grad")?;
    let args = [
        Arg::from(gx.storage.buffer()),
        Arg::from(oc.storage.buffer()),
        Arg::from(mbuf.storage.buffer()),
        Arg::from(col.storage.buffer()),
        Arg::from(&meta),
        Arg::from(n_col as i64),
    ];
    // SAFETY: `n_col` items, one per column element [ic, ky, kx, b, oh, ow]; each reads
    // `col[i]` and `off`/`mask` at checked-shape indices, and adds atomically (a
    // compare-exchange loop on the element's bits, OpenCL 1.1 §6.11.11) into `gx` at
    // [b < B, ic < C, yp, xp] only where yp in [0, H) and xp in [0, W) (tested on the float
    // values before conversion; NaN fails the test) — inside the fresh contiguous `gx` of
    // x's shape, seen by no other tensor. The retry loop ends when no other item wrote the
    // element between the read and the exchange; each item performs at most 9 such adds.
    unsafe { runtime::launch(device, &f, &[n_col], None, &args)? };

    Ok((
        finish(gx, x.dtype)?,
        finish(go, x.dtype)?,
        finish(gw, x.dtype)?,
        gm,
        gb,
    ))
}
