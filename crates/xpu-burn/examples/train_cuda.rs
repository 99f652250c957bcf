//! The training example (`train.rs`: the same model, data, optimizer and loop, compiled from
//! that file) on burn's own CUDA backend (`burn-cuda` 0.19.1, fusion and autotune on), for a
//! like-for-like step time against xpu on the same GPU. Needs the `cuda-compare` feature
//! (off by default, so CI never builds it) and, at run time, the CUDA driver (libcuda) and
//! NVRTC (a CUDA toolkit, or PyTorch's wheels: `site-packages/nvidia/*/lib` on
//! `LD_LIBRARY_PATH`).
//!
//! `cargo run --release -p xpu-burn --features cuda-compare --example train_cuda -- [--steps N] [--batch B]`

#[path = "train.rs"]
#[allow(dead_code)]
mod xpu_train;

use burn::tensor::backend::Backend;
use burn_autodiff::Autodiff;
use burn_cuda::{Cuda, CudaDevice};

fn main() -> std::process::ExitCode {
    let mut steps = 300usize;
    let mut batch_size = 64usize;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("--steps", Some(v)) => steps = v,
            ("--batch", Some(v)) => batch_size = v,
            _ => {
                eprintln!("usage: train_cuda [--steps N] [--batch B]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let device = CudaDevice::default();
    println!(
        "training train.rs's transformer block on {} for {steps} steps, batch {batch_size}",
        <Cuda as Backend>::name(&device)
    );
    let (first, end, step_ms) = xpu_train::train::<Autodiff<Cuda>>(steps, batch_size, &device);
    println!("loss {first:.4} -> {end:.4}; {step_ms:.3} ms per step (after 5 warm-up steps)");
    if end < 0.5 * first {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("train_cuda: the loss did not fall by half ({first} -> {end})");
        std::process::ExitCode::FAILURE
    }
}
