//! Views of allocator memory are scoped to their allocation (on a real OpenCL device, PoCL
//! in CI): nothing reaches a block after it is freed or past its requested end, and nothing
//! keeps released memory alive. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.
//!
//! That a view cannot outlive its `DataPtr` (so cannot write into the block's next owner,
//! nor keep a segment alive past `empty_cache`) is checked at compile time: see the
//! `compile_fail` examples of `DataPtr::view` and `with_raw_view`.

mod common;

use xpu_alloc::{AllocConfig, AllocError, DeviceAllocator};
use xpu_device::DeviceError;
use xpu_stream::StreamError;

use common::{device_stream, fresh_stream};

fn private() -> DeviceAllocator {
    // Split segments, whatever the platform's default: the tests place blocks side by side.
    DeviceAllocator::new(0, AllocConfig::parse("split_segments:True").unwrap()).unwrap()
}

#[test]
fn a_view_reads_and_writes_only_its_own_allocation() {
    let Some(s) = device_stream() else {
        return;
    };
    let alloc = private();
    let a = alloc.allocate(1000, &s).unwrap();
    let b = alloc.allocate(1000, &s).unwrap();
    assert_eq!(
        b.address(),
        a.address() + 1024,
        "b is a's neighbour in the segment"
    );
    let (va, vb) = (a.view().unwrap(), b.view().unwrap());
    assert_eq!((va.data_ptr().size(), vb.data_ptr().size()), (1000, 1000));
    vb.write(&s, 0, &[0x22; 1000]).unwrap();
    va.write(&s, 0, &[0x11; 1000]).unwrap();
    let oob = |r: Result<(), AllocError>, offset: u64, len: u64| {
        assert_eq!(
            r.unwrap_err(),
            AllocError::OutOfRange {
                offset,
                len,
                size: 1000
            }
        );
    };
    // Past the requested end (inside the rounded block and into the neighbour).
    oob(va.write(&s, 0, &[0x11; 2048]), 0, 2048);
    oob(va.write(&s, 999, &[0x11; 2]), 999, 2);
    oob(va.write(&s, usize::MAX, &[0x11; 2]), u64::MAX, 2);
    oob(va.fill(&s, &[0x11], 512, 1024), 512, 1024);
    oob(va.copy_from(&s, &vb, 0, 1, 1000), 1, 1000);
    oob(va.copy_from(&s, &vb, 1, 0, 1000), 1, 1000);
    let mut big = vec![0u8; 1001];
    oob(va.read(&s, 0, &mut big), 0, 1001);
    // Within bounds: fill, copy and read back.
    va.fill(&s, &[0x33; 4], 0, 8).unwrap();
    vb.copy_from(&s, &va, 0, 992, 8).unwrap();
    let (mut ra, mut rb) = (vec![0u8; 1000], vec![0u8; 1000]);
    va.read(&s, 0, &mut ra).unwrap();
    vb.read(&s, 0, &mut rb).unwrap();
    let mut want_a = vec![0x11u8; 1000];
    want_a[..8].fill(0x33);
    let mut want_b = vec![0x22u8; 1000];
    want_b[992..].fill(0x33);
    assert_eq!((ra, rb), (want_a, want_b));
    // The raw pair names the same bytes.
    let (mem_a, off_a) = a.cl_mem_and_offset().unwrap();
    let (mem_b, off_b) = b.cl_mem_and_offset().unwrap();
    assert_eq!((mem_a, off_b - off_a), (mem_b, 1024));
}

#[test]
fn a_view_reports_the_device_error_typed() {
    let Some(s) = device_stream() else {
        return;
    };
    let a = xpu_alloc::allocate(1024, &s).unwrap();
    let va = a.view().unwrap();
    // Overlapping ranges of one buffer: the driver's CL_MEM_COPY_OVERLAP (OpenCL 3.0 §5.2.3).
    let overlap = va.copy_from(&s, &va, 0, 8, 64).unwrap_err();
    assert!(
        matches!(&overlap, AllocError::Device(e) if matches!(**e, DeviceError::OpenCl(c) if c.code == -8)),
        "{overlap:?}"
    );
    assert_eq!(
        overlap.to_string(),
        "device error: clEnqueueCopyBuffer failed: CL_MEM_COPY_OVERLAP (-8)"
    );
    // A pattern the runtime refuses before the driver.
    let pattern = va.fill(&s, &[1, 2, 3], 0, 6).unwrap_err();
    assert!(
        matches!(
            &pattern,
            AllocError::Device(e) if matches!(**e, DeviceError::InvalidArgument(_))
        ),
        "{pattern:?}"
    );
    assert!(!pattern.is_bad_fork() && !overlap.is_bad_fork());
    // A released external stream is a stream failure, not a device one.
    let external = fresh_stream(0);
    let released = external.stream();
    drop(external);
    let stream = va.write(&released, 0, &[1; 8]).unwrap_err();
    assert!(
        matches!(
            &stream,
            AllocError::Stream(m)
                if matches!(m.downcast_ref(), Some(StreamError::ExternalReleased { .. }))
        ) && stream.to_string().contains("was dropped"),
        "{stream:?}"
    );
    assert_eq!(
        AllocError::from(DeviceError::BadFork),
        AllocError::BadFork,
        "a device-layer bad fork is the allocator's own"
    );
    assert!(AllocError::Device(Box::new(DeviceError::BadFork)).is_bad_fork());
}

#[test]
fn a_view_refuses_a_stream_of_another_device() {
    if xpu_device::device_count() < 2 {
        eprintln!("skipped: needs two devices (POCL_DEVICES=\"pthread pthread\")");
        return;
    }
    let alloc = private();
    let owner = fresh_stream(0);
    let a = alloc.allocate(64, &owner.stream()).unwrap();
    let other = xpu_stream::get_stream_from_pool(0, 1).unwrap();
    assert_eq!(
        a.view().unwrap().write(&other, 0, &[1]).unwrap_err(),
        AllocError::StreamDevice {
            stream: 1,
            device: 0
        }
    );
}

#[test]
fn raw_delete_during_a_raw_view_frees_the_block_when_the_view_ends() {
    let Some(s) = device_stream() else {
        return;
    };
    let p = xpu_alloc::raw_alloc_with_stream(1000, &s).unwrap();
    let before = xpu_alloc::memory_allocated(0).unwrap();
    let inside = xpu_alloc::with_raw_view(p, |v| {
        v.write(&s, 0, &[0x11; 1000]).unwrap();
        xpu_alloc::raw_delete(p).unwrap();
        // The block is still this view's: a new allocation gets another one.
        let q = xpu_alloc::raw_alloc_with_stream(1000, &s).unwrap();
        assert_ne!(q.address(), p.address());
        xpu_alloc::with_raw_view(q, |w| w.write(&s, 0, &[0x22; 1000]))
            .unwrap()
            .unwrap();
        let mut back = vec![0u8; 1000];
        v.read(&s, 0, &mut back).unwrap();
        (back, xpu_alloc::memory_allocated(0).unwrap(), q)
    })
    .unwrap();
    let (back, allocated, q) = inside;
    assert_eq!(back, vec![0x11; 1000]);
    assert_eq!(allocated, before + 1024);
    // Once the view ended, the pointer is gone and its block is free.
    assert_eq!(xpu_alloc::memory_allocated(0).unwrap(), before);
    assert_eq!(
        xpu_alloc::with_raw_view(p, |v| v.data_ptr().size()).unwrap_err(),
        AllocError::InvalidDevicePointer {
            address: p.address()
        }
    );
    assert_eq!(
        xpu_alloc::raw_cl_mem_and_offset(p).unwrap_err(),
        AllocError::InvalidDevicePointer {
            address: p.address()
        }
    );
    xpu_alloc::raw_delete(q).unwrap();
    // Nothing is left holding the memory: empty_cache releases all of it, and the
    // statistics agree.
    xpu_alloc::empty_cache();
    assert_eq!(
        (
            xpu_alloc::memory_reserved(0).unwrap(),
            xpu_alloc::memory_allocated(0).unwrap()
        ),
        (0, 0)
    );
}

#[test]
fn empty_cache_during_a_raw_view_keeps_the_viewed_segment() {
    let Some(s) = device_stream() else {
        return;
    };
    let p = xpu_alloc::raw_alloc_with_stream(1000, &s).unwrap();
    let reserved = xpu_alloc::with_raw_view(p, |v| {
        xpu_alloc::raw_delete(p).unwrap();
        xpu_alloc::empty_cache();
        // Still allocated (the view holds it), so still reserved, and still usable.
        v.write(&s, 0, &[7; 1000]).unwrap();
        xpu_alloc::memory_reserved(0).unwrap()
    })
    .unwrap();
    let segment = if xpu_alloc::device_splits_segments(0).unwrap() {
        2 << 20
    } else {
        1024
    };
    assert_eq!(reserved, segment);
    xpu_alloc::empty_cache();
    assert_eq!(xpu_alloc::memory_reserved(0).unwrap(), 0);
}
