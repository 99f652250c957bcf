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
    // burn-cuda fuses always (`--fusion` changes nothing here).
    let (steps, batch_size, _fusion) = match xpu_train::parse_args("train_cuda") {
        Ok(v) => v,
        Err(code) => return code,
    };
    let device = CudaDevice::default();
    println!(
        "training train.rs's transformer block on {} for {steps} steps, batch {batch_size}",
        <Cuda as Backend>::name(&device)
    );
    let result = xpu_train::train::<Autodiff<Cuda>>(steps, batch_size, &device);
    xpu_train::report("train_cuda", result)
}
