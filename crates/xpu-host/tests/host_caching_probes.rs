//! The caching pinned-host allocator, probes that held: blocks recorded on streams of two devices,
//! overlapping sub-range copies, `empty_cache` during a gated download, an exiting thread's bins, a
//! block freed in a completion callback, overflowing copy ranges.
//!
//! Review h78 (fresh eyes on the caching pinned-host allocator): PASSING probes of what was
//! attacked and held. PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"
//! XPU_REQUIRE_DEVICE=1`; skipped without devices unless `XPU_REQUIRE_DEVICE=1`. Ordering by
//! user-event gates, never a sleep. One lock serializes the tests of this file (one of them
//! reads process-wide object counts).

mod host_common;

use std::cell::RefCell;
use std::sync::Mutex;

use host_common::TestResult;
use host_common::{allocator, device_buffer, have_devices, pattern, read_back, test_name};
use xpu_device::backend::wait_for_callbacks;
use xpu_event::Gate;
use xpu_host::{HostAllocator, HostBytes, HostCopy, HostError, HostMemoryStats, HostPtr};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two distinct pool streams of `device`.
fn two_streams(device: usize) -> TestResult<(Stream, Stream)> {
    let a = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    let mut b = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    while b == a {
        b = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    }
    Ok((a, b))
}

/// A block of device 0 recorded on a pool stream of device 0 and one of device 1, each held
/// back by its own closed gate, then freed: reused only once BOTH streams' work completed
/// (stream order is a contract, on any device). Opening device 0's gate alone leaves it
/// pending; opening device 1's too makes it the next allocation.
#[test]
fn a_block_recorded_on_streams_of_two_devices_waits_for_both() -> TestResult {
    let _serial = serial();
    if !have_devices(2, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let s0 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 1)?;
    let (g0, g1) = (Gate::new(0)?, Gate::new(1)?);
    g0.block(&s0)?;
    g1.block(&s1)?;
    let h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    assert!(h.record_stream(&s0)? && h.record_stream(&s1)?);
    drop(h);
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.pending_markers), (1, 2));
    let mut kept = vec![alloc.allocate_on(0, 4096)?];
    assert_ne!(
        kept[0].address(),
        addr,
        "reused while both streams are held back"
    );
    g0.open()?;
    s0.synchronize()?;
    alloc.process_events();
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.pending_markers), (1, 1));
    kept.push(alloc.allocate_on(0, 4096)?);
    assert_ne!(
        kept[1].address(),
        addr,
        "reused while device 1's stream is held back"
    );
    g1.open()?;
    s1.synchronize()?;
    let again = alloc.allocate_on(0, 4096)?;
    assert_eq!(
        again.address(),
        addr,
        "not reused once both streams completed"
    );
    assert_eq!(alloc.memory_stats().pending_blocks, 0);
    Ok(())
}

/// Overlapping sub-ranges of one block on two streams: a device-to-host copy into
/// `h[0..2048]` on stream `a` (held back by a closed gate), then a host-to-device copy from
/// `h[1024..3072]` on stream `b`. The upload must read the bytes the download wrote
/// (`h[1024..2048]`) and the untouched ones (`h[2048..3072]`): it is ordered after the
/// download although `b` never waited on `a` (no safe borrow sees bytes change; the device
/// never reads bytes a queued device write has yet to write). A zero-length copy at the end
/// of the block (`host_offset == len`) is accepted, records nothing and enqueues nothing.
#[test]
fn overlapping_sub_range_copies_on_two_streams_are_ordered() -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let (a, b) = two_streams(0)?;
    let src = device_buffer(0, 4096)?;
    let dst = device_buffer(0, 4096)?;
    let bytes = pattern(3, 4096);
    a.copy_from_pageable(&bytes, &src, 0)?;
    b.copy_from_pageable(&[0u8; 4096], &dst, 0)?;
    let mut h = alloc.allocate_on(0, 4096)?;
    h.fill(0xEE);
    let gate = Gate::new(0)?;
    gate.block(&a)?;
    a.copy_pinned(&src, 0, HostBytes::Into(&mut h), 0, 2048)?;
    b.copy_pinned(&dst, 0, HostBytes::From(&h), 1024, 2048)?;
    b.copy_pinned(&dst, 4096, HostBytes::From(&h), 4096, 0)?;
    assert_eq!(h.recorded_streams(), vec![a, b]);
    gate.open()?;
    a.synchronize()?;
    b.synchronize()?;
    let got = read_back(&b, &dst, 0, 2048)?;
    assert_eq!(
        &got[..1024],
        &bytes[1024..2048],
        "the upload ran before the download"
    );
    assert!(got[1024..].iter().all(|&x| x == 0xEE));
    assert_eq!(&h[..2048], &bytes[..2048]);
    Ok(())
}

/// `empty_cache` while a freed block's device-to-host copy is held back: the block is kept
/// (not released while the command may write it), and statistics show it allocated,
/// pending and reserved; once the copy completed it rejoins the cache, and the next
/// `empty_cache` releases it: every statistic back to its baseline (current values 0).
#[test]
fn empty_cache_during_a_gated_download_keeps_the_block_then_releases_it() -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 8192)?;
    let gate = Gate::new(0)?;
    gate.block(&stream)?;
    let mut h = alloc.allocate_on(0, 5000)?;
    stream.copy_pinned(&dev, 100, HostBytes::Into(&mut h), 10, 4000)?;
    drop(h);
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.allocation.current, s.allocated_bytes.current), (1, 8192));
    assert_eq!((s.segment.current, s.reserved_bytes.current), (1, 8192));
    assert_eq!((s.pending_blocks, s.num_host_free), (1, 0));
    gate.open()?;
    stream.synchronize()?;
    alloc.process_events();
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.allocation.current, s.allocated_bytes.current), (0, 0));
    assert_eq!((s.segment.current, s.reserved_bytes.current), (0, 0));
    assert_eq!((s.pending_blocks, s.pending_markers), (0, 0));
    assert_eq!((s.num_host_alloc, s.num_host_free), (1, 1));
    Ok(())
}

thread_local! {
    static HELD: RefCell<Option<HostPtr>> = const { RefCell::new(None) };
}

/// What a worker thread does before it exits: frees blocks of 10 size classes into its
/// cache (more classes than a thread's bins, so bins are rebound and their blocks go back to
/// the free lists), and keeps one more block in a thread-local, freed by the thread's exit
/// (whichever of its destructor and the cache's runs first).
fn worker(alloc: &HostAllocator) -> Result<(), HostError> {
    HELD.with(|h| -> Result<(), HostError> {
        *h.borrow_mut() = Some(alloc.allocate_on(0, 64 << 12)?);
        Ok(())
    })?;
    for k in 0..10 {
        drop(alloc.allocate_on(0, 64 << k)?);
    }
    Ok(())
}

fn exact(s: &HostMemoryStats) -> impl PartialEq + std::fmt::Debug {
    (
        [s.allocation, s.allocated_bytes, s.segment, s.reserved_bytes],
        [
            s.num_host_alloc,
            s.num_host_free,
            s.pending_blocks,
            s.pending_markers,
        ],
    )
}

/// Thread caches across thread exit, with bin rebinding and a block freed by a thread-local
/// destructor: after the worker exits, the statistics equal those of an allocator without
/// thread caches after the same calls, no block is counted allocated, and allocating the
/// 11 sizes again on the main thread asks the driver for nothing (every block the worker
/// cached came back). Reference §5 statistics; the thread cache is invisible in them.
#[test]
fn an_exiting_threads_rebound_bins_and_thread_local_block_all_come_back() -> TestResult {
    let _serial = serial();
    if !have_devices(1, &test_name()) {
        return Ok(());
    }
    let cached = HostAllocator::new();
    let slow = HostAllocator::without_thread_caches();
    for alloc in [&cached, &slow] {
        let a = alloc.clone();
        std::thread::spawn(move || worker(&a))
            .join()
            .expect("worker")?;
    }
    assert_eq!(exact(&cached.memory_stats()), exact(&slow.memory_stats()));
    let s = cached.memory_stats();
    assert_eq!((s.allocation.current, s.segment.current), (0, 11));
    let again: Vec<HostPtr> = (0..=12)
        .filter(|&k| k <= 9 || k == 12)
        .map(|k| cached.allocate_on(0, 64 << k))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        cached.memory_stats().num_host_alloc,
        11,
        "a cached block was lost"
    );
    drop(again);
    cached.empty_cache();
    slow.empty_cache();
    assert_eq!(cached.memory_stats().reserved_bytes.current, 0);
    assert_eq!(slow.memory_stats().reserved_bytes.current, 0);
    Ok(())
}

/// A `HostPtr` freed on the runtime's callback thread (an `on_complete` closure), its use
/// recorded on a stream held back by a closed gate: the free records its marker there
/// without a hang, the block stays pending, and it is reused only after the gate opened.
#[test]
fn a_block_freed_in_a_completion_callback_waits_for_its_recorded_stream() -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let gate = Gate::new(0)?;
    gate.block(&stream)?;
    let trigger = Gate::new(0)?;
    let h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    assert!(h.record_stream(&stream)?);
    trigger.as_cl_event().on_complete(move |_| drop(h))?;
    trigger.open()?;
    wait_for_callbacks();
    assert_eq!(alloc.memory_stats().pending_blocks, 1);
    let other = alloc.allocate_on(0, 4096)?;
    assert_ne!(other.address(), addr);
    gate.open()?;
    stream.synchronize()?;
    let again = alloc.allocate_on(0, 4096)?;
    assert_eq!(again.address(), addr);
    Ok(())
}

/// Offsets and lengths that overflow `usize` on both sides of `copy_pinned`: typed
/// `OutOfRange`, no panic, nothing recorded, and the block goes back to the cache at once.
#[test]
fn overflowing_copy_ranges_are_typed_and_record_nothing() -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 4096)?;
    let mut h = alloc.allocate_on(0, 4096)?;
    let addr = h.address();
    let m = usize::MAX;
    let results = [
        stream.copy_pinned(&dev, m, HostBytes::From(&h), 0, 1),
        stream.copy_pinned(&dev, 0, HostBytes::From(&h), m, 2),
        stream.copy_pinned(&dev, 1, HostBytes::From(&h), 1, m),
        stream.copy_pinned(&dev, m, HostBytes::Into(&mut h), 0, 1),
        stream.copy_pinned(&dev, 0, HostBytes::Into(&mut h), m, 2),
        stream.copy_pinned(&dev, 0, HostBytes::Into(&mut h), 4097, 0),
    ];
    for r in results {
        assert!(matches!(r, Err(HostError::OutOfRange { .. })), "{r:?}");
    }
    assert!(h.recorded_streams().is_empty());
    drop(h);
    assert_eq!(alloc.memory_stats().pending_blocks, 0);
    assert_eq!(alloc.allocate_on(0, 4096)?.address(), addr);
    Ok(())
}
