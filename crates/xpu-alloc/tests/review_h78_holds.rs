//! Review h78: PASSING probes of the pinned-host copy paths of `xpu-alloc` (what was attacked
//! and held). PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"`; skipped without two
//! devices unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates, never a sleep.

use xpu_alloc::{AllocConfig, DeviceAllocator, HostCopy, HostError};
use xpu_event::Gate;
use xpu_stream::get_stream_from_pool;
use xpu_testing::devices;

const N: usize = 4096;

/// Control of `review_h78.rs`'s finding: the same scene without the refused view copies. A
/// device-0 block freed while device 1's pool stream is held back by a closed gate goes
/// back to its allocation stream's cache at once (the next allocation of the size on that
/// stream gets it): device 1's stream alone does not hold it back.
#[test]
fn a_block_is_reused_at_once_while_another_devices_stream_is_gated() {
    if !devices(2) {
        return;
    }
    let a = get_stream_from_pool(0, 0).unwrap();
    let other = get_stream_from_pool(0, 1).unwrap();
    let gate = Gate::new(1).unwrap();
    gate.block(&other).unwrap();
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let addr = ptr.address();
    drop(ptr);
    let next = alloc.allocate(N as u64, &a).unwrap();
    let reused = next.address() == addr;
    drop(next);
    gate.open().unwrap();
    other.synchronize().unwrap();
    assert!(
        reused,
        "a block with no recorded use was not reused at once"
    );
}

/// The whole-allocation copies refuse a stream of another device before recording anything
/// (`RegionLender::before_copy`: `StreamDevice`): the block is reused at once on its
/// allocation stream while device 1's stream is held back (the contrast with the view
/// copies of `review_h78.rs`).
#[test]
fn a_refused_whole_copy_on_another_devices_stream_records_nothing() {
    if !devices(2) {
        return;
    }
    let a = get_stream_from_pool(0, 0).unwrap();
    let other = get_stream_from_pool(0, 1).unwrap();
    let gate = Gate::new(1).unwrap();
    gate.block(&other).unwrap();
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let ptr = alloc.allocate(N as u64, &a).unwrap();
    let addr = ptr.address();
    {
        let src = xpu_alloc::host_allocate_on(0, N).unwrap();
        let w = other.copy_from_host(&src, &ptr);
        let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
        let r = other.copy_to_host(&ptr, &mut dst);
        assert!(matches!(w, Err(HostError::StreamDevice { .. })), "{w:?}");
        assert!(matches!(r, Err(HostError::StreamDevice { .. })), "{r:?}");
        assert!(src.recorded_streams().is_empty() && dst.recorded_streams().is_empty());
    }
    drop(ptr);
    let next = alloc.allocate(N as u64, &a).unwrap();
    let reused = next.address() == addr;
    drop(next);
    gate.open().unwrap();
    other.synchronize().unwrap();
    assert!(reused, "a refused whole copy held the block back");
}
