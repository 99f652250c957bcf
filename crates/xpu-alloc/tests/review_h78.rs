//! Review h78 (fresh eyes on the pinned-host copy paths of `xpu-alloc`): its finding, a test
//! that failed before the fix (5 of 5 runs) and passes since. PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread"`; skipped without two devices unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering by a user-event gate, never a sleep.

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_event::Gate;
use xpu_stream::get_stream_from_pool;
use xpu_testing::devices;

const N: usize = 4096;

/// Finding: `BlockView::write_from_host` / `read_into_host` on a stream of another device
/// record that stream on the device block before failing.
///
/// Sequence: a device-0 `DataPtr` `ptr` of 4 KiB allocated on pool stream `a` (device 0);
/// pool stream `other` of device 1 held back by a closed gate; `ptr.view().write_from_host(
/// &other, ...)` and `read_into_host(&other, ...)` (both refused: review h16's probe only
/// checked `is_err()`); `drop(ptr)`; `allocate(4 KiB, &a)`.
///
/// Expected: the refused copies record nothing, as every other entry point refuses a stream
/// of another device before recording (`DataPtr::record_stream` and
/// `RegionLender::before_copy` return `StreamDevice` "nothing recorded",
/// `BlockView::queue` checks the device first): the block goes back to its allocation
/// stream's cache at once, and the next allocation of the size on `a` gets it (same address),
/// whatever device 1's stream is doing. Rule: bad input gets a typed error and nothing
/// leaks; stream order is a contract (a block is held back only by recorded uses).
///
/// Observed (PoCL, 5 of 5 runs): both calls fail with `Device(OpenCl(.. code: -34 ..))`
/// (`CL_INVALID_CONTEXT` from `check_buffer_context` in the backend's `copy_pinned`), not
/// `StreamDevice`, and the next allocation is another block: the freed block waits for a
/// marker on device 1's gated stream. Cause: `BlockView::host_target`
/// (crates/xpu-alloc/src/data_ptr.rs:896-909) runs `pin.prepare_on(stream)` and
/// `note_use(stream)` (`record_stream_ref` of the device-1 stream on the device-0 block)
/// with no check of the stream's device, which `BlockView::queue` (data_ptr.rs:766-776),
/// `DataPtr::record_stream` (:622-635) and `RegionLender::before_copy`
/// (crates/xpu-alloc/src/host_copy.rs:65-72) all make first. The control,
/// `review_h78_holds.rs`, shows the block reused at once without the refused calls. Fixed:
/// `host_target` refuses the stream with `StreamDevice` before anything else.
#[test]
fn a_refused_view_host_copy_on_another_devices_stream_records_nothing() {
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
    let errors;
    {
        let view = ptr.view().unwrap();
        let src = xpu_alloc::host_allocate_on(0, N).unwrap();
        let w = view.write_from_host(&other, &src, 0, 0, N);
        let mut dst = xpu_alloc::host_allocate_on(0, N).unwrap();
        let r = view.read_into_host(&other, 0, &mut dst, 0, N);
        let refused = |e: &Result<(), xpu_alloc::host::HostError>| {
            matches!(
                e,
                Err(xpu_alloc::host::HostError::StreamDevice {
                    stream: 1,
                    device: 0
                })
            )
        };
        assert!(refused(&w) && refused(&r), "refused: {w:?} {r:?}");
        errors = format!("{w:?} / {r:?}");
    }
    drop(ptr);
    let next = alloc.allocate(N as u64, &a).unwrap();
    let reused = next.address() == addr;
    drop(next);
    gate.open().unwrap();
    other.synchronize().unwrap();
    a.synchronize().unwrap();
    assert!(
        reused,
        "the block of refused copies on a device-1 stream was held back by that stream's \
         closed gate (a foreign-device stream was recorded on it): next allocation is another \
         block (the refusals: {errors})"
    );
}
