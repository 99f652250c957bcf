//! A pinned-host out-of-memory is out of memory through the facade (`Error::is_out_of_memory`).
//!
//! Review h58 (fresh eyes on the facade, xpu-lazy and the pinned-host allocator): findings,
//! each a test that fails on the code as reviewed. PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread"`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`.
//!
//! Fixed in b51232d (`HostError::is_out_of_memory`): this passes now.

mod common;

use xpu::xpu_alloc::HostError;
use xpu::xpu_device::{ClError, DeviceError};
use xpu::MemoryError;

/// The pinned-host allocator's own out-of-memory report: what `host_allocate_on` returns when
/// the driver refuses a new pinned block even after the cached blocks were released
/// (`xpu-host/src/allocator.rs`, `new_block`: the second `CL_MEM_OBJECT_ALLOCATION_FAILURE`
/// becomes `HostError::OutOfMemory { source: DeviceError::OpenCl(..) }`; the allocator never
/// returns `HostError::Device(oom)`, the first one is retried).
fn pinned_oom() -> HostError {
    HostError::OutOfMemory {
        device: 0,
        size: 1 << 30,
        source: DeviceError::OpenCl(ClError::new("clCreateBuffer", -4)),
    }
}

/// Finding: `xpu::Error::is_out_of_memory` is documented as torch's `except
/// torch.OutOfMemoryError:` "whichever layer it came through", true for "a driver's
/// out-of-memory code (`CL_MEM_OBJECT_ALLOCATION_FAILURE`, ...) in the device, host or kernel
/// layers". The host layer's out-of-memory error is `HostError::OutOfMemory` (its `source` is
/// that driver code), but the facade only looks for `HostError::Device(d)` with an
/// out-of-memory `d` (crates/xpu/src/error.rs, `is_out_of_memory`, the `Error::Host` arm), a
/// shape the pinned-host allocator never produces for an out-of-memory (it retries the first
/// driver OOM and reports the second as `OutOfMemory`). The same error inside typed memory
/// (`MemoryError::Host`, e.g. the pinned staging of a peer copy or a download) is not seen
/// either: the `Error::Memory` arm only asks `MemoryError::Alloc`.
///
/// The error is built by hand: PoCL over-commits pinned memory (64 blocks of 8 GiB were all
/// granted on this 23 GiB machine), so the driver's refusal cannot be provoked here; what the
/// test checks is the facade's classification of the value the allocator returns.
///
/// Observed (3 of 3 runs): `Error::Host(OutOfMemory{..}).is_out_of_memory()` is false, and so
/// is `Error::Memory(MemoryError::Host(OutOfMemory{..}))`, while the same driver code as a
/// `DeviceError` is true.
#[test]
fn a_pinned_host_out_of_memory_is_out_of_memory_through_the_facade() {
    let driver: xpu::Error = ClError::new("clCreateBuffer", -4).into();
    assert!(driver.is_out_of_memory(), "control: {driver}");
    let direct: xpu::Error = pinned_oom().into();
    let in_memory: xpu::Error = MemoryError::Host(pinned_oom()).into();
    assert!(
        direct.is_out_of_memory() && in_memory.is_out_of_memory(),
        "the pinned-host allocator's out-of-memory error is not out of memory for the facade: \
         Error::Host -> {}, Error::Memory(Host) -> {} ({direct})",
        direct.is_out_of_memory(),
        in_memory.is_out_of_memory()
    );
}
