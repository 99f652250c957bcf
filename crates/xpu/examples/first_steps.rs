//! First steps, written from the docs alone, as someone coming from `torch.cuda` / cudarc
//! would: pick a device, get streams, allocate typed device memory, upload from a `Vec` and
//! from pinned host memory, build and launch an OpenCL C kernel, download, time it with
//! events, order a second stream after the first with an event, free a buffer used on another
//! stream (`record_stream`), print the allocator's statistics and empty its cache. Every
//! result is asserted.
//!
//! `cargo run -p xpu --example first_steps`

mod support;

use xpu::xpu_alloc::host_allocate;
use xpu::xpu_event::Gate;
use xpu::xpu_kernel::memory::copy_htod_pinned;
use xpu::{DeviceBuffer, Event, LaunchExt, Program, StreamExt, StreamMemoryExt};

/// `y[i] = a * x[i] + y[i]` for `i < n`.
const AXPY: &str =
    "__kernel void axpy(__global float *y, __global const float *x, float a, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}";

const N: usize = 1 << 16;

// Every layer's error converts into `xpu::Error`, so `?` works on all of them here.
fn run() -> xpu::Result<()> {
    // A device: torch.cuda.init() / device_count() / set_device() / get_device_name().
    xpu::init()?; // fails with a clear error when there is no OpenCL device
    println!("{} device(s)", xpu::device_count());
    xpu::set_device(0)?;
    let device = xpu::current_device()?;
    println!("device {device}: {}", xpu::get_device_name(None)?);

    // Streams: the thread's current stream, and a second one from the device's pool.
    let s1 = xpu::current_stream(None)?;
    let s2 = xpu::new_stream(None, 0)?;

    // Typed device memory, uploaded from a Vec (staged through pinned memory, non-blocking)...
    let x_host: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x = DeviceBuffer::from_slice(&x_host, &s1)?;
    // ... and from pinned host memory the caller fills (no staging copy).
    let mut pinned = host_allocate(N * std::mem::size_of::<f32>())?;
    for (bytes, i) in pinned.as_mut_slice().chunks_exact_mut(4).zip(0..) {
        bytes.copy_from_slice(&(1000.0f32 + i as f32).to_ne_bytes());
    }
    let mut y = DeviceBuffer::<f32>::new(N, &s1)?;
    copy_htod_pinned(&s1, &pinned, &mut y)?;
    drop(pinned); // safe: the pinned block is not reused before the upload completes

    // A kernel: built once per device (and cached on disk), then launched on s1.
    let axpy = Program::build(device, AXPY, "")?.function("axpy")?;
    let (mut start, mut end) = (Event::timing(), Event::timing());
    start.record(&s1)?;
    // SAFETY: N work-items, each touching element i < N of `y` and `x`, both N elements long;
    // nothing borrows their bytes on the host; the kernel terminates.
    unsafe {
        s1.launch(&axpy, &[N], None)?
            .args((&y, &x, 2.0f32, N as u32))?
            .enqueue()?;
    }
    end.record(&s1)?;

    // s2's later work waits for everything s1 did up to `end` (the host does not block).
    // A gate holds s2 back too, so that the frees below happen while s2 still uses `y`.
    let gate = Gate::new(device)?;
    gate.block(&s2)?;
    s2.wait_event(&end)?;
    let mut z = DeviceBuffer::<f32>::new(N, &s2)?;
    s2.memcpy_dtod(&y, &mut z)?; // `y` (allocated on s1) is used on s2: recorded on s2
                                 // The explicit form, as Tensor.record_stream: needed only for uses xpu does not see (raw
                                 // interop handles); xpu's copies and launches on another stream record it themselves.
    y.data_ptr().record_stream(&s2)?;
    let y_address = y.data_ptr().address();
    drop(y); // freed while s2's copy is pending: the block waits for s2 before reuse
    let reused = DeviceBuffer::<f32>::new(N, &s1)?;
    assert_ne!(
        reused.data_ptr().address(),
        y_address,
        "a block used on another stream was handed out before that stream's work ran"
    );
    drop(reused);
    gate.open()?;

    // Download (blocking, after the work enqueued on s2 before it) and check.
    let z_host = z.to_vec(&s2)?;
    for (i, v) in z_host.iter().enumerate() {
        let expected = 2.0 * i as f32 + 1000.0 + i as f32;
        assert_eq!(*v, expected, "z[{i}]");
    }

    // Time the kernel: both events must have completed (`end` did: s2 waited for it).
    end.synchronize()?;
    let ms = start.elapsed_time(&end)?;
    assert!(ms >= 0.0, "elapsed time {ms} ms");
    println!("axpy of {N} floats: {ms:.3} ms, result checked");

    // The caching allocator's statistics, as torch.cuda.memory_stats / memory_summary.
    let stats = xpu::memory_stats(None)?;
    let live = (x.len() + z.len()) * std::mem::size_of::<f32>();
    assert!(
        stats.allocated_bytes.all.current >= live as i64,
        "{stats:?}"
    );
    assert!(stats.reserved_bytes.all.current >= stats.allocated_bytes.all.current);
    println!("{}", xpu::memory_summary(None, true)?);

    // Free everything and return the cached segments to the driver, as torch.cuda.empty_cache.
    drop((x, z));
    xpu::synchronize(None)?;
    xpu::empty_cache();
    assert_eq!(xpu::memory_allocated(None)?, 0);
    assert_eq!(xpu::memory_reserved(None)?, 0, "empty_cache left segments");
    println!("after empty_cache: 0 B reserved");
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}
