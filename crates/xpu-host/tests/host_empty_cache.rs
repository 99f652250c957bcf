//! `empty_cache` releases cached blocks only: blocks in use, or freed while a copy still uses
//! them, are kept.

mod host_common;

use host_common::{device_buffer, gated_stream, TestResult};
use xpu_host::{HostBytes, HostCopy};

#[test]
fn empty_cache_keeps_blocks_in_use_and_pending() -> TestResult {
    let Some((alloc, stream, gate)) = gated_stream()? else {
        return Ok(());
    };
    let dst = device_buffer(0, 8192)?;

    let held = alloc.allocate_on(0, 2048)?; // in use
    let pending = alloc.allocate_on(0, 8192)?; // freed during a gated copy
    let cached = alloc.allocate_on(0, 512)?; // freed, idle
    let (held_addr, pending_addr) = (held.address(), pending.address());
    stream.copy_pinned(&dst, 0, HostBytes::From(&pending), 0, 8192)?;
    drop(pending);
    drop(cached);

    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!(s.num_host_free, 1, "only the idle block is released");
    assert_eq!(s.segment.current, 2);
    assert_eq!(s.reserved_bytes.current, 2048 + 8192);
    assert_eq!(s.pending_blocks, 1);

    gate.open()?;
    stream.synchronize()?;
    // The pending block was kept: it comes back from the cache, with no driver allocation.
    let again = alloc.allocate_on(0, 8192)?;
    assert_eq!(again.address(), pending_addr);
    assert_eq!(alloc.memory_stats().num_host_alloc, 3);
    assert_eq!(held.address(), held_addr);
    drop(again);
    drop(held);
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.segment.current, s.reserved_bytes.current), (0, 0));
    assert_eq!(s.num_host_free, 3);
    Ok(())
}
