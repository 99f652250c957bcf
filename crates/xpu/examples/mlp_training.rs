//! A two-layer MLP trained with minibatch SGD on the device by OpenCL C kernels (matmul with
//! bias, ReLU, loss, backward, update: `support/mlp.rs`, the example model): the parameters are uploaded on
//! a copy stream before training, and each step's minibatch (64 of 256 samples) is uploaded on
//! the copy stream into one of two device slots while the previous step computes on the
//! compute stream, ordered by events (the compute stream waits for the slot's upload; the copy
//! stream waits for the step that last read the slot before overwriting it). Each step's loss
//! is checked against a CPU reference with the same initialization (a fixed-seed SplitMix64),
//! the same data and batches and the same operation order. Exits non-zero when a loss differs
//! by more than 1e-4 relative.
//!
//! `cargo run -p xpu --example mlp_training [STEPS]` (default 300)

use std::time::Instant;

#[allow(dead_code)]
#[path = "support/mlp.rs"]
mod mlp;

use mlp::{compare_losses, CpuMlp, GpuMlp, MlpConfig};

/// Largest relative difference allowed between a device loss and the CPU's.
const TOLERANCE: f64 = 1e-4;

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let steps: usize = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 300,
    };
    let device = xpu::current_device()?;
    let config = MlpConfig {
        batch: 64,
        ..MlpConfig::default()
    };
    println!(
        "MLP {}-{}-{} on {} samples in minibatches of {}, lr {}, {steps} steps on device \
         {device} ({})",
        config.inputs,
        config.hidden,
        config.outputs,
        config.samples,
        config.batch,
        config.learning_rate,
        xpu::get_device_name(Some(device))?
    );

    let start = Instant::now();
    let mut gpu = GpuMlp::new(device, config)?;
    let gpu_losses = gpu.train(steps)?;
    let gpu_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let cpu_losses = CpuMlp::new(config).train(steps);
    let cpu_s = start.elapsed().as_secs_f64();

    for (step, (g, c)) in gpu_losses.iter().zip(&cpu_losses).enumerate() {
        if step % 50 == 0 || step + 1 == steps {
            println!("step {step:4}: loss {g:.6} (CPU {c:.6})");
        }
    }
    compare_losses(&gpu_losses, &cpu_losses, TOLERANCE)?;
    let identical = gpu_losses
        .iter()
        .zip(&cpu_losses)
        .filter(|(g, c)| g.to_bits() == c.to_bits())
        .count();
    if let (Some(g), Some(c)) = (gpu_losses.last(), cpu_losses.last()) {
        println!(
            "final loss: device {g:.8}, CPU {c:.8} (every step within {TOLERANCE:e} relative, \
             {identical}/{steps} bit-identical); device {gpu_s:.3} s (build included), \
             CPU {cpu_s:.3} s"
        );
        if steps >= 100 && g >= &(gpu_losses[0] * 0.5) {
            return Err(format!("the loss did not halve: {} -> {g}", gpu_losses[0]).into());
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    run().map_or_else(
        |e| {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        },
        |()| std::process::ExitCode::SUCCESS,
    )
}
