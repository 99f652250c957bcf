//! Pinned host buffers: non-blocking copies to and from the device, and lifetime of the host
//! memory while a copy is in flight.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_device::backend::{Buffer, CommandQueue, Context, MemFlags, PinnedBuffer, PinnedBytes};
use xpu_device::{Device, DeviceError};

#[test]
fn pinned_write_and_read_round_trip() {
    let Some((_, ctx, q)) = common::device0_queue() else {
        return;
    };
    let mut src = PinnedBuffer::new(ctx, &q, 8192).unwrap();
    assert_eq!(src.len(), 8192);
    assert!(!src.is_empty());
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let dev_buf = Buffer::new(ctx, 8192, MemFlags::default()).unwrap();
    let w = q
        .copy_pinned(&dev_buf, 0, PinnedBytes::From(&src), 0, 8192, &[])
        .unwrap();

    let mut dst = PinnedBuffer::new(ctx, &q, 4096).unwrap();
    dst.as_mut_slice().fill(0);
    // Read the second half of the device buffer into the pinned buffer, after the write.
    let r = q
        .copy_pinned(&dev_buf, 4096, PinnedBytes::Into(&mut dst), 0, 4096, &[&w])
        .unwrap();
    r.wait().unwrap();
    assert!(w.is_complete().unwrap());
    assert_eq!(dst.as_slice(), &src.as_slice()[4096..]);

    assert!(matches!(
        q.copy_pinned(&dev_buf, 0, PinnedBytes::From(&src), 8000, 200, &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        q.copy_pinned(&dev_buf, 0, PinnedBytes::Into(&mut dst), 4000, 100, &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        PinnedBuffer::new(ctx, &q, 0),
        Err(DeviceError::InvalidArgument(_))
    ));
}

#[test]
fn pinned_memory_outlives_its_handle_while_a_copy_waits() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let mut gate = common::Gate::new(dev);
    let mut src = PinnedBuffer::new(ctx, &q, 1024).unwrap();
    src.as_mut_slice().fill(0x3C);
    let dev_buf = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    let w = q
        .copy_pinned(
            &dev_buf,
            0,
            PinnedBytes::From(&src),
            0,
            1024,
            &[gate.event()],
        )
        .unwrap();
    q.flush().unwrap();
    // The copy cannot start before the gate opens; the caller drops its handle meanwhile.
    drop(src);
    assert!(!w.is_complete().unwrap());
    gate.open();
    w.wait().unwrap();
    let out = common::read_bytes(&q, &dev_buf, 1024);
    assert_all(
        &out,
        0x3C,
        "the copy did not read the dropped handle's bytes",
    );
    q.finish().unwrap();
}

/// Runs `access` while `gate` is closed; a helper thread opens the gate once `access` returned,
/// or after a timeout when `access` is blocked waiting for the gated copy. The outcome never
/// depends on the timeout, only on whether `access` waits for the copy.
fn with_gate_opened_meanwhile<R: Send>(
    gate: &mut common::Gate,
    access: impl FnOnce() -> R + Send,
) -> R {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = rx.recv_timeout(Duration::from_millis(200));
            gate.open();
        });
        let r = access();
        let _ = tx.send(());
        r
    })
}

/// Asserts that every byte of `bytes` is `want`; a failure says what it means (`what`) and
/// shows the first byte.
fn assert_all(bytes: &[u8], want: u8, what: &str) {
    assert!(
        bytes.iter().all(|&b| b == want),
        "{what}: {:#x?} where every byte should be {want:#x}",
        bytes.first()
    );
}

/// A closed gate, a device buffer of `n` bytes holding `device_byte` and a pinned buffer of `n`
/// bytes on `q` holding `host_byte`.
fn gate_and_buffers(
    (dev, ctx, q): (&Device, &Context, &CommandQueue),
    n: usize,
    device_byte: u8,
    host_byte: u8,
) -> (common::Gate, Buffer, PinnedBuffer) {
    let gate = common::Gate::new(dev);
    let dev_buf = Buffer::new(ctx, n, MemFlags::default()).unwrap();
    q.write(&dev_buf, 0, &vec![device_byte; n]).unwrap();
    let mut p = PinnedBuffer::new(ctx, q, n).unwrap();
    p.as_mut_slice().fill(host_byte);
    (gate, dev_buf, p)
}

#[test]
fn pinned_reads_wait_for_a_copy_into_the_buffer() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let (mut gate, dev_buf, mut p) = gate_and_buffers((dev, ctx, &q), 512, 0xAB, 0);
    assert!(!p.has_copies_in_flight());
    let r = q
        .copy_pinned(
            &dev_buf,
            0,
            PinnedBytes::Into(&mut p),
            0,
            512,
            &[gate.event()],
        )
        .unwrap();
    q.flush().unwrap();
    assert!(p.has_copies_in_flight());
    let p = &p;
    let (view, first) = with_gate_opened_meanwhile(&mut gate, || {
        let view: &[u8] = p.as_slice();
        (view, view.to_vec())
    });
    r.wait().unwrap();
    assert_all(
        &first,
        0xAB,
        "as_slice returned before the copy into the buffer completed",
    );
    assert_eq!(view, &first[..], "bytes changed under a live &[u8]");
    q.finish().unwrap();
}

#[test]
fn pinned_writes_wait_for_a_copy_from_the_buffer() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let (mut gate, dev_buf, mut p) = gate_and_buffers((dev, ctx, &q), 512, 0, 1);
    let w = q
        .copy_pinned(&dev_buf, 0, PinnedBytes::From(&p), 0, 512, &[gate.event()])
        .unwrap();
    q.flush().unwrap();
    // Reading does not wait for a copy that only reads the host bytes.
    assert_all(p.as_slice(), 1, "the host bytes changed under the copy");
    assert!(!w.is_complete().unwrap());
    with_gate_opened_meanwhile(&mut gate, || p.as_mut_slice().fill(2));
    w.wait().unwrap();
    let out = common::read_bytes(&q, &dev_buf, 512);
    assert_all(
        &out,
        1,
        "the device received bytes written after the copy was enqueued",
    );
    q.finish().unwrap();
}

#[test]
fn pinned_copies_on_two_queues_keep_their_order_on_the_host_bytes() {
    let Some(dev) = common::device0() else {
        return;
    };
    let ctx = dev.context().unwrap();
    let (qa, qb) = (common::queue(dev), common::queue(dev));
    let mut gate = common::Gate::new(dev);
    let out_a = Buffer::new(ctx, 256, MemFlags::default()).unwrap();
    let in_b = Buffer::new(ctx, 256, MemFlags::default()).unwrap();
    qa.write(&out_a, 0, &[0; 256]).unwrap();
    qb.write(&in_b, 0, &[7; 256]).unwrap();
    let mut p = PinnedBuffer::new(ctx, &qa, 256).unwrap();
    p.as_mut_slice().fill(1);
    // Queue A reads the host bytes once the gate opens; queue B then overwrites them. The
    // second copy must not overtake the first one on the host bytes.
    let h2d = qa
        .copy_pinned(&out_a, 0, PinnedBytes::From(&p), 0, 256, &[gate.event()])
        .unwrap();
    let d2h = qb
        .copy_pinned(&in_b, 0, PinnedBytes::Into(&mut p), 0, 256, &[])
        .unwrap();
    qa.flush().unwrap();
    qb.flush().unwrap();
    gate.open();
    h2d.wait().unwrap();
    d2h.wait().unwrap();
    let got = common::read_bytes(&qa, &out_a, 256);
    assert_all(
        &got,
        1,
        "the host-to-device copy read bytes of the later device-to-host copy",
    );
    assert_all(p.as_slice(), 7, "the device-to-host copy did not land");
}
