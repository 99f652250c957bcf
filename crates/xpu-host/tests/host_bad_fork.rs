//! In a bad fork child (forked after the parent initialized OpenCL) every entry point of the
//! pinned-host allocator returns `HostError::BadFork` at once, or does nothing, without
//! calling the driver, waiting for an event or taking a lock that a thread of the parent may
//! have held at the fork. The parent's state is reproduced in a fresh process (a pinned
//! block, a device buffer, a stream, and a device-to-host copy into the block held back by an
//! unopened gate) that then becomes a bad fork (`simulate_bad_fork`, the flag the
//! `pthread_atfork` child handler sets: this crate may not fork). A hang is caught by the
//! bound.
mod host_common;

use host_common::device_buffer;
use xpu_event::Gate;
use xpu_host::{
    host_allocate, host_allocate_on, host_empty_cache, host_memory_stats, host_record_event,
    HostAllocator, HostBytes, HostCopy, HostError, HostMemoryStats,
};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};
use xpu_testing::bad_fork::{assert_bad_fork, bad_fork_test, done};

const N: usize = 256;

#[test]
fn host_allocator_refuses_in_a_bad_fork_child_without_waiting() {
    bad_fork_test("host-bad-fork", run);
}

fn run() {
    // The parent's state: everything initialized, a copy into `pending` in flight.
    let alloc = HostAllocator::new();
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let dev = device_buffer(0, N).expect("device buffer");
    let mut host = alloc.allocate_on(0, N).expect("pinned block");
    host.fill(7);
    stream.copy_from_host(&host, &dev).expect("copy");
    stream.synchronize().expect("synchronize");
    let global = host_allocate(N).expect("global pinned block");
    let mut pending = alloc.allocate_on(0, N).expect("pinned block");
    let gate = Gate::new(0).expect("gate");
    gate.block(&stream).expect("block");
    stream.copy_to_host(&dev, &mut pending).expect("gated copy");
    stream.queue().expect("queue").flush().expect("flush");

    xpu_device::fork::simulate_bad_fork();

    assert_bad_fork("host_allocate", host_allocate(N));
    assert_bad_fork("host_allocate_on", host_allocate_on(0, N));
    assert_bad_fork("allocate_on", alloc.allocate_on(0, N));
    assert_bad_fork("allocate_on(0 bytes)", alloc.allocate_on(0, 0));
    assert_bad_fork("allocate", HostAllocator::new().allocate(N));
    assert_bad_fork("copy_from_host", stream.copy_from_host(&host, &dev));
    assert_bad_fork("copy_to_host", stream.copy_to_host(&dev, &mut host));
    assert_bad_fork(
        "copy_pinned(HostBytes::From)",
        stream.copy_pinned(&dev, 0, HostBytes::From(&host), 0, N),
    );
    assert_bad_fork(
        "copy_pinned(HostBytes::Into)",
        stream.copy_pinned(&dev, 0, HostBytes::Into(&mut host), 0, N),
    );
    assert_bad_fork(
        "copy_from_pageable",
        stream.copy_from_pageable(&[1; N], &dev, 0),
    );
    // record_stream and functions without a result do nothing.
    assert_eq!(
        host.record_stream(&stream),
        Ok(false),
        "record_stream recorded"
    );
    assert_eq!(
        host_record_event(&global, &stream),
        Ok(false),
        "host_record_event recorded"
    );
    assert!(host.recorded_streams().is_empty());
    assert!(host.pinned().is_none() && pending.pinned_mut().is_none());
    host_empty_cache();
    alloc.empty_cache();
    alloc.process_events();
    assert_eq!(host_memory_stats(), HostMemoryStats::default());
    assert_eq!(alloc.memory_stats(), HostMemoryStats::default());
    // The views do not wait for the copy held back by the gate (it never completes here).
    assert!(pending.as_slice().is_empty(), "as_slice in a bad fork");
    assert!(
        pending.as_mut_slice().is_empty(),
        "as_mut_slice in a bad fork"
    );
    // Dropping returns nothing to the allocator (its locks may have been held at the fork).
    drop(pending);
    drop(host);
    drop(global);
    let msg = HostError::BadFork.to_string();
    assert!(msg.contains("spawn"), "{msg}");
    done();
    // The gate stays closed: the parent owned it.
    std::mem::forget(gate);
}
