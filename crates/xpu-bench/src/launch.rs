//! Speed figures of the launch layer (`xpu-kernel`) for `xpu bench`, with their floors
//! measured in the same run: `launch_4args_ns` vs `raw_launch_4args_ns`, `program_cold_ms` vs `program_cached_ms`;
//! and [`clblast`]: CLBlast's SGEMM on xpu streams and blocks vs on a plain queue.

use std::time::Instant;

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_device::backend::{Buffer, Kernel, MemFlags, QueueOptions};
use xpu_kernel::graph::{Graph, GraphError, ReplayMode};
use xpu_kernel::{DeviceBuffer, Function, KernelCache, KernelError, LaunchExt, MemoryError};
use xpu_kernel::{Program, ProgramOrigin};
use xpu_stream::ExternalStream;

const SRC: &str = r"
__kernel void axpy4(__global float *y, __global const float *x, float a, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
";

/// Runs the figures on `device`; `launches` per measured round (`quick`: fewer).
///
/// - `launch_4args_ns`: one launch through [`LaunchExt::launch`] with four arguments (two
///   caching-allocator blocks, a float, a uint), per launch, including the stream's
///   execution of a one-work-item kernel (the queue is drained at the end of each round).
/// - `raw_launch_4args_ns`: the same kernel launched through `xpu-device` directly: the four
///   checked `clSetKernelArg` of [`Kernel`] (of a program built from the same source through
///   `xpu-device`) on two pre-made buffers and `clEnqueueNDRangeKernel` (only `xpu-device`
///   calls OpenCL; `Kernel`'s checks cost one `clGetMemObjectInfo` per buffer). Rounds alternate with the previous figure; each is the
///   best of 9 rounds.
/// - `raw_launch_4args_subbuf_ns`: as the raw figure with two sub-buffers of one buffer, what
///   an allocator block is as one argument (PoCL's launches cost more with sub-buffers).
/// - `launch_100_ns`: 100 one-work-item `axpy4` launches through [`LaunchExt::launch`]
///   (arguments set each time) and the stream drained, per round of 100;
///   `graph_replay_100_ns`: the same 100 launches captured once in a [`Graph`] and replayed
///   with one [`Graph::replay`], the stream drained, per replay; best of `rounds` alternated
///   rounds each; `graph_replay_over_launch` their ratio; `graph_command_buffer`: 1 when the
///   graph replayed through `cl_khr_command_buffer` (where the device has it, unless
///   `XPU_GRAPH_COMMAND_BUFFER=0`), 0 for the recorded replay;
///   `graph_recorded_replay_100_ns`: the same graph captured with [`ReplayMode::Recorded`]
///   (one enqueue per launch), in the same alternated rounds.
/// - `program_cold_ms`: building a new source (a fresh comment, so no cache of ours knows it)
///   and creating its kernel; `program_cached_ms`: the same source and options again with the
///   in-memory cache off, so from the disk cache in a fresh directory, as a new process would.
///   The driver's own caches are not controlled (PoCL keeps compiled kernels in
///   `~/.cache/pocl`, so its cold figure may be lower than a first build ever).
///
/// # Errors
/// Device, allocator or build failures.
pub fn run(device: usize, quick: bool) -> Result<Vec<(String, f64)>, KernelError> {
    let mut out = Vec::new();
    let (launch_ns, raw_ns, sub_ns) = launch_figures(device, if quick { 200 } else { 2000 })?;
    out.push(("launch_4args_ns".to_owned(), launch_ns));
    out.push(("raw_launch_4args_ns".to_owned(), raw_ns));
    out.push(("raw_launch_4args_subbuf_ns".to_owned(), sub_ns));
    out.push(("launch_over_raw".to_owned(), launch_ns / raw_ns));
    let g = graph_figures(device, if quick { 5 } else { 30 })?;
    out.push(("launch_100_ns".to_owned(), g.launch));
    out.push(("graph_replay_100_ns".to_owned(), g.replay));
    out.push(("graph_replay_over_launch".to_owned(), g.replay / g.launch));
    out.push(("graph_command_buffer".to_owned(), g.command_buffer));
    out.push(("graph_recorded_replay_100_ns".to_owned(), g.recorded));
    let (cold, cached) = program_figures(device)?;
    out.push(("program_cold_ms".to_owned(), cold));
    out.push(("program_cached_ms".to_owned(), cached));
    out.push(("program_cached_over_cold".to_owned(), cached / cold));
    Ok(out)
}

/// A stream on a queue of its own (`profiling` as asked) and `axpy4` built for `device`
/// without the kernel cache.
fn own_stream_and_axpy4(
    device: usize,
    profiling: bool,
) -> Result<(ExternalStream, Function), KernelError> {
    let queue = xpu_device::device(device)?.create_queue(QueueOptions {
        profiling,
        priority: None,
    })?;
    let stream = ExternalStream::new(queue, device)?;
    let program = Program::build_with_cache(device, SRC, "", &KernelCache::disabled())?;
    Ok((stream, program.function("axpy4")?))
}

#[allow(unsafe_code)]
fn launch_figures(device: usize, launches: u32) -> Result<(f64, f64, f64), KernelError> {
    let (stream, f) = own_stream_and_axpy4(device, true)?;
    let s = stream.stream();
    let dev = xpu_device::device(device)?;
    let alloc = DeviceAllocator::new(device, AllocConfig::default())?;
    let y = alloc.allocate(4096, &s)?;
    let x = alloc.allocate(4096, &s)?;
    y.view()?.fill(&s, &[0; 4], 0, 4096)?;
    x.view()?.fill(&s, &[0; 4], 0, 4096)?;
    let ctx = dev.context()?;
    let rb_y = Buffer::new(ctx, 4096, MemFlags::default())?;
    let rb_x = Buffer::new(ctx, 4096, MemFlags::default())?;
    let seg = Buffer::new(ctx, 8192, MemFlags::default())?;
    let sb_y = seg.sub_buffer(0, 4096)?;
    let sb_x = seg.sub_buffer(4096, 4096)?;
    let program = xpu_device::backend::Program::build(ctx, dev.id(), SRC)?;
    let mut raw = Kernel::new(&program, "axpy4")?;
    let q = s.queue()?;
    q.fill(&rb_y, &[0; 4], 0, 4096, &[])?;
    q.fill(&rb_x, &[0; 4], 0, 4096, &[])?;
    let ours = |n: u32| -> Result<f64, KernelError> {
        let t = Instant::now();
        for _ in 0..n {
            // SAFETY: one work-item touches y[0] and x[0] of 1024-float allocations.
            unsafe {
                s.launch(&f, &[1], None)?
                    .args((&y, &x, 1.0f32, 1u32))?
                    .enqueue()?;
            }
        }
        s.synchronize()?;
        Ok(t.elapsed().as_nanos() as f64 / f64::from(n))
    };
    let mut theirs = |n: u32, sub: bool| -> Result<f64, KernelError> {
        let (by, bx) = if sub { (&sb_y, &sb_x) } else { (&rb_y, &rb_x) };
        let t = Instant::now();
        for _ in 0..n {
            raw.set_arg_buffer(0, by)?;
            raw.set_arg_buffer(1, bx)?;
            raw.set_arg(2, 1.0f32)?;
            raw.set_arg(3, 1u32)?;
            // SAFETY: one work-item touches y[0] and x[0] of 1024-float buffers.
            drop(unsafe { q.enqueue_kernel(&raw, &[1], None, &[]) }?);
        }
        q.finish().map_err(xpu_device::DeviceError::from)?;
        Ok(t.elapsed().as_nanos() as f64 / f64::from(n))
    };
    ours(launches / 10 + 1)?;
    theirs(launches / 10 + 1, false)?;
    let (mut best_ours, mut best_raw, mut best_sub) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..9 {
        best_raw = best_raw.min(theirs(launches, false)?);
        best_sub = best_sub.min(theirs(launches, true)?);
        best_ours = best_ours.min(ours(launches)?);
    }
    Ok((best_ours, best_raw, best_sub))
}

/// The graph figures of [`run`], in nanoseconds per 100 launches.
struct GraphFigures {
    launch: f64,
    replay: f64,
    recorded: f64,
    command_buffer: f64,
}

#[allow(unsafe_code)]
fn graph_figures(device: usize, rounds: u32) -> Result<GraphFigures, KernelError> {
    let graph_err = |e: GraphError| {
        KernelError::Device(xpu_device::DeviceError::InvalidArgument(e.to_string()))
    };
    let mem_err = |e: MemoryError| {
        KernelError::Device(xpu_device::DeviceError::InvalidArgument(e.to_string()))
    };
    let (stream, f) = own_stream_and_axpy4(device, false)?;
    let s = stream.stream();
    let y = std::sync::Arc::new(DeviceBuffer::<f32>::zeroed(1024, &s).map_err(mem_err)?);
    let x = std::sync::Arc::new(DeviceBuffer::<f32>::zeroed(1024, &s).map_err(mem_err)?);
    let capture = |mode: ReplayMode| {
        Graph::capture_with(&s, mode, |c| {
            for _ in 0..100 {
                // SAFETY: one work-item touches y[0] and x[0] of 1024-float buffers, at every
                // replay.
                unsafe {
                    c.launch(&s, &f, &[1], None)?
                        .arg(&y)?
                        .arg(&x)?
                        .arg(1.0f32)?
                        .arg(1u32)?
                        .enqueue()?;
                }
            }
            Ok(())
        })
        .map_err(graph_err)
    };
    let graph = capture(ReplayMode::from_env())?;
    let recorded = capture(ReplayMode::Recorded)?;
    let direct = || -> Result<f64, KernelError> {
        let t = Instant::now();
        for _ in 0..100 {
            // SAFETY: one work-item touches y[0] and x[0] of 1024-float buffers.
            unsafe {
                s.launch(&f, &[1], None)?
                    .args((&*y, &*x, 1.0f32, 1u32))?
                    .enqueue()?;
            }
        }
        s.synchronize()?;
        Ok(t.elapsed().as_nanos() as f64)
    };
    let replay = |g: &Graph| -> Result<f64, KernelError> {
        let t = Instant::now();
        g.replay(&s).map_err(graph_err)?;
        s.synchronize()?;
        Ok(t.elapsed().as_nanos() as f64)
    };
    direct()?;
    replay(&graph)?;
    replay(&recorded)?;
    let mut best = [f64::INFINITY; 3];
    for _ in 0..rounds.max(1) {
        best[0] = best[0].min(direct()?);
        best[1] = best[1].min(replay(&graph)?);
        best[2] = best[2].min(replay(&recorded)?);
    }
    Ok(GraphFigures {
        launch: best[0],
        replay: best[1],
        recorded: best[2],
        command_buffer: if graph.uses_command_buffer() {
            1.0
        } else {
            0.0
        },
    })
}

fn program_figures(device: usize) -> Result<(f64, f64), KernelError> {
    let nonce = format!(
        "// xpu bench {} {:?}\n",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let source = format!("{nonce}{SRC}");
    let dir = std::env::temp_dir().join(format!(
        "xpu-bench-kernels-{}-{}",
        std::process::id(),
        fnv1a64(nonce.as_bytes())
    ));
    let cache = KernelCache::at(&dir).memory(false);
    let t = Instant::now();
    let cold = Program::build_with_cache(device, &source, "", &cache)?;
    cold.function("axpy4")?;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let cached = Program::build_with_cache(device, &source, "", &cache)?;
    cached.function("axpy4")?;
    let cached_ms = t.elapsed().as_secs_f64() * 1e3;
    let _ = std::fs::remove_dir_all(&dir);
    if cached.origin() != ProgramOrigin::DiskCache {
        return Err(KernelError::Device(
            xpu_device::DeviceError::InvalidArgument(
                "the kernel cache did not serve the second build".to_owned(),
            ),
        ));
    }
    Ok((cold_ms, cached_ms))
}

/// FNV-1a (64-bit) of `bytes`: a short name for the benchmark's kernel-cache directory.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SGEMM size and repetitions of [`clblast`] on `device`: 1024^3 x 50 on a GPU (the H200
/// runs one in about 0.15 ms, long enough that launch costs do not dominate), 512^3 x 20
/// elsewhere (PoCL on a CPU: about 0.5 s a round); 256^3 x 5 when `quick`.
fn clblast_size(device: usize, quick: bool) -> Result<(usize, usize), KernelError> {
    let gpu = xpu_device::device(device)?.properties().device_type == xpu_device::DeviceType::Gpu;
    Ok(match (quick, gpu) {
        (true, _) => (256, 5),
        (false, true) => (1024, 50),
        (false, false) => (512, 20),
    })
}

/// CLBlast's SGEMM through xpu vs on a plain queue (`xpu_device::foreign::clblast`, loaded at
/// run time): `reps` row-major `n^3` SGEMMs per round, best of three interleaved rounds each.
///
/// - `clblast_sgemm_xpu_gflops`: [`xpu_kernel::clblast_sgemm`] on a pool stream with
///   caching-allocator [`DeviceBuffer`]s (block-exact regions, extent checks, CLBlast's event
///   adopted as an xpu `Event`, its temporary buffer, when it asks for one, from the caching
///   allocator), the stream synchronized at the end of the round;
/// - `clblast_sgemm_plain_gflops`: the same `CLBlastSgemm` on a queue of its own with three
///   plain buffers, its events released, `clFinish` at the end of the round;
/// - `clblast_over_plain`: their ratio (goal >= 0.98); `clblast_sgemm_n`, `clblast_sgemm_reps`.
///
/// GFLOP/s count `2 n^3` floating-point operations per SGEMM.
///
/// # Errors
/// [`KernelError::Interop`] with `ForeignError::NotAvailable` without CLBlast; device,
/// allocator or CLBlast failures.
pub fn clblast(device: usize, quick: bool) -> Result<Vec<(String, f64)>, KernelError> {
    let (n, reps) = clblast_size(device, quick)?;
    clblast_with(device, n, reps)
}

/// [`clblast`] with `reps` SGEMMs of `n^3` per round.
///
/// # Errors
/// As [`clblast`].
#[allow(unsafe_code)]
pub fn clblast_with(
    device: usize,
    n: usize,
    reps: usize,
) -> Result<Vec<(String, f64)>, KernelError> {
    use xpu_device::foreign::clblast::{Clblast, Sgemm};
    use xpu_kernel::{clblast_sgemm, ClRegion, InteropError, RowMajorSgemm, TempBuffer};
    let blas = Clblast::get().map_err(InteropError::from)?;
    let flops = 2.0 * (n * n * n) as f64 * reps as f64;
    let host_a: Vec<f32> = (0..n * n).map(|i| (i % 17) as f32 * 0.125 - 1.0).collect();
    let host_b: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 * 0.25 - 1.5).collect();

    let dev = xpu_device::device(device)?;
    let queue = dev.create_queue(QueueOptions {
        profiling: true,
        priority: None,
    })?;
    let ctx = dev.context()?;
    let bytes = n * n * 4;
    let plain = [
        Buffer::new(ctx, bytes, MemFlags::default())?,
        Buffer::new(ctx, bytes, MemFlags::default())?,
        Buffer::new(ctx, bytes, MemFlags::default())?,
    ];
    queue.write(&plain[0], 0, bytemuck::cast_slice(&host_a))?;
    queue.write(&plain[1], 0, bytemuck::cast_slice(&host_b))?;
    let g = Sgemm::row_major(
        n,
        n,
        n,
        plain[0].as_raw(),
        plain[1].as_raw(),
        plain[2].as_raw(),
    );
    let plain_round = || -> Result<f64, KernelError> {
        let t = Instant::now();
        for _ in 0..reps {
            // SAFETY: the three buffers hold n*n floats each, what a row-major n^3 SGEMM with
            // leading dimensions n touches; `queue` is a live in-order queue of their context;
            // the returned event is taken over (and released) by `from_raw_owned`.
            let event = unsafe { blas.sgemm(&g, queue.as_raw()) }.map_err(InteropError::from)?;
            if let Some(event) = event {
                // SAFETY: CLBlast returned this event and its reference is ours.
                drop(unsafe { xpu_device::backend::ClEvent::from_raw_owned(event) });
            }
        }
        queue.finish().map_err(xpu_device::DeviceError::from)?;
        Ok(flops / t.elapsed().as_secs_f64() / 1e9)
    };

    let s = xpu_stream::get_stream_from_pool(0, device)?;
    let upload = |host: &[f32]| DeviceBuffer::from_slice(host, &s);
    let (a, b) = (upload(&host_a), upload(&host_b));
    let (a, b, mut c) = (a?, b?, DeviceBuffer::<f32>::zeroed(n * n, &s)?);
    s.synchronize()?;
    let mut xpu_round = || -> Result<f64, KernelError> {
        let (ra, rb) = (ClRegion::new(&a)?, ClRegion::new(&b)?);
        let rc = ClRegion::new_mut(&mut c)?;
        let g = RowMajorSgemm::new((n, n, n), &ra, &rb, &rc);
        let t = Instant::now();
        for _ in 0..reps {
            clblast_sgemm(&s, &g, TempBuffer::AsNeeded)?;
        }
        s.synchronize()?;
        Ok(flops / t.elapsed().as_secs_f64() / 1e9)
    };
    plain_round()?; // warm-up: CLBlast compiles its kernels once per device
    xpu_round()?;
    let (mut best_plain, mut best_xpu) = (0.0f64, 0.0f64);
    for _ in 0..3 {
        best_plain = best_plain.max(plain_round()?);
        best_xpu = best_xpu.max(xpu_round()?);
    }
    Ok(vec![
        ("clblast_sgemm_n".to_owned(), n as f64),
        ("clblast_sgemm_reps".to_owned(), reps as f64),
        ("clblast_sgemm_xpu_gflops".to_owned(), best_xpu),
        ("clblast_sgemm_plain_gflops".to_owned(), best_plain),
        ("clblast_over_plain".to_owned(), best_xpu / best_plain),
    ])
}
