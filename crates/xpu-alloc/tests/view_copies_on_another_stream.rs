//! View copies (fill, copy, upload) of a block on another stream never write into the block's next
//! owner.
//!
//! Review h10: defects found by breaking the runtime through safe calls (each test fails on
//! the code it was written against). Real OpenCL (PoCL in CI); ordering by user-event gates.

mod common;

use xpu_alloc::{AllocConfig, DataPtr, DeviceAllocator};
use xpu_event::Gate;
use xpu_stream::Stream;

use common::{device_streams, MIB};

fn private() -> DeviceAllocator {
    DeviceAllocator::new(0, AllocConfig::parse("").unwrap()).unwrap()
}

/// The race of the three tests below. A 1 MiB allocation `x` on `s` gets a non-blocking
/// command `enqueue` on `t`, held back by a gate; `x` is freed at once, and the next 1 MiB
/// allocation `y` on `s` (the same block, when it is reused) is written with 0x11. After the
/// gate opens, returns how many of `y`'s bytes hold `stale` (what the command wrote), and
/// whether `y` got `x`'s block.
fn stale_bytes_in_next_owner(
    s: &Stream,
    t: &Stream,
    stale: u8,
    enqueue: impl FnOnce(&DataPtr, &Stream),
) -> (usize, bool) {
    let alloc = private();
    let x = alloc.allocate(MIB, s).unwrap();
    let x_addr = x.address();
    let gate = Gate::new(0).unwrap();
    gate.block(t).unwrap();
    // The command waits behind the gate on `t`.
    enqueue(&x, t);
    drop(x);
    let y = alloc.allocate(MIB, s).unwrap();
    let reused = y.address() == x_addr;
    y.view()
        .unwrap()
        .write(s, 0, &vec![0x11u8; MIB as usize])
        .unwrap();
    gate.open().unwrap();
    t.synchronize().unwrap();
    let mut out = vec![0u8; MIB as usize];
    y.view().unwrap().read(s, 0, &mut out).unwrap();
    (out.iter().filter(|&&b| b == stale).count(), reused)
}

/// `BlockView::fill` on a stream other than the allocation stream is non-blocking and
/// recorded nothing: freeing the `DataPtr` right after (safe) handed its block to the next
/// allocation on the allocation stream while the fill was still queued, and the stale fill
/// then overwrote the new owner's bytes.
#[test]
fn a_view_fill_on_another_stream_never_writes_the_blocks_next_owner() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let (stale, reused) = stale_bytes_in_next_owner(&s, &t, 0xAA, |x, t| {
        x.view().unwrap().fill(t, &[0xAA], 0, MIB as usize).unwrap();
    });
    assert_eq!(
        stale,
        0,
        "the block was {}handed to a new allocation while a fill of its former owner was \
         queued on another stream; {stale} of the new owner's bytes were overwritten",
        if reused { "" } else { "not " }
    );
}

/// `BlockView::copy_from` into a view on another stream: the same stale write through the
/// destination (non-blocking, nothing recorded on the destination).
#[test]
fn a_view_copy_on_another_stream_never_writes_the_blocks_next_owner() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let alloc = private();
    let src = alloc.allocate(MIB, &s).unwrap();
    src.view()
        .unwrap()
        .write(&s, 0, &vec![0xBBu8; MIB as usize])
        .unwrap();
    let (stale, reused) = stale_bytes_in_next_owner(&s, &t, 0xBB, |x, t| {
        x.view()
            .unwrap()
            .copy_from(t, &src.view().unwrap(), 0, 0, MIB as usize)
            .unwrap();
    });
    assert_eq!(
        stale,
        0,
        "block {}reused; {stale} of the new owner's bytes were overwritten by a queued copy \
         into its former owner",
        if reused { "" } else { "not " }
    );
}

/// `BlockView::write_from_host` on another stream: the same stale write (a pinned host-to-
/// device copy queued behind a gate on `t`), which recorded only the host side.
#[test]
fn a_view_upload_on_another_stream_never_writes_the_blocks_next_owner() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let mut src = xpu_alloc::host::host_allocate_on(0, MIB as usize).unwrap();
    src.as_mut_slice().fill(0xCC);
    let (stale, reused) = stale_bytes_in_next_owner(&s, &t, 0xCC, |x, t| {
        x.view()
            .unwrap()
            .write_from_host(t, &src, 0, 0, MIB as usize)
            .unwrap();
    });
    assert_eq!(
        stale,
        0,
        "block {}reused; {stale} of the new owner's bytes were overwritten by a queued upload \
         into its former owner",
        if reused { "" } else { "not " }
    );
}
