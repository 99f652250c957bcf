//! Data integrity of host<->device copies through pinned blocks, both ways, and their
//! argument checks.

mod host_common;

use host_common::{allocator_and_stream, copy_setup, device_buffer, pattern, read_back};
use xpu_host::{HostBytes, HostCopy, HostError};

#[test]
fn round_trip_preserves_the_bytes() -> Result<(), HostError> {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(());
    };
    for &n in &[1usize, 3, 4096, 100_000, 1 << 20] {
        let dev = device_buffer(0, n)?;
        let want = pattern(n as u8, n);
        let mut src = alloc.allocate_on(0, n)?;
        src.copy_from_slice(&want);
        stream.copy_pinned(&dev, 0, HostBytes::From(&src), 0, n)?;
        drop(src); // freed before the copy is known to be done: must stay intact
        let mut back = alloc.allocate_on(0, n)?;
        back.fill(0);
        stream.copy_pinned(&dev, 0, HostBytes::Into(&mut back), 0, n)?;
        stream.synchronize()?;
        assert_eq!(&back[..], &want[..], "{n} bytes");
        // Cross-check against the device through a plain blocking read.
        assert_eq!(read_back(&stream, &dev, 0, n)?, want);
    }
    Ok(())
}

#[test]
fn offsets_select_the_right_bytes() -> Result<(), HostError> {
    let Some((alloc, stream, dev)) = copy_setup(1000)? else {
        return Ok(());
    };
    stream.queue()?.write(&dev, 0, &[0u8; 1000])?;
    let mut src = alloc.allocate_on(0, 300)?;
    src.copy_from_slice(&pattern(9, 300));
    // src[100..250] -> dev[500..650]
    stream.copy_pinned(&dev, 500, HostBytes::From(&src), 100, 150)?;
    let mut back = alloc.allocate_on(0, 400)?;
    back.fill(0xAA);
    // dev[490..660] -> back[10..180]
    stream.copy_pinned(&dev, 490, HostBytes::Into(&mut back), 10, 170)?;
    stream.synchronize()?;
    assert!(back[..10].iter().all(|&b| b == 0xAA));
    assert!(back[10..20].iter().all(|&b| b == 0));
    assert_eq!(&back[20..170], &src[100..250]);
    assert!(back[170..180].iter().all(|&b| b == 0));
    assert!(back[180..].iter().all(|&b| b == 0xAA));
    Ok(())
}

#[test]
fn pageable_copy_writes_the_bytes() -> Result<(), HostError> {
    let Some((_, stream, dev)) = copy_setup(512)? else {
        return Ok(());
    };
    let want = pattern(3, 256);
    stream.copy_from_pageable(&want, &dev, 256)?;
    assert_eq!(read_back(&stream, &dev, 256, 256)?, want);
    Ok(())
}

#[test]
fn ranges_are_checked_against_the_requested_length() -> Result<(), HostError> {
    let Some((alloc, stream, dev)) = copy_setup(4096)? else {
        return Ok(());
    };
    let mut h = alloc.allocate_on(0, 1000)?; // a 1024-byte block
    let (what, offset, len, size) =
        out_of_range(stream.copy_pinned(&dev, 0, HostBytes::From(&h), 0, 1001));
    assert_eq!((what, offset, len, size), ("host source", 0, 1001, 1000));
    let err = out_of_range(stream.copy_pinned(&dev, 4000, HostBytes::From(&h), 900, 100));
    assert_eq!(err.0, "device destination");
    let err = out_of_range(stream.copy_pinned(&dev, 4095, HostBytes::Into(&mut h), 0, 2));
    assert_eq!(err.0, "device source");
    let err = out_of_range(stream.copy_pinned(&dev, 0, HostBytes::Into(&mut h), usize::MAX, 2));
    assert_eq!(err.0, "host destination");
    out_of_range(stream.copy_from_pageable(&[0u8; 10], &dev, 4090));
    // Failed copies record nothing; zero-length copies enqueue and record nothing.
    stream.copy_pinned(&dev, 0, HostBytes::From(&h), 1000, 0)?;
    let mut empty = alloc.allocate_on(0, 0)?;
    stream.copy_pinned(&dev, 0, HostBytes::Into(&mut empty), 0, 0)?;
    assert!(h.recorded_streams().is_empty());
    Ok(())
}

#[test]
fn whole_allocation_copies_through_device_memory() -> Result<(), HostError> {
    let Some((alloc, stream, dev)) = copy_setup(5000)? else {
        return Ok(());
    };
    let mut src = alloc.allocate_on(0, 3000)?;
    src.copy_from_slice(&pattern(11, 3000));
    stream.copy_from_host(&src, &dev)?;
    assert_eq!(src.recorded_streams(), vec![stream]);
    let mut back = alloc.allocate_on(0, 3000)?;
    stream.copy_to_host(&dev, &mut back)?;
    stream.synchronize()?;
    assert_eq!(&back[..], &src[..]);
    // The region must hold the whole host allocation.
    let mut big = alloc.allocate_on(0, 6000)?;
    let (what, _, len, size) = out_of_range(stream.copy_from_host(&big, &dev));
    assert_eq!((what, len, size), ("device destination", 6000, 5000));
    let (what, _, len, size) = out_of_range(stream.copy_to_host(&dev, &mut big));
    assert_eq!((what, len, size), ("device source", 6000, 5000));
    Ok(())
}

/// `(what, offset, len, size)` of the `OutOfRange` error that `result` must be.
fn out_of_range<T: std::fmt::Debug>(result: Result<T, HostError>) -> (&'static str, u64, u64, u64) {
    match result {
        Err(HostError::OutOfRange {
            what,
            offset,
            len,
            size,
        }) => (what, offset, len, size),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}
