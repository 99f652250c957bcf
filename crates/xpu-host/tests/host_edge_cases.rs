//! Edge cases of the pinned-host allocator, probes that held: zero / huge sizes and bad devices
//! leave the statistics alone, copy ranges checked against the requested length, buffers swapped
//! through `pinned_mut`, a released external stream's gated copy, blocks taken from another
//! thread's cache, `empty_cache` racing frees.
//!
//! Review h16 (fresh eyes, the pinned-host allocator): PASSING probes, kept as regression
//! tests. Zero and huge sizes, bad devices, statistics after errors, buffers swapped through
//! `pinned_mut`, blocks freed while a copy on a released external stream is held back,
//! thread caches across threads, `empty_cache` racing frees.
//!
//! Ordering is deterministic: copies that must still be in flight are held back by closed
//! user-event gates; threads hand over with channels and scopes, never sleeps.

mod host_common;

use std::sync::mpsc;

use host_common::{allocator, device_buffer, have_devices, test_name, TestResult};
use xpu_device::backend::QueueOptions;
use xpu_event::Gate;
use xpu_host::{HostBytes, HostCopy, HostError, HostMemoryStats, HostPtr, MAX_HOST_ALLOC};
use xpu_stream::{get_stream_from_pool, ExternalStream, PRIORITY_NORMAL};

fn unchanged(a: &HostMemoryStats, b: &HostMemoryStats) {
    assert_eq!(a.allocation, b.allocation);
    assert_eq!(a.allocated_bytes, b.allocated_bytes);
    assert_eq!(a.segment, b.segment);
    assert_eq!(a.reserved_bytes, b.reserved_bytes);
    assert_eq!(a.num_host_alloc, b.num_host_alloc);
    assert_eq!(a.num_host_free, b.num_host_free);
}

/// Zero sizes, huge sizes and bad devices: typed errors (or an empty pointer), no panic, and
/// the statistics do not move.
#[test]
fn zero_huge_and_bad_device_requests_leave_the_statistics_alone() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let keep = alloc.allocate_on(0, 100)?;
    let before = alloc.memory_stats();
    let z = alloc.allocate_on(0, 0)?;
    assert!(z.is_empty() && z.as_slice().is_empty() && z.as_ptr().is_null());
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    assert!(!z.record_stream(&stream)?);
    for size in [
        usize::MAX,
        (MAX_HOST_ALLOC as usize) + 1,
        usize::MAX / 2 + 2,
    ] {
        assert!(
            matches!(alloc.allocate_on(0, size), Err(HostError::TooLarge { .. })),
            "{size}"
        );
    }
    assert!(alloc.allocate_on(usize::MAX, 1).is_err());
    assert!(alloc.allocate_on(64, 1).is_err());
    assert!(alloc.allocate_on(xpu_device::device_count(), 1).is_err());
    // An empty pointer of a device that does not exist copies nothing.
    let e = HostPtr::empty(usize::MAX);
    let dev = device_buffer(0, 16)?;
    stream.copy_from_host(&e, &dev)?;
    stream.copy_pinned(&dev, 16, HostBytes::From(&e), 0, 0)?;
    unchanged(&before, &alloc.memory_stats());
    drop(keep);
    Ok(())
}

/// Copy ranges are checked against the requested length, not the rounded block.
#[test]
fn a_copy_past_the_requested_length_inside_the_block_is_refused() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 2048)?;
    let mut h = alloc.allocate_on(0, 1000)?;
    assert_eq!(h.allocated_size(), 1024);
    for (off, len) in [(0, 1001), (1000, 1), (1, usize::MAX), (usize::MAX, 1)] {
        assert!(matches!(
            stream.copy_pinned(&dev, 0, HostBytes::From(&h), off, len),
            Err(HostError::OutOfRange { .. })
        ));
        assert!(matches!(
            stream.copy_pinned(&dev, 0, HostBytes::Into(&mut h), off, len),
            Err(HostError::OutOfRange { .. })
        ));
    }
    assert!(stream.copy_from_pageable(&[0; 16], &dev, 2040).is_err());
    assert!(stream
        .copy_from_pageable(&[0; 1], &dev, usize::MAX)
        .is_err());
    Ok(())
}

/// Buffers swapped through `pinned_mut` between blocks of different size classes and
/// devices: every access stays inside the buffer really there, copies are checked against it,
/// the swapped blocks are released (not cached) and the statistics come back to zero.
#[test]
fn swapped_buffers_stay_in_bounds_and_are_released() -> TestResult {
    if !have_devices(2, &test_name()) {
        return Ok(());
    }
    let alloc = xpu_host::HostAllocator::new();
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 8192)?;
    let mut small = alloc.allocate_on(0, 1000)?;
    let mut big = alloc.allocate_on(1, 4096)?;
    std::mem::swap(small.pinned_mut().unwrap(), big.pinned_mut().unwrap());
    assert_eq!(small.as_slice().len(), 1000);
    small.as_mut_slice().fill(3);
    // `big` now holds a 1024-byte buffer behind a 4096-byte request.
    assert!(big.as_slice().len() <= 1024);
    assert!(big.as_mut_slice().len() <= 1024);
    assert!(stream
        .copy_pinned(&dev, 0, HostBytes::From(&big), 0, 4096)
        .is_err());
    assert!(stream.copy_from_host(&big, &dev).is_err());
    assert!(stream.copy_to_host(&dev, &mut big).is_err());
    stream.copy_from_host(&small, &dev)?;
    stream.synchronize()?;
    let (sa, ba) = (small.address(), big.address());
    drop(small);
    drop(big);
    // Neither block is handed out again.
    let a = alloc.allocate_on(0, 1000)?;
    let b = alloc.allocate_on(1, 4096)?;
    assert_ne!(a.address(), ba);
    assert_ne!(b.address(), sa);
    drop((a, b));
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.allocation.current, s.allocated_bytes.current), (0, 0));
    assert_eq!((s.segment.current, s.reserved_bytes.current), (0, 0));
    assert_eq!(s.num_host_alloc, s.num_host_free);
    Ok(())
}

/// A pinned block used by a copy on an external stream that is held back, then the external
/// stream is dropped (unregistered) and the block freed: the free-time marker cannot be
/// recorded, so the block must not be cached (it is released); the copy still completes into
/// the device buffer once the gate opens.
#[test]
fn a_block_of_a_released_external_streams_gated_copy_is_not_reused() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let queue = xpu_device::device(0)?.create_queue(QueueOptions {
        profiling: true,
        priority: None,
    })?;
    let theirs = queue.clone();
    let ext = ExternalStream::new(queue, 0)?;
    let s = ext.stream();
    let gate = Gate::new(0)?;
    gate.block(&s)?;
    let dev = device_buffer(0, 4096)?;
    let mut h = alloc.allocate_on(0, 4096)?;
    h.fill(0x5A);
    s.copy_from_host(&h, &dev)?;
    let addr = h.address();
    drop(ext);
    drop(h);
    let mut again = alloc.allocate_on(0, 4096)?;
    assert_ne!(
        again.address(),
        addr,
        "reused while a held-back copy reads it"
    );
    again.fill(0);
    gate.open()?;
    theirs.finish()?;
    let q = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let mut back = vec![0u8; 4096];
    q.queue()?.read(&dev, 0, &mut back)?;
    assert!(
        back.iter().all(|&b| b == 0x5A),
        "the held-back copy read changed bytes"
    );
    Ok(())
}

/// A block freed into thread T1's cache, taken by T2 (whose miss flushes T1's bin), is not
/// handed to T1 as well.
#[test]
fn a_block_taken_from_another_threads_cache_is_not_handed_out_twice() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let (to_t1, t1_waits) = mpsc::channel::<()>();
    let (to_main, main_waits) = mpsc::channel::<usize>();
    let alloc_ref = &alloc;
    std::thread::scope(|sc| -> TestResult {
        let t1 = sc.spawn(move || -> Result<(usize, usize), HostError> {
            let x = alloc_ref.allocate_on(0, 8192)?;
            let addr = x.address();
            drop(x); // into T1's cache
            to_main.send(addr).ok();
            t1_waits.recv().ok();
            let y = alloc_ref.allocate_on(0, 8192)?;
            Ok((addr, y.address()))
        });
        let x_addr = main_waits.recv()?;
        // This thread has no cached block of the class: its miss flushes T1's bin.
        let mine = alloc.allocate_on(0, 8192)?;
        assert_eq!(mine.address(), x_addr);
        to_t1.send(()).ok();
        let (_, t1_got) = t1.join().expect("t1 panicked")?;
        assert_ne!(t1_got, mine.address(), "one block handed to two threads");
        Ok(())
    })?;
    Ok(())
}

/// `empty_cache` in a loop while two threads allocate, write and free: every live block
/// keeps its bytes, and at the end nothing is allocated or reserved.
#[test]
fn empty_cache_racing_frees_keeps_live_blocks_and_ends_at_zero() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..2u8)
            .map(|t| {
                let alloc = &alloc;
                sc.spawn(move || -> Result<(), HostError> {
                    for i in 0..300usize {
                        let size = 512 << (i % 4);
                        let mut h = alloc.allocate_on(0, size)?;
                        h.fill(t ^ (i as u8));
                        let mut h2 = alloc.allocate_on(0, size)?;
                        h2.fill(!t);
                        assert!(h.iter().all(|&b| b == t ^ (i as u8)), "bytes changed");
                        assert!(h2.iter().all(|&b| b == !t), "bytes changed");
                    }
                    Ok(())
                })
            })
            .collect();
        let cleaner = sc.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                alloc.empty_cache();
            }
        });
        for w in workers {
            w.join().expect("worker panicked").expect("worker failed");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        cleaner.join().expect("cleaner panicked");
    });
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.allocation.current, s.allocated_bytes.current), (0, 0));
    assert_eq!(s.allocation.allocated, s.allocation.freed);
    assert_eq!(s.allocation.allocated, 1200);
    // Blocks in the workers' (exited) caches went back to the free lists and were released.
    assert_eq!((s.segment.current, s.reserved_bytes.current), (0, 0));
    assert_eq!(s.num_host_alloc, s.num_host_free);
    Ok(())
}
