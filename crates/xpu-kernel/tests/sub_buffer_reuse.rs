//! A block's bytes reused under a sub-buffer of another size: the new sub-buffer is made only
//! after the commands the bytes' earlier owner queued on the allocation stream completed
//! (`xpu_alloc::SubBuffers`; NVIDIA's driver ran later commands first or crashed otherwise,
//! `ci/diag/nvidia_subbuffer_repro.c`). PoCL orders the queue either way, so the test watches
//! the rule itself: the earlier owner's work is held behind a gate opened only once the runtime has
//! recorded the marker it waits on (`Gate::open_when_waited_on`), and the
//! earlier work must be complete when the new sub-buffer's first use returns. Sub-buffers are
//! made only for kernels built as written and for `DataPtr::block_cl_mem` (kernels built by
//! `Program::build` and copies take the segment's buffer and an offset), so the test uses
//! `block_cl_mem`, on platforms whose sub-buffers are safe (not NVIDIA's). Alone in its
//! file: it counts the process's live events. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu_event::test_support::Gate;
use xpu_event::Event;
use xpu_kernel::DeviceBuffer;

#[test]
fn a_sub_buffer_over_reused_bytes_is_made_after_the_earlier_owners_commands() {
    let Some((s, _ext)) = common::device0_stream() else {
        return;
    };
    if !xpu_alloc::sub_buffers_safe_on(&xpu_device::device(0).unwrap().properties().platform_name) {
        return;
    }
    // The earlier owner: 4 KiB, its sub-buffer made and cached, then a copy, which the gate
    // holds back; `done` completes after it.
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    let a = DeviceBuffer::<u32>::new(1024, &s).unwrap();
    a.data_ptr().block_cl_mem().unwrap();
    a.data_ptr()
        .view()
        .unwrap()
        .fill(&s, &7u32.to_ne_bytes(), 0, 4096)
        .unwrap();
    let addr = a.data_ptr().address();
    let mut done = Event::default();
    done.record(&s).unwrap();
    drop(a);
    // The next owner of the same bytes, half the size: a sub-buffer of another (offset, size).
    let b = DeviceBuffer::<u32>::new(512, &s).unwrap();
    assert_eq!(
        b.data_ptr().address(),
        addr,
        "best fit reuses the freed block"
    );

    // The new sub-buffer's first use.
    let (view, earlier_done) = gate
        .open_when_waited_on(|| (b.data_ptr().block_cl_mem().map(|_| ()), done.query()))
        .unwrap();
    view.unwrap();
    assert!(
        earlier_done.unwrap(),
        "the sub-buffer over the reused bytes was made while the earlier owner's copy was \
         still queued"
    );
    assert_eq!(b.to_vec(&s).unwrap().len(), 512);
}
