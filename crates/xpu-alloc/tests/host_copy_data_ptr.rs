//! Pinned-host copies (xpu-host's `HostCopy`) to and from a device allocation: the `DataPtr`
//! lends its block (not the segment) as the copy's region. On a real OpenCL device (PoCL in
//! CI); skipped without one unless `XPU_REQUIRE_DEVICE=1`.

use xpu_alloc::{AllocConfig, DeviceAllocator, HostCopy, HostError};
use xpu_testing::devices;

/// A pool stream of device 0 and a new allocator for it; `None` (the test is skipped) without
/// a device.
fn stream_and_allocator() -> Option<(xpu_stream::Stream, DeviceAllocator)> {
    devices(1).then(|| {
        (
            xpu_stream::get_stream_from_pool(0, 0).unwrap(),
            DeviceAllocator::new(0, AllocConfig::default()).unwrap(),
        )
    })
}

#[test]
fn a_round_trip_through_a_data_ptr_copies_its_bytes_and_stays_inside_its_block() {
    let Some((stream, alloc)) = stream_and_allocator() else {
        return;
    };
    // Two blocks of one segment: the copy into `b` must not touch `a`.
    let a = alloc.allocate(4096, &stream).unwrap();
    let b = alloc.allocate(4096, &stream).unwrap();
    let mut zeros = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    zeros.fill(0);
    stream.copy_from_host(&zeros, &a).unwrap();
    let mut src = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    for (i, byte) in src.iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    stream.copy_from_host(&src, &b).unwrap();
    let mut back = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    stream.copy_to_host(&b, &mut back).unwrap();
    let mut other = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    stream.copy_to_host(&a, &mut other).unwrap();
    stream.synchronize().unwrap();
    assert!(back.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8));
    assert!(other.iter().all(|&x| x == 0));
}

#[test]
fn a_copy_longer_than_the_data_ptr_is_refused() {
    let Some((stream, alloc)) = stream_and_allocator() else {
        return;
    };
    let small = alloc.allocate(1000, &stream).unwrap();
    let src = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    let err = stream.copy_from_host(&src, &small).unwrap_err();
    assert!(
        matches!(
            err,
            HostError::OutOfRange {
                len: 4096,
                size: 1000,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A whole-allocation copy of device 0's allocation on a stream of device 1 is refused with a
/// typed error naming both devices (review h27's note: it was the driver's
/// `CL_INVALID_CONTEXT`, -34, from the enqueue), in both directions, before any command is
/// enqueued; the allocation and the host block stay usable.
#[test]
fn a_copy_on_another_devices_stream_is_refused_with_both_devices_named() {
    if !devices(2) {
        return;
    }
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let s0 = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let s1 = xpu_stream::get_stream_from_pool(0, 1).unwrap();
    let p = alloc.allocate(4096, &s0).unwrap();
    let mut host = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    host.fill(3);
    let expected = |e: HostError| match e {
        HostError::StreamDevice { stream, device } => (stream, device),
        other => panic!("not StreamDevice: {other:?}"),
    };
    assert_eq!(
        expected(s1.copy_to_host(&p, &mut host).unwrap_err()),
        (1, 0)
    );
    assert_eq!(expected(s1.copy_from_host(&host, &p).unwrap_err()), (1, 0));
    s0.copy_from_host(&host, &p).unwrap();
    let mut back = xpu_alloc::host_allocate_on(0, 4096).unwrap();
    s0.copy_to_host(&p, &mut back).unwrap();
    s0.synchronize().unwrap();
    assert!(back.iter().all(|&b| b == 3));
}
