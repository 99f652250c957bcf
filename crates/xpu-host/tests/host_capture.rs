//! Pinned blocks and streams that a graph is capturing (xpu-stream's `CaptureGuard`, what
//! `xpu_kernel::graph::Graph::capture` holds): `record_stream` refuses such a stream, and a
//! block whose recorded stream is being captured when it is freed is released, never reused
//! without its marker. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod host_common;

use host_common::{allocator_and_stream, copy_setup};
use xpu_host::{HostBytes, HostCopy, HostError};
use xpu_stream::{CaptureGuard, StreamError};

#[test]
fn record_stream_on_a_capturing_stream_is_refused_and_records_nothing() -> Result<(), HostError> {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    let a = alloc.allocate_on(0, 256)?;
    let addr = a.address();
    let guard = CaptureGuard::begin(&stream)?;
    let want = HostError::Stream(StreamError::Capturing {
        device: 0,
        id: stream.id(),
        operation: "pinned host record_stream",
    });
    assert_eq!(a.record_stream(&stream), Err(want.clone()));
    assert_eq!(xpu_host::host_record_event(&a, &stream), Err(want.clone()));
    // An empty pointer too: a command on a capturing stream is refused whatever it holds.
    assert_eq!(
        xpu_host::HostPtr::empty(0).record_stream(&stream),
        Err(want)
    );
    assert!(a.recorded_streams().is_empty());
    // Nothing was recorded, so the block is reusable at once, without a marker.
    drop(a);
    let stats = alloc.memory_stats();
    assert_eq!((stats.pending_blocks, stats.pending_markers), (0, 0));
    let b = alloc.allocate_on(0, 256)?;
    assert_eq!(b.address(), addr);
    drop(guard);
    // Once the capture ended, the stream is recorded again.
    assert_eq!(b.record_stream(&stream), Ok(true));
    assert_eq!(b.recorded_streams(), vec![stream]);
    Ok(())
}

#[test]
fn a_block_freed_while_its_recorded_stream_is_captured_is_released_not_reused(
) -> Result<(), HostError> {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    let a = alloc.allocate_on(0, 512)?;
    assert_eq!(a.record_stream(&stream), Ok(true));
    let guard = CaptureGuard::begin(&stream)?;
    // No marker can be recorded on the capturing stream, nor can it be synchronized: the
    // block cannot be proven free of the work recorded before the capture, so it leaves the
    // cache (its memory is released; copies in flight keep the driver's buffer alive).
    drop(a);
    let stats = alloc.memory_stats();
    assert_eq!((stats.pending_blocks, stats.pending_markers), (0, 0));
    assert_eq!(stats.segment.current, 0);
    assert_eq!(stats.num_host_free, 1);
    let b = alloc.allocate_on(0, 512)?;
    assert_eq!(alloc.memory_stats().num_host_alloc, 2, "a fresh block");
    drop(guard);
    drop(b);
    Ok(())
}

#[test]
fn pinned_copies_on_a_capturing_stream_are_refused_and_record_nothing() -> Result<(), HostError> {
    let Some((alloc, stream, dev)) = copy_setup(1024)? else {
        return Ok(());
    };
    let mut host = alloc.allocate_on(0, 1024)?;
    let guard = CaptureGuard::begin(&stream)?;
    let refused = |operation| {
        Err(HostError::Stream(StreamError::Capturing {
            device: 0,
            id: stream.id(),
            operation,
        }))
    };
    let (to_device, to_host) = ("host-to-device copy", "device-to-host copy");
    assert_eq!(
        stream.copy_pinned(&dev, 0, HostBytes::From(&host), 0, 512),
        refused(to_device)
    );
    assert_eq!(
        stream.copy_pinned(&dev, 0, HostBytes::Into(&mut host), 0, 512),
        refused(to_host)
    );
    assert_eq!(stream.copy_from_host(&host, &dev), refused(to_device));
    assert_eq!(stream.copy_to_host(&dev, &mut host), refused(to_host));
    // Ranges are checked first, in the copy's direction (the source's first).
    let out_of_range = stream.copy_pinned(&dev, 1000, HostBytes::Into(&mut host), 1000, 100);
    assert!(
        matches!(
            out_of_range,
            Err(HostError::OutOfRange {
                what: "device source",
                ..
            })
        ),
        "{out_of_range:?}"
    );
    // Nothing was enqueued on the block nor recorded.
    let pinned = host.pinned().expect("a pinned block");
    assert!(!pinned.has_copies_in_flight());
    assert!(host.recorded_streams().is_empty());
    drop(guard);
    stream.copy_pinned(&dev, 0, HostBytes::From(&host), 0, 512)?;
    assert_eq!(host.recorded_streams(), vec![stream]);
    stream.synchronize()?;
    Ok(())
}
