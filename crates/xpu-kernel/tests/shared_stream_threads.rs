//! Many threads on one stream at once, as a framework uses xpu (burn's tests run on one
//! device's default stream from every test thread): uploads, launches, downloads and frees
//! interleaved from 8 threads, every value checked. Found by burn's suite on the H200, whose
//! driver died in a thread of its own when tests ran in parallel.
//!
//! On the H200 (NVIDIA driver 580) the launch test died with SIGSEGV inside
//! `libnvidia-opencl.so.1` in 6 of 8 runs, or returned wrong values (a later upload ran before
//! an earlier kernel of the same in-order queue); PoCL passed. The raw-OpenCL reduction
//! (`ci/diag/nvidia_subbuffer_repro.c`) showed the driver breaks when a sub-buffer is made over
//! bytes an earlier command still uses through another `cl_mem`, or while another thread
//! releases a sub-buffer of the same bytes. Since xpu waits for the bytes' stream before making
//! such a sub-buffer (`xpu_alloc::SubBuffers`), the test passed 10 of 10 runs there
//! (2026-12-03, 14:00 UTC; docs/performance.md).
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu_kernel::{DeviceBuffer, LaunchExt, Program};

const THREADS: usize = 8;
const ROUNDS: usize = 60;

const ADD1: &str = "__kernel void add1(__global float *y, __global const float *x, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = x[i] + 1.0f;
}";

/// A fresh stream of device 0 (`None`: skipped without a device), shared by every thread.
fn stream0() -> Option<(xpu_stream::Stream, xpu_stream::ExternalStream)> {
    common::device0_stream()
}

#[test]
fn uploads_and_downloads_from_many_threads_on_one_stream_keep_their_values() {
    let Some((s, _ext)) = stream0() else {
        return;
    };
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            scope.spawn(move || {
                for r in 0..ROUNDS {
                    let n = 1 + (t * 131 + r * 17) % 700;
                    let host: Vec<f32> = (0..n)
                        .map(|i| (t * 100_000 + r * 1000 + i) as f32)
                        .collect();
                    let buf = DeviceBuffer::from_slice(&host, &s).unwrap();
                    assert_eq!(buf.to_vec(&s).unwrap(), host, "thread {t} round {r}");
                }
            });
        }
    });
}

#[test]
fn launches_from_many_threads_on_one_stream_keep_their_values() {
    let Some((s, _ext)) = stream0() else {
        return;
    };
    let add1 = Program::build(0, ADD1, "")
        .unwrap()
        .function("add1")
        .unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let add1 = add1.clone();
            scope.spawn(move || {
                for r in 0..ROUNDS {
                    let n = 1 + (t * 131 + r * 17) % 700;
                    let host: Vec<f32> = (0..n).map(|i| (t + r + i) as f32).collect();
                    let x = DeviceBuffer::from_slice(&host, &s).unwrap();
                    let y = DeviceBuffer::<f32>::new(n, &s).unwrap();
                    // SAFETY: n work-items, each reading x[i] and writing y[i] for i < n, both
                    // n elements long; nothing borrows them on the host; the kernel ends.
                    unsafe {
                        s.launch(&add1, &[n], None)
                            .unwrap()
                            .args((&y, &x, n as u32))
                            .unwrap()
                            .enqueue()
                            .unwrap();
                    }
                    drop(x);
                    let got = y.to_vec(&s).unwrap();
                    let want: Vec<f32> = host.iter().map(|v| v + 1.0).collect();
                    assert_eq!(got, want, "thread {t} round {r}");
                }
            });
        }
    });
}
