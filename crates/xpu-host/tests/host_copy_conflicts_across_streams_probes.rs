//! Conflicting pinned-host copies, probes that held: swapped buffers under a gated copy, a
//! cross-device gated download through `empty_cache`, threads dropping blocks under gated copies,
//! zero and out-of-range copies.
//!
//! Review h41: what held. Sequences expected to break the pinned-host allocator's guarantees
//! (a block reused while a copy still writes it, bytes changing under a borrow, a panic) that
//! pass on the code as reviewed. PoCL 3.1, `POCL_DEVICES="pthread pthread"`; skipped without
//! devices unless `XPU_REQUIRE_DEVICE=1`.

mod host_common;

use std::sync::mpsc;
use std::time::Duration;

use host_common::{device_buffer, have_devices, read_back, test_name, TestResult};
use xpu_device::backend::PinnedBytes;
use xpu_event::Gate;
use xpu_host::{HostAllocator, HostBytes, HostCopy, HostError};
use xpu_stream::{get_stream_from_pool, ExternalStream, PRIORITY_NORMAL};

const N: usize = 4096;
const OPEN_AFTER: Duration = Duration::from_millis(300);

/// Runs `access` while `gate` is closed; a helper opens the gate once `access` returned, or
/// after [`OPEN_AFTER`] while it waits.
fn with_gate_opened_meanwhile<R: Send>(gate: &Gate, access: impl FnOnce() -> R + Send) -> R {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = rx.recv_timeout(OPEN_AFTER);
            gate.open().expect("open the gate");
        });
        let r = access();
        let _ = tx.send(());
        r
    })
}

fn fresh(device: usize) -> TestResult<ExternalStream> {
    Ok(ExternalStream::new(
        xpu_testing::fresh_queue(device),
        device,
    )?)
}

/// Buffers swapped between two blocks of one size class through `pinned_mut` while a gated
/// device-to-host copy writes one of them; both pointers dropped; new allocations of the class
/// on this thread and another: none gets the buffer under the copy before the gate opens, the
/// new owners' bytes are intact after it, and reading the buffer's new owner waits.
#[test]
fn swapped_buffers_under_a_gated_copy_are_not_reused_early() -> TestResult {
    if !have_devices(1, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let ext = fresh(0)?;
    let s = ext.stream();
    let dev = device_buffer(0, N)?;
    s.queue()?.write(&dev, 0, &[0x77; N])?;
    let gate = Gate::new(0)?;
    gate.block(&s)?;
    let mut a = alloc.allocate_on(0, N)?;
    let mut b = alloc.allocate_on(0, N)?;
    a.as_mut_slice().fill(1);
    b.as_mut_slice().fill(2);
    let under_copy = a.address();
    // A backend copy (no record_stream on the block), then the buffers change blocks.
    drop(s.queue()?.copy_pinned(
        &dev,
        0,
        PinnedBytes::Into(a.pinned_mut().expect("block")),
        0,
        N,
        &[],
    )?);
    std::mem::swap(
        a.pinned_mut().expect("block"),
        b.pinned_mut().expect("block"),
    );
    assert_eq!(b.address(), under_copy);
    // b now holds the buffer under the copy: reading it waits for the copy.
    let first = with_gate_opened_meanwhile(&gate, || b.as_slice().to_vec());
    assert!(first.iter().all(|&x| x == 0x77), "read before the copy");
    // Again, and drop both this time while the copy is queued.
    let gate = Gate::new(0)?;
    gate.block(&s)?;
    let mut c = alloc.allocate_on(0, N)?;
    let mut d = alloc.allocate_on(0, N)?;
    let under = c.address();
    s.copy_to_host(&dev, &mut c)?;
    std::mem::swap(
        c.pinned_mut().expect("block"),
        d.pinned_mut().expect("block"),
    );
    drop(c);
    drop(d);
    let mut news = Vec::new();
    for _ in 0..4 {
        let mut p = alloc.allocate_on(0, N)?;
        assert_ne!(p.address(), under, "the block under the copy was reused");
        p.as_mut_slice().fill(0x33);
        news.push(p);
    }
    let other = std::thread::scope(|sc| {
        sc.spawn(|| -> Result<usize, HostError> { Ok(alloc.allocate_on(0, N)?.address()) })
            .join()
            .expect("thread")
    })?;
    assert_ne!(other, under, "reused on another thread");
    gate.open()?;
    s.synchronize()?;
    for p in &news {
        assert!(p.iter().all(|&x| x == 0x33), "a new owner's bytes changed");
    }
    Ok(())
}

/// A device-to-host copy into a block of device 0 made on device 1's stream, held back;
/// the block dropped, `empty_cache`, new blocks of the class allocated and written: none is
/// the block under the copy, their bytes survive the copy, and the block comes back only
/// after the gate.
#[test]
fn a_cross_device_gated_download_keeps_its_block_through_empty_cache() -> TestResult {
    if !have_devices(2, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let ext1 = fresh(1)?;
    let s1 = ext1.stream();
    let d1 = device_buffer(1, N)?;
    s1.queue()?.write(&d1, 0, &[0x5A; N])?;
    let gate = Gate::new(1)?;
    gate.block(&s1)?;
    let mut h = alloc.allocate_on(0, N)?;
    let under = h.address();
    s1.copy_to_host(&d1, &mut h)?;
    drop(h);
    alloc.empty_cache();
    let mut news = Vec::new();
    for _ in 0..3 {
        let mut p = alloc.allocate_on(0, N)?;
        assert_ne!(p.address(), under, "reused while device 1's copy is queued");
        p.as_mut_slice().fill(0x44);
        news.push(p);
    }
    alloc.empty_cache();
    gate.open()?;
    s1.synchronize()?;
    for p in &news {
        assert!(p.iter().all(|&x| x == 0x44), "a new owner's bytes changed");
    }
    drop(news);
    Ok(())
}

/// Several threads, each with its own gated stream: allocate, queue a download into the block
/// (half of them on device 1 when there are two devices), drop, allocate again and write; only
/// then open the gates. Every new block keeps its bytes.
#[test]
fn threads_dropping_blocks_under_gated_copies_never_share_them() -> TestResult {
    if !have_devices(1, &test_name()) {
        return Ok(());
    }
    let two = xpu_device::device_count() >= 2;
    let alloc = HostAllocator::new();
    std::thread::scope(|sc| -> TestResult {
        let mut handles = Vec::new();
        for t in 0..6u8 {
            let alloc = &alloc;
            handles.push(sc.spawn(move || -> Result<(), String> {
                let run = || -> TestResult {
                    let dev = if two && t % 2 == 1 { 1 } else { 0 };
                    let ext = fresh(dev)?;
                    let s = ext.stream();
                    let buf = device_buffer(dev, N)?;
                    s.queue()?.write(&buf, 0, &[0xC0 | t; N])?;
                    for round in 0..5 {
                        let gate = Gate::new(dev)?;
                        gate.block(&s)?;
                        let mut h = alloc.allocate_on(0, N)?;
                        s.copy_to_host(&buf, &mut h)?;
                        let under = h.address();
                        drop(h);
                        let mut mine = alloc.allocate_on(0, N)?;
                        if mine.address() == under {
                            return Err(format!("thread {t} round {round}: reused").into());
                        }
                        mine.as_mut_slice().fill(t);
                        gate.open()?;
                        s.synchronize()?;
                        if !mine.iter().all(|&x| x == t) {
                            return Err(format!("thread {t} round {round}: bytes changed").into());
                        }
                    }
                    Ok(())
                };
                run().map_err(|e| e.to_string())
            }));
        }
        for h in handles {
            h.join().expect("thread")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Zero-length copies at the end of both sides, and at offsets past either side; copies of
/// an empty pointer: `Ok` or typed `OutOfRange`, never a panic; nothing is recorded for a
/// refused copy.
#[test]
fn zero_and_out_of_range_copies_are_typed() -> TestResult {
    if !have_devices(1, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let s = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 64)?;
    let mut h = alloc.allocate_on(0, 48)?;
    s.copy_pinned(&dev, 64, HostBytes::From(&h), 48, 0)?;
    s.copy_pinned(&dev, 64, HostBytes::Into(&mut h), 48, 0)?;
    for (bo, ho, len) in [
        (65, 0, 0),
        (0, 49, 0),
        (0, 0, 49),
        (60, 0, 8),
        (usize::MAX, 0, 1),
        (0, usize::MAX, 1),
        (1, 1, usize::MAX),
    ] {
        let r = s.copy_pinned(&dev, bo, HostBytes::From(&h), ho, len);
        assert!(matches!(r, Err(HostError::OutOfRange { .. })), "{r:?}");
        let r = s.copy_pinned(&dev, bo, HostBytes::Into(&mut h), ho, len);
        assert!(matches!(r, Err(HostError::OutOfRange { .. })), "{r:?}");
    }
    assert!(h.recorded_streams().is_empty());
    let mut e = alloc.allocate_on(0, 0)?;
    s.copy_to_host(&dev, &mut e)?;
    s.copy_from_host(&e, &dev)?;
    assert!(e.as_slice().is_empty());
    s.synchronize()?;
    let _ = read_back(&s, &dev, 0, 64)?;
    Ok(())
}
