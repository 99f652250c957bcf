//! `caching_allocator_delete` of a pointer that another allocator owns does not free a live
//! allocation.
//!
//! Review h43 (fresh eyes on today's facade functions under torch.cuda's names): findings,
//! each a test that fails on the code as reviewed. PoCL 3.1 on the CPU,
//! `POCL_DEVICES="pthread pthread"`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu::xpu_alloc::{AllocConfig, DeviceAllocator};

/// Finding: `caching_allocator_delete` documents "invalid device pointer" for a pointer the
/// allocator did not hand out, as `torch.cuda.caching_allocator_delete`; a pointer of another
/// allocator of the same device (a `DeviceAllocator::new`, public through `xpu::xpu_alloc`)
/// instead frees whichever live allocation of the process-wide allocator has the same
/// address, and it usually has one: every allocator's address space of a device starts at
/// the same base (`BufferSource`: `(device + 1) << 44`, a counter per source), so the first
/// allocations of two allocators share their address. A `DevicePtr` is `(device, address)`
/// and tells no allocator apart.
///
/// Sequence: `mine = caching_allocator_alloc(4096, Some(&s))`; another
/// `DeviceAllocator::new(0, default)` hands out `theirs = raw_alloc(4096, &s)`;
/// `caching_allocator_delete(theirs)`.
///
/// Observed (3 of 3 runs): both pointers are `(0, 0x1000_0000_0000)`; deleting `theirs`
/// through the facade returns `Ok` and frees `mine` (the facade's `memory_allocated` drops
/// back), and the real owner's `caching_allocator_delete(mine)` then fails with "invalid
/// device pointer"; `mine`'s block can be handed to the next allocation while its owner still
/// holds the pointer.
#[test]
fn caching_allocator_delete_frees_a_live_allocation_for_another_allocators_pointer() {
    if !common::have_device("caching_allocator_delete") {
        return;
    }
    let stream = xpu::new_stream(None, 0).unwrap();
    let before = xpu::memory_allocated(Some(0)).unwrap();
    let mine = xpu::caching_allocator_alloc(4096, Some(&stream)).unwrap();
    let other = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let theirs = other.raw_alloc(4096, &stream).unwrap();
    let deleted = xpu::caching_allocator_delete(theirs);
    let allocated_after = xpu::memory_allocated(Some(0)).unwrap();
    let mine_deleted = xpu::caching_allocator_delete(mine);
    other.raw_delete(theirs).ok();
    assert!(
        deleted.is_err() && mine_deleted.is_ok(),
        "mine {mine:?}, theirs (another allocator's) {theirs:?}: deleting theirs through the \
         facade gave {deleted:?} (memory_allocated {before} -> {allocated_after} with mine \
         live), then deleting mine gave {mine_deleted:?}"
    );
}
