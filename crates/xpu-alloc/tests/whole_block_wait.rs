//! A block that is its whole segment, over bytes that a split block used through a
//! sub-buffer: its first use takes the segment's buffer only after the commands the earlier
//! owner queued on the allocation stream completed (`xpu_alloc::SubBuffers`, the rule NVIDIA's
//! driver needs when a segment's buffer and its sub-buffers meet). PoCL orders the queue
//! either way, so the test watches the rule itself, as xpu-kernel's `sub_buffer_reuse.rs`:
//! the earlier owner's work is held behind a gate opened only once the runtime has recorded
//! the marker it waits on (`Gate::open_when_waited_on`), and the earlier work must
//! be complete when the whole block's first use returns. Alone in its file: it counts the
//! process's live events. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use common::{device_stream, MIB};
use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_event::{Event, Gate};

#[test]
fn a_whole_block_over_bytes_a_split_block_used_is_passed_after_the_earlier_commands() {
    let Some(s) = device_stream() else {
        return;
    };
    if !xpu_alloc::sub_buffers_safe_on(&xpu_device::device(0).unwrap().properties().platform_name) {
        return; // `block_cl_mem` of a split block is refused there.
    }
    // A 4 MiB block of a 20 MiB segment.
    let alloc =
        DeviceAllocator::new(0, AllocConfig::parse("split_segments:True").unwrap()).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    let a = alloc.allocate(4 * MIB, &s).unwrap();
    let addr = a.address();
    // Its sub-buffer, made and cached by `block_cl_mem` (kernels built as written and raw
    // interop make them; copies do not), then a fill the gate holds back.
    a.block_cl_mem().unwrap();
    a.view().unwrap().fill(&s, &[7], 0, 4 << 20).unwrap();
    let mut done = Event::default();
    done.record(&s).unwrap();
    drop(a);
    // The next owner of the bytes takes the whole merged segment.
    let b = alloc.allocate(20 * MIB, &s).unwrap();
    assert_eq!((b.address(), b.allocated_size()), (addr, 20 * MIB));
    assert_eq!(
        alloc.core().snapshot().len(),
        1,
        "one segment: the block's own"
    );

    // The whole block's first use: the segment's own buffer.
    let (mem, earlier_done) = gate
        .open_when_waited_on(|| (b.block_cl_mem(), done.query()))
        .unwrap();
    assert_eq!(mem.unwrap().1, 20 << 20, "the segment's buffer");
    assert!(
        earlier_done.unwrap(),
        "the segment's buffer was passed while the earlier owner's fill through its \
         sub-buffer was still queued"
    );
    let mut back = vec![0u8; 4096];
    b.view().unwrap().read(&s, 0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 7));
}
