//! Host cost of one small element-wise op on xpu: enqueues `N` adds of two `[16, 64]` float
//! tensors through burn's tensor API on `Xpu` (no autodiff), then on `XpuFusion`, without
//! synchronizing in between, and prints the host nanoseconds per op (the enqueue loop alone, wall clock and
//! the enqueuing thread's own CPU time from `/proc/thread-self/schedstat`, which leaves out
//! the driver's threads that run the kernels) and per op including the final
//! synchronization. Beside it, in the same run, the raw floor: the same element-wise add
//! (1,024 work-items) launched through `xpu-device` alone, four `clSetKernelArg` and one
//! `clEnqueueNDRangeKernel` per op on the same stream's queue, no allocation, on three
//! buffers of their own (the floor), and on three sub-buffers of one buffer (what an
//! allocator block is as a plain argument), and the enqueue alone (the arguments set once,
//! before the loop: what no launch layer can go under). A measuring tool for the launch path
//! (see docs/performance.md).
//!
//! `cargo run --release -p xpu-burn --example op_overhead -- [N]` (default 10,000).

use std::time::Instant;

use xpu::xpu_device::backend::{Buffer, Kernel, MemFlags, Program};

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use xpu_burn::{Xpu, XpuDevice, XpuFusion};

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
    measure::<Xpu>(n, &device, "Xpu");
    // On XpuFusion the adds are recorded and run when the stream drains: the loop's adds
    // whose results are dropped join runs, so this is the host cost per op recorded and
    // executed, in fewer launches (see the launch count).
    measure::<XpuFusion>(n, &device, "XpuFusion");
    // Where fusion pays on any device: memory traffic. Adam's update of one large parameter
    // (burn-optim's 14 element-wise ops) reads and writes it once fused, 14 times unfused.
    adam::<Xpu>(&device, "Xpu");
    adam::<XpuFusion>(&device, "XpuFusion");
    for (sub, every_time, what) in [
        (false, true, "4 kernel arguments set each time, buffers"),
        (true, true, "4 kernel arguments set each time, sub-buffers"),
        (false, false, "the enqueue alone, arguments set once"),
    ] {
        match raw_floor(n, sub, every_time) {
            Ok(ns) => println!(
                "raw floor ({n} launches of the same add through xpu-device, {what}): {ns:.0} ns \
                 per launch enqueued"
            ),
            Err(e) => eprintln!("op_overhead: raw floor failed: {e}"),
        }
    }
    std::process::ExitCode::SUCCESS
}

/// Enqueues `n` adds of two `[16, 64]` tensors on backend `B` (after 100 to warm up) and
/// prints the host cost per op, enqueued and with the final sync, and the launches taken.
fn measure<B: Backend<Device = XpuDevice>>(n: usize, device: &XpuDevice, name: &str) {
    let a = Tensor::<B, 2>::random([16, 64], Distribution::Default, device);
    let b = Tensor::<B, 2>::random([16, 64], Distribution::Default, device);
    // Warm-up: builds the kernel, fills the allocator's cache.
    for _ in 0..100 {
        let _ = a.clone() + b.clone();
    }
    B::sync(device);
    let launches = xpu_burn::runtime::launch_count();
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
    B::sync(device);
    let total = start.elapsed();
    let launches = xpu_burn::runtime::launch_count() - launches;
    drop(last);
    println!(
        "{name}: {n} adds of [16, 64] f32: {:.0} ns per op enqueued ({} ns of this thread's CPU), {:.0} ns per op with the sync, {launches} launches",
        enqueue.as_nanos() as f64 / n as f64,
        cpu.map_or_else(|| "?".to_owned(), |c| format!("{c:.0}")),
        total.as_nanos() as f64 / n as f64
    );
}

/// Times Adam's update (burn-optim's sequence of ops: the moments, their bias corrections,
/// the step) of a `[4096, 4096]` f32 parameter on backend `B`, 20 times after 3 to warm up,
/// and prints the milliseconds per update and the launches per update (on `XpuFusion` a run
/// may span consecutive updates: fewer than one launch per update).
fn adam<B: Backend<Device = XpuDevice>>(device: &XpuDevice, name: &str) {
    let shape = [4096, 4096];
    let mut p = Tensor::<B, 2>::random(shape, Distribution::Default, device);
    let g = Tensor::<B, 2>::random(shape, Distribution::Default, device);
    let mut m = Tensor::<B, 2>::zeros(shape, device);
    let mut v = Tensor::<B, 2>::zeros(shape, device);
    let (b1, b2, eps, lr) = (0.9f32, 0.999f32, 1e-5f32, 1e-3f32);
    let step = |t: i32, p: Tensor<B, 2>, m: Tensor<B, 2>, v: Tensor<B, 2>| {
        let m = m.mul_scalar(b1).add(g.clone().mul_scalar(1.0 - b1));
        let v = v
            .mul_scalar(b2)
            .add(g.clone().powi_scalar(2).mul_scalar(1.0 - b2));
        let mc = m.clone().div_scalar(1.0 - b1.powi(t));
        let vc = v.clone().div_scalar(1.0 - b2.powi(t));
        let update = mc.div(vc.sqrt().add_scalar(eps)).mul_scalar(lr);
        (p.sub(update), m, v)
    };
    let runs = 20;
    let mut launches = 0;
    let mut start = Instant::now();
    for t in 1..=3 + runs {
        if t == 4 {
            B::sync(device);
            launches = xpu_burn::runtime::launch_count();
            start = Instant::now();
        }
        (p, m, v) = step(t, p, m, v);
    }
    B::sync(device);
    let ms = start.elapsed().as_secs_f64() * 1e3 / runs as f64;
    let launches = (xpu_burn::runtime::launch_count() - launches) as f64 / runs as f64;
    println!(
        "{name}: Adam's update of a [4096, 4096] f32 parameter: {ms:.3} ms per update, \
         {launches:.2} launches per update"
    );
}

/// The same add as burn's, launched `n` times through `xpu-device` on three buffers, or
/// three sub-buffers of one with `sub`, its arguments set before each launch or, without
/// `every_time`, once (see the module docs): host ns per launch enqueued, without the final
/// drain.
fn raw_floor(n: usize, sub: bool, every_time: bool) -> Result<f64, Box<dyn std::error::Error>> {
    const SRC: &str = r"
__kernel void add(__global float *c, __global const float *a, __global const float *b, uint n) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
";
    let dev = xpu::xpu_device::device(0)?;
    let ctx = dev.context()?;
    let seg = Buffer::new(ctx, 3 * 4096, MemFlags::default())?;
    let (c, a, b) = if sub {
        (
            seg.sub_buffer(0, 4096)?,
            seg.sub_buffer(4096, 4096)?,
            seg.sub_buffer(8192, 4096)?,
        )
    } else {
        let plain = || Buffer::new(ctx, 4096, MemFlags::default());
        (plain()?, plain()?, plain()?)
    };
    let program = Program::build(ctx, dev.id(), SRC)?;
    let mut k = Kernel::new(&program, "add")?;
    let stream = xpu::current_stream(Some(0))?;
    let q = stream.queue()?;
    q.fill(&seg, &[0; 4], 0, 3 * 4096, &[])?;
    for buf in [&c, &a, &b] {
        q.fill(buf, &[0; 4], 0, 4096, &[])?;
    }
    let set_args = |k: &mut Kernel| -> Result<(), Box<dyn std::error::Error>> {
        k.set_arg_buffer(0, &c)?;
        k.set_arg_buffer(1, &a)?;
        k.set_arg_buffer(2, &b)?;
        k.set_arg(3, 1024u32)?;
        Ok(())
    };
    set_args(&mut k)?;
    let mut round = |n: usize| -> Result<f64, Box<dyn std::error::Error>> {
        let t = Instant::now();
        for _ in 0..n {
            if every_time {
                set_args(&mut k)?;
            }
            // SAFETY: 1,024 work-items touch the 1,024 floats of three 4 KiB buffers (or
            // sub-buffers), which live until the queue is drained below.
            unsafe { q.enqueue_kernel_without_event(&k, &[1024], None, &[]) }?;
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        q.finish()?;
        Ok(ns)
    };
    round(100)?;
    round(n)
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
