//! Review h79 (of 081a8c9): failing tests. Graph capture hands its closure a `&mut Capture`
//! and, when the closure returns, builds the graph from whatever `Capture` sits behind that
//! reference (`Graph::capture_in_pool_with`, graph.rs:941-990), with the device, stream and
//! queue of the stream *it* was called with. Nested captures (allowed: see review h19's
//! `nested_captures`) give one closure two `&mut Capture` at once, and `std::mem::swap` (safe)
//! exchanges them: the inner capture then ends the outer one (drops its capturing mark and
//! builds a graph of its commands), and the outer one goes on with, and finally builds its
//! graph from, the inner one's handle. Nothing checks that the handle given back is the one
//! lent (its `id`). The rules broken: "ending capture on another stream" must be a typed
//! error and leave a consistent state; "launching on a stream of another device" must be a
//! typed error; no safe call may crash.
//!
//! Run with `POCL_DEVICES="pthread pthread"` (the cross-device tests skip with one device).

mod common;

use std::sync::Arc;

use common::fresh_streams;
use xpu_kernel::graph::{Capture, Graph, GraphError, ReplayMode};
use xpu_kernel::{DeviceBuffer, Function, KernelError, LaunchExt, Program};
use xpu_stream::Stream;

const N: usize = 256;
const SRC: &str = r"
__kernel void set(__global uint *y, uint v, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = v;
}
";

/// The environment variable naming the scenario a child process runs.
const CHILD: &str = "XPU_REVIEW_H79_CHILD";

fn set_fn(device: usize) -> Function {
    Program::build(device, SRC, "")
        .unwrap()
        .function("set")
        .unwrap()
}

/// Outer capture of `s0`, inner capture of `s1` inside it whose closure swaps the two
/// handles; the outer closure then records `y1 = 5` on `s1` through the handle it now holds
/// (the inner capture's). Returns the outer capture's result.
fn swapped_capture(
    s0: &Stream,
    s1: &Stream,
    f1: &Function,
    y1: &Arc<DeviceBuffer<u32>>,
    mode: ReplayMode,
) -> Result<Graph, GraphError> {
    Graph::capture_with(s0, mode, |a| {
        let _inner = Graph::capture_with(s1, mode, |b| {
            std::mem::swap::<Capture>(a, b);
            Ok(())
        })?;
        // SAFETY: N work-items write y1[0..N), its whole allocation; the kernel terminates.
        unsafe {
            a.launch(s1, f1, &[N], None)?
                .arg(y1)?
                .arg(5u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
}

/// The cross-device scenario on the default streams of devices 0 and 1 (same stream id, so
/// the replay's `record_stream` of the device-1 block is skipped as "its own stream").
/// Expected: the capture is refused (its handle was swapped), or the graph it returns, of
/// device 0, replays on device 0's stream without a raw OpenCL error; in either case no
/// crash, and both streams end up not capturing.
fn cross_device(mode: ReplayMode) {
    let s0 = xpu_stream::default_stream(0).unwrap();
    let s1 = xpu_stream::default_stream(1).unwrap();
    assert_eq!(s0.id(), s1.id());
    let f1 = set_fn(1);
    let y1 = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s1).unwrap());
    s1.synchronize().unwrap();
    match swapped_capture(&s0, &s1, &f1, &y1, mode) {
        Err(_) => {}
        Ok(g) => {
            assert_eq!(g.device(), 0);
            let r = g.replay(&s0);
            assert!(
                r.is_ok() || matches!(r, Err(GraphError::OtherDevice { .. })),
                "a graph of device 0 replayed a kernel of device 1 on device 0's queue: {r:?}"
            );
        }
    }
    assert!(!s0.is_capturing() && !s1.is_capturing());
}

/// Finding 1 (crash). With `ReplayMode::Auto` the outer capture ends by recording its
/// command buffer for device 0's queue (graph.rs:974, `command_buffer_for(&queue, ..)`, the
/// queue of the stream the capture was called with) with the device-1 kernel the swapped
/// handle recorded: PoCL 3.1 dereferences a bad pointer in `clCommandNDRangeKernelKHR`
/// (SIGSEGV; gdb: libpocl under `CommandBuffer::kernel` <- `record_command_buffer` <-
/// `Graph::capture_in_pool_with`). Safe code only. Run in a child process so the crash does
/// not take the other tests down; expected: the child exits with success.
#[test]
fn swapped_capture_handles_across_devices_do_not_crash_the_command_buffer_recording() {
    if std::env::var(CHILD).as_deref() == Ok("auto") {
        cross_device(ReplayMode::Auto);
        return;
    }
    if std::env::var(CHILD).is_ok() || !xpu_testing::devices(2) {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "swapped_capture_handles_across_devices_do_not_crash_the_command_buffer_recording",
            "--exact",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD, "auto")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child capturing with swapped handles (safe code) died: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Finding 1, recorded replay. The outer capture returns a graph whose `device()` is 0 and
/// whose kernel is device 1's; `replay(&s0)` passes the device check (graph.rs:1040) and
/// enqueues that kernel on device 0's queue, which PoCL refuses with `CL_INVALID_CONTEXT`
/// (`Kernel(Device(OpenCl { clEnqueueNDRangeKernel, -34 }))`): the capture API let a safe
/// caller build a launch "on a stream of another device", caught only by the driver.
/// Expected: the capture refused, or a replay that is correct or `OtherDevice`.
#[test]
fn swapped_capture_handles_across_devices_build_no_graph_of_the_wrong_device() {
    if std::env::var(CHILD).is_ok() || !xpu_testing::devices(2) {
        return;
    }
    cross_device(ReplayMode::Recorded);
}

/// Finding 1, one device: after the inner capture (of `s2`) returns with the outer handle
/// swapped into it, it has dropped the outer capture's mark on `s1` (graph.rs:967,
/// `drop(capture)`), while the outer capture is still running: a direct launch on `s1` inside
/// the outer closure is accepted and runs at once instead of being refused with
/// `KernelError::Capturing`, and `s2`, whose capture has returned its graph, still reads as
/// capturing. Expected ("ending capture on another stream" is a typed error): `s1` stays
/// capturing for as long as its capture's closure runs, and the direct launch is refused.
#[test]
fn a_swapped_capture_handle_does_not_end_the_outer_capture_early() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let f = set_fn(0);
    let y = DeviceBuffer::<u32>::zeroed(N, &s1).unwrap();
    s1.synchronize().unwrap();
    let mut seen = None;
    let _ = Graph::capture(&s1, |a| {
        let inner = Graph::capture(&s2, |b| {
            std::mem::swap::<Capture>(a, b);
            Ok(())
        });
        // SAFETY: N work-items write y[0..N), its whole allocation; the kernel terminates.
        let direct = s1
            .launch(&f, &[N], None)
            .and_then(|l| unsafe { l.arg(&y)?.arg(3u32)?.arg(N as u32)?.enqueue() });
        seen = Some((inner.is_ok(), s1.is_capturing(), s2.is_capturing(), direct));
        Ok(())
    });
    let (inner_ok, s1_capturing, s2_capturing, direct) = seen.unwrap();
    assert!(
        !inner_ok || (s1_capturing && matches!(direct, Err(KernelError::Capturing { .. }))),
        "inside the capture of s1, after a nested capture ended with a swapped handle: \
         s1 capturing {s1_capturing}, s2 capturing {s2_capturing}, direct launch on s1 \
         {direct:?}"
    );
    assert!(!s1.is_capturing() && !s2.is_capturing());
}
