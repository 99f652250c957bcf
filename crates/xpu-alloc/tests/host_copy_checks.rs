//! Copies between pinned host memory and device allocations, probes that held: streams of another
//! device refused, overlapping and overflowing ranges refused, blocks freed while a gated copy runs
//! not reused.
//!
//! Review h16 (fresh eyes, host <-> device copies): probes of the copy paths between pinned
//! host memory and device allocations. PASSING probes, kept as regression tests.
//!
//! Ordering is deterministic: work that must still be in flight is held back by a closed
//! user-event gate (`xpu_event::Gate`). On PoCL (`POCL_DEVICES="pthread pthread"`); skipped
//! without devices unless `XPU_REQUIRE_DEVICE=1`.
//!
//! Found by reading, with no deterministic test (the window is host code between two calls,
//! which no gate can hold open): `BlockView::write_from_host` / `read_into_host` recorded the
//! copy's stream on the block only after the copy was enqueued, and that record can fail
//! (`ExternalReleased` once another thread dropped the `ExternalStream` in between): the call
//! then returned an error with the copy in flight and unrecorded, and the `DataPtr` dropped
//! next went back to the cache while the copy still used its bytes. Fixed by recording
//! before the enqueue, as `fill` and `copy_from` do (crates/xpu-alloc/src/data_ptr.rs).

use xpu_alloc::{AllocConfig, DeviceAllocator, HostCopy, HostError};
use xpu_event::Gate;
use xpu_stream::{get_stream_from_pool, Stream};
use xpu_testing::devices;

const N: usize = 4096;

fn streams(device: usize) -> (Stream, Stream) {
    let a = get_stream_from_pool(0, device).unwrap();
    let mut b = get_stream_from_pool(0, device).unwrap();
    while b == a {
        b = get_stream_from_pool(0, device).unwrap();
    }
    (a, b)
}

/// A device-0 allocation copied from pinned memory on a stream of device 1: the region's
/// buffer belongs to device 0's context, so the copy must be refused (and nothing written).
#[test]
fn a_whole_copy_on_a_stream_of_another_device_is_refused() {
    if !devices(2) {
        return;
    }
    let (a, _) = streams(0);
    let (other, _) = streams(1);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    ptr.view().unwrap().write(&a, 0, &[1u8; N]).unwrap();
    let mut src = xpu_alloc::host_allocate_on(1, N).unwrap();
    src.fill(9);
    let r = other.copy_from_host(&src, &ptr);
    assert!(
        r.is_err(),
        "a copy into a device-0 block on a device-1 stream was enqueued"
    );
    other.synchronize().unwrap();
    let mut back = vec![0u8; N];
    ptr.view().unwrap().read(&a, 0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 1));
}

/// `BlockView::write_from_host` / `read_into_host` on a stream of another device: refused.
#[test]
fn a_view_host_copy_on_a_stream_of_another_device_is_refused() {
    if !devices(2) {
        return;
    }
    let (a, _) = streams(0);
    let (other, _) = streams(1);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let view = ptr.view().unwrap();
    view.write(&a, 0, &[1u8; N]).unwrap();
    let mut src = xpu_alloc::host_allocate_on(0, N).unwrap();
    src.fill(9);
    assert!(view.write_from_host(&other, &src, 0, 0, N).is_err());
    let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
    assert!(view.read_into_host(&other, 0, &mut dst, 0, N).is_err());
    other.synchronize().unwrap();
    let mut back = vec![0u8; N];
    view.read(&a, 0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 1));
}

/// Overlapping device-side copy within one allocation through two views: an error
/// (`CL_MEM_COPY_OVERLAP`), no panic, no partial write; a same-range copy too.
#[test]
fn an_overlapping_copy_within_one_allocation_is_refused() {
    if !devices(1) {
        return;
    }
    let (a, _) = streams(0);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let (v1, v2) = (ptr.view().unwrap(), ptr.view().unwrap());
    let pat: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
    v1.write(&a, 0, &pat).unwrap();
    assert!(v1.copy_from(&a, &v2, 0, 16, 1024).is_err());
    assert!(v1.copy_from(&a, &v2, 0, 0, 1024).is_err());
    let mut back = vec![0u8; N];
    v1.read(&a, 0, &mut back).unwrap();
    assert_eq!(back, pat);
}

/// Out-of-range and overflowing offsets and lengths on every host-copy entry point: typed
/// errors, no panic.
#[test]
fn overflowing_offsets_and_lengths_are_errors() {
    if !devices(1) {
        return;
    }
    let (a, _) = streams(0);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let view = ptr.view().unwrap();
    let src = xpu_alloc::host_allocate_on(0, N).unwrap();
    let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
    for (off, hoff, len) in [
        (usize::MAX, 0, 1),
        (0, usize::MAX, 1),
        (1, 0, usize::MAX),
        (N, 0, 1),
        (0, N, 1),
        (N - 1, 0, 2),
    ] {
        assert!(matches!(
            view.write_from_host(&a, &src, hoff, off, len),
            Err(HostError::OutOfRange { .. })
        ));
        assert!(matches!(
            view.read_into_host(&a, off, &mut dst, hoff, len),
            Err(HostError::OutOfRange { .. })
        ));
        let device_bad = off.checked_add(len).is_none_or(|e| e > N);
        assert_eq!(view.fill(&a, &[0], off, len).is_err(), device_bad);
        assert!(view.copy_from(&a, &view, off, hoff, len).is_err());
    }
    // Bad fill patterns.
    assert!(view.fill(&a, &[], 0, 16).is_err());
    assert!(view.fill(&a, &[0; 3], 0, 3).is_err());
    assert!(view.fill(&a, &[0; 256], 0, 256).is_err());
    assert!(view.fill(&a, &[0; 4], 2, 4).is_err());
    // Zero-length copies at the end are no-ops.
    view.write_from_host(&a, &src, N, N, 0).unwrap();
    view.read_into_host(&a, N, &mut dst, N, 0).unwrap();
    a.synchronize().unwrap();
}

/// A block written from pinned memory on a gated stream B (not its allocation stream A),
/// then freed: the next allocation of the size on A must not get the block while B's copy
/// is held back (else B's copy lands in the new owner's bytes).
#[test]
fn a_block_freed_while_a_gated_view_upload_runs_is_not_reused() {
    if !devices(1) {
        return;
    }
    let (a, b) = streams(0);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&b).unwrap();
    let x = alloc.allocate(N as u64, &a).unwrap();
    let mut src = xpu_alloc::host_allocate_on(0, N).unwrap();
    src.fill(0xEE);
    x.view()
        .unwrap()
        .write_from_host(&b, &src, 0, 0, N)
        .unwrap();
    drop(src);
    drop(x);
    let y = alloc.allocate(N as u64, &a).unwrap();
    y.view().unwrap().write(&a, 0, &[0x11; N]).unwrap();
    gate.open().unwrap();
    b.synchronize().unwrap();
    let mut back = vec![0u8; N];
    y.view().unwrap().read(&a, 0, &mut back).unwrap();
    assert!(
        back.iter().all(|&v| v == 0x11),
        "a freed block's gated upload wrote into its next owner"
    );
}

/// As above for a whole-allocation download into pinned memory (`copy_to_host`) on a gated
/// stream: the device block is not reused, and the host block reads the old bytes.
#[test]
fn a_block_freed_while_a_gated_whole_download_runs_is_not_reused() {
    if !devices(1) {
        return;
    }
    let (a, b) = streams(0);
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let x = alloc.allocate(N as u64, &a).unwrap();
    x.view().unwrap().write(&a, 0, &[0x22; N]).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&b).unwrap();
    let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
    b.copy_to_host(&x, &mut dst).unwrap();
    drop(x);
    let y = alloc.allocate(N as u64, &a).unwrap();
    y.view().unwrap().write(&a, 0, &[0x33; N]).unwrap();
    gate.open().unwrap();
    b.synchronize().unwrap();
    assert!(
        dst.iter().all(|&v| v == 0x22),
        "the download read the next owner's bytes"
    );
}
