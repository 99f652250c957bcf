//! Trains a small transformer block with burn on xpu: `Autodiff<Xpu>`, burn's `nn` modules
//! (multi-head self-attention, layer norm, linear layers, GELU) and burn's Adam optimizer, on
//! generated data (sequence classification: is the sum of the first feature over the
//! sequence positive?). Prints the loss as it falls and the mean step time; fails unless the
//! loss at the end is under half of the loss at the start.
//!
//! `cargo run --release -p xpu-burn --example train -- [--steps N] [--batch B] [--fusion]`
//! (defaults: 300 steps, batch 64, no fusion; `--fusion` trains on `Autodiff<XpuFusion>`,
//! burn-fusion over xpu, whose element-wise runs are one kernel each; `cargo xtask test`
//! runs a short version of both).

use std::process::ExitCode;
use std::time::Instant;

use burn::module::Module;
use burn::nn::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, ElementConversion, Int, Tensor};
use burn_autodiff::Autodiff;
use xpu_burn::{Xpu, XpuDevice, XpuFusion};

const SEQ: usize = 16;
const D_MODEL: usize = 64;
const HEADS: usize = 4;
const CLASSES: usize = 2;

/// A pre-norm transformer block, mean-pooled, with a linear classifier head.
#[derive(Module, Debug)]
struct Model<B: Backend> {
    embed: Linear<B>,
    norm1: LayerNorm<B>,
    attn: MultiHeadAttention<B>,
    norm2: LayerNorm<B>,
    ff1: Linear<B>,
    ff2: Linear<B>,
    gelu: Gelu,
    head: Linear<B>,
}

impl<B: Backend> Model<B> {
    fn new(device: &B::Device) -> Self {
        Model {
            embed: LinearConfig::new(D_MODEL, D_MODEL).init(device),
            norm1: LayerNormConfig::new(D_MODEL).init(device),
            attn: MultiHeadAttentionConfig::new(D_MODEL, HEADS)
                .with_dropout(0.0)
                .init(device),
            norm2: LayerNormConfig::new(D_MODEL).init(device),
            ff1: LinearConfig::new(D_MODEL, 4 * D_MODEL).init(device),
            ff2: LinearConfig::new(4 * D_MODEL, D_MODEL).init(device),
            gelu: Gelu::new(),
            head: LinearConfig::new(D_MODEL, CLASSES).init(device),
        }
    }

    /// `[batch, SEQ, D_MODEL]` to logits `[batch, CLASSES]`.
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let h = self.embed.forward(x);
        let a = self
            .attn
            .forward(MhaInput::self_attn(self.norm1.forward(h.clone())))
            .context;
        let h = h + a;
        let f = self.ff2.forward(
            self.gelu
                .forward(self.ff1.forward(self.norm2.forward(h.clone()))),
        );
        let h = h + f;
        let pooled = h.mean_dim(1).squeeze_dim::<2>(1);
        self.head.forward(pooled)
    }
}

/// A batch of inputs and labels, generated on the device.
fn batch<B: Backend>(size: usize, device: &B::Device) -> (Tensor<B, 3>, Tensor<B, 1, Int>) {
    let x = Tensor::<B, 3>::random([size, SEQ, D_MODEL], Distribution::Normal(0.0, 1.0), device);
    let first = x
        .clone()
        .slice([0..size, 0..SEQ, 0..1])
        .sum_dim(1)
        .reshape([size]);
    let y = first.greater_elem(0.0).int();
    (x, y)
}

pub(crate) fn train<B: AutodiffBackend>(
    steps: usize,
    batch_size: usize,
    device: &B::Device,
) -> (f32, f32, f64) {
    B::seed(device, 42);
    let mut model = Model::<B>::new(device);
    let mut optim = AdamConfig::new().init::<B, Model<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let (mut first, mut last) = (0.0f32, 0.0f32);
    let mut window = Vec::new();
    let mut timed = 0.0f64;
    let warmup = steps.min(5);
    let mut start = Instant::now();
    let mut launches = 0;
    for step in 0..steps {
        if step == warmup {
            B::sync(device);
            start = Instant::now();
            launches = xpu_burn::runtime::launch_count();
        }
        let (x, y) = batch::<B>(batch_size, device);
        let logits = model.forward(x);
        let loss = loss_fn.forward(logits, y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
        // Reading the loss every 10 steps (and at the ends) syncs the stream; the others don't.
        if step % 10 == 0 || step + 1 == steps {
            let v = loss.into_scalar().elem::<f32>();
            window.push(v);
            if step == 0 {
                first = v;
            }
            last = v;
            println!("step {step:4}  loss {v:.4}");
        }
    }
    B::sync(device);
    if steps > warmup {
        timed = start.elapsed().as_secs_f64() * 1e3 / (steps - warmup) as f64;
        let per_step = (xpu_burn::runtime::launch_count() - launches) / (steps - warmup) as u64;
        println!("{per_step} kernel launches per step");
    }
    // The last reading alone is noisy: compare the mean of the last three readings.
    let tail: Vec<f32> = window.iter().rev().take(3).copied().collect();
    let end = tail.iter().sum::<f32>() / tail.len() as f32;
    let _ = last;
    (first, end, timed)
}

/// The command line `[--steps N] [--batch B] [--fusion]` (defaults 300, 64, off) of the
/// example `prog`, or the exit code after printing its usage.
pub(crate) fn parse_args(prog: &str) -> Result<(usize, usize, bool), ExitCode> {
    let mut steps = 300usize;
    let mut batch_size = 64usize;
    let mut fusion = false;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--fusion" {
            fusion = true;
            continue;
        }
        let v = it.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("--steps", Some(v)) => steps = v,
            ("--batch", Some(v)) => batch_size = v,
            _ => {
                eprintln!("usage: {prog} [--steps N] [--batch B] [--fusion]");
                return Err(ExitCode::from(2));
            }
        }
    }
    Ok((steps, batch_size, fusion))
}

/// Prints the result of [`train`] and the example's verdict: success when the loss fell
/// by half.
pub(crate) fn report(prog: &str, (first, end, step_ms): (f32, f32, f64)) -> ExitCode {
    println!("loss {first:.4} -> {end:.4}; {step_ms:.3} ms per step (after 5 warm-up steps)");
    if end < 0.5 * first {
        ExitCode::SUCCESS
    } else {
        eprintln!("{prog}: the loss did not fall by half ({first} -> {end})");
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let (steps, batch_size, fusion) = match parse_args("train") {
        Ok(v) => v,
        Err(code) => return code,
    };
    if let Err(e) = xpu::init() {
        eprintln!("train: no OpenCL device: {e}");
        return ExitCode::FAILURE;
    }
    let device = XpuDevice::default();
    let name = if fusion {
        <XpuFusion as Backend>::name(&device)
    } else {
        <Xpu as Backend>::name(&device)
    };
    println!(
        "training a transformer block ({SEQ}x{D_MODEL}, {HEADS} heads) on {name} for {steps} steps, batch {batch_size}"
    );
    let result = if fusion {
        train::<Autodiff<XpuFusion>>(steps, batch_size, &device)
    } else {
        train::<Autodiff<Xpu>>(steps, batch_size, &device)
    };
    let code = report("train", result);
    println!(
        "{}",
        xpu::memory_summary(Some(device.index), true).unwrap_or_default()
    );
    code
}
