//! Graph capture misuse: uses of another device in a capture, a stream released mid-capture, an
//! oversized allocation during a capture, nested captures of one stream, and a panic caught mid
//! nested capture are typed errors that leave both captures consistent.
//!
//! Reviews h79 (of 081a8c9) and h80 (of its fix, 9209a05): passing probes of what was
//! attacked and held. Its finding (the
//! handles of two nested captures exchanged with `std::mem::swap`: the inner capture ended
//! the outer one, and the outer built a graph of device 0 holding a device-1 kernel, which
//! PoCL's command-buffer recording crashed on; 5 of 5 runs each of three tests) no longer
//! compiles: `Capture` is branded with its capture's lifetime (the `compile_fail` example on
//! `xpu_kernel::graph::Capture`). They run one at a time (one lock): one reads the device's
//! allocated bytes. Run with
//! `POCL_DEVICES="pthread pthread"` (the cross-device probe skips with one device).

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::{fresh_stream, fresh_streams};
use xpu_kernel::graph::{Graph, GraphError, ReplayMode};
use xpu_kernel::{DeviceBuffer, Function, KernelError, MemoryError, Program};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const N: usize = 256;
const SRC: &str = r"
__kernel void set(__global uint *y, uint v, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = v;
}
";

fn set_fn(device: usize) -> Function {
    Program::build(device, SRC, "")
        .unwrap()
        .function("set")
        .unwrap()
}

/// Holds: in a capture of a device-0 stream, every way to reach device 1 through the handle
/// is a typed error (a device-1 stream: `NotCaptured`; a join of it: `OtherDevice`; a
/// device-1 buffer as a launch argument: `KernelError::OtherDevice`; as a fill target:
/// `MemoryError::StreamDevice`), the capture still ends with a graph that replays, and a
/// replay on device 1 is `OtherDevice`.
#[test]
fn cross_device_uses_in_a_capture_are_typed_errors() {
    let _one = serial();
    let Some(([s0, s1], _ext)) = fresh_streams([0, 1]) else {
        return;
    };
    let (f0, f1) = (set_fn(0), set_fn(1));
    let y0 = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s0).unwrap());
    let y1 = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s1).unwrap());
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
    let g = Graph::capture(&s0, |c| {
        assert!(matches!(
            c.launch(&s1, &f1, &[N], None),
            Err(GraphError::NotCaptured { .. })
        ));
        let e = c.record_event(&s0)?;
        assert!(matches!(
            c.wait_event(&s1, &e),
            Err(GraphError::OtherDevice { .. })
        ));
        assert!(matches!(
            c.launch(&s0, &f0, &[N], None)?.arg(&y1),
            Err(GraphError::Kernel(KernelError::OtherDevice { .. }))
        ));
        match c.fill(&s0, &y1, 1u32) {
            Err(GraphError::Kernel(KernelError::Memory(m))) => {
                assert!(matches!(*m, MemoryError::StreamDevice { .. }), "{m:?}");
            }
            r => panic!("a fill of a device-1 buffer in a device-0 capture: {r:?}"),
        }
        // SAFETY: N work-items write y0[0..N), the whole allocation; the kernel ends.
        unsafe {
            c.launch(&s0, &f0, &[N], None)?
                .arg(&y0)?
                .arg(4u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
    .unwrap();
    assert!(matches!(g.replay(&s1), Err(GraphError::OtherDevice { .. })));
    g.replay(&s0).unwrap();
    assert_eq!(y0.to_vec(&s0).unwrap(), vec![4u32; N]);
    assert_eq!(y1.to_vec(&s1).unwrap(), vec![0u32; N]);
    assert!(!s0.is_capturing() && !s1.is_capturing());
}

/// Holds: the captured stream's `ExternalStream` dropped inside the capture's closure (the
/// stream released mid-capture): the capture still returns a graph, a replay on the released
/// stream is a typed `KernelError::Stream` error (nothing enqueued), the graph replays on
/// another stream, and once the graph and buffers are dropped the device's allocated bytes
/// are back at their baseline. An over-large `Capture::alloc` in the same capture is a typed
/// `MemoryError` and leaves nothing allocated.
#[test]
fn a_stream_released_mid_capture_and_an_oversized_alloc() {
    let _one = serial();
    if !xpu_testing::devices(1) {
        return;
    }
    let f = set_fn(0);
    let other = fresh_stream(0);
    let s2 = other.stream();
    xpu_alloc::wait_pool_releases();
    let base = xpu_alloc::memory_allocated(0).unwrap();
    for mode in [ReplayMode::Auto, ReplayMode::Recorded] {
        let ext = fresh_stream(0);
        let s = ext.stream();
        let mut ext = Some(ext);
        let mut out = None;
        let g = Graph::capture_with(&s, mode, |c| {
            assert!(matches!(
                c.alloc::<u64>(&s, usize::MAX / 4),
                Err(GraphError::Kernel(KernelError::Memory(_)))
            ));
            let y = c.alloc::<u32>(&s, N)?;
            out = Some(Arc::clone(&y));
            drop(ext.take());
            // SAFETY: N work-items write y[0..N), the whole allocation; the kernel ends.
            unsafe {
                c.launch(&s, &f, &[N], None)?
                    .arg(&y)?
                    .arg(6u32)?
                    .arg(N as u32)?
                    .enqueue()
            }
        })
        .unwrap();
        assert!(matches!(
            g.replay(&s),
            Err(GraphError::Kernel(KernelError::Stream(_)))
        ));
        g.replay(&s2).unwrap();
        let y = out.take().unwrap();
        assert_eq!(y.to_vec(&s2).unwrap(), vec![6u32; N]);
        drop(g);
        drop(y);
    }
    s2.synchronize().unwrap();
    xpu_alloc::wait_pool_releases();
    assert_eq!(xpu_alloc::memory_allocated(0).unwrap(), base);
}

// Review h80 (fresh eyes on 9209a05: `Capture<'brand>`, an invariant lifetime brand per
// capture): what held at run time. Its twelve compile-time attempts to move one capture's
// handle or launch into the other's place, and three controls, are doctests of xpu-kernel's
// `capture_brand` module.

/// Holds (nested capture on the same stream): a capture nested in a capture of the same
/// stream is `AlreadyCapturing`, the outer capture goes on and its graph replays, and the
/// stream is released afterwards.
#[test]
fn a_nested_capture_of_the_same_stream_is_refused() {
    let _one = serial();
    let Some(([s], _ext)) = fresh_streams([0]) else {
        return;
    };
    let f = set_fn(0);
    let y = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s).unwrap());
    s.synchronize().unwrap();
    let g = Graph::capture(&s, |outer| {
        let inner = Graph::capture(&s, |_inner| Ok(()));
        assert!(
            matches!(inner, Err(GraphError::AlreadyCapturing { .. })),
            "{inner:?}"
        );
        // SAFETY: N work-items write y[0..N), the whole allocation; the kernel ends.
        unsafe {
            outer
                .launch(&s, &f, &[N], None)?
                .arg(&y)?
                .arg(3u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
    .unwrap();
    assert!(!s.is_capturing());
    g.replay(&s).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), vec![3u32; N]);
}

/// Holds (panics and catch_unwind mid-capture): inside an outer capture, an inner capture on
/// another stream panics after recording a launch of the OUTER capture that is left without
/// `enqueue`; the panic is caught in the outer closure. The inner stream is released, the
/// abandoned launch records nothing, the outer capture goes on and its graph holds only the
/// launch enqueued afterwards (one node), and replays it; an event of the inner capture is
/// a `ForeignEvent` to the outer one.
#[test]
fn a_panic_caught_mid_nested_capture_leaves_both_captures_consistent() {
    let _one = serial();
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let f = set_fn(0);
    let y = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s1).unwrap());
    s1.synchronize().unwrap();
    let g = Graph::capture(&s1, |outer| {
        let mut foreign = None;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Graph::capture(&s2, |inner| {
                foreign = Some(inner.record_event(&s2)?);
                let _abandoned = outer.launch(&s1, &f, &[N], None)?.arg(&y)?;
                assert!(s2.is_capturing());
                panic!("mid-capture");
            })
        }));
        assert!(caught.is_err());
        assert!(!s2.is_capturing(), "the inner stream stays captured");
        assert!(s1.is_capturing());
        let e = foreign.expect("inner event");
        assert!(matches!(
            outer.wait_event(&s1, &e),
            Err(GraphError::ForeignEvent)
        ));
        // SAFETY: N work-items write y[0..N), the whole allocation; the kernel ends.
        unsafe {
            outer
                .launch(&s1, &f, &[N], None)?
                .arg(&y)?
                .arg(5u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
    .unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert!(!s1.is_capturing() && !s2.is_capturing());
    g.replay(&s1).unwrap();
    assert_eq!(y.to_vec(&s1).unwrap(), vec![5u32; N]);
}
