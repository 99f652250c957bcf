//! Host cost of one small element-wise op on xpu: enqueues `N` adds of two `[16, 64]` float
//! tensors through burn's tensor API on `Xpu` (no autodiff), without synchronizing in
//! between, and prints the host nanoseconds per op (the enqueue loop alone, wall clock and
//! the enqueuing thread's own CPU time from `/proc/thread-self/schedstat`, which leaves out
//! the driver's threads that run the kernels) and per op including the final
//! synchronization. A measuring tool for the launch path (see docs/performance.md).
//!
//! `cargo run --release -p xpu-burn --example op_overhead -- [N]` (default 10,000).

use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use xpu_burn::{Xpu, XpuDevice};

fn main() -> std::process::ExitCode {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    if let Err(e) = xpu::init() {
        eprintln!("op_overhead: no OpenCL device: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let device = XpuDevice::default();
    let a = Tensor::<Xpu, 2>::random([16, 64], Distribution::Default, &device);
    let b = Tensor::<Xpu, 2>::random([16, 64], Distribution::Default, &device);
    // Warm-up: builds the kernel, fills the allocator's cache.
    for _ in 0..100 {
        let _ = a.clone() + b.clone();
    }
    Xpu::sync(&device);
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let mut last = None;
    for _ in 0..n {
        last = Some(a.clone() + b.clone());
    }
    let enqueue = start.elapsed();
    let cpu = thread_cpu_ns()
        .zip(cpu0)
        .map(|(b, a)| (b - a) as f64 / n as f64);
    Xpu::sync(&device);
    let total = start.elapsed();
    drop(last);
    println!(
        "{n} adds of [16, 64] f32: {:.0} ns per op enqueued ({} ns of this thread's CPU), {:.0} ns per op with the sync",
        enqueue.as_nanos() as f64 / n as f64,
        cpu.map_or_else(|| "?".to_owned(), |c| format!("{c:.0}")),
        total.as_nanos() as f64 / n as f64
    );
    std::process::ExitCode::SUCCESS
}

/// The calling thread's CPU time so far, ns (Linux: the first field of
/// `/proc/thread-self/schedstat`); `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
