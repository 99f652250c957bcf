//! A freed pinned block is reused only after the work recorded on it completed. Ordering is
//! made deterministic with a gate (a user event the stream waits on).

mod host_common;

use host_common::{
    allocator, assert_reused_only_after_the_gate, device_buffer, gated_block, gated_stream,
    pattern, read_back, TestResult,
};
use xpu_host::{HostBytes, HostCopy, HostError};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

#[test]
fn unrecorded_block_is_reused_at_once_within_its_size_class() -> Result<(), HostError> {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let a = alloc.allocate_on(0, 1000)?;
    let addr = a.address();
    assert_eq!(a.len(), 1000);
    assert_eq!(a.allocated_size(), 1024);
    drop(a);
    // Same class (1024), another request size: the same block.
    let b = alloc.allocate_on(0, 1024)?;
    assert_eq!(b.address(), addr);
    // Another class never takes it, even though 1024 >= 600 would fit: no splitting, exact
    // classes only.
    let c = alloc.allocate_on(0, 2000)?;
    assert_ne!(c.address(), addr);
    drop(b);
    let d = alloc.allocate_on(0, 513)?;
    assert_eq!(d.address(), addr);
    assert_eq!(alloc.memory_stats().num_host_alloc, 2);
    Ok(())
}

#[test]
fn block_freed_during_gated_copy_waits_for_the_copy() -> TestResult {
    let Some((alloc, stream, gate, mut a, a_addr)) = gated_block(4096)? else {
        return Ok(());
    };
    let dst = device_buffer(0, 4096)?;
    let want = pattern(5, 4096);
    a.copy_from_slice(&want);
    stream.copy_pinned(&dst, 0, HostBytes::From(&a), 0, 4096)?;
    assert_eq!(a.recorded_streams(), vec![stream]);
    drop(a); // the copy still has to read it

    // Gated: the copy has not run, so the block must not be handed out.
    let mut b = alloc.allocate_on(0, 4096)?;
    assert_ne!(
        b.address(),
        a_addr,
        "block reused while a gated copy still reads it"
    );
    let stats = alloc.memory_stats();
    assert_eq!((stats.pending_blocks, stats.pending_markers), (1, 1));
    b.fill(0xEE); // would corrupt the copy if it were the same memory
    let b_addr = b.address();
    drop(b); // no streams: reusable at once
    let c = alloc.allocate_on(0, 4096)?;
    assert_eq!(c.address(), b_addr);
    assert_ne!(c.address(), a_addr);

    gate.open()?;
    stream.synchronize()?;
    // Processed at the start of this allocation: the block is back and reused.
    let d = alloc.allocate_on(0, 4096)?;
    assert_eq!(d.address(), a_addr);
    assert!(d.recorded_streams().is_empty());
    let stats = alloc.memory_stats();
    assert_eq!((stats.pending_blocks, stats.pending_markers), (0, 0));
    assert_eq!(stats.num_host_alloc, 2);

    // The copy read the original bytes.
    assert_eq!(read_back(&stream, &dst, 0, 4096)?, want);
    Ok(())
}

#[test]
fn block_freed_during_gated_read_waits_for_the_read() -> TestResult {
    let Some((alloc, stream, gate, mut a, a_addr)) = gated_block(256)? else {
        return Ok(());
    };
    let src = device_buffer(0, 256)?;
    stream.copy_pinned(&src, 0, HostBytes::Into(&mut a), 0, 256)?;
    drop(a);
    assert_reused_only_after_the_gate(&alloc, &gate, &stream, 256, a_addr)
}

#[test]
fn record_event_alone_defers_reuse() -> TestResult {
    let Some((alloc, stream, gate, a, a_addr)) = gated_block(64)? else {
        return Ok(());
    };
    assert!(xpu_host::host_record_event(&a, &stream)?);
    assert!(a.record_stream(&stream)?); // recorded once per stream
    assert_eq!(a.recorded_streams().len(), 1);
    drop(a);
    assert_reused_only_after_the_gate(&alloc, &gate, &stream, 64, a_addr)
}

#[test]
fn every_recorded_stream_must_finish() -> TestResult {
    let Some((alloc, s2, gate, a, a_addr)) = gated_block(128)? else {
        return Ok(());
    };
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    assert_ne!(s1, s2);
    a.record_stream(&s1)?;
    a.record_stream(&s2)?;
    drop(a);
    s1.synchronize()?;
    // s1's marker may be complete, s2's is gated: still not reusable.
    assert_reused_only_after_the_gate(&alloc, &gate, &s2, 128, a_addr)
}

#[test]
fn pending_blocks_are_processed_oldest_first() -> TestResult {
    let Some((alloc, slow, gate)) = gated_stream()? else {
        return Ok(());
    };
    let fast = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let a = alloc.allocate_on(0, 32)?;
    let b = alloc.allocate_on(0, 32)?;
    let (a_addr, b_addr) = (a.address(), b.address());
    a.record_stream(&slow)?;
    b.record_stream(&fast)?;
    drop(a); // older, gated
    drop(b); // newer, its stream finishes now
    fast.synchronize()?;
    // The oldest entry is unfinished, so processing stops there (as PyTorch): b waits too.
    let c = alloc.allocate_on(0, 32)?;
    assert!(c.address() != a_addr && c.address() != b_addr);
    assert_eq!(alloc.memory_stats().pending_blocks, 2);
    gate.open()?;
    slow.synchronize()?;
    // Both rejoin the free list, a then b; the list is LIFO.
    let d = alloc.allocate_on(0, 32)?;
    let e = alloc.allocate_on(0, 32)?;
    assert_eq!((d.address(), e.address()), (b_addr, a_addr));
    assert_eq!(alloc.memory_stats().num_host_alloc, 3);
    Ok(())
}
