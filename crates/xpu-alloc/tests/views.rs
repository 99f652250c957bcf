//! Views of allocator memory are scoped to their allocation (on a real OpenCL device, PoCL
//! in CI): nothing reaches a block after it is freed or past its requested end, and nothing
//! keeps released memory alive. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_stream::ExternalStream;

fn device() -> bool {
    if xpu_device::device_count() >= 1 {
        return true;
    }
    assert!(
        !xpu_device::require_device(),
        "XPU_REQUIRE_DEVICE=1 but no OpenCL device was found"
    );
    eprintln!("skipped: needs an OpenCL device");
    false
}

fn fresh_stream() -> ExternalStream {
    let q = xpu_device::device(0)
        .unwrap()
        .create_queue(xpu_device::backend::QueueOptions {
            profiling: false,
            priority: None,
        })
        .unwrap();
    ExternalStream::new(q, 0).unwrap()
}

fn private() -> DeviceAllocator {
    DeviceAllocator::new(0, AllocConfig::default()).unwrap()
}

#[test]
fn a_handle_kept_after_free_cannot_write_into_the_next_allocation() {
    if !device() {
        return;
    }
    let alloc = private();
    let owner = fresh_stream();
    let s = owner.stream();
    let q = s.queue().unwrap();
    let a = alloc.allocate(1000, &s).unwrap();
    let (stale, off) = a.buffer_and_offset().unwrap();
    let address = a.address();
    drop(a);
    let b = alloc.allocate(1000, &s).unwrap();
    assert_eq!(b.address(), address, "the freed block is reused");
    let (buf, boff) = b.buffer_and_offset().unwrap();
    q.write(&buf, boff as usize, &[0x22; 1000]).unwrap();
    let _ = q.write(&stale, off as usize, &[0x11; 1000]);
    let mut back = vec![0u8; 1000];
    q.read(&buf, boff as usize, &mut back).unwrap();
    assert_eq!(back[0], 0x22, "the freed allocation's handle wrote into its successor");
}

#[test]
fn a_write_past_the_allocation_end_is_refused() {
    if !device() {
        return;
    }
    let alloc = private();
    let owner = fresh_stream();
    let s = owner.stream();
    let q = s.queue().unwrap();
    let a = alloc.allocate(1000, &s).unwrap();
    let b = alloc.allocate(1000, &s).unwrap();
    let (buf_b, off_b) = b.buffer_and_offset().unwrap();
    q.write(&buf_b, off_b as usize, &[0x22; 1000]).unwrap();
    let (buf_a, off_a) = a.buffer_and_offset().unwrap();
    let past_end = q.write(&buf_a, off_a as usize, &[0x11; 2048]);
    assert!(past_end.is_err(), "a 2048-byte write into a 1000-byte allocation was accepted");
    let mut back = vec![0u8; 1000];
    q.read(&buf_b, off_b as usize, &mut back).unwrap();
    assert_eq!(back, vec![0x22; 1000]);
}

#[test]
fn empty_cache_leaves_no_handle_on_released_memory() {
    if !device() {
        return;
    }
    let alloc = private();
    let owner = fresh_stream();
    let s = owner.stream();
    let q = s.queue().unwrap();
    let a = alloc.allocate(1000, &s).unwrap();
    let (kept, off) = a.buffer_and_offset().unwrap();
    drop(a);
    alloc.empty_cache();
    assert_eq!(alloc.memory_stats().reserved_bytes.all.current, 0);
    // The statistics say nothing is reserved: the memory must be gone, not writable.
    let write = q.write(&kept, off as usize, &[1; 16]);
    assert!(write.is_err(), "released memory is still reachable through a kept handle");
}
