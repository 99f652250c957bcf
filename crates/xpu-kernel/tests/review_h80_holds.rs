//! Review h80 (fresh eyes on 9209a05: `Capture<'brand>`, an invariant lifetime brand per
//! capture, so that the handles of two nested captures cannot be exchanged): PASSING probes of
//! what was attacked and held.
//!
//! Compilation: the twelve safe ways tried to move one capture's handle or launch into the
//! other capture's place, and three controls, are doctests of `xpu-kernel`'s `capture_brand`
//! module (`compile_fail` with the error code expected; the controls compile).
//!
//! Runtime (PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped without
//! a device unless `XPU_REQUIRE_DEVICE=1`): a nested capture of the same stream, a panic
//! caught in the middle of a nested capture, and another capture's event.

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::fresh_streams;
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::{DeviceBuffer, Function, Program};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const N: usize = 64;
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
