//! Pinned host buffers: non-blocking copies to and from the device, and lifetime of the host
//! memory while a copy is in flight.

mod common;

use xpu_device::backend::{Buffer, MemFlags, PinnedBuffer};
use xpu_device::DeviceError;

#[test]
fn pinned_write_and_read_round_trip() {
    let Some(dev) = common::device0("pinned_write_and_read_round_trip") else {
        return;
    };
    let ctx = dev.context().unwrap();
    let q = common::queue(dev);
    let mut src = PinnedBuffer::new(ctx, &q, 8192).unwrap();
    assert_eq!(src.len(), 8192);
    assert!(!src.is_empty());
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let dev_buf = Buffer::new(ctx, 8192, MemFlags::default()).unwrap();
    let w = q
        .write_from_pinned(&src, 0, &dev_buf, 0, 8192, &[])
        .unwrap();

    let mut dst = PinnedBuffer::new(ctx, &q, 4096).unwrap();
    dst.as_mut_slice().fill(0);
    // Read the second half of the device buffer into the pinned buffer, after the write.
    let r = q
        .read_into_pinned(&dev_buf, 4096, &dst, 0, 4096, &[&w])
        .unwrap();
    r.wait().unwrap();
    assert!(w.is_complete().unwrap());
    assert_eq!(dst.as_slice(), &src.as_slice()[4096..]);

    assert!(matches!(
        q.write_from_pinned(&src, 8000, &dev_buf, 0, 200, &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        q.read_into_pinned(&dev_buf, 0, &dst, 4000, 100, &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        PinnedBuffer::new(ctx, &q, 0),
        Err(DeviceError::InvalidArgument(_))
    ));
}

#[test]
fn pinned_memory_outlives_its_handle_while_a_copy_waits() {
    let Some(dev) = common::device0("pinned_memory_outlives_its_handle_while_a_copy_waits") else {
        return;
    };
    let ctx = dev.context().unwrap();
    let q = common::queue(dev);
    let mut gate = common::Gate::new(dev);
    let mut src = PinnedBuffer::new(ctx, &q, 1024).unwrap();
    src.as_mut_slice().fill(0x3C);
    let dev_buf = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let w = q
        .write_from_pinned(&src, 0, &dev_buf, 0, 1024, &[gate.event()])
        .unwrap();
    q.flush().unwrap();
    // The copy cannot start before the gate opens; the caller drops its handle meanwhile.
    drop(src);
    assert!(!w.is_complete().unwrap());
    gate.open();
    w.wait().unwrap();
    let mut out = vec![0u8; 1024];
    q.read(&dev_buf, 0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x3C));
    q.finish().unwrap();
}

#[test]
fn a_pinned_buffer_hands_out_no_buffer_to_write_behind_a_borrow() {
    let Some(dev) = common::device0("a_pinned_buffer_hands_out_no_buffer_to_write_behind_a_borrow")
    else {
        return;
    };
    let ctx = dev.context().unwrap();
    let q = common::queue(dev);
    let mut p = PinnedBuffer::new(ctx, &q, 256).unwrap();
    p.as_mut_slice().fill(0);
    let view: &[u8] = p.as_slice();
    let before = view.to_vec();
    let handle = p.buffer().clone();
    q.write(&handle, 0, &[9u8; 256]).unwrap();
    assert_eq!(view, &before[..], "a blocking write changed bytes behind a live &[u8]");
}
