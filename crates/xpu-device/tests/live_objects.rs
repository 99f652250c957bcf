//! Live OpenCL object counts return to their baseline: no leak of buffers, sub-buffers,
//! events, queues, programs, kernels or completion callbacks. One test in this binary, so no
//! other test's objects move the counts.

mod common;

use xpu_device::backend::{wait_for_callbacks, Buffer, MemFlags};
use xpu_device::{live_objects, LiveObjects};

#[test]
fn every_live_object_count_returns_to_its_baseline() {
    let Some(dev) = common::device0() else {
        return;
    };
    let ctx = dev.context().unwrap();
    let baseline = live_objects();

    // 10,000 launches whose events are dropped at once.
    let q = common::queue(dev);
    let (program, kernel, out) = common::scale_index_into(dev, 64, 2);
    let during = live_objects();
    assert_eq!(
        during,
        LiveObjects {
            buffers: baseline.buffers + 2, // ours and the kernel's argument reference
            queues: baseline.queues + 1,
            programs: baseline.programs + 1,
            kernels: baseline.kernels + 1,
            ..baseline
        }
    );
    for _ in 0..10_000 {
        // SAFETY: 64 work-items write out[0..64), the 256-byte argument buffer.
        drop(unsafe { q.enqueue_kernel(&kernel, &[64], None, &[]) }.unwrap());
    }
    q.finish().unwrap();
    assert_eq!(live_objects(), during, "after 10,000 launches");

    // Markers, barriers, sub-buffers, user events, forwarded statuses.
    let align = dev.properties().mem_base_addr_align as usize;
    let parent = Buffer::new(ctx, 4 * align, MemFlags::default()).unwrap();
    for _ in 0..1_000 {
        let gate = dev.create_user_event().unwrap();
        let bridge = dev.create_user_event().unwrap();
        let m = q.enqueue_marker(&[&gate]).unwrap();
        m.forward_to(&bridge).unwrap();
        let b = q.enqueue_barrier(&[&bridge]).unwrap();
        let sub = parent.sub_buffer(align, align).unwrap();
        q.fill(&sub, &[1u8], 0, align, &[&b]).unwrap();
        gate.set_complete().unwrap();
    }
    q.finish().unwrap();
    drop(parent);

    // Completion callbacks holding buffers: every closure runs and drops its captures.
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..1_000 {
        let held = out.clone();
        let tx = tx.clone();
        q.enqueue_marker(&[])
            .unwrap()
            .on_complete(move |s| {
                drop(held);
                let _ = tx.send(s);
            })
            .unwrap();
    }
    q.flush().unwrap();
    for _ in 0..1_000 {
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(30)), Ok(0));
    }
    wait_for_callbacks();
    q.finish().unwrap();
    assert_eq!(
        live_objects(),
        during,
        "after markers, sub-buffers and callbacks"
    );

    drop((kernel, program, out, q));
    assert_eq!(live_objects(), baseline);
}
