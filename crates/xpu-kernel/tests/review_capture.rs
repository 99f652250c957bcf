//! Review (fresh eyes, safe code only) of the launch and graph layers around captures: a
//! launch assembled before a capture began cannot slip onto the capturing stream at its
//! enqueue, and captured commands on zero-sized elements give a graph that replays.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::Arc;

use common::device0_stream;
use xpu_kernel::graph::Graph;
use xpu_kernel::{DeviceBuffer, KernelError, LaunchExt, Program};

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

/// A graph whose private pool holds its only buffer is dropped while its replay is held back
/// by a gate: neither the buffer's block nor the pool's segment is handed to another
/// allocation (of the global allocator, on another stream) before the replay ran, so the
/// replay's late fill cannot land in the new owner's memory. `empty_cache` waits for the
/// pool's release, which waits for the replay (as torch's `empty_cache` synchronizes its
/// events), so it runs on another thread while allocations go on here.
#[test]
fn a_dropped_graphs_pool_memory_is_not_reused_before_its_pending_replay() {
    let Some(([s1, s2], _ext)) = common::fresh_streams([0, 0]) else {
        return;
    };
    const N: usize = 1 << 16;
    let mut addr = 0;
    let graph = Graph::capture(&s1, |c| {
        let buf = c.alloc::<f32>(&s1, N)?;
        addr = buf.data_ptr().address();
        c.fill(&s1, &buf, 9.0f32)?;
        Ok(())
    })
    .unwrap();
    let gate = xpu_event::Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    graph.replay(&s1).unwrap();
    drop(graph);
    let (tx, rx) = std::sync::mpsc::channel();
    let emptying = std::thread::spawn(move || {
        xpu_alloc::empty_cache();
        tx.send(()).unwrap();
    });
    let (atx, arx) = std::sync::mpsc::channel();
    let allocating = std::thread::spawn(move || {
        let zs: Vec<DeviceBuffer<f32>> = (0..4)
            .map(|_| DeviceBuffer::from_slice(&vec![-7.0f32; N], &s2).unwrap())
            .collect();
        s2.synchronize().unwrap();
        atx.send(()).unwrap();
        zs
    });
    let allocated = arx.recv_timeout(std::time::Duration::from_secs(20));
    let emptied_early = rx.try_recv().is_ok();
    gate.open().unwrap();
    assert!(
        allocated.is_ok(),
        "allocating on another stream blocked while empty_cache waited for the gated replay"
    );
    assert!(
        !emptied_early,
        "empty_cache returned before the gated replay ran"
    );
    let zs = allocating.join().unwrap();
    emptying.join().unwrap();
    s1.synchronize().unwrap();
    let reused = zs.iter().any(|z| z.data_ptr().address() == addr);
    for z in &zs {
        assert_eq!(
            z.to_vec(&s2).unwrap(),
            vec![-7.0f32; N],
            "the gated replay's fill landed in a new allocation (block reused: {reused})"
        );
    }
}
