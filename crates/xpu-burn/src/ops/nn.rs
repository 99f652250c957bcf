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
use xpu::xpu_kernel::Arg;

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
    /// Whether this is a transposed convolution (see [`conv`]).
    pub transposed: bool,
}

impl<const N: usize> ConvParams<N> {
    /// A (not transposed) convolution's parameters.
    pub fn new(
        stride: [usize; N],
        padding: [usize; N],
        dilation: [usize; N],
        groups: usize,
    ) -> Self {
        ConvParams {
            stride,
            padding,
            dilation,
            padding_out: [0; N],
            groups,
            transposed: false,
        }
    }

    /// These parameters for the transposed convolution, with `padding_out`.
    pub fn transposed(self, padding_out: [usize; N]) -> Self {
        ConvParams {
            padding_out,
            transposed: true,
            ..self
        }
    }
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

/// The tensors of a deformable convolution ([`deform_conv2d`]): input `x` `[B, C, H, W]`,
/// `offset` `[B, 2 * offset_groups * KH * KW, OH, OW]`, `weight` `[CO, C / weight_groups,
/// KH, KW]`, and optionally `mask` `[B, offset_groups * KH * KW, OH, OW]` and `bias` `[CO]`.
#[derive(Debug, Clone, Copy)]
pub struct DeformInput<'a> {
    /// The input.
    pub x: &'a XpuTensor,
    /// The sampling offsets (y, x per tap).
    pub offset: &'a XpuTensor,
    /// The weight.
    pub weight: &'a XpuTensor,
    /// The per-tap mask scaling each sample.
    pub mask: Option<&'a XpuTensor>,
    /// The bias added per output channel.
    pub bias: Option<&'a XpuTensor>,
}

impl<'a> DeformInput<'a> {
    /// The operands of one deformable convolution, in burn's argument order.
    pub fn new(
        x: &'a XpuTensor,
        offset: &'a XpuTensor,
        weight: &'a XpuTensor,
        mask: Option<&'a XpuTensor>,
        bias: Option<&'a XpuTensor>,
    ) -> Self {
        Self {
            x,
            offset,
            weight,
            mask,
            bias,
        }
    }
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
/* Every kernel takes (buffers..., __global const long *p, long n): item i of n. */
#define ITEM long i = get_global_id(0); if (i >= n) return;
/* The plane sizes of the pooling and interpolation metadata: input H x W, output OH x OW. */
#define PLANE long H = p[0], W = p[1], OH = p[2], OW = p[3];
/* The pooling window of the pooling metadata (POOL_META). */
#define WINDOW \
  long KH = p[4], KW = p[5], SH = p[6], SW = p[7], PH = p[8], PW = p[9], DH = p[10], \
       DW = p[11], FLAG = p[12];
/* Item i's position in an [NC, OH, OW] output, or in an [NC, H, W] input. */
#define AT_OUT long ow = i % OW; long t = i / OW; long oh = t % OH; long nc = t / OH;
#define AT_IN long iw = i % W; long t = i / W; long ih = t % H; long nc = t / H;

/* The input index that tap k (stride s, padding pad, dilation d) of output index o reads,
   or -1 when it lies outside [0, size). */
static inline long tap(long o, long s, long pad, long k, long d, long size) {
  long x = o * s - pad + k * d;
  return (x < 0 || x >= size) ? -1 : x;
}

/* The inverse: the output index in [0, size) whose tap k reads input index x, or -1 when
   there is none (s non-zero). */
static inline long tap_source(long x, long s, long pad, long k, long d, long size) {
  long t = x + pad - k * d;
  if (t < 0 || t % s != 0) return -1;
  return t / s < size ? t / s : -1;
}

/* Opens the loops over the window taps (kh < KH, kw < KW) whose indices (ah, aw) =
   (TAP(bh, SH, PH, kh, DH, LH), TAP(bw, SW, PW, kw, DW, LW)) lie inside [0, LH) x [0, LW)
   (TAP: tap or tap_source); END_TAPS closes them. */
#define FOR_TAPS(TAP, bh, bw, ah, aw, LH, LW) \
  for (long kh = 0; kh < KH; kh++) { \
    long ah = TAP(bh, SH, PH, kh, DH, LH); \
    if (ah < 0) continue; \
    for (long kw = 0; kw < KW; kw++) { \
      long aw = TAP(bw, SW, PW, kw, DW, LW); \
      if (aw < 0) continue;
#define END_TAPS }}
/* The pixels (y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1) of an H x W image into
   v[0..4], 0 for those outside (integer bounds: a float test may round above H). */
static inline void corners(__global const T *img, long H, long W, long y0, long x0, T *v) {
  for (int c = 0; c < 4; c++) {
    long y = y0 + c / 2, x = x0 + c % 2;
    v[c] = (y >= 0 && y < H && x >= 0 && x < W) ? img[y * W + x] : (T)0;
  }
}

static inline T bilinear_zero(__global const T *img, long H, long W, T y, T x) {
  if (!(y > (T)-1 && y < (T)H && x > (T)-1 && x < (T)W)) return (T)0;
  T yl = floor(y), xl = floor(x);
  T v[4];
  corners(img, H, W, (long)yl, (long)xl, v);
  T ly = y - yl, lx = x - xl, hy = (T)1 - ly, hx = (T)1 - lx;
  return hy * hx * v[0] + hy * lx * v[1] + ly * hx * v[2] + ly * lx * v[3];
}
"#;

/// A template of kernels of this file: OpenCL C source whose kernels all take
/// `(outputs..., inputs..., __global const long *p, long n)` and read at most `meta_len`
/// longs of `p`.
struct Template {
    /// The source (after the `T` define, the prelude and [`COMMON`]).
    body: &'static str,
    /// The longs of `p` its kernels may read.
    meta_len: usize,
    /// Whether the `double` build needs 64-bit atomics (the deformable input gradient).
    f64_atomics: bool,
}

impl Template {
    const fn new(body: &'static str, meta_len: usize) -> Template {
        Template {
            body,
            meta_len,
            f64_atomics: false,
        }
    }
}

/// A kernel of this file: the `__kernel` function `name` of `template`.
#[derive(Clone, Copy)]
struct Kernel {
    name: &'static str,
    template: &'static Template,
}

impl Kernel {
    const fn new(name: &'static str, template: &'static Template) -> Kernel {
        Kernel { name, template }
    }

    /// A launch of this kernel computing in `dtype` (see [`Launch`]).
    fn launch<'a>(
        self,
        dtype: DType,
        inputs: &'a [&'a XpuTensor],
        meta: &'a [usize],
    ) -> Launch<'a> {
        Launch {
            kernel: self,
            dtype,
            inputs,
            meta,
        }
    }
}

/// One launch of a [`Kernel`] computing in `dtype` (the `T` of its template), reading
/// `inputs` and the metadata `meta` (uploaded as the longs of `p`).
///
/// # What each caller guarantees
/// [`Launch::run`] holds the one `unsafe` launch of this file; its `// SAFETY:` argument
/// rests on this contract, which every call site argues in a `// Bounds:` comment next to
/// its `Launch`:
/// - kernel `name`, run with the global size `items` and `n = items`, the metadata `meta`
///   and the buffers `(outputs..., inputs...)` in that order, reads each buffer only below
///   its element count and writes only the outputs, each element by one work-item (or by
///   atomic adds), and terminates (its loops are bounded, its integer divisors non-zero for
///   this metadata);
/// - each buffer has the element type the kernel declares for it: `T` (= `dtype`) or `long`
///   (`DType::I64`).
///
/// [`Launch::run`] checks the rest and returns [`Error::Invalid`] otherwise: every buffer is
/// a contiguous view from offset 0 on the launch's device (so element `k < numel` lies in
/// its storage); every output's storage is held by that output alone (fresh, seen by no
/// other tensor); `meta` holds exactly the template's `meta_len` longs.
struct Launch<'a> {
    kernel: Kernel,
    dtype: DType,
    inputs: &'a [&'a XpuTensor],
    meta: &'a [usize],
}

impl Launch<'_> {
    /// Runs the kernel with `items` work-items writing `outputs` (nothing when `items` is 0).
    ///
    /// # Errors
    /// [`Error::Invalid`] when a check of the contract above fails (a bug of this file);
    /// dtype, allocation, build and enqueue errors.
    fn run(&self, outputs: &[&XpuTensor], items: usize) -> Result<()> {
        let Some(device) = outputs.first().map(|t| t.device()) else {
            return invalid(format!("{}: a launch without an output", self.kernel.name));
        };
        let name = self.kernel.name;
        if items == 0 {
            return Ok(());
        }
        for t in outputs.iter().chain(self.inputs) {
            if t.device() != device || !t.is_contiguous() || t.offset != 0 {
                return invalid(format!(
                    "{name}: a buffer on device {} (launch on {device}), contiguous {}, offset {}",
                    t.device(),
                    t.is_contiguous(),
                    t.offset
                ));
            }
        }
        if outputs
            .iter()
            .any(|t| std::sync::Arc::strong_count(&t.storage) != 1)
        {
            return invalid(format!("{name}: an output shares its storage"));
        }
        let template = self.kernel.template;
        if self.meta.len() != template.meta_len {
            return invalid(format!(
                "{name}: {} metadata values, the kernel reads {}",
                self.meta.len(),
                template.meta_len
            ));
        }
        let t = dtype::cl_type(self.dtype)?;
        let key = format!("nn|{name}|{t}");
        let f = runtime::library_function(device, &key, name, || {
            let mut s = dtype::pragmas(&[t]);
            if template.f64_atomics && t == "double" {
                s.push_str("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n");
                s.push_str(DEFORM_F64);
            }
            s.push_str(&format!("#define T {t}\n"));
            s.push_str(crate::ops::PRELUDE);
            s.push_str(COMMON);
            s.push_str(template.body);
            s
        })?;
        let values: Vec<i64> = self.meta.iter().map(|&v| v as i64).collect();
        let meta = runtime::upload_meta(device, &values)?;
        let mut args: Vec<Arg<'_>> = outputs
            .iter()
            .chain(self.inputs)
            .map(|t| Arg::from(t.storage.buffer()))
            .collect();
        args.push(Arg::from(&meta));
        args.push(Arg::from(items as i64));
        // SAFETY: the bounds, race and termination argument for this kernel, these buffers
        // and this metadata is the caller's (the contract in `Launch`'s doc, argued at each
        // call site in its `// Bounds:` comment). What that argument assumes was checked
        // above: each buffer is a contiguous view from offset 0 of a storage sized for at
        // least its element count (`XpuTensor::empty`), on this device; each output's
        // storage is held by the output alone, so no other tensor reads what the kernel
        // writes; `p` holds exactly the `meta_len` longs the template's kernels may read;
        // `n` is the global size `items`, so items past it return at once.
        unsafe { runtime::launch(device, &f, &[items], None, &args)? };
        Ok(())
    }

    /// Allocates a fresh output of `shape` in the launch's type, runs one work-item per
    /// output element, and returns the output converted to `result` (the caller's type).
    ///
    /// # Errors
    /// As [`Launch::run`].
    fn output(&self, shape: &[usize], result: DType) -> Result<XpuTensor> {
        let device = match self.inputs.first() {
            Some(t) => t.device(),
            None => return invalid(format!("{}: a launch without an input", self.kernel.name)),
        };
        let out = XpuTensor::empty(device, shape, self.dtype)?;
        self.run(&[&out], out.numel())?;
        finish(out, result)
    }
}

// ---------------------------------------------------------------------------------------------
// Convolution and transposed convolution (3 spatial dimensions; 1-D and 2-D pad with size-1
// dimensions).

const CONV: &str = r#"
/* The convolution metadata (CONV_TEMPLATE) and the output position (b, oc, od, oh, ow) of
   item i. */
#define CONV_PARAMS \
  long C = p[1], D = p[2], H = p[3], W = p[4], CO = p[5], OD = p[6], OH = p[7], OW = p[8]; \
  long KD = p[9], KH = p[10], KW = p[11], SD = p[12], SH = p[13], SW = p[14]; \
  long PD = p[15], PH = p[16], PW = p[17], DD = p[18], DH = p[19], DW = p[20], G = p[21]; \
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long od = t % OD; t /= OD; \
  long oc = t % CO; long b = t / CO;
/* A convolution kernel: TAP maps an output index and a kernel tap to the input index it
   reads (-1: none), WCH is the weight's channel row for input channel c of group g. */
#define CONV_KERNEL(NAME, TAP, WCH) \
__kernel void NAME(__global T *out, __global const T *x, __global const T *w, \
                   __global const T *bias, __global const long *p, long n) { \
  ITEM \
  CONV_PARAMS \
  long cig = C / G, cog = CO / G; long g = oc / cog; \
  T acc = p[22] ? bias[oc] : (T)0; \
  for (long c = 0; c < cig; c++) { \
    __global const T *xp = x + (b * C + g * cig + c) * D * H * W; \
    __global const T *wp = w + (WCH) * KD * KH * KW; \
    for (long kd = 0; kd < KD; kd++) { \
      long id = TAP(od, SD, PD, kd, DD, D); \
      if (id < 0) continue; \
      FOR_TAPS(TAP, oh, ow, ih, iw, H, W) \
        acc += xp[(id * H + ih) * W + iw] * wp[(kd * KH + kh) * KW + kw]; \
      END_TAPS \
    } \
  } \
  out[i] = acc; \
}

/* weight [CO, C/G, KD, KH, KW] */
CONV_KERNEL(conv, tap, oc * cig + c)
/* weight [C, CO/G, KD, KH, KW]: row (g*cig + c)*cog + oc % cog */
CONV_KERNEL(conv_t, tap_source, (g * cig + c) * cog + oc % cog)
"#;

/// The convolution kernels' metadata: batch, C, D, H, W, CO, OD, OH, OW, KD, KH, KW, the
/// strides, paddings and dilations (3 each), groups, has-bias.
const CONV_TEMPLATE: Template = Template::new(CONV, 23);
const CONV_K: Kernel = Kernel::new("conv", &CONV_TEMPLATE);
const CONV_T_K: Kernel = Kernel::new("conv_t", &CONV_TEMPLATE);

/// Pads an N-d (N ≤ 3) spatial shape to 3 dimensions with leading 1s.
fn pad3<const N: usize>(v: [usize; N], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - N..].copy_from_slice(&v);
    out
}

/// The N-d convolution (N = 1, 2 or 3) of `x` `[batch, c_in, spatial...]` with `weight`
/// `[c_out, c_in / groups, kernel...]`, plus `bias` `[c_out]`: `[batch, c_out, out...]`,
/// each output size `(in + 2 pad - dil (k - 1) - 1) / stride + 1` (as
/// torch.nn.functional.conv1d / conv2d / conv3d).
///
/// When `p.transposed`, the transposed convolution (as torch.nn.functional.conv_transpose1d
/// / 2d / 3d) with `weight` `[c_in, c_out / groups, kernel...]`: each output size
/// `(in - 1) stride + dil (k - 1) + 1 + padding_out - 2 pad`.
///
/// # Errors
/// [`Error::Invalid`] for shapes that do not match (ranks, channel counts, groups, a kernel
/// larger than the padded input, zero strides or dilations, a transposed convolution's
/// padding exceeding its output); dtype, allocation and kernel errors.
pub fn conv<const N: usize>(
    x: &XpuTensor,
    weight: &XpuTensor,
    bias: Option<&XpuTensor>,
    p: ConvParams<N>,
) -> Result<XpuTensor> {
    let transposed = p.transposed;
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
    let in3 = pad3(<[usize; N]>::try_from(&x.shape[2..]).unwrap_or([1; N]), 1);
    let k3 = pad3(
        <[usize; N]>::try_from(&weight.shape[2..]).unwrap_or([1; N]),
        1,
    );
    let mut m = vec![batch, c_in];
    m.extend_from_slice(&in3);
    m.push(c_out);
    m.extend_from_slice(&pad3(out_sp, 1));
    m.extend_from_slice(&k3);
    m.extend_from_slice(&pad3(p.stride, 1));
    m.extend_from_slice(&pad3(p.padding, 0));
    m.extend_from_slice(&pad3(p.dilation, 1));
    m.push(g);
    m.push(bc.is_some() as usize);
    let kernel = if transposed { CONV_T_K } else { CONV_K };
    let bias_buf = bc.as_ref().unwrap_or(&xc);
    // Bounds: one item per element of the fresh contiguous output [batch, c_out, out...];
    // item `i` writes `out[i]` only. `x` and `weight` have the shapes checked above
    // ([batch, c_in, D, H, W] and [c_out, c_in/g, KD, KH, KW], or [c_in, c_out/g, ...]
    // transposed), so every read `x[(b*C + ic)*DHW + (id*H + ih)*W + iw]` has b < batch,
    // ic < c_in, and the spatial indices are checked in [0, size) before the read; weight
    // indices are < c_out (c_in) * per-group channels * kernel volume. `bias` is read at
    // oc < c_out only when present (checked [c_out]). Divisors (OW, OH, OD, c_out, groups,
    // c_out/groups, strides) are non-zero: a non-empty output makes every output size
    // non-zero and the host checked groups and strides. The loops are bounded by the
    // channel and kernel counts.
    kernel
        .launch(dtype, &[&xc, &wc, bias_buf], &m)
        .output(&out_shape, x.dtype)
}

// ---------------------------------------------------------------------------------------------
// Pooling.

const AVG_POOL: &str = r#"
__kernel void avg_pool(__global T *out, __global const T *x, __global const long *p, long n) {
  ITEM
  PLANE WINDOW AT_OUT
  __global const T *xp = x + nc * H * W;
  T sum = (T)0; long cnt = 0;
  FOR_TAPS(tap, oh, ow, ih, iw, H, W)
    sum += xp[ih * W + iw];
    cnt++;
  END_TAPS
  if (FLAG) cnt = KH * KW;
  out[i] = sum / (T)cnt;
}

__kernel void avg_pool_bwd(__global T *gx, __global const T *gy, __global const long *p, long n) {
  ITEM
  PLANE WINDOW AT_IN
  long lo_h = ih + PH - KH + 1, lo_w = iw + PW - KW + 1;
  long oh0 = lo_h <= 0 ? 0 : (lo_h + SH - 1) / SH;
  long ow0 = lo_w <= 0 ? 0 : (lo_w + SW - 1) / SW;
  long oh1 = min((ih + PH) / SH, OH - 1), ow1 = min((iw + PW) / SW, OW - 1);
  T acc = (T)0;
  for (long oh = oh0; oh <= oh1; oh++) {
    long h0 = max(oh * SH - PH, 0L), h1 = min(oh * SH - PH + KH, H);
    for (long ow = ow0; ow <= ow1; ow++) {
      long w0 = max(ow * SW - PW, 0L), w1 = min(ow * SW - PW + KW, W);
      long cnt = FLAG ? KH * KW : (h1 - h0) * (w1 - w0);
      acc += gy[(nc * OH + oh) * OW + ow] / (T)cnt;
    }
  }
  gx[i] = acc;
}
"#;

const ADAPTIVE: &str = r#"
__kernel void adaptive_pool(__global T *out, __global const T *x, __global const long *p, long n) {
  ITEM
  PLANE AT_OUT
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
  ITEM
  PLANE AT_IN
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

const MAX_POOL: &str = r#"
__kernel void max_pool(__global T *out, __global long *idx, __global const T *x,
                       __global const long *p, long n) {
  ITEM
  PLANE WINDOW AT_OUT
  __global const T *xp = x + nc * H * W;
  /* A window with no tap (all in padding: burn allows padding over half the kernel) gives
     -inf at index 0, as burn's NdArray and CubeCL backends do. */
  T m = (T)(-INFINITY); long mi = 0; int first = 1;
  FOR_TAPS(tap, oh, ow, ih, iw, H, W)
    T v = xp[ih * W + iw];
    if (first || v > m || (isnan(v) && !isnan(m))) { m = v; mi = ih * W + iw; first = 0; }
  END_TAPS
  out[i] = m;
  idx[i] = mi;
}

__kernel void max_pool_bwd(__global T *gx, __global const T *gy, __global const long *idx,
                           __global const long *p, long n) {
  ITEM
  PLANE WINDOW AT_IN
  long pos = ih * W + iw;
  T acc = (T)0;
  FOR_TAPS(tap_source, ih, iw, oh, ow, OH, OW)
    long o = (nc * OH + oh) * OW + ow;
    if (idx[o] == pos) acc += gy[o];
  END_TAPS
  gx[i] = acc;
}
"#;

/// The pooling kernels' metadata: H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW and a flag
/// (`count_include_pad` for average pooling, unused by max pooling).
const POOL_META: usize = 13;

const AVG_POOL_TEMPLATE: Template = Template::new(AVG_POOL, POOL_META);
const AVG_POOL_K: Kernel = Kernel::new("avg_pool", &AVG_POOL_TEMPLATE);
const AVG_POOL_BWD_K: Kernel = Kernel::new("avg_pool_bwd", &AVG_POOL_TEMPLATE);
const MAX_POOL_TEMPLATE: Template = Template::new(MAX_POOL, POOL_META);
const MAX_POOL_K: Kernel = Kernel::new("max_pool", &MAX_POOL_TEMPLATE);
const MAX_POOL_BWD_K: Kernel = Kernel::new("max_pool_bwd", &MAX_POOL_TEMPLATE);
/// The adaptive pooling kernels' metadata: H, W, OH, OW.
const ADAPTIVE_TEMPLATE: Template = Template::new(ADAPTIVE, 4);
const ADAPTIVE_K: Kernel = Kernel::new("adaptive_pool", &ADAPTIVE_TEMPLATE);
const ADAPTIVE_BWD_K: Kernel = Kernel::new("adaptive_pool_bwd", &ADAPTIVE_TEMPLATE);

/// A 2-D pooling window (as burn's pooling options): kernel size, stride, zero padding on
/// both sides and dilation, each as `[height, width]`.
#[derive(Debug, Clone, Copy)]
pub struct Pool2d {
    /// Window size (non-zero).
    pub kernel: [usize; 2],
    /// Stride (non-zero).
    pub stride: [usize; 2],
    /// Zero padding on both sides.
    pub padding: [usize; 2],
    /// Dilation (non-zero; average pooling takes `[1, 1]` only).
    pub dilation: [usize; 2],
}

/// A pooling of input `x` that [`Pool2d::check`] accepted.
struct Pooling {
    /// `x`'s shape `[B, C, H, W]`.
    xs: [usize; 4],
    /// The output's shape `[B, C, OH, OW]`.
    out: [usize; 4],
    /// The kernels' metadata (layout at [`POOL_META`]).
    meta: [usize; POOL_META],
}

impl Pool2d {
    /// The pooling of `x` `[B, C, H, W]` by this window: output size
    /// `(in + 2 pad - dil (k - 1) - 1) / stride + 1` per axis; `flag` goes last in the
    /// metadata.
    fn check(&self, what: &str, x: &XpuTensor, flag: bool) -> Result<Pooling> {
        let xs = dims::<4>(x, what)?;
        let mut out = xs;
        for a in 0..2 {
            out[2 + a] = conv_out(
                what,
                xs[2 + a],
                self.kernel[a],
                self.stride[a],
                self.padding[a],
                self.dilation[a],
            )?;
        }
        let [k, s, p, d] = [self.kernel, self.stride, self.padding, self.dilation];
        let meta = [
            xs[2],
            xs[3],
            out[2],
            out[3],
            k[0],
            k[1],
            s[0],
            s[1],
            p[0],
            p[1],
            d[0],
            d[1],
            flag as usize,
        ];
        Ok(Pooling { xs, out, meta })
    }

    fn check_avg(&self, what: &str, x: &XpuTensor, count_include_pad: bool) -> Result<Pooling> {
        if self.dilation != [1, 1] {
            return invalid(format!(
                "{what}: dilation {:?} (average pooling takes [1, 1])",
                self.dilation
            ));
        }
        self.check(what, x, count_include_pad)
    }
}

/// Checks that `grad` has the output's shape `expected` and is on `x`'s device.
fn check_grad(what: &str, x: &XpuTensor, grad: &XpuTensor, expected: &[usize]) -> Result<()> {
    if grad.shape != expected {
        return invalid(format!(
            "{what}: output gradient {:?} must have the output's shape {expected:?}",
            grad.shape
        ));
    }
    check_same_device(x.device(), &[grad])
}

/// `grad` (the gradient of an output of shape `expected`, on `x`'s device) prepared for a
/// backward kernel: contiguous, in its compute type (returned too).
fn prep_grad(
    what: &str,
    x: &XpuTensor,
    grad: &XpuTensor,
    expected: &[usize],
) -> Result<(XpuTensor, DType)> {
    check_grad(what, x, grad, expected)?;
    let dtype = compute_dtype(grad.dtype)?;
    Ok((prep(grad, dtype)?, dtype))
}

/// 2-D average pooling of `x` `[batch, channels, H, W]` (as torch.nn.functional.avg_pool2d,
/// `ceil_mode = false`): the mean over each window's elements inside the input, divided by
/// the kernel area when `count_include_pad`.
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4, a zero stride, a dilation other than
/// `[1, 1]` or a kernel larger than the padded input; dtype, allocation and kernel errors.
pub fn avg_pool2d(x: &XpuTensor, window: Pool2d, count_include_pad: bool) -> Result<XpuTensor> {
    let pool = window.check_avg("avg_pool2d", x, count_include_pad)?;
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    // Bounds: one item per element of the fresh [B, C, OH, OW] output; item `i` writes
    // only `out[i]`; it reads `x[nc*H*W + ih*W + iw]` with nc < B*C (i / (OH*OW)) and ih, iw
    // checked in [0, H) x [0, W) — inside the contiguous `x`. OW, OH are non-zero (a
    // non-empty output); the division by `cnt` is a float division. Loops bounded by the
    // kernel size.
    AVG_POOL_K
        .launch(dtype, &[&xc], &pool.meta)
        .output(&pool.out, x.dtype)
}

/// The gradient of [`avg_pool2d`] with respect to `x`, given the output gradient `grad`.
///
/// # Errors
/// As [`avg_pool2d`]; [`Error::Invalid`] when `grad` is not of the output's shape.
pub fn avg_pool2d_backward(
    x: &XpuTensor,
    grad: &XpuTensor,
    window: Pool2d,
    count_include_pad: bool,
) -> Result<XpuTensor> {
    let what = "avg_pool2d_backward";
    let pool = window.check_avg(what, x, count_include_pad)?;
    let (gc, dtype) = prep_grad(what, x, grad, &pool.out)?;
    // Bounds: one item per element of the fresh [B, C, H, W] output; item `i` writes only
    // `gx[i]`; it reads `gy[(nc*OH + oh)*OW + ow]` with nc < B*C and oh in [0, OH), ow in
    // [0, OW) (the loop bounds are clamped to OH-1 / OW-1 and start at >= 0) — inside the
    // contiguous grad checked to be [B, C, OH, OW]. Divisors W, H (a non-empty output) and
    // the strides (checked non-zero) are non-zero; `cnt` divides floats. Loops bounded by
    // OH, OW.
    AVG_POOL_BWD_K
        .launch(dtype, &[&gc], &pool.meta)
        .output(&pool.xs, grad.dtype)
}

/// 2-D adaptive average pooling of `x` `[batch, channels, H, W]` to `output_size` (as
/// torch.nn.functional.adaptive_avg_pool2d): output `o` averages input rows
/// `floor(o H / OH) .. ceil((o + 1) H / OH)`, likewise columns.
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4; dtype, allocation and kernel errors.
pub fn adaptive_avg_pool2d(x: &XpuTensor, output_size: [usize; 2]) -> Result<XpuTensor> {
    let [b, c, h, w] = dims::<4>(x, "adaptive_avg_pool2d input")?;
    let [oh, ow] = output_size;
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    // Bounds: one item per element of the fresh [B, C, OH, OW] output; item `i` writes only
    // `out[i]`; it reads rows h0 <= ih < h1 <= H and columns w0 <= iw < w1 <= W of plane
    // nc < B*C (h1 = ceil((oh+1) H / OH) <= H since oh < OH) — inside the contiguous `x`.
    // OH, OW non-zero (a non-empty output); the final division is a float division. Loops
    // bounded by H and W.
    ADAPTIVE_K
        .launch(dtype, &[&xc], &[h, w, oh, ow])
        .output(&[b, c, oh, ow], x.dtype)
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
    let expected = [xs[0], xs[1], gs[2], gs[3]];
    let (gc, dtype) = prep_grad("adaptive_avg_pool2d_backward", x, grad, &expected)?;
    // Bounds: one item per element of the fresh output of x's shape; item `i` writes only
    // `gx[i]`; it reads `gy[(nc*OH + oh)*OW + ow]` for nc < B*C, oh < OH, ow < OW — inside
    // the contiguous grad of shape [B, C, OH, OW]. Integer divisors: W, H (a non-empty
    // output) and OH, OW, only inside loops that run when they are non-zero. Loops bounded
    // by OH and OW.
    ADAPTIVE_BWD_K
        .launch(dtype, &[&gc], &[xs[2], xs[3], gs[2], gs[3]])
        .output(&xs, grad.dtype)
}

/// 2-D max pooling of `x` `[batch, channels, H, W]` with the index of each maximum (as
/// torch.nn.functional.max_pool2d with `return_indices`, `ceil_mode = false`): the output
/// and an `i64` tensor of the same shape holding `h * W + w` of the maximum within its
/// `(n, c)` plane (the first maximum in window order; NaN counts as a maximum). A window
/// entirely in the padding (burn allows padding over half the kernel, which torch refuses)
/// gives negative infinity at index 0, as burn's NdArray and CubeCL backends do; its
/// gradient goes nowhere ([`max_pool2d_with_indices_backward`]: index 0 is no tap of it).
///
/// # Errors
/// [`Error::Invalid`] for a rank other than 4, a zero stride or dilation, or a kernel larger
/// than the padded input; dtype, allocation and kernel errors.
pub fn max_pool2d_with_indices(x: &XpuTensor, window: Pool2d) -> Result<(XpuTensor, XpuTensor)> {
    let pool = window.check("max_pool2d", x, false)?;
    let device = x.device();
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    let out = XpuTensor::empty(device, &pool.out, dtype)?;
    let idx = XpuTensor::empty(device, &pool.out, DType::I64)?;
    // Bounds: one item per element of the fresh outputs `out` (T) and `idx` (long), both
    // [B, C, OH, OW]; item `i` writes only `out[i]` and `idx[i]`; it reads
    // `x[nc*H*W + ih*W + iw]` with nc < B*C and ih, iw checked in [0, H) x [0, W) — inside
    // the contiguous `x`. OW, OH non-zero (a non-empty output). Loops bounded by the kernel
    // size.
    MAX_POOL_K
        .launch(dtype, &[&xc], &pool.meta)
        .run(&[&out, &idx], out.numel())?;
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
    window: Pool2d,
    grad: &XpuTensor,
    indices: &XpuTensor,
) -> Result<XpuTensor> {
    let what = "max_pool2d_backward";
    let pool = window.check(what, x, false)?;
    let (gc, dtype) = prep_grad(what, x, grad, &pool.out)?;
    check_grad(&format!("{what} (indices)"), x, indices, &pool.out)?;
    let ic = prep(indices, DType::I64)?;
    // Bounds: one item per element of the fresh output of x's shape; item `i` writes only
    // `gx[i]`; it reads `gy[o]` (T) and `idx[o]` (long, `DType::I64`) with
    // o = (nc*OH + oh)*OW + ow, nc < B*C, oh < OH, ow < OW (checked before the read; th, tw
    // checked >= 0) — inside the contiguous grad and indices, both checked to be
    // [B, C, OH, OW]. Index values are only compared, never used to address memory.
    // Divisors W, H (a non-empty output) and strides (checked non-zero) are non-zero. Loops
    // bounded by the kernel size.
    MAX_POOL_BWD_K
        .launch(dtype, &[&gc, &ic], &pool.meta)
        .output(&pool.xs, grad.dtype)
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
  ITEM
  PLANE AT_OUT int mode = (int)p[4];
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
  ITEM
  PLANE AT_IN int mode = (int)p[4];
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

/// The interpolation kernels' metadata: H, W, OH, OW, mode (0 nearest, 1 bilinear, 2
/// bicubic).
const INTERP_TEMPLATE: Template = Template::new(INTERP, 5);
const INTERP_K: Kernel = Kernel::new("interp", &INTERP_TEMPLATE);
const INTERP_BWD_K: Kernel = Kernel::new("interp_bwd", &INTERP_TEMPLATE);

/// The interpolation metadata for input `[_, _, H, W]` resized to `output_size`.
fn interp_meta(xs: [usize; 4], output_size: [usize; 2], mode: Interpolation) -> [usize; 5] {
    let mode = match mode {
        Interpolation::Nearest => 0,
        Interpolation::Bilinear => 1,
        Interpolation::Bicubic => 2,
    };
    [xs[2], xs[3], output_size[0], output_size[1], mode]
}

/// The shapes of input `x` `[B, C, H, W]` and of its resize to `output_size`.
fn resize_shapes(x: &XpuTensor, output_size: [usize; 2]) -> Result<([usize; 4], [usize; 4])> {
    let xs = dims::<4>(x, "interpolate input")?;
    Ok((xs, [xs[0], xs[1], output_size[0], output_size[1]]))
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
    let (xs, out) = resize_shapes(x, output_size)?;
    if out.iter().all(|&d| d > 0) && (xs[2] == 0 || xs[3] == 0) {
        return invalid(format!(
            "interpolate: cannot resize an empty input {xs:?} to {output_size:?}"
        ));
    }
    let dtype = compute_dtype(x.dtype)?;
    let xc = prep(x, dtype)?;
    // Bounds: one item per element of the fresh [B, C, OH, OW] output; item `i` writes only
    // `out[i]`; it reads plane nc < B*C of the contiguous `x` (H, W >= 1, checked for a
    // non-empty output) at rows/columns clamped to [0, H-1] x [0, W-1] (nearest:
    // (o*in)/out < in since o < out). OH, OW non-zero (a non-empty output),
    // max(out-1, 1) >= 1. Loops: 4x4 taps.
    INTERP_K
        .launch(dtype, &[&xc], &interp_meta(xs, output_size, mode))
        .output(&out, x.dtype)
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
    let (xs, out) = resize_shapes(x, output_size)?;
    let (gc, dtype) = prep_grad("interpolate_backward", x, grad, &out)?;
    // Bounds: one item per element of the fresh output of x's shape; item `i` writes only
    // `gx[i]`; it reads `gy[nc*OH*OW + oh*OW + ow]` with nc < B*C, oh < OH, ow < OW —
    // inside the contiguous grad checked to be [B, C, OH, OW]. Integer divisors: W, H (a
    // non-empty output), and OH / OW in `axis_weight`, only called inside loops that run
    // when they are non-zero. Loops bounded by OH and OW.
    INTERP_BWD_K
        .launch(dtype, &[&gc], &interp_meta(xs, output_size, mode))
        .output(&xs, grad.dtype)
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

/* The masked sample of input channel ic at that position: `sv`. */
#define MASKED_SAMPLE(b, ic, og, ky, kx, oh, ow) \
  SAMPLE_POS(b, og, ky, kx, oh, ow) \
  T sv = mv * bilinear_zero(x + ((b) * C + (ic)) * H * W, H, W, sy, sx);

__kernel void deform(__global T *out, __global const T *x, __global const T *off,
                     __global const T *mask, __global const T *w, __global const T *bias,
                     __global const long *p, long n) {
  ITEM
  PARAMS
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; long oc = t % CO; long b = t / CO;
  long g = oc / cog;
  T acc = HB ? bias[oc] : (T)0;
  for (long c = 0; c < cig; c++) {
    long ic = g * cig + c; long og = ic / cpo;
    for (long ky = 0; ky < KH; ky++) {
      for (long kx = 0; kx < KW; kx++) {
        MASKED_SAMPLE(b, ic, og, ky, kx, oh, ow)
        acc += w[((oc * cig + c) * KH + ky) * KW + kx] * sv;
      }
    }
  }
  out[i] = acc;
}

/* col[ic, ky, kx, b, oh, ow] = sum over the group's output channels of w * grad_out. */
__kernel void deform_cols(__global T *col, __global const T *w, __global const T *gy,
                          __global const long *p, long n) {
  ITEM
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
  T v[4];
  corners(img, H, W, (long)yl, (long)xl, v);
  T bl = v[0], br = v[1], tl = v[2], tr = v[3];
  if (is_y) { T dx = x - xl; return dx * (tr - br) + ((T)1 - dx) * (tl - bl); }
  T dy = y - yl;
  return dy * (tr - tl) + ((T)1 - dy) * (br - bl);
}

/* The gradients of one tap's sample position (offset: PER = 2 values, y then x; mask:
   PER = 1) per (b, og, ky, kx, oh, ow): the sum over the offset group's input channels c of
   col[c, ky, kx, b, oh, ow] times VALUE (of the channel's plane `img`). */
#define DEFORM_TAP_GRAD(NAME, PER, VALUE) \
__kernel void NAME(__global T *gt, __global const T *x, __global const T *off, \
                   __global const T *mask, __global const T *col, \
                   __global const long *p, long n) { \
  ITEM \
  PARAMS \
  long ow = i % OW; long t = i / OW; long oh = t % OH; t /= OH; \
  long ch = t % (OG * KH * KW * PER); long b = t / (OG * KH * KW * PER); \
  int dir = (int)(ch % PER); long k = ch / PER; \
  long kx = k % KW; long ky = (k / KW) % KH; long og = k / (KW * KH); \
  SAMPLE_POS(b, og, ky, kx, oh, ow) \
  (void)dir; (void)mv; \
  T acc = (T)0; \
  for (long c = og * cpo; c < (og + 1) * cpo; c++) { \
    __global const T *img = x + (b * C + c) * H * W; \
    T cv = col[(((c * KH + ky) * KW + kx) * B + b) * OH * OW + oh * OW + ow]; \
    acc += (VALUE) * cv; \
  } \
  gt[i] = acc; \
}

/* Offset gradient [B, OG*KH*KW*2, OH, OW]. */
DEFORM_TAP_GRAD(deform_offset_grad, 2, mv * coord_weight(img, H, W, sy, sx, dir == 0))
/* Mask gradient [B, OG*KH*KW, OH, OW]. */
DEFORM_TAP_GRAD(deform_mask_grad, 1, bilinear_zero(img, H, W, sy, sx))

/* Weight gradient [CO, C/G, KH, KW]. */
__kernel void deform_weight_grad(__global T *gw, __global const T *x, __global const T *off,
                                 __global const T *mask, __global const T *gy,
                                 __global const long *p, long n) {
  ITEM
  PARAMS
  long kx = i % KW; long t = i / KW; long ky = t % KH; t /= KH; long c = t % cig; long oc = t / cig;
  long g = oc / cog; long ic = g * cig + c; long og = ic / cpo;
  T acc = (T)0;
  for (long b = 0; b < B; b++) {
    for (long oh = 0; oh < OH; oh++) {
      for (long ow = 0; ow < OW; ow++) {
        MASKED_SAMPLE(b, ic, og, ky, kx, oh, ow)
        acc += gy[((b * CO + oc) * OH + oh) * OW + ow] * sv;
      }
    }
  }
  gw[i] = acc;
}

/* Bias gradient [CO]. */
__kernel void deform_bias_grad(__global T *gb, __global const T *gy, __global const long *p, long n) {
  ITEM
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
  ITEM
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

fn deform_check(input: &DeformInput<'_>, p: &DeformParams) -> Result<DeformShape> {
    let [b, c, h, w] = dims::<4>(input.x, "deform_conv2d input")?;
    let [co, cig, kh, kw] = dims::<4>(input.weight, "deform_conv2d weight")?;
    let (g, og) = (p.weight_groups, p.offset_groups);
    if g == 0 || og == 0 || c % g != 0 || c % og != 0 || co % g != 0 || cig * g != c {
        return invalid(format!(
            "deform_conv2d: input {:?}, weight {:?}, {g} weight groups and {og} offset groups do not match",
            input.x.shape, input.weight.shape
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
    if input.offset.shape != [b, 2 * taps, oh, ow] {
        return invalid(format!(
            "deform_conv2d: offset {:?} must be {:?}",
            input.offset.shape,
            [b, 2 * taps, oh, ow]
        ));
    }
    if let Some(m) = input.mask {
        if m.shape != [b, taps, oh, ow] {
            return invalid(format!(
                "deform_conv2d: mask {:?} must be {:?}",
                m.shape,
                [b, taps, oh, ow]
            ));
        }
    }
    if let Some(bi) = input.bias {
        if bi.shape != [co] {
            return invalid(format!("deform_conv2d: bias {:?} must be [{co}]", bi.shape));
        }
    }
    let device = input.x.device();
    check_same_device(device, &[input.offset, input.weight])?;
    for t in input.mask.iter().chain(input.bias.iter()) {
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

/// The deformable convolution kernels' metadata (the 19 longs `PARAMS` reads).
fn deform_meta(s: &DeformShape, p: &DeformParams, has_mask: bool, has_bias: bool) -> [usize; 19] {
    [
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
    ]
}

const DEFORM_TEMPLATE: Template = Template {
    body: DEFORM,
    meta_len: 19,
    f64_atomics: true,
};
const DEFORM_K: Kernel = Kernel::new("deform", &DEFORM_TEMPLATE);
const DEFORM_COLS_K: Kernel = Kernel::new("deform_cols", &DEFORM_TEMPLATE);
const DEFORM_OFFSET_GRAD_K: Kernel = Kernel::new("deform_offset_grad", &DEFORM_TEMPLATE);
const DEFORM_MASK_GRAD_K: Kernel = Kernel::new("deform_mask_grad", &DEFORM_TEMPLATE);
const DEFORM_WEIGHT_GRAD_K: Kernel = Kernel::new("deform_weight_grad", &DEFORM_TEMPLATE);
const DEFORM_BIAS_GRAD_K: Kernel = Kernel::new("deform_bias_grad", &DEFORM_TEMPLATE);
const DEFORM_INPUT_GRAD_K: Kernel = Kernel::new("deform_input_grad", &DEFORM_TEMPLATE);

/// The deformable 2-D convolution (as torchvision.ops.deform_conv2d) of `x` `[B, C, H, W]`
/// with `weight` `[CO, C / weight_groups, KH, KW]`: kernel tap `(ky, kx)` of offset group
/// `og` at output `(oh, ow)` samples its input plane bilinearly (zero outside) at
/// `(oh stride + ky dil - pad + offset[b, 2 k, oh, ow], ... + offset[b, 2 k + 1, oh, ow])`,
/// `k = (og KH + ky) KW + kx`, scaled by `mask[b, k, oh, ow]` when given, plus `bias`.
///
/// # Errors
/// [`Error::Invalid`] for shapes that do not match; dtype, allocation and kernel errors.
pub fn deform_conv2d(input: DeformInput<'_>, p: DeformParams) -> Result<XpuTensor> {
    let s = deform_check(&input, &p)?;
    let dtype = compute_dtype(input.x.dtype)?;
    let xc = prep(input.x, dtype)?;
    let oc = prep(input.offset, dtype)?;
    let wc = prep(input.weight, dtype)?;
    let mc = input.mask.map(|m| prep(m, dtype)).transpose()?;
    let bc = input.bias.map(|b| prep(b, dtype)).transpose()?;
    let meta = deform_meta(&s, &p, mc.is_some(), bc.is_some());
    let (mbuf, bbuf) = (mc.as_ref().unwrap_or(&oc), bc.as_ref().unwrap_or(&wc));
    // Bounds: one item per element of the fresh [B, CO, OH, OW] output; item `i` writes only
    // `out[i]`. All inputs are contiguous with the shapes `deform_check` verified: it reads
    // `w` at [oc, c < C/G, ky < KH, kx < KW], `off` at [b, 2k(+1) < 2*OG*KH*KW, oh, ow],
    // `mask` (only when present, flag HM) at [b, k, oh, ow], `bias` (only when present) at
    // [oc], and the input plane (b, ic < C) through `bilinear_zero`, which reads only rows
    // in [0, H) and columns in [0, W) (the sample must lie in (-1, H) x (-1, W); NaN fails
    // the test). Integer divisors are non-zero: OW, OH, CO (a non-empty output); G, OG
    // (checked); CO/G (CO > 0 and G divides it); C/OG is only divided by inside the channel
    // loop, which runs only when C/G > 0, i.e. C > 0, and OG divides C. Loops bounded by
    // the channel and kernel counts.
    DEFORM_K
        .launch(dtype, &[&xc, &oc, mbuf, &wc, bbuf], &meta)
        .output(&[s.b, s.co, s.oh, s.ow], input.x.dtype)
}

/// The gradients of [`deform_conv2d`] given the output gradient `grad` `[B, CO, OH, OW]`:
/// input, offset, weight, mask (when given) and bias (when given).
///
/// # Errors
/// As [`deform_conv2d`]; [`Error::Invalid`] when `grad` is not of the output's shape.
pub fn deform_conv2d_backward(
    input: DeformInput<'_>,
    grad: &XpuTensor,
    p: DeformParams,
) -> Result<DeformGrads> {
    let s = deform_check(&input, &p)?;
    check_grad(
        "deform_conv2d_backward",
        input.x,
        grad,
        &[s.b, s.co, s.oh, s.ow],
    )?;
    let device = input.x.device();
    let dtype = compute_dtype(input.x.dtype)?;
    let gc = prep(grad, dtype)?;
    let xc = prep(input.x, dtype)?;
    let oc = prep(input.offset, dtype)?;
    let wc = prep(input.weight, dtype)?;
    let mc = input.mask.map(|m| prep(m, dtype)).transpose()?;
    let meta = deform_meta(&s, &p, mc.is_some(), input.bias.is_some());
    let mbuf = mc.as_ref().unwrap_or(&oc);

    // Columns: [C, KH, KW, B, OH, OW].
    let col = XpuTensor::empty(device, &[s.c, s.kh, s.kw, s.b, s.oh, s.ow], dtype)?;
    // Bounds: one item per element of the fresh `col`; item `i` writes only `col[i]`; it
    // reads `w` at [g*CO/G + o < CO, c < C/G, ky, kx] and `gy` at [b < B, oc < CO, oh, ow],
    // inside the contiguous weight and gradient (shapes checked). Divisors OW, OH, B, KW, KH
    // (a non-empty `col`), C/G (ic < C so C > 0, G divides C) are non-zero. Loop bounded by
    // CO/G.
    DEFORM_COLS_K
        .launch(dtype, &[&wc, &gc], &meta)
        .run(&[&col], col.numel())?;

    // Bounds (offset gradient): one item per element of the fresh output of the offset's
    // shape [B, 2*OG*KH*KW, OH, OW]; item `i` writes only `go[i]`; it reads `off`/`mask` at
    // [b, k(*2+1), oh, ow] of the checked shapes, `col` at [c < C, ky, kx, b, oh, ow]
    // (c < (og+1)*C/OG <= C), and input planes (b, c) only where `coord_weight` found the
    // row/column in [0, H) x [0, W). Divisors OW, OH, OG*KH*KW*2, KW, KH (a non-empty
    // output) are non-zero. Loop bounded by C/OG.
    let go = DEFORM_OFFSET_GRAD_K
        .launch(dtype, &[&xc, &oc, mbuf, &col], &meta)
        .output(&input.offset.shape, input.x.dtype)?;

    // Bounds (mask gradient): as the offset gradient's: one item per element of the fresh
    // output of the mask's shape [B, OG*KH*KW, OH, OW], item `i` writes only `gm[i]`; reads
    // of `off`, `mask`, `col` and the input are at checked-shape indices, input reads through
    // `bilinear_zero` (rows/columns in range). Divisors non-zero for a non-empty output. Loop
    // bounded by C/OG.
    let gm = match &mc {
        Some(m) => Some(
            DEFORM_MASK_GRAD_K
                .launch(dtype, &[&xc, &oc, m, &col], &meta)
                .output(&m.shape, input.x.dtype)?,
        ),
        None => None,
    };

    // Bounds (weight gradient): one item per element of the fresh output of the weight's
    // shape [CO, C/G, KH, KW]; item `i` writes only `gw[i]`; it reads `gy` at
    // [b < B, oc < CO, oh < OH, ow < OW], `off`/`mask` at [b, k, oh, ow] with k < OG*KH*KW
    // (og = ic / (C/OG) < OG), and the input plane (b, ic < C) through `bilinear_zero` (in
    // range). Divisors KW, KH, C/G, CO/G, C/OG are non-zero (a non-empty output,
    // divisibility checked). Loops bounded by B, OH, OW.
    let gw = DEFORM_WEIGHT_GRAD_K
        .launch(dtype, &[&xc, &oc, mbuf, &gc], &meta)
        .output(&input.weight.shape, input.x.dtype)?;

    // Bounds (bias gradient): CO items, one per element of the fresh [CO] output; item `i`
    // writes only `gb[i]`; it reads `gy[(b*CO + i)*OH*OW + j]` for b < B, j < OH*OW — inside
    // the contiguous gradient [B, CO, OH, OW]. PARAMS' divisions: G, OG non-zero (checked).
    // Loops bounded by B and OH*OW.
    let gb = match input.bias {
        Some(bi) => Some(
            DEFORM_BIAS_GRAD_K
                .launch(dtype, &[&gc], &meta)
                .output(&bi.shape, input.x.dtype)?,
        ),
        None => None,
    };

    // Input gradient (scatter with atomic adds into a zeroed buffer).
    let gx = full(device, &input.x.shape, ScalarValue::F(0.0), dtype)?;
    // Bounds: one item per element of `col` [C, KH, KW, B, OH, OW] (its element count is the
    // global size); each reads `col[i]` and `off`/`mask` at checked-shape indices, and adds
    // atomically (a compare-exchange loop on the element's bits, OpenCL 1.1 §6.11.11) into
    // `gx` at [b < B, ic < C, yp, xp] only where yp in [0, H) and xp in [0, W) (tested on
    // the float values before conversion; NaN fails the test) — inside the fresh contiguous
    // `gx` of x's shape. The retry loop ends when no other item wrote the element between
    // the read and the exchange; each item performs at most 9 such adds.
    DEFORM_INPUT_GRAD_K
        .launch(dtype, &[&oc, mbuf, &col], &meta)
        .run(&[&gx], col.numel())?;

    Ok((finish(gx, input.x.dtype)?, go, gw, gm, gb))
}
