//! A two-layer MLP trained with minibatch SGD on the device, and the same training on the
//! CPU, step for step: the runtime at work as a small framework would use it. Example code,
//! not a library module: the example `mlp_training.rs` next to this folder, `xpu demo`
//! (xpu-cli) and the tests (`crates/xpu/tests/mlp.rs`, a captured step in xpu-kernel's
//! `tests/graph.rs`) include this file with `#[path = ".."] mod mlp;`, so it names its
//! crates directly (`xpu_kernel`, `xpu_stream`, `xpu_event`, `thiserror`).
//!
//! The model: `h = relu(x·W1 + b1)`, `o = h·W2 + b2`, loss `mean((o - y)²)` over the
//! `samples × outputs` elements; `W` are `in × out` row-major `f32`. Parameters and data come
//! from [`Rng`], a hand-written fixed-seed generator, so the device and the CPU start from
//! the same bits.
//!
//! The device side ([`GpuMlp`]) runs seven OpenCL C kernels (forward linear with bias and
//! optional ReLU, loss, loss gradient, a matrix product reading either operand transposed
//! for the weight gradients `xᵀ·g` and the gradient by the hidden layer `g·W2ᵀ`, bias
//! gradient, ReLU mask, SGD update):
//! the parameters are uploaded on a copy stream from the pool, an [`Event`] recorded there is
//! waited on by the compute stream, and every step's loss is written by the device into a
//! loss buffer read back once at the end.
//!
//! Minibatches: step `t` trains on rows `b·batch .. (b + 1)·batch` of the data set,
//! `b = t mod (samples / batch)`. With more than one batch, each step's minibatch is uploaded
//! on the copy stream into one of two device slots (as a `DataLoader` with pinned memory and
//! `non_blocking=True` copies on a side stream), enqueued before the previous step's kernels so
//! that the copy overlaps them: the compute stream waits for the slot's upload event before the
//! step, and records a "consumed" event after it, which the copy stream waits for before it
//! overwrites that slot two steps later. The host rows go through `copy_htod`'s pinned staging
//! blocks, each reused only after its upload completes (their use is recorded).
//!
//! Same numbers on both sides: every kernel computes each output element in one work-item,
//! summing in the CPU reference's order, with `#pragma OPENCL FP_CONTRACT OFF` (no fused
//! multiply-add, which the CPU code does not use either) and without `-cl-fast-relaxed-math`;
//! constants (the gradient scale `2 / (samples·outputs)`) are computed on the host once and
//! passed to both. On PoCL the losses agree bit for bit; [`compare_losses`] allows a
//! relative difference (1e-4 in the example) for devices whose `+`/`*` differ in the last bit.
//!
//! Soundness: the kernels, their work sizes and their buffers are fixed by this module. Every
//! buffer is private to [`GpuMlp`], allocated with the length its config gives, and each
//! kernel receives the element counts it loops over and guards its work-item index by them,
//! so every access stays inside its buffer; the loops are bounded, so each kernel ends;
//! the host reaches the buffers only through stream-ordered copies. That discharges
//! [`Launch::enqueue`](xpu_kernel::Launch::enqueue)'s contract, so the API here is safe: its
//! `unsafe {}` blocks, each with its `// SAFETY:` comment, are the ones a user of the launch
//! API writes.

use xpu_event::{Event, EventError};
use xpu_stream::{Stream, StreamError};

use xpu_kernel::memory::{copy_htod, DeviceBuffer, MemoryError};
use xpu_kernel::{Function, KernelError, LaunchExt, Program};

/// The kernels (OpenCL C 1.2). Each guards its index by the counts it is given.
pub const KERNELS: &str = r"
#pragma OPENCL FP_CONTRACT OFF
// out[m,n] = act(b[n] + sum_k x[m,k] * w[k,n]), k in order; act = relu when relu != 0.
__kernel void linear_fwd(__global float *out, __global const float *x, __global const float *w,
                         __global const float *b, uint m_rows, uint k_dim, uint n_dim, uint relu) {
    size_t i = get_global_id(0);
    if (i >= (size_t)m_rows * n_dim) return;
    uint m = i / n_dim, n = i % n_dim;
    float acc = b[n];
    for (uint k = 0; k < k_dim; k++) acc = acc + x[m * k_dim + k] * w[k * n_dim + n];
    out[i] = (relu != 0 && acc < 0.0f) ? 0.0f : acc;
}
// losses[step] = sum_i (o[i] - y[i])^2, i in order (one work-item); the host divides by n.
__kernel void mse_loss(__global float *losses, uint step, uint n_losses,
                       __global const float *o, __global const float *y, uint n) {
    if (get_global_id(0) != 0 || step >= n_losses) return;
    float s = 0.0f;
    for (uint i = 0; i < n; i++) { float d = o[i] - y[i]; s = s + d * d; }
    losses[step] = s;
}
// g[i] = scale * (o[i] - y[i])
__kernel void mse_grad(__global float *g, __global const float *o, __global const float *y,
                       float scale, uint n) {
    size_t i = get_global_id(0);
    if (i < n) g[i] = scale * (o[i] - y[i]);
}
// c[r,q] = sum_t a[r * a_rs + t * a_cs] * b[t * b_rs + q * b_cs], t in order (c is
// rows x cols, the sum over inner): a matrix product whose operands are addressed by a row
// and a column stride, so that either is read as stored or transposed (as BLAS's transa,
// transb): the weight gradient x^T * g and the gradient by a layer's input g * w^T.
__kernel void matmul(__global float *c, __global const float *a, __global const float *b,
                     uint rows, uint inner, uint cols, uint a_rs, uint a_cs, uint b_rs,
                     uint b_cs) {
    size_t i = get_global_id(0);
    if (i >= (size_t)rows * cols) return;
    uint r = i / cols, q = i % cols;
    float acc = 0.0f;
    for (uint t = 0; t < inner; t++)
        acc = acc + a[r * a_rs + t * a_cs] * b[t * b_rs + q * b_cs];
    c[i] = acc;
}
// db[n] = sum_m g[m,n], m in order.
__kernel void grad_b(__global float *db, __global const float *g, uint m_rows, uint n_dim) {
    size_t n = get_global_id(0);
    if (n >= n_dim) return;
    float acc = 0.0f;
    for (uint m = 0; m < m_rows; m++) acc = acc + g[m * n_dim + n];
    db[n] = acc;
}
// d[i] = h[i] > 0 ? d[i] : 0: the gradient d by a ReLU's output h, made the gradient by
// its input (in place).
__kernel void relu_mask(__global float *d, __global const float *h, uint n) {
    size_t i = get_global_id(0);
    if (i < n) d[i] = h[i] > 0.0f ? d[i] : 0.0f;
}
// w[i] = w[i] - lr * g[i]
__kernel void sgd(__global float *w, __global const float *g, float lr, uint n) {
    size_t i = get_global_id(0);
    if (i < n) w[i] = w[i] - lr * g[i];
}
";

/// Sizes, learning rate and seed of the model and its data set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlpConfig {
    /// Features per sample.
    pub inputs: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Outputs per sample.
    pub outputs: usize,
    /// Samples in the data set.
    pub samples: usize,
    /// Samples per SGD step (a divisor of `samples`; `samples` for full-batch training).
    pub batch: usize,
    /// SGD learning rate.
    pub learning_rate: f32,
    /// Seed of [`Rng`] for the parameters and the data.
    pub seed: u64,
}

impl Default for MlpConfig {
    /// 16 inputs, 64 hidden units, 4 outputs, 256 samples in one full batch, learning rate
    /// 0.05, seed 42.
    fn default() -> Self {
        MlpConfig {
            inputs: 16,
            hidden: 64,
            outputs: 4,
            samples: 256,
            batch: 256,
            learning_rate: 0.05,
            seed: 42,
        }
    }
}

/// Largest dimension product accepted (elements of one buffer), so that every index fits the
/// kernels' `uint`.
const MAX_ELEMENTS: usize = 1 << 28;

impl MlpConfig {
    fn check(&self) -> Result<(), MlpError> {
        let dims = [self.inputs, self.hidden, self.outputs, self.samples];
        if dims.contains(&0) {
            return Err(MlpError::Config("every dimension is at least 1".into()));
        }
        let products = [
            self.samples.checked_mul(self.inputs),
            self.samples.checked_mul(self.hidden),
            self.samples.checked_mul(self.outputs),
            self.inputs.checked_mul(self.hidden),
            self.hidden.checked_mul(self.outputs),
        ];
        if products.iter().any(|p| p.is_none_or(|p| p > MAX_ELEMENTS)) {
            return Err(MlpError::Config(format!(
                "a buffer would exceed {MAX_ELEMENTS} elements"
            )));
        }
        if self.batch == 0 || self.samples % self.batch != 0 {
            return Err(MlpError::Config(format!(
                "the batch ({}) divides the samples ({})",
                self.batch, self.samples
            )));
        }
        if !self.learning_rate.is_finite() {
            return Err(MlpError::Config("the learning rate is finite".into()));
        }
        Ok(())
    }

    /// The gradient scale of the mean squared error, `2 / (batch · outputs)`, computed once
    /// for both sides.
    fn grad_scale(&self) -> f32 {
        2.0 / (self.batch * self.outputs) as f32
    }

    /// Minibatches in the data set.
    fn batches(&self) -> usize {
        self.samples / self.batch
    }

    /// The element ranges of step `step`'s minibatch in `x` and `y`.
    fn batch_rows(&self, step: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let first = (step % self.batches()) * self.batch;
        (
            first * self.inputs..(first + self.batch) * self.inputs,
            first * self.outputs..(first + self.batch) * self.outputs,
        )
    }
}

/// What training on the device can fail with.
#[derive(Debug, thiserror::Error)]
pub enum MlpError {
    /// An invalid [`MlpConfig`].
    #[error("invalid MLP configuration: {0}")]
    Config(String),
    /// Building the program or a launch; an allocation or a copy
    /// ([`KernelError::Memory`]); getting a stream or synchronizing one
    /// ([`KernelError::Stream`]).
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Recording or waiting on the upload event.
    #[error(transparent)]
    Event(#[from] EventError),
}

xpu_device::impl_from_via!(MlpError::Kernel(KernelError) <- MemoryError, StreamError);

/// The fixed-seed generator of the parameters and data: SplitMix64 (Steele, Lea, Flood 2014),
/// written out here so that both sides (and any reader) get the same stream of numbers.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`, exactly representable (24 random bits).
    pub fn next_f32(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        bits as f32 / (1u32 << 23) as f32 - 1.0
    }

    fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

/// Initial parameters and the data set, generated from the config's seed.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpState {
    /// `inputs × hidden`.
    pub w1: Vec<f32>,
    /// `hidden`.
    pub b1: Vec<f32>,
    /// `hidden × outputs`.
    pub w2: Vec<f32>,
    /// `outputs`.
    pub b2: Vec<f32>,
    /// `samples × inputs`.
    pub x: Vec<f32>,
    /// `samples × outputs`: a fixed random "teacher" MLP's outputs on `x`.
    pub y: Vec<f32>,
}

impl MlpState {
    /// The initial state for `config` (weights uniform in `±1/sqrt(fan_in)`, biases zero;
    /// inputs uniform in `[-1, 1)`; targets from a teacher network drawn from the same
    /// generator).
    pub fn new(config: &MlpConfig) -> MlpState {
        let c = config;
        let mut rng = Rng::new(c.seed);
        let s1 = 1.0 / (c.inputs as f32).sqrt();
        let s2 = 1.0 / (c.hidden as f32).sqrt();
        let w1 = rng.fill(c.inputs * c.hidden, s1);
        let w2 = rng.fill(c.hidden * c.outputs, s2);
        let x = rng.fill(c.samples * c.inputs, 1.0);
        // The teacher: the same shape, other weights, biases of 0.1.
        let tw1 = rng.fill(c.inputs * c.hidden, s1);
        let tw2 = rng.fill(c.hidden * c.outputs, s2);
        let (tb1, tb2) = (vec![0.1; c.hidden], vec![0.1; c.outputs]);
        let (_, y) = forward(c, c.samples, &x, [&tw1, &tb1, &tw2, &tb2]);
        MlpState {
            w1,
            b1: vec![0.0; c.hidden],
            w2,
            b2: vec![0.0; c.outputs],
            x,
            y,
        }
    }
}

/// CPU twin of `linear_fwd`.
fn linear(x: &[f32], w: &[f32], b: &[f32], m: usize, k: usize, n: usize, relu: bool) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for r in 0..m {
        for c in 0..n {
            let mut acc = b[c];
            for i in 0..k {
                acc += x[r * k + i] * w[i * n + c];
            }
            out[r * n + c] = if relu && acc < 0.0 { 0.0 } else { acc };
        }
    }
    out
}

/// The model's forward pass on the CPU, for `rows` samples `x` (`rows × inputs`) and the
/// parameters `[w1, b1, w2, b2]`: the hidden activations `h = relu(x·w1 + b1)`
/// (`rows × hidden`) and the outputs `h·w2 + b2` (`rows × outputs`).
fn forward(
    c: &MlpConfig,
    rows: usize,
    x: &[f32],
    [w1, b1, w2, b2]: [&[f32]; 4],
) -> (Vec<f32>, Vec<f32>) {
    let h = linear(x, w1, b1, rows, c.inputs, c.hidden, true);
    let out = linear(&h, w2, b2, rows, c.hidden, c.outputs, false);
    (h, out)
}

/// How a matrix product reads an operand from its row-major buffer (as BLAS's `transa` /
/// `transb` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transpose {
    /// As stored.
    No,
    /// Transposed.
    Yes,
}

impl Transpose {
    /// The (row, column) strides, in elements, of a `rows × cols` operand read from a
    /// row-major buffer of `rows × cols` elements ([`Transpose::No`]) or of `cols × rows`
    /// ([`Transpose::Yes`]). Either way the largest index reached is `rows · cols - 1`.
    fn strides(self, rows: usize, cols: usize) -> (usize, usize) {
        match self {
            Transpose::No => (cols, 1),
            Transpose::Yes => (1, rows),
        }
    }
}

/// CPU twin of `matmul`: `op(a)·op(b)` (`m × n`, each element summed over `k` in order from
/// 0), where `op(a)` (`m × k`) and `op(b)` (`k × n`) are read as [`Transpose`] says.
fn matmul(
    (a, ta): (&[f32], Transpose),
    (b, tb): (&[f32], Transpose),
    (m, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let (a_rs, a_cs) = ta.strides(m, k);
    let (b_rs, b_cs) = tb.strides(k, n);
    let mut c = vec![0.0; m * n];
    for (i, d) in c.iter_mut().enumerate() {
        let (r, q) = (i / n, i % n);
        let mut acc = 0.0f32;
        for t in 0..k {
            acc += a[r * a_rs + t * a_cs] * b[t * b_rs + q * b_cs];
        }
        *d = acc;
    }
    c
}

/// CPU twin of `relu_mask`.
fn relu_mask(d: &mut [f32], h: &[f32]) {
    for (d, h) in d.iter_mut().zip(h) {
        *d = if *h > 0.0 { *d } else { 0.0 };
    }
}

/// CPU twin of `grad_b`.
fn grad_b(g: &[f32], m: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|c| {
            let mut acc = 0.0f32;
            for r in 0..m {
                acc += g[r * n + c];
            }
            acc
        })
        .collect()
}

fn sgd(w: &mut [f32], g: &[f32], lr: f32) {
    for (w, g) in w.iter_mut().zip(g) {
        *w -= lr * *g;
    }
}

/// The CPU reference: the same model, data and operation order as [`GpuMlp`].
#[derive(Debug, Clone)]
pub struct CpuMlp {
    config: MlpConfig,
    state: MlpState,
    step: usize,
}

impl CpuMlp {
    /// The reference model at its initial state.
    pub fn new(config: MlpConfig) -> CpuMlp {
        CpuMlp {
            state: MlpState::new(&config),
            config,
            step: 0,
        }
    }

    /// One SGD step on the next minibatch; returns the loss of the forward pass before the
    /// update.
    pub fn step(&mut self) -> f32 {
        let c = self.config;
        let (xr, yr) = c.batch_rows(self.step);
        self.step += 1;
        let s = &mut self.state;
        let (x, y) = (&s.x[xr], &s.y[yr]);
        let (m, i, hd, o) = (c.batch, c.inputs, c.hidden, c.outputs);
        let (h, out) = forward(&c, m, x, [&s.w1, &s.b1, &s.w2, &s.b2]);
        let n = m * o;
        let mut sum = 0.0f32;
        for (p, t) in out.iter().zip(y) {
            let d = p - t;
            sum += d * d;
        }
        let loss = sum / n as f32;
        let scale = c.grad_scale();
        let g: Vec<f32> = out.iter().zip(y).map(|(p, t)| scale * (p - t)).collect();
        let dw2 = matmul((&h, Transpose::Yes), (&g, Transpose::No), (hd, m, o));
        let db2 = grad_b(&g, m, o);
        let mut dh = matmul((&g, Transpose::No), (&s.w2, Transpose::Yes), (m, o, hd));
        relu_mask(&mut dh, &h);
        let dw1 = matmul((x, Transpose::Yes), (&dh, Transpose::No), (i, m, hd));
        let db1 = grad_b(&dh, m, hd);
        let lr = c.learning_rate;
        sgd(&mut s.w1, &dw1, lr);
        sgd(&mut s.b1, &db1, lr);
        sgd(&mut s.w2, &dw2, lr);
        sgd(&mut s.b2, &db2, lr);
        loss
    }

    /// `steps` steps; the loss of each.
    pub fn train(&mut self, steps: usize) -> Vec<f32> {
        (0..steps).map(|_| self.step()).collect()
    }

    /// The current parameters and data.
    pub fn state(&self) -> &MlpState {
        &self.state
    }
}

/// The program's functions.
#[derive(Debug, Clone)]
struct Kernels {
    linear_fwd: Function,
    mse_loss: Function,
    mse_grad: Function,
    matmul: Function,
    grad_b: Function,
    relu_mask: Function,
    sgd: Function,
}

/// A device slot for one minibatch: its inputs and targets, which batch it holds, the upload
/// event (recorded on the copy stream) and the event of the last step that read it (recorded
/// on the compute stream).
#[derive(Debug)]
struct Slot {
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    batch: Option<usize>,
    uploaded: Event,
    consumed: Option<Event>,
}

/// A point of the minibatch pipeline, handed to a [`GpuMlp::set_pipeline_hook`] hook on the
/// host while the work is enqueued (a test seam: tests block a stream there with a
/// [`Gate`](xpu_event::Gate), or enqueue a copy of the slot, to check the ordering
/// deterministically). Whatever the hook enqueues on `stream` runs at that point of the
/// stream's order.
#[doc(hidden)]
#[derive(Debug)]
pub struct PipelinePoint<'a> {
    /// Which point: before an upload (on the copy stream) or before a step's read (on the
    /// compute stream).
    pub stage: PipelineStage,
    /// The step whose minibatch is uploaded, or the step about to run.
    pub step: usize,
    /// The slot index.
    pub slot: usize,
    /// The stage's stream: the copy stream before an upload, the compute stream before a read.
    pub stream: Stream,
    /// The slot's inputs (`batch × inputs`): as they are before the upload, or as the step's
    /// kernels will read them.
    pub x: &'a DeviceBuffer<f32>,
    /// The slot's targets (`batch × outputs`), likewise.
    pub y: &'a DeviceBuffer<f32>,
}

/// Where a [`PipelinePoint`] stands in the minibatch pipeline.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineStage {
    /// On the copy stream, after its wait for the last step that read the slot (the slot's
    /// "consumed" event), before the upload of the step's rows into it.
    BeforeUpload,
    /// On the compute stream, after its wait for the slot's upload event, before the step's
    /// kernels read the slot.
    BeforeRead,
}

/// The hook type of [`GpuMlp::set_pipeline_hook`].
type PipelineHook = Box<dyn FnMut(PipelinePoint<'_>) -> Result<(), MlpError> + Send>;

/// An optional [`PipelineHook`] (a newtype for `Debug`).
#[derive(Default)]
struct Hook(Option<PipelineHook>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(hook)"
        } else {
            "None"
        })
    }
}

impl Hook {
    fn call(&mut self, point: PipelinePoint<'_>) -> Result<(), MlpError> {
        match &mut self.0 {
            Some(h) => h(point),
            None => Ok(()),
        }
    }
}

/// The model on a device: its parameters, minibatch slots, activations and gradients in
/// private [`DeviceBuffer`]s, trained by the [`KERNELS`] on a compute stream, the minibatches
/// uploaded on a copy stream.
#[derive(Debug)]
pub struct GpuMlp {
    config: MlpConfig,
    compute: Stream,
    copy: Stream,
    k: Kernels,
    data: MlpState,
    step: usize,
    slots: Vec<Slot>,
    hook: Hook,
    /// `inputs → hidden`, ReLU.
    l1: Layer,
    /// `hidden → outputs`, no activation.
    l2: Layer,
}

/// One dense layer on the device, for a minibatch of `batch` rows: `fan_in × fan_out`
/// weights, `fan_out` biases and their gradients; its `batch × fan_out` outputs and the
/// loss's gradient by its pre-activations `x·w + b`, from which the weight and bias gradients
/// are computed.
#[derive(Debug)]
struct Layer {
    w: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    dw: DeviceBuffer<f32>,
    db: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
    dz: DeviceBuffer<f32>,
    fan_in: usize,
    fan_out: usize,
    relu: bool,
}

/// `n` as the kernels' `uint` (the config check bounds every count by [`MAX_ELEMENTS`]).
fn u(n: usize) -> u32 {
    u32::try_from(n).expect("bounded by MlpConfig::check")
}

impl GpuMlp {
    /// Builds the kernels for `device` (through the program cache), uploads the initial
    /// parameters of `config` ([`MlpState::new`]) on a copy stream from the pool and makes a
    /// compute stream from the pool wait for the upload (an [`Event`] recorded on the copy
    /// stream, as `torch.cuda.Event.record` / `wait`). The minibatches are uploaded by
    /// [`GpuMlp::train`].
    ///
    /// # Errors
    /// [`MlpError::Config`] for a zero dimension, a buffer over 2^28 elements, a batch that
    /// does not divide the samples or a non-finite learning rate; build, allocation, stream
    /// and event errors.
    pub fn new(device: usize, config: MlpConfig) -> Result<GpuMlp, MlpError> {
        config.check()?;
        let program = Program::build(device, KERNELS, "-cl-std=CL1.2")?;
        let f = |name: &str| program.function(name);
        let k = Kernels {
            linear_fwd: f("linear_fwd")?,
            mse_loss: f("mse_loss")?,
            mse_grad: f("mse_grad")?,
            matmul: f("matmul")?,
            grad_b: f("grad_b")?,
            relu_mask: f("relu_mask")?,
            sgd: f("sgd")?,
        };
        let copy = xpu_stream::get_stream_from_pool(0, device)?;
        let compute = xpu_stream::get_stream_from_pool(0, device)?;
        let state = MlpState::new(&config);
        let c = config;
        // Uploads on the copy stream; the buffers are allocated for the compute stream (their
        // allocation stream, where they are used and freed), so the copies are recorded uses.
        let up = |v: &[f32]| -> Result<DeviceBuffer<f32>, MemoryError> {
            let mut buf = DeviceBuffer::new(v.len(), &compute)?;
            copy_htod(&copy, v, &mut buf)?;
            Ok(buf)
        };
        let new = |n: usize| DeviceBuffer::<f32>::new(n, &compute);
        let layer = |w: &[f32], b: &[f32], (fan_in, fan_out), relu| -> Result<Layer, MemoryError> {
            Ok(Layer {
                w: up(w)?,
                b: up(b)?,
                dw: new(fan_in * fan_out)?,
                db: new(fan_out)?,
                out: new(c.batch * fan_out)?,
                dz: new(c.batch * fan_out)?,
                fan_in,
                fan_out,
                relu,
            })
        };
        let l1 = layer(&state.w1, &state.b1, (c.inputs, c.hidden), true)?;
        let l2 = layer(&state.w2, &state.b2, (c.hidden, c.outputs), false)?;
        let mut uploaded = Event::default();
        uploaded.record(&copy)?;
        uploaded.wait(&compute)?;
        // Two slots when the batches alternate (one is uploaded while the other is read); one
        // for full-batch training, uploaded once.
        let slots = (0..c.batches().min(2))
            .map(|_| {
                Ok(Slot {
                    x: new(c.batch * c.inputs)?,
                    y: new(c.batch * c.outputs)?,
                    batch: None,
                    uploaded: Event::default(),
                    consumed: None,
                })
            })
            .collect::<Result<Vec<_>, MemoryError>>()?;
        Ok(GpuMlp {
            config,
            compute,
            copy,
            k,
            data: state,
            step: 0,
            slots,
            hook: Hook::default(),
            l1,
            l2,
        })
    }

    /// Makes step `step`'s minibatch resident in its slot: unless the slot holds it already,
    /// the copy stream waits for the last step that read the slot, uploads the rows and
    /// records the slot's upload event. Non-blocking.
    fn prefetch(&mut self, step: usize) -> Result<(), MlpError> {
        let c = self.config;
        let batch = step % c.batches();
        let at = step % self.slots.len();
        let slot = &mut self.slots[at];
        if slot.batch == Some(batch) {
            return Ok(());
        }
        if let Some(consumed) = &slot.consumed {
            consumed.wait(&self.copy)?;
        }
        self.hook.call(PipelinePoint {
            stage: PipelineStage::BeforeUpload,
            step,
            slot: at,
            stream: self.copy,
            x: &slot.x,
            y: &slot.y,
        })?;
        let (xr, yr) = c.batch_rows(step);
        copy_htod(&self.copy, &self.data.x[xr], &mut slot.x)?;
        copy_htod(&self.copy, &self.data.y[yr], &mut slot.y)?;
        slot.uploaded.record(&self.copy)?;
        slot.batch = Some(batch);
        Ok(())
    }

    /// Installs a hook called at each [`PipelinePoint`] while [`GpuMlp::train`] enqueues the
    /// minibatch pipeline (replacing any earlier one). A test seam, not part of the model's
    /// API: the hook may block the copy or the compute stream with a gate, so that a test
    /// checks that compute never reads a slot before its upload completed and that an upload
    /// never overwrites a slot the compute stream has not consumed. Its error ends `train`.
    ///
    /// Soundness is unchanged: the hook sees the slots by shared reference, only while it
    /// runs, and can only enqueue stream-ordered commands on them through the safe API; no
    /// kernel's bounds depend on the slots' contents.
    #[doc(hidden)]
    pub fn set_pipeline_hook(
        &mut self,
        hook: impl FnMut(PipelinePoint<'_>) -> Result<(), MlpError> + Send + 'static,
    ) {
        self.hook = Hook(Some(Box::new(hook)));
    }

    /// The configuration.
    pub fn config(&self) -> &MlpConfig {
        &self.config
    }

    /// The compute stream.
    pub fn stream(&self) -> Stream {
        self.compute
    }

    /// `layer`'s forward pass `out = act(x·w + b)`, for its input `x` of `m × k` (`m` the
    /// batch, `k × n` weights).
    #[allow(unsafe_code)]
    fn linear(&self, layer: &Layer, x: &DeviceBuffer<f32>) -> Result<(), KernelError> {
        let Layer { out, w, b, .. } = layer;
        let (m, k, n) = (self.config.batch, layer.fan_in, layer.fan_out);
        debug_assert!(out.len() == m * n && x.len() == m * k && w.len() == k * n && b.len() == n);
        // SAFETY: the callers pass x of exactly m·k elements (the config's sizes), the layer's
        // out, w and b have m·n, k·n and n (`GpuMlp::new` allocates them so; all asserted
        // above in debug builds); work-items at or past m·n return; the others read x[m·k..],
        // w[..k·n], b[..n] inside them and write out[i], i < m·n; the buffers are private,
        // reached by the host only through stream-ordered copies; the loop over k ends.
        unsafe {
            self.compute
                .launch(&self.k.linear_fwd, &[m * n], None)?
                .args((out, x, w, b, u(m), u(k), u(n), u32::from(layer.relu)))?
                .enqueue()
        }
    }

    /// `c = op(a)·op(b)` by the `matmul` kernel (`m × n`, each element summed over `k` in
    /// order from 0), where `op(a)` (`m × k`) and `op(b)` (`k × n`) are read from their
    /// row-major buffers as [`Transpose`] says.
    #[allow(unsafe_code)]
    fn matmul(
        &self,
        c: &DeviceBuffer<f32>,
        (a, ta): (&DeviceBuffer<f32>, Transpose),
        (b, tb): (&DeviceBuffer<f32>, Transpose),
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), KernelError> {
        let (a_rs, a_cs) = ta.strides(m, k);
        let (b_rs, b_cs) = tb.strides(k, n);
        debug_assert!(c.len() == m * n && a.len() == m * k && b.len() == k * n);
        // SAFETY: the callers pass c, a and b of exactly m·n, m·k and k·n elements (a
        // layer's buffers, allocated so by `GpuMlp::new`, and a slot's x of the config's
        // sizes; asserted above in debug builds); work-items at or past m·n return; the
        // others write c[i], i < m·n, and read a[r·a_rs + t·a_cs] and b[t·b_rs + q·b_cs] with
        // r < m, t < k, q < n, at most m·k - 1 and k·n - 1 for either layout
        // (`Transpose::strides`); private buffers; the loop over k ends.
        unsafe {
            self.compute
                .launch(&self.k.matmul, &[m * n], None)?
                .args((
                    c,
                    a,
                    b,
                    u(m),
                    u(k),
                    u(n),
                    u(a_rs),
                    u(a_cs),
                    u(b_rs),
                    u(b_cs),
                ))?
                .enqueue()
        }
    }

    /// `layer`'s gradients `dw = xᵀ·g` (`k × n`) and `db = Σ_rows g` (`n`), for its input `x`
    /// of `m × k` (`m` the batch) and `g` its `dz`, `m × n`.
    #[allow(unsafe_code)]
    fn grads(&self, layer: &Layer, x: &DeviceBuffer<f32>) -> Result<(), KernelError> {
        let Layer { dw, db, dz: g, .. } = layer;
        let (m, k, n) = (self.config.batch, layer.fan_in, layer.fan_out);
        self.matmul(dw, (x, Transpose::Yes), (g, Transpose::No), (k, m, n))?;
        debug_assert!(db.len() == n && g.len() == m * n);
        // SAFETY: db has n elements, g m·n (`GpuMlp::new` allocates them so); work-items
        // past n return; reads g[r·n + c] with r < m, c < n; private buffers; bounded loop.
        unsafe {
            self.compute
                .launch(&self.k.grad_b, &[n], None)?
                .args((db, g, u(m), u(n)))?
                .enqueue()
        }
    }

    /// The gradient by `layer`'s input, `g·wᵀ` (`m × k` for `g` its `dz`, `m × n`, and its
    /// `k × n` weights), into `below.dz`, the gradient by the pre-activations of the layer
    /// that computed that input, `below.out`: made zero where `below` has a ReLU and its
    /// output is not positive (ReLU's derivative).
    #[allow(unsafe_code)]
    fn input_grad(&self, layer: &Layer, below: &Layer) -> Result<(), KernelError> {
        let (m, k, n) = (self.config.batch, layer.fan_in, layer.fan_out);
        let (d, h) = (&below.dz, &below.out);
        self.matmul(
            d,
            (&layer.dz, Transpose::No),
            (&layer.w, Transpose::Yes),
            (m, n, k),
        )?;
        if !below.relu {
            return Ok(());
        }
        debug_assert!(d.len() == m * k && h.len() == m * k);
        // SAFETY: below's dz and out both have m·k elements (`GpuMlp::new` allocates them
        // batch × fan_out, below's fan_out being layer's fan_in); work-items at or past m·k
        // return; the others read h[i] and read and write d[i], i < m·k; private buffers; no
        // loop.
        unsafe {
            self.compute
                .launch(&self.k.relu_mask, &[m * k], None)?
                .args((d, h, u(m * k)))?
                .enqueue()
        }
    }

    /// An SGD update of `layer`: its weights, then its biases.
    fn sgd(&self, layer: &Layer) -> Result<(), KernelError> {
        self.sgd_buffer(&layer.w, &layer.dw)?;
        self.sgd_buffer(&layer.b, &layer.db)
    }

    /// `w -= lr · g`, both of `w.len()` elements.
    #[allow(unsafe_code)]
    fn sgd_buffer(&self, w: &DeviceBuffer<f32>, g: &DeviceBuffer<f32>) -> Result<(), KernelError> {
        let n = w.len();
        debug_assert_eq!(g.len(), n);
        // SAFETY: w and g both have n elements (parameter and its gradient, the same config
        // size); work-items past n return; private buffers; no loop.
        unsafe {
            self.compute
                .launch(&self.k.sgd, &[n], None)?
                .args((w, g, self.config.learning_rate, u(n)))?
                .enqueue()
        }
    }

    /// Enqueues SGD step `self.step` on the compute stream, after its minibatch's upload (see
    /// [`GpuMlp::prefetch`]); its loss goes to `losses[index]`.
    #[allow(unsafe_code)]
    fn step_into(&mut self, losses: &DeviceBuffer<f32>, index: usize) -> Result<(), MlpError> {
        let c = self.config;
        let (m, o) = (c.batch, c.outputs);
        let n = m * o;
        let at = self.step % self.slots.len();
        self.slots[at].uploaded.wait(&self.compute)?;
        let slot = &self.slots[at];
        self.hook.call(PipelinePoint {
            stage: PipelineStage::BeforeRead,
            step: self.step,
            slot: at,
            stream: self.compute,
            x: &slot.x,
            y: &slot.y,
        })?;
        let (x, y) = (&slot.x, &slot.y);
        let (h, out) = (&self.l1.out, &self.l2.out);
        let g = &self.l2.dz;
        self.linear(&self.l1, x)?;
        self.linear(&self.l2, h)?;
        // SAFETY: one work-item; it writes losses[index] only when index < losses.len()
        // (passed as n_losses) and reads out[..n], y[..n], both m·o = n elements; private
        // buffers (losses is borrowed by this call and not host-visible); bounded loop.
        unsafe {
            self.compute
                .launch(&self.k.mse_loss, &[1], None)?
                .args((
                    losses,
                    u32::try_from(index).unwrap_or(u32::MAX),
                    u32::try_from(losses.len()).unwrap_or(u32::MAX),
                    out,
                    y,
                    u(n),
                ))?
                .enqueue()?;
        }
        // SAFETY: g, out, y have n = m·o elements; work-items past n return; private
        // buffers; no loop.
        unsafe {
            self.compute
                .launch(&self.k.mse_grad, &[n], None)?
                .args((g, out, y, c.grad_scale(), u(n)))?
                .enqueue()?;
        }
        self.grads(&self.l2, h)?;
        self.input_grad(&self.l2, &self.l1)?;
        self.grads(&self.l1, x)?;
        let mut consumed = Event::default();
        consumed.record(&self.compute)?;
        self.slots[at].consumed = Some(consumed);
        self.sgd(&self.l1)?;
        self.sgd(&self.l2)?;
        self.step += 1;
        Ok(())
    }

    /// Trains `steps` SGD steps (enqueued back to back, no host round trip; each step's
    /// minibatch upload is enqueued on the copy stream before the previous step's kernels, so
    /// that it overlaps them), then reads the per-step losses back (the loss of each forward
    /// pass before its update). A second call continues with the next minibatch.
    ///
    /// # Errors
    /// Launch, allocation and copy errors.
    pub fn train(&mut self, steps: usize) -> Result<Vec<f32>, MlpError> {
        if steps == 0 {
            return Ok(Vec::new());
        }
        let losses = DeviceBuffer::<f32>::zeroed(steps, &self.compute)?;
        self.prefetch(self.step)?;
        for s in 0..steps {
            if s + 1 < steps {
                self.prefetch(self.step + 1)?;
            }
            self.step_into(&losses, s)?;
        }
        // The device sums the squared errors; the mean is taken here as on the CPU (an OpenCL
        // division may be off by 2.5 ulp, OpenCL C 1.2 §7.4).
        let n = (self.config.batch * self.config.outputs) as f32;
        let sums = losses.to_vec(&self.compute)?;
        Ok(sums.into_iter().map(|s| s / n).collect())
    }

    /// The current parameters `(w1, b1, w2, b2)`, read back on the compute stream.
    ///
    /// # Errors
    /// Copy errors.
    pub fn parameters(&self) -> Result<[Vec<f32>; 4], MlpError> {
        let s = &self.compute;
        Ok([
            self.l1.w.to_vec(s)?,
            self.l1.b.to_vec(s)?,
            self.l2.w.to_vec(s)?,
            self.l2.b.to_vec(s)?,
        ])
    }
}

/// Where the device's losses leave the reference's: the first step off by more than the
/// tolerance.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "step {step}: device loss {gpu:e} vs CPU loss {cpu:e} (relative difference {relative:e} > \
     {tolerance:e})"
)]
pub struct LossMismatch {
    /// The step (0-based); `usize::MAX` when the lengths differ.
    pub step: usize,
    /// The device's loss.
    pub gpu: f32,
    /// The reference's loss.
    pub cpu: f32,
    /// `|gpu - cpu| / |cpu|` (`|gpu - cpu|` when `cpu` is 0).
    pub relative: f64,
    /// The tolerance given.
    pub tolerance: f64,
}

/// Checks every step's loss: `|gpu - cpu| <= tolerance · |cpu|` (absolute for a zero CPU
/// loss). A NaN fails.
///
/// # Errors
/// The first [`LossMismatch`], also when the lengths differ.
pub fn compare_losses(gpu: &[f32], cpu: &[f32], tolerance: f64) -> Result<(), LossMismatch> {
    if gpu.len() != cpu.len() {
        return Err(LossMismatch {
            step: usize::MAX,
            gpu: gpu.len() as f32,
            cpu: cpu.len() as f32,
            relative: f64::INFINITY,
            tolerance,
        });
    }
    for (step, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let diff = (f64::from(g) - f64::from(c)).abs();
        let relative = if c == 0.0 {
            diff
        } else {
            diff / f64::from(c).abs()
        };
        if relative.is_nan() || relative > tolerance {
            return Err(LossMismatch {
                step,
                gpu: g,
                cpu: c,
                relative,
                tolerance,
            });
        }
    }
    Ok(())
}
