//! Pinned-host copies of a device-0 block refused on another device's gated stream record nothing,
//! so the block is reused at once.
//!
//! Review h78 (fresh eyes on the pinned-host copy paths of `xpu-alloc`): a device-0 block,
//! device 1's pool stream held back by a closed gate, and copies on that stream that must be
//! refused with nothing recorded, so that the block goes back to its allocation stream's cache
//! at once. The view copies' test failed before its fix (5 of 5 runs); the other two are the
//! controls that held. PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"`; skipped without
//! two devices unless `XPU_REQUIRE_DEVICE=1`. Ordering by a user-event gate, never a sleep.

use xpu_alloc::{AllocConfig, DataPtr, DeviceAllocator, HostCopy, HostError};
use xpu_event::Gate;
use xpu_stream::{get_stream_from_pool, Stream};
use xpu_testing::devices;

const N: usize = 4096;

/// A 4 KiB block of device 0 allocated on pool stream `a`, handed to `refused` with a pool
/// stream of device 1 held back by a closed gate; then freed. Whether the next allocation of
/// the size on `a` gets the same block while the gate is still closed.
fn reused_after(refused: impl FnOnce(&DataPtr, &Stream)) -> Option<bool> {
    if !devices(2) {
        return None;
    }
    let a = get_stream_from_pool(0, 0).unwrap();
    let other = get_stream_from_pool(0, 1).unwrap();
    let gate = Gate::new(1).unwrap();
    gate.block(&other).unwrap();
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let addr = ptr.address();
    refused(&ptr, &other);
    drop(ptr);
    let next = alloc.allocate(N as u64, &a).unwrap();
    let reused = next.address() == addr;
    drop(next);
    gate.open().unwrap();
    other.synchronize().unwrap();
    a.synchronize().unwrap();
    Some(reused)
}

fn refused_by_device(e: &Result<(), HostError>) -> bool {
    matches!(
        e,
        Err(HostError::StreamDevice {
            stream: 1,
            device: 0
        })
    )
}

/// Control: without any copy, device 1's gated stream does not hold the block back.
#[test]
fn a_block_is_reused_at_once_while_another_devices_stream_is_gated() {
    if let Some(reused) = reused_after(|_, _| {}) {
        assert!(
            reused,
            "a block with no recorded use was not reused at once"
        );
    }
}

/// The whole-allocation copies refuse a stream of another device before recording anything
/// (`RegionLender::before_copy`: `StreamDevice`; held before the review).
#[test]
fn a_refused_whole_copy_on_another_devices_stream_records_nothing() {
    let reused = reused_after(|ptr, other| {
        let src = xpu_alloc::host_allocate_on(0, N).unwrap();
        let w = other.copy_from_host(&src, ptr);
        let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
        let r = other.copy_to_host(ptr, &mut dst);
        assert!(
            refused_by_device(&w) && refused_by_device(&r),
            "{w:?} / {r:?}"
        );
        assert!(src.recorded_streams().is_empty() && dst.recorded_streams().is_empty());
    });
    if let Some(reused) = reused {
        assert!(reused, "a refused whole copy held the block back");
    }
}

/// The finding: `BlockView::write_from_host` / `read_into_host` on a stream of another device
/// recorded that stream on the block before the driver refused the copy (`CL_INVALID_CONTEXT`,
/// -34, from the backend's `copy_pinned`), so the freed block waited for a marker behind
/// device 1's closed gate and the next allocation got another block (5 of 5 runs). Rule: bad
/// input gets a typed error and nothing leaks; a block is held back only by recorded uses.
/// Fixed: `BlockView::host_target` refuses the stream with `StreamDevice` first, as
/// `BlockView::queue`, `DataPtr::record_stream` and `RegionLender::before_copy` do.
#[test]
fn a_refused_view_host_copy_on_another_devices_stream_records_nothing() {
    let reused = reused_after(|ptr, other| {
        let view = ptr.view().unwrap();
        let src = xpu_alloc::host_allocate_on(0, N).unwrap();
        let w = view.write_from_host(other, &src, 0, 0, N);
        let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
        let r = view.read_into_host(other, 0, &mut dst, 0, N);
        assert!(
            refused_by_device(&w) && refused_by_device(&r),
            "{w:?} / {r:?}"
        );
    });
    if let Some(reused) = reused {
        assert!(
            reused,
            "refused view copies on a device-1 stream held the block back behind that stream's \
             closed gate"
        );
    }
}
