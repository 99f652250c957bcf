//! Captured graphs on a real OpenCL device (PoCL in CI, two devices for the cross-device
//! case): replay matches direct launches, arguments stay alive, capture errors are typed and
//! leave the stream usable (a launch built before the capture included), zero-sized elements
//! replay. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;
/// The example MLP (example code, not a library module: see its header).
#[allow(dead_code)]
#[path = "../../xpu/examples/support/mlp.rs"]
mod mlp;

use std::sync::Arc;

use common::{device0_stream, fresh_stream, fresh_streams};
use xpu_kernel::graph::{
    command_buffer_supported, Capture, Graph, GraphArg, GraphError, ReplayMode,
};
use xpu_kernel::{DeviceBuffer, Function, KernelError, LaunchExt, MemoryError, Program};
use xpu_stream::Stream;
use xpu_testing::devices;

const SAXPY: &str = r"
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
";

const N: usize = 1000;

fn saxpy(device: usize) -> Function {
    Program::build(device, SAXPY, "")
        .unwrap()
        .function("saxpy")
        .unwrap()
}

fn xs() -> Vec<f32> {
    (0..N).map(|i| (i % 17) as f32 * 0.25).collect()
}

/// The chain step: y = a_k * x + y for the five a_k, as the CPU computes it.
const AS: [f32; 5] = [0.5, -1.0, 2.0, 0.25, 1.5];

fn cpu_chain(steps: usize) -> Vec<f32> {
    let x = xs();
    let mut y = vec![1.0f32; N];
    for _ in 0..steps {
        for a in AS {
            for (yi, xi) in y.iter_mut().zip(&x) {
                *yi += a * xi;
            }
        }
    }
    y
}

/// The two tests of a scenario, in a module named after it: `through_a_command_buffer`
/// replays through a command buffer where the device has one ([`ReplayMode::Auto`]),
/// `recorded` is the recorded replay.
macro_rules! both_paths {
    ($scenario:ident) => {
        mod $scenario {
            #[test]
            fn through_a_command_buffer() {
                super::$scenario(super::ReplayMode::Auto);
            }

            #[test]
            fn recorded() {
                super::$scenario(super::ReplayMode::Recorded);
            }
        }
    };
}

/// Whether a graph captured with `mode` on device 0 replays through a command buffer.
fn expect_command_buffer(mode: ReplayMode) -> bool {
    mode == ReplayMode::Auto && command_buffer_supported(0).unwrap()
}

both_paths!(replay_matches_direct_launches_and_the_cpu);

fn replay_matches_direct_launches_and_the_cpu(mode: ReplayMode) {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = saxpy(0);
    // Direct: ten rounds of the five launches.
    let x1 = DeviceBuffer::from_slice(&xs(), &s).unwrap();
    let y1 = DeviceBuffer::from_slice(&vec![1.0f32; N], &s).unwrap();
    for _ in 0..10 {
        for a in AS {
            // SAFETY: N work-items touch y1[0..N), x1[0..N).
            unsafe {
                s.launch(&f, &[N], None)
                    .unwrap()
                    .arg(&y1)
                    .unwrap()
                    .arg(&x1)
                    .unwrap()
                    .arg(a)
                    .unwrap()
                    .arg(N as u32)
                    .unwrap()
                    .enqueue()
                    .unwrap();
            }
        }
    }
    let direct = y1.to_vec(&s).unwrap();
    // Graph: the same five launches captured once (plus a copy of y into an output allocated
    // during capture), replayed ten times.
    let (x2, y2) = x_and_ones(&s);
    let mut out = None;
    let graph = Graph::capture_with(&s, mode, |c| {
        for a in AS {
            capture_saxpy_launch(c, &s, &f, (&x2, &y2), a)?;
        }
        let o = c.alloc::<f32>(&s, N)?;
        c.copy(&s, &y2, 0, &o, 0, N)?;
        out = Some(o);
        Ok(())
    })
    .unwrap();
    assert_eq!(graph.len(), 6);
    assert_eq!(graph.uses_command_buffer(), expect_command_buffer(mode));
    // Nothing ran during capture.
    assert_eq!(y2.to_vec(&s).unwrap(), vec![1.0f32; N]);
    for _ in 0..10 {
        graph.replay(&s).unwrap();
    }
    let replayed = y2.to_vec(&s).unwrap();
    let copied = out.unwrap().to_vec(&s).unwrap();
    let cpu = cpu_chain(10);
    assert_eq!(replayed, direct, "replay differs from direct launches");
    assert_eq!(
        copied, direct,
        "the captured copy holds the last replay's y"
    );
    for (g, c) in replayed.iter().zip(&cpu) {
        assert!((g - c).abs() <= 1e-4 * c.abs().max(1.0), "{g} vs cpu {c}");
    }
    println!(
        "cl_khr_command_buffer on device 0: {}",
        command_buffer_supported(0).unwrap()
    );
}

#[test]
fn graph_keeps_its_arguments_alive_after_the_handles_drop() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = saxpy(0);
    let (x, y) = x_and_ones(&s);
    let graph = Graph::capture(&s, |c| {
        c.fill(&s, &y, 1.0f32)?;
        capture_saxpy_launch(c, &s, &f, (&x, &y), 2.0)
    })
    .unwrap();
    let y_addr = y.data_ptr().address();
    let weak_y = Arc::downgrade(&y);
    drop(x);
    drop(y);
    assert!(weak_y.upgrade().is_some(), "the graph holds y");
    // Allocations of the same size now: had x or y been freed, one would get its block.
    let others: Vec<_> = (0..4)
        .map(|_| DeviceBuffer::from_slice(&vec![-7.0f32; N], &s).unwrap())
        .collect();
    assert!(others.iter().all(|o| o.data_ptr().address() != y_addr));
    graph.replay(&s).unwrap();
    graph.replay(&s).unwrap();
    let y = weak_y.upgrade().unwrap();
    assert_ax_plus_one(&y, &s, 2.0);
    for o in &others {
        assert_eq!(o.to_vec(&s).unwrap(), vec![-7.0f32; N]);
    }
    drop(y);
    drop(graph);
    assert!(weak_y.upgrade().is_none(), "dropping the graph frees y");
}

#[test]
fn capture_errors_are_typed_and_leave_the_stream_usable() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let other_ext = fresh_stream(0);
    let other = other_ext.stream();
    let f = saxpy(0);
    let (x, y) = x_and_ones(&s);
    let mut plain = DeviceBuffer::<f32>::new(N, &s).unwrap();
    let graph = Graph::capture(&s, |c| {
        // A direct launch on the capturing stream.
        // SAFETY: refused before anything is enqueued (and would touch y[0..N), x[0..N)).
        let e = unsafe {
            s.launch(&f, &[N], None)
                .and_then(|l| l.arg(&*y)?.arg(&*x)?.arg(1.0f32)?.arg(N as u32)?.enqueue())
        }
        .unwrap_err();
        assert!(matches!(e, KernelError::Capturing { .. }), "{e}");
        // A typed-memory command on it.
        let e = xpu_kernel::memory::fill(&s, &mut plain, 3.0f32).unwrap_err();
        assert!(matches!(e, MemoryError::Capturing { .. }), "{e}");
        // Synchronizing it.
        let e = c.synchronize(&s).unwrap_err();
        assert!(
            matches!(e, GraphError::SynchronizeWhileCapturing { .. }),
            "{e}"
        );
        // A command on a stream that is not part of the capture.
        let e = c.fill(&other, &y, 0.0f32).unwrap_err();
        assert!(matches!(e, GraphError::NotCaptured { .. }), "{e}");
        // A second capture of the same stream.
        let e = Graph::capture(&s, |_| Ok(())).unwrap_err();
        assert!(matches!(e, GraphError::AlreadyCapturing { .. }), "{e}");
        // The other stream is not captured: direct work on it runs.
        xpu_kernel::memory::fill(&other, &mut plain, 5.0f32).unwrap();
        // It joins through an event and then records.
        let ev = c.record_event(&s)?;
        c.wait_event(&other, &ev)?;
        c.fill(&other, &y, 4.0f32)?;
        let ev2 = c.record_event(&other)?;
        c.wait_event(&s, &ev2)?;
        capture_saxpy_launch(c, &s, &f, (&x, &y), 1.0)
    })
    .unwrap();
    other.synchronize().unwrap();
    assert_eq!(plain.to_vec(&other).unwrap(), vec![5.0f32; N]);
    // After the capture: the streams are usable directly again.
    xpu_kernel::memory::fill(&s, &mut plain, 3.0f32).unwrap();
    assert_eq!(plain.to_vec(&s).unwrap(), vec![3.0f32; N]);
    s.synchronize().unwrap();
    graph.replay(&s).unwrap();
    let want: Vec<f32> = xs().iter().map(|x| x + 4.0).collect();
    assert_eq!(y.to_vec(&s).unwrap(), want);
    // A closure error ends the capture without a graph, and releases the stream.
    let e = Graph::capture(&s, |c| c.synchronize(&s)).unwrap_err();
    assert!(matches!(e, GraphError::SynchronizeWhileCapturing { .. }));
    // SAFETY: N work-items touch y[0..N), x[0..N).
    unsafe {
        s.launch(&f, &[N], None)
            .unwrap()
            .arg(&*y)
            .unwrap()
            .arg(&*x)
            .unwrap()
            .arg(1.0f32)
            .unwrap()
            .arg(N as u32)
            .unwrap()
            .enqueue()
            .unwrap();
    }
    let want: Vec<f32> = xs().iter().map(|x| 2.0 * x + 4.0).collect();
    assert_eq!(y.to_vec(&s).unwrap(), want);
}

#[test]
fn graph_replay_on_another_device_is_refused() {
    let Some(([s0, s1], _ext)) = fresh_streams([0, 1]) else {
        return;
    };
    let f = saxpy(0);
    let (x, y) = x_and_ones(&s0);
    let graph = Graph::capture(&s0, |c| capture_saxpy_launch(c, &s0, &f, (&x, &y), 3.0)).unwrap();
    let e = graph.replay(&s1).unwrap_err();
    assert!(
        matches!(
            e,
            GraphError::OtherDevice {
                graph_device: 0,
                stream_device: 1
            }
        ),
        "{e}"
    );
    // A launch of device 0's function captured on device 1 is refused too.
    let e = Graph::capture(&s1, |c| c.launch(&s1, &f, &[N], None).map(drop)).unwrap_err();
    assert!(
        matches!(e, GraphError::Kernel(KernelError::StreamDevice { .. })),
        "{e}"
    );
    // Both streams still work; the graph replays on its device.
    s1.synchronize().unwrap();
    graph.replay(&s0).unwrap();
    assert_ax_plus_one(&y, &s0, 3.0);
}

both_paths!(frees_blocks_after_replays_on_other_streams);

fn frees_blocks_after_replays_on_other_streams(mode: ReplayMode) {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let f = saxpy(0);
    // x is allocated on s1 and held only by the graph; the graph is replayed on s2.
    let x = Arc::new(DeviceBuffer::from_slice(&xs(), &s1).unwrap());
    let out = Arc::new(DeviceBuffer::from_slice(&vec![1.0f32; N], &s2).unwrap());
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    let graph = capture_saxpy(&s2, mode, &f, &x, &out);
    let x_addr = x.data_ptr().address();
    drop(x);
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s2).unwrap(); // the replay cannot run before the gate opens
    graph.replay(&s2).unwrap();
    drop(graph); // frees x: its block must wait for the gated replay on s2
    let z = DeviceBuffer::from_slice(&vec![-7.0f32; N], &s1).unwrap();
    s1.synchronize().unwrap(); // s1 is not gated: the -7s are written now
    gate.open().unwrap();
    let want: Vec<f32> = xs().iter().map(|x| 2.0 * x + 1.0).collect();
    let got = out.to_vec(&s2).unwrap();
    assert!(
        got == want,
        "the replay read x's block after its reuse: out[0] = {} (2 * -7 + 1 = -13), want {}",
        got[0],
        want[0]
    );
    assert_eq!(z.to_vec(&s1).unwrap(), vec![-7.0f32; N]);
    println!(
        "z reused x's block after the replay: {}",
        z.data_ptr().address() == x_addr
    );
}

// One SGD step of the example MLP (`mlp`)'s two-layer model, captured from the module's seven
// kernels in `GpuMlp`'s order, replayed ten times: the losses and parameters equal ten
// direct steps of `GpuMlp` (same kernels, same order: bit for bit) and follow the CPU.
both_paths!(mlp_step_replayed_ten_times);

fn mlp_step_replayed_ten_times(mode: ReplayMode) {
    use mlp::{compare_losses, CpuMlp, GpuMlp, MlpConfig, MlpState, KERNELS};
    if !devices(1) {
        return;
    }
    let c = MlpConfig::default();
    let mut direct = GpuMlp::new(0, c).unwrap();
    let direct_losses = direct.train(10).unwrap();
    let direct_params = direct.parameters().unwrap();
    let cpu_losses = CpuMlp::new(c).train(10);

    let ext = fresh_stream(0);
    let s = ext.stream();
    let p = Program::build(0, KERNELS, "-cl-std=CL1.2").unwrap();
    let k = |n: &str| p.function(n).unwrap();
    let (linear_fwd, mse_loss, mse_grad) = (k("linear_fwd"), k("mse_loss"), k("mse_grad"));
    let (matmul, grad_b, relu_mask, sgd) = (k("matmul"), k("grad_b"), k("relu_mask"), k("sgd"));
    let st = MlpState::new(&c);
    let up = |v: &[f32]| Arc::new(DeviceBuffer::from_slice(v, &s).unwrap());
    let (w1, b1, w2, b2, x, y) = (
        up(&st.w1),
        up(&st.b1),
        up(&st.w2),
        up(&st.b2),
        up(&st.x),
        up(&st.y),
    );
    let (m, i, hd, o) = (c.samples, c.inputs, c.hidden, c.outputs);
    let n = m * o;
    let u = |v: usize| u32::try_from(v).unwrap();
    let grad_scale = 2.0 / (m * o) as f32;
    let mut loss = None;
    let graph = Graph::capture_with(&s, mode, |g| {
        let new = |g: &mut Capture<'_>, len| g.alloc::<f32>(&s, len);
        let (h, out, gr, dh) = (new(g, m * hd)?, new(g, n)?, new(g, n)?, new(g, m * hd)?);
        let (dw1, db1, dw2, db2) = (new(g, i * hd)?, new(g, hd)?, new(g, hd * o)?, new(g, o)?);
        let l = new(g, 1)?;
        // SAFETY: (all launches below, at every replay) the sizes and index bounds of
        // GpuMlp's launches (the example `mlp`), with buffers of exactly those lengths held by
        // the graph; the kernels' loops are bounded by the scalar sizes.
        unsafe {
            let lin = |g: &mut Capture<'_>,
                       [out, xx, w, b]: [&Arc<DeviceBuffer<f32>>; 4],
                       (mm, kk, nn): (usize, usize, usize),
                       relu: bool| {
                let args =
                    blocks_and_sizes([out, xx, w, b], [u(mm), u(kk), u(nn), u32::from(relu)]);
                capture_launch(g, &s, &linear_fwd, mm * nn, args)
            };
            // c = op(a)·op(b) (rows × cols, summed over inner) by `matmul`, as GpuMlp reads
            // its operands: a transposed (strides 1, rows) and b as stored (cols, 1), or a as
            // stored (inner, 1) and b transposed (1, inner).
            let product = |g: &mut Capture<'_>,
                           [c, a, b]: [&Arc<DeviceBuffer<f32>>; 3],
                           (rows, inner, cols): (usize, usize, usize),
                           a_transposed: bool| {
                let (a_strides, b_strides) = if a_transposed {
                    ([1, rows], [cols, 1])
                } else {
                    ([inner, 1], [1, inner])
                };
                let [a_rs, a_cs] = a_strides.map(u);
                let [b_rs, b_cs] = b_strides.map(u);
                let sizes = [u(rows), u(inner), u(cols), a_rs, a_cs, b_rs, b_cs];
                let args = blocks_and_sizes([c, a, b], sizes);
                capture_launch(g, &s, &matmul, rows * cols, args)
            };
            let grads = |g: &mut Capture<'_>,
                         [dw, db, xx, gg]: [&Arc<DeviceBuffer<f32>>; 4],
                         (mm, kk, nn): (usize, usize, usize)| {
                product(g, [dw, xx, gg], (kk, mm, nn), true)?;
                let args = blocks_and_sizes([db, gg], [u(mm), u(nn)]);
                capture_launch(g, &s, &grad_b, nn, args)
            };
            let step =
                |g: &mut Capture<'_>, w: &Arc<DeviceBuffer<f32>>, d: &Arc<DeviceBuffer<f32>>| {
                    let args = [
                        w.into(),
                        d.into(),
                        c.learning_rate.into(),
                        u(w.len()).into(),
                    ];
                    capture_launch(g, &s, &sgd, w.len(), args)
                };
            lin(g, [&h, &x, &w1, &b1], (m, i, hd), true)?;
            lin(g, [&out, &h, &w2, &b2], (m, hd, o), false)?;
            let args = [
                (&l).into(),
                0u32.into(),
                1u32.into(),
                (&out).into(),
                (&y).into(),
                u(n).into(),
            ];
            capture_launch(g, &s, &mse_loss, 1, args)?;
            let args = [
                (&gr).into(),
                (&out).into(),
                (&y).into(),
                grad_scale.into(),
                u(n).into(),
            ];
            capture_launch(g, &s, &mse_grad, n, args)?;
            grads(g, [&dw2, &db2, &h, &gr], (m, hd, o))?;
            product(g, [&dh, &gr, &w2], (m, o, hd), false)?;
            let args = blocks_and_sizes([&dh, &h], [u(m * hd)]);
            capture_launch(g, &s, &relu_mask, m * hd, args)?;
            grads(g, [&dw1, &db1, &x, &dh], (m, i, hd))?;
            for (w, d) in [(&w1, &dw1), (&b1, &db1), (&w2, &dw2), (&b2, &db2)] {
                step(g, w, d)?;
            }
        }
        loss = Some(l);
        Ok(())
    })
    .unwrap();
    assert_eq!(graph.len(), 14, "seven kernels, fourteen launches per step");
    assert_eq!(graph.uses_command_buffer(), expect_command_buffer(mode));
    let loss = loss.unwrap();
    let mut losses = Vec::new();
    for _ in 0..10 {
        graph.replay(&s).unwrap();
        losses.push(loss.to_vec(&s).unwrap()[0] / n as f32);
    }
    assert_eq!(
        losses, direct_losses,
        "replayed losses vs direct GpuMlp steps"
    );
    let params = [&w1, &b1, &w2, &b2].map(|b| b.to_vec(&s).unwrap());
    assert!(
        params == direct_params,
        "replayed parameters vs direct GpuMlp steps"
    );
    compare_losses(&losses, &cpu_losses, 1e-4).unwrap();
    assert!(losses[9] < losses[0], "the loss decreases: {losses:?}");
}

/// Captures a launch of `f` over `global` work-items on `s` into `g`, with `args` in order.
///
/// # Safety
/// As [`xpu_kernel::graph::CaptureLaunch::enqueue`], for this launch with these arguments.
unsafe fn capture_launch(
    g: &mut Capture<'_>,
    s: &Stream,
    f: &Function,
    global: usize,
    args: impl IntoIterator<Item = GraphArg>,
) -> Result<(), GraphError> {
    let mut launch = g.launch(s, f, &[global], None)?;
    for arg in args {
        launch = launch.arg(arg)?;
    }
    // SAFETY: the caller's obligations, for this launch.
    unsafe { launch.enqueue() }
}

/// A launch's arguments: `blocks`, then `sizes`.
fn blocks_and_sizes<const B: usize, const S: usize>(
    blocks: [&Arc<DeviceBuffer<f32>>; B],
    sizes: [u32; S],
) -> impl Iterator<Item = GraphArg> {
    let sizes = sizes.map(GraphArg::from);
    blocks.map(GraphArg::from).into_iter().chain(sizes)
}

/// Asserts `y` = `a` * [`xs`] + 1 (read on `s`).
fn assert_ax_plus_one(y: &DeviceBuffer<f32>, s: &Stream, a: f32) {
    let want: Vec<f32> = xs().iter().map(|x| a * x + 1.0).collect();
    assert_eq!(y.to_vec(s).unwrap(), want);
}

/// `x` = [`xs`] and `y` = ones, uploaded on `s`, shareable with a graph.
fn x_and_ones(s: &Stream) -> (Arc<DeviceBuffer<f32>>, Arc<DeviceBuffer<f32>>) {
    (
        Arc::new(DeviceBuffer::from_slice(&xs(), s).unwrap()),
        Arc::new(DeviceBuffer::from_slice(&vec![1.0f32; N], s).unwrap()),
    )
}

/// Captures `y += a * x` over [`N`] work-items of `f` (the [`saxpy`] kernel) on `s` into `c`.
///
/// # Panics
/// When `x` or `y` holds fewer than [`N`] floats (the launch would touch past them).
fn capture_saxpy_launch(
    c: &mut Capture<'_>,
    s: &Stream,
    f: &Function,
    (x, y): (&Arc<DeviceBuffer<f32>>, &Arc<DeviceBuffer<f32>>),
    a: f32,
) -> Result<(), GraphError> {
    assert!(x.len() >= N && y.len() >= N, "x and y hold N floats");
    // SAFETY: N work-items touch y[0..N), x[0..N), inside both (asserted above), at every
    // replay; the graph holds both; the kernel terminates.
    unsafe {
        c.launch(s, f, &[N], None)?
            .arg(y)?
            .arg(x)?
            .arg(a)?
            .arg(N as u32)?
            .enqueue()
    }
}

/// y += 2x, captured on one stream.
fn capture_saxpy(
    s: &Stream,
    mode: ReplayMode,
    f: &Function,
    x: &Arc<DeviceBuffer<f32>>,
    y: &Arc<DeviceBuffer<f32>>,
) -> Graph {
    Graph::capture_with(s, mode, |c| capture_saxpy_launch(c, s, f, (x, y), 2.0)).unwrap()
}

fn replay_on_a_second_stream(mode: ReplayMode) {
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let f = saxpy(0);
    let (x, y) = x_and_ones(&s1);
    let graph = capture_saxpy(&s1, mode, &f, &x, &y);
    assert_eq!(graph.uses_command_buffer(), expect_command_buffer(mode));
    graph.replay(&s1).unwrap();
    s1.synchronize().unwrap();
    graph.replay(&s2).unwrap();
    graph.replay(&s2).unwrap();
    s2.synchronize().unwrap();
    graph.replay(&s1).unwrap();
    assert_ax_plus_one(&y, &s1, 8.0);
}

both_paths!(replay_on_a_second_stream);

/// A replay enqueued while the previous one is still pending (held by a user event): with a
/// command buffer this is simultaneous use of one buffer.
fn replay_while_the_previous_replay_is_pending(mode: ReplayMode) {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = saxpy(0);
    let (x, y) = x_and_ones(&s);
    let graph = capture_saxpy(&s, mode, &f, &x, &y);
    assert_eq!(graph.uses_command_buffer(), expect_command_buffer(mode));
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    graph.replay(&s).unwrap(); // pending behind the gate
    graph.replay(&s).unwrap(); // enqueued while the first is pending
    graph.replay(&s).unwrap();
    assert!(!s.query().unwrap(), "the replays wait for the gate");
    gate.open().unwrap();
    assert_ax_plus_one(&y, &s, 6.0);
}

both_paths!(replay_while_the_previous_replay_is_pending);

#[test]
fn a_captured_upload_replays_recorded() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let y = Arc::new(DeviceBuffer::<f32>::new(4, &s).unwrap());
    let graph = Graph::capture(&s, |c| c.write(&s, &y, 0, &[1.0, 2.0, 3.0, 4.0])).unwrap();
    assert!(
        !graph.uses_command_buffer(),
        "uploads have no command-buffer form"
    );
    graph.replay(&s).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

// A launch built before a capture is refused when enqueued during it; captured commands on
// zero-sized elements give a graph that replays.

const SET: &str = "__kernel void set(__global uint *x, uint v) { x[get_global_id(0)] = v; }";

/// A launch built (and its arguments set) before `Graph::capture` began on its stream, then
/// enqueued from inside the capture closure: the enqueue is refused with
/// `KernelError::Capturing` (as `LaunchExt::launch` refuses on a capturing stream), and the
/// kernel does not run. It used to be enqueued on the capturing stream and ran at once.
#[test]
fn a_launch_built_before_a_capture_is_refused_when_enqueued_during_it() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let set = Program::build(0, SET, "").unwrap().function("set").unwrap();
    let buf = DeviceBuffer::<u32>::zeroed(16, &s).unwrap();
    let launch = s
        .launch(&set, &[16], None)
        .unwrap()
        .arg(&buf)
        .unwrap()
        .arg(7u32)
        .unwrap();
    let mut result = None;
    let graph = Graph::capture(&s, |_c| {
        // SAFETY: 16 work-items write x[0..16), the allocation's 64 bytes; nothing borrows
        // them on the host; the kernel terminates.
        #[allow(unsafe_code)]
        let r = unsafe { launch.enqueue() };
        result = Some(r);
        Ok(())
    })
    .unwrap();
    assert!(graph.is_empty());
    let r = result.expect("the closure ran");
    assert!(
        matches!(&r, Err(KernelError::Capturing { device: 0, stream, .. }) if *stream == s.id()),
        "enqueue on a capturing stream: {r:?}"
    );
    assert_eq!(
        buf.to_vec(&s).unwrap(),
        vec![0; 16],
        "the refused kernel ran"
    );
    // The stream is usable after the capture: the same launch, built again, runs.
    // SAFETY: as above.
    #[allow(unsafe_code)]
    unsafe {
        s.launch(&set, &[16], None)
            .unwrap()
            .args((&buf, 7u32))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    assert_eq!(buf.to_vec(&s).unwrap(), vec![7; 16]);
}

/// Captured copies and uploads of zero-sized elements (`()` is `Pod`) move no bytes; the
/// graph they give replays (nothing to enqueue) instead of failing at every replay on the
/// block-less buffers.
#[test]
fn captured_copies_and_uploads_of_zero_sized_elements_replay() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let a = Arc::new(DeviceBuffer::<()>::new(4, &s).unwrap());
    let b = Arc::new(DeviceBuffer::<()>::new(4, &s).unwrap());
    let graph = Graph::capture(&s, |c| {
        c.copy(&s, &a, 0, &b, 1, 3)?;
        c.write(&s, &b, 0, &[(); 4])?;
        Ok(())
    })
    .unwrap();
    graph.replay(&s).unwrap();
    graph.replay(&s).unwrap();
    s.synchronize().unwrap();
}
