//! Host access to a pinned block is tied to the completion of the copies that use it: reading
//! waits for a device-to-host copy into the block, writing waits for every copy that touches
//! it, and a freed block is not reused while a copy (even one made with the backend directly,
//! without `record_stream`) is still in flight.
//!
//! Each copy is held back by a closed user-event gate, so it is deterministically still queued
//! when the host touches the block. Where the accessor must wait, a helper thread opens the
//! gate once the main thread reports that it got through, or after a timeout (the accessor is
//! then blocked inside its wait): the outcome never depends on that timeout, only on whether
//! the accessor waits for the copy.

mod host_common;

use std::sync::mpsc;
use std::time::Duration;

use host_common::{allocator, allocator_and_stream, device_buffer, read_back, TestResult};
use xpu_device::backend::{Buffer, PinnedBytes};
use xpu_event::Gate;
use xpu_host::{HostAllocator, HostCopy, HostError, HostPtr};
use xpu_stream::Stream;

const N: usize = 4096;
/// How long the helper waits for the main thread before opening the gate anyway.
const OPEN_AFTER: Duration = Duration::from_millis(200);

/// Runs `access` while `gate` is closed; a helper thread opens the gate once `access` returned,
/// or after [`OPEN_AFTER`] when `access` is blocked waiting for the gated copy.
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

/// A device buffer of [`N`] bytes holding `device_byte`, a block of `N` bytes of `alloc`
/// holding `host_byte`, and a closed gate that holds back `stream`.
fn gated_buffers(
    alloc: &HostAllocator,
    stream: &Stream,
    device_byte: u8,
    host_byte: u8,
) -> TestResult<(Buffer, HostPtr, Gate)> {
    let dev = device_buffer(0, N)?;
    stream.queue()?.write(&dev, 0, &[device_byte; N])?;
    let mut host = alloc.allocate_on(0, N)?;
    host.fill(host_byte);
    let gate = Gate::new(0)?;
    gate.block(stream)?;
    Ok((dev, host, gate))
}

#[test]
fn reading_a_host_block_waits_for_the_device_to_host_copy_into_it() -> TestResult {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    let (dev, mut host, gate) = gated_buffers(&alloc, &stream, 0xAB, 0)?;
    stream.copy_to_host(&dev, &mut host)?;
    stream.queue()?.flush()?;
    let host = &host;
    let (view, first) = with_gate_opened_meanwhile(&gate, || {
        let view: &[u8] = host.as_slice();
        (view, view.to_vec())
    });
    stream.synchronize()?;
    let later = view.to_vec();
    assert!(
        first.iter().all(|&b| b == 0xAB),
        "as_slice returned before the copy into the block completed (first byte {:#x})",
        first[0]
    );
    assert_eq!(later, first, "the bytes changed under a live &[u8]");
    Ok(())
}

#[test]
fn writing_a_host_block_waits_for_the_host_to_device_copy_from_it() -> TestResult {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    let (dev, mut host, gate) = gated_buffers(&alloc, &stream, 0, 1)?;
    stream.copy_from_host(&host, &dev)?;
    stream.queue()?.flush()?;
    with_gate_opened_meanwhile(&gate, || host.as_mut_slice().fill(2));
    stream.synchronize()?;
    let out = read_back(&stream, &dev, 0, N)?;
    assert!(
        out.iter().all(|&b| b == 1),
        "the device received {:#x}, written after the copy of 1 was enqueued",
        out[0]
    );
    assert!(host.iter().all(|&b| b == 2));
    Ok(())
}

#[test]
fn a_freed_block_is_not_reused_while_a_backend_copy_still_writes_into_it() -> TestResult {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    let queue = stream.queue()?;
    let dev = device_buffer(0, N)?;
    queue.write(&dev, 0, &[0x11; N])?;
    let gate = Gate::new(0)?;
    let mut old = alloc.allocate_on(0, N)?;
    let old_address = old.address();
    // A copy made with the backend directly, without record_stream.
    let copy = queue.copy_pinned(
        &dev,
        0,
        PinnedBytes::Into(old.pinned_mut().expect("a block")),
        0,
        N,
        &[gate.as_cl_event()],
    )?;
    queue.flush()?;
    drop(old);
    let mut next = alloc.allocate_on(0, N)?;
    next.fill(0x22);
    gate.open()?;
    copy.wait()?;
    assert!(
        next.iter().all(|&b| b == 0x22),
        "the old copy overwrote the new owner's bytes with {:#x} (same block reused: {})",
        next[0],
        next.address() == old_address
    );
    drop(next);
    // Once the copy completed, the block is reusable again.
    alloc.process_events();
    Ok(())
}

#[test]
fn a_block_whose_buffer_was_swapped_out_is_released_not_cached() -> Result<(), HostError> {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let dev = xpu_device::device(0)?;
    let queue = dev.create_queue(Default::default())?;
    let mut small = xpu_device::backend::PinnedBuffer::new(dev.context()?, &queue, 64)?;
    let mut a = alloc.allocate_on(0, N)?;
    let a_address = a.address();
    std::mem::swap(a.pinned_mut().expect("a block"), &mut small);
    // The HostPtr never hands out more than its (now smaller) buffer.
    assert!(a.as_slice().len() <= 64);
    drop(a);
    let b = alloc.allocate_on(0, N)?;
    assert_eq!(
        b.as_slice().len(),
        N,
        "a cached block of the wrong size was reused"
    );
    assert_ne!(b.address(), a_address);
    // The original block's buffer is now the caller's, intact.
    assert_eq!(small.len(), N);
    Ok(())
}
