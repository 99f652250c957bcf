//! Typed device memory on a real OpenCL device (PoCL in CI; two devices for the cross-device
//! copies: `POCL_DEVICES="pthread pthread"`): values round-trip exactly at odd offsets and
//! lengths, non-blocking uploads do not reference the caller's slice, reads are ordered after
//! earlier work, misuse is a typed error (an overflowing region's byte offset too), and uses
//! on other streams are recorded (pinned host copies too).
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu_alloc::AllocError;
use xpu_event::test_support::Gate;
use xpu_kernel::memory::{
    copy_dtod, copy_dtoh, copy_dtoh_pinned, copy_htod, copy_htod_pinned, copy_peer, fill,
    memset_zeros, staging_plan, staging_threads, to_vec, STAGING_BYTES_PER_THREAD,
    STAGING_CHUNK_BYTES, STAGING_FIRST_PIECE_BYTES, STAGING_MAX_THREADS,
};
use xpu_kernel::{DeviceBuffer, DeviceRegion, MemoryError, StreamMemoryExt};

use common::{assert_block_not_reused, device0_stream, fresh_streams, ramp, Claimed};

#[test]
fn htod_and_dtoh_round_trip_at_odd_offsets_and_lengths() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let host = ramp(1001);
    let buf = s.htod_copy(&host).unwrap();
    assert_eq!(buf.len(), 1001);
    assert_eq!(buf.to_vec(&s).unwrap(), host);
    let view = buf.slice(3..994).unwrap();
    assert_eq!(
        (view.offset(), view.len(), view.byte_offset()),
        (3, 991, 12)
    );
    assert_eq!(s.dtoh_sync_copy(&view).unwrap(), host[3..994]);
    let inner = view.slice(5..=6).unwrap();
    assert_eq!(inner.offset(), 8);
    let mut two = [0f32; 2];
    copy_dtoh(&s, &inner, &mut two).unwrap();
    assert_eq!(two, [host[8], host[9]]);

    // An upload into an odd sub-range leaves its neighbours alone.
    let mut buf = buf;
    let patch = [100.0f32, 200.0, 300.0];
    copy_htod(&s, &patch, &mut buf.slice_mut(997..1000).unwrap()).unwrap();
    let back = buf.to_vec(&s).unwrap();
    assert_eq!(back[996], host[996]);
    assert_eq!(back[997..1000], patch);
    assert_eq!(back[1000], host[1000]);

    // Odd element sizes: 3-byte elements at an odd offset.
    let rgb: Vec<[u8; 3]> = (0..77u8).map(|i| [i, i ^ 0x55, 255 - i]).collect();
    let mut img = DeviceBuffer::<[u8; 3]>::zeroed(80, &s).unwrap();
    copy_htod(&s, &rgb, &mut img.slice_mut(1..78).unwrap()).unwrap();
    let back = img.to_vec(&s).unwrap();
    assert_eq!(back[0], [0, 0, 0]);
    assert_eq!(back[1..78], rgb[..]);
    assert_eq!(back[78..], [[0, 0, 0], [0, 0, 0]]);
}

#[test]
fn htod_does_not_reference_the_callers_slice_after_returning() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    // More than two staging chunks, with a ragged tail.
    let n = 2 * STAGING_CHUNK_BYTES + 12_345;
    let mut host: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let expected = host.clone();
    let mut buf = DeviceBuffer::<u8>::new(n, &s).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap(); // the uploads cannot run before the gate opens
    copy_htod(&s, &host, &mut buf).unwrap();
    host.iter_mut().for_each(|b| *b = 0xEE); // the caller reuses its slice at once
    drop(host);
    gate.open().unwrap();
    assert!(buf.to_vec(&s).unwrap() == expected);
}

#[test]
fn staging_plan_ramps_up_from_small_pieces_and_tiles_the_source() {
    let bytes = 100 * STAGING_CHUNK_BYTES + 777;
    for threads in [1, 2, 3, 8] {
        let plan = staging_plan(bytes, threads);
        assert_eq!(plan.first().map(|r| r.start), Some(0));
        assert_eq!(plan.last().map(|r| r.end), Some(bytes));
        assert!(plan.windows(2).all(|w| w[0].end == w[1].start));
        assert!(plan
            .iter()
            .all(|r| !r.is_empty() && r.len() <= STAGING_CHUNK_BYTES));
        if threads == 1 {
            assert!(plan[..plan.len() - 1]
                .iter()
                .all(|r| r.len() == STAGING_CHUNK_BYTES));
        } else {
            // Round r holds `threads` pieces of FIRST << r bytes, up to the chunk size.
            for (i, r) in plan[..plan.len() - 1].iter().enumerate() {
                let want =
                    (STAGING_FIRST_PIECE_BYTES << (i / threads).min(10)).min(STAGING_CHUNK_BYTES);
                assert_eq!(r.len(), want, "piece {i} of {threads} threads");
            }
        }
    }
    assert!(staging_plan(0, 4).is_empty());
    assert_eq!(staging_plan(10, 4), vec![0..10]);
    assert_eq!(staging_threads(2 * STAGING_BYTES_PER_THREAD - 1), 1);
    assert_eq!(staging_threads(usize::MAX), {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        STAGING_MAX_THREADS.min(cores)
    });
}

#[test]
fn threaded_staged_upload_round_trips_and_frees_every_staging_block() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    // Enough for several threads and every ramp size, with a ragged tail, at an odd offset.
    let n = (3 * STAGING_CHUNK_BYTES + 4 * STAGING_FIRST_PIECE_BYTES + 4099) / 4;
    let bytes = n * 4;
    let host: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let mut buf = DeviceBuffer::<u32>::zeroed(n + 5, &s).unwrap();
    let threads = staging_threads(bytes);
    let pieces = staging_plan(bytes, threads).len() as i64;
    s.synchronize().unwrap();
    xpu_alloc::HostAllocator::global().process_events();
    let before = xpu_alloc::host_memory_stats();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap(); // no upload can complete before the gate opens
    copy_htod(&s, &host, &mut buf.slice_mut(3..n + 3).unwrap()).unwrap();
    let during = xpu_alloc::host_memory_stats();
    // One pinned block per piece, none reusable while its upload is held back.
    assert_eq!(
        during.allocation.allocated - before.allocation.allocated,
        pieces
    );
    assert_eq!(
        during.allocation.current - before.allocation.current,
        pieces
    );
    gate.open().unwrap();
    let back = buf.to_vec(&s).unwrap();
    assert_eq!(back[..3], [0, 0, 0]);
    assert!(back[3..n + 3] == host[..], "staged upload differs");
    assert_eq!(back[n + 3..], [0, 0]);
    xpu_alloc::HostAllocator::global().process_events();
    let after = xpu_alloc::host_memory_stats();
    assert_eq!(after.allocation.current, before.allocation.current);
    assert_eq!(after.allocation.freed - before.allocation.freed, pieces);
}

/// Runs `blocked` (a call that waits for work `gate` holds back) on this thread while another
/// thread opens `gate`: the call cannot return before the gate opens, whatever the timing.
fn open_gate_during<R>(gate: &Gate, blocked: impl FnOnce() -> R) -> R {
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            gate.open().unwrap();
        });
        blocked()
    })
}

#[test]
fn dtoh_is_ordered_after_earlier_work_on_the_stream() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut buf = DeviceBuffer::<u32>::zeroed(1000, &s).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    fill(&s, &mut buf.slice_mut(10..20).unwrap(), 0xDEAD_BEEF).unwrap();
    // Blocks until the gate opens and the fill ran, whatever the thread's timing.
    let v = open_gate_during(&gate, || to_vec(&s, &buf).unwrap());
    assert_eq!(v[9], 0);
    assert!(v[10..20].iter().all(|&x| x == 0xDEAD_BEEF));
    assert_eq!(v[20], 0);
}

#[test]
fn fills_of_every_element_size_and_zeroing() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut f = DeviceBuffer::<f32>::new(101, &s).unwrap();
    s.memset(&mut f, 1.5).unwrap();
    s.memset(&mut f.slice_mut(33..34).unwrap(), -2.0).unwrap();
    let v = f.to_vec(&s).unwrap();
    assert!(v[..33].iter().chain(&v[34..]).all(|&x| x == 1.5));
    assert_eq!(v[33], -2.0);
    memset_zeros(&s, &mut f.slice_mut(100..).unwrap()).unwrap();
    assert_eq!(f.to_vec(&s).unwrap()[99..], [1.5, 0.0]);

    // 12-byte elements: no OpenCL fill pattern has that size (staged upload instead).
    let mut t = DeviceBuffer::<[f32; 3]>::zeroed(7, &s).unwrap();
    fill(&s, &mut t.slice_mut(1..6).unwrap(), [1.0, 2.0, 3.0]).unwrap();
    let v = t.to_vec(&s).unwrap();
    assert_eq!(v[0], [0.0; 3]);
    assert!(v[1..6].iter().all(|&x| x == [1.0, 2.0, 3.0]));
    assert_eq!(v[6], [0.0; 3]);

    // 128-byte elements: the largest pattern.
    let mut w = DeviceBuffer::<[u64; 16]>::new(3, &s).unwrap();
    let big: [u64; 16] = std::array::from_fn(|i| i as u64 * 0x0101_0101);
    fill(&s, &mut w, big).unwrap();
    assert_eq!(w.to_vec(&s).unwrap(), vec![big; 3]);

    let mut b = DeviceBuffer::<u8>::zeroed(5, &s).unwrap();
    fill(&s, &mut b.slice_mut(1..4).unwrap(), 9).unwrap();
    assert_eq!(b.to_vec(&s).unwrap(), [0, 9, 9, 9, 0]);
}

#[test]
fn dtod_copies_between_buffers_and_within_one() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let host = ramp(64);
    let a = DeviceBuffer::from_slice(&host, &s).unwrap();
    let mut b = DeviceBuffer::<f32>::zeroed(64, &s).unwrap();
    copy_dtod(
        &s,
        &a.slice(5..17).unwrap(),
        &mut b.slice_mut(40..52).unwrap(),
    )
    .unwrap();
    let v = b.to_vec(&s).unwrap();
    assert_eq!(v[39], 0.0);
    assert_eq!(v[40..52], host[5..17]);
    assert_eq!(v[52], 0.0);
    s.memcpy_dtod(&a, &mut b).unwrap();
    assert_eq!(b.to_vec(&s).unwrap(), host);

    let mut c = DeviceBuffer::from_slice(&host, &s).unwrap();
    c.copy_within(&s, 0..10, 30).unwrap();
    let v = c.to_vec(&s).unwrap();
    assert_eq!(v[30..40], host[0..10]);
    assert_eq!(v[29], host[29]);
    assert_eq!(v[40], host[40]);
    assert_eq!(
        c.copy_within(&s, 0..10, 5).unwrap_err(),
        MemoryError::Overlap {
            src: 0,
            dst: 5,
            len: 10
        }
    );
}

#[test]
fn misuse_is_a_typed_error_and_zero_length_does_nothing() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut buf = DeviceBuffer::<f32>::zeroed(10, &s).unwrap();
    assert_eq!(
        buf.slice(8..11).unwrap_err(),
        MemoryError::OutOfRange {
            start: 8,
            end: 11,
            len: 10
        }
    );
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = buf.slice(5..4).unwrap_err();
    assert!(matches!(reversed, MemoryError::OutOfRange { .. }));
    assert!(matches!(
        buf.slice(..).unwrap().slice(3..=10).unwrap_err(),
        MemoryError::OutOfRange { len: 10, .. }
    ));
    assert_eq!(
        copy_htod(&s, &[1.0; 3], &mut buf).unwrap_err(),
        MemoryError::LengthMismatch { src: 3, dst: 10 }
    );
    let mut out = [0f32; 4];
    assert_eq!(
        copy_dtoh(&s, &buf.slice(0..5).unwrap(), &mut out).unwrap_err(),
        MemoryError::LengthMismatch { src: 5, dst: 4 }
    );
    assert!(matches!(
        DeviceBuffer::<u64>::new(usize::MAX / 4, &s).unwrap_err(),
        MemoryError::TooLarge { .. }
    ));
    assert!(matches!(
        DeviceBuffer::<u8>::new(usize::MAX / 4, &s).unwrap_err(),
        MemoryError::Alloc(xpu_alloc::AllocError::TooLarge { .. })
    ));

    // Zero lengths: empty buffers, empty views, empty copies.
    let mut empty = DeviceBuffer::<f32>::zeroed(0, &s).unwrap();
    assert!(empty.is_empty() && empty.data_ptr().is_empty());
    copy_htod(&s, &[], &mut empty).unwrap();
    assert_eq!(empty.to_vec(&s).unwrap(), Vec::<f32>::new());
    let mut none = buf.slice_mut(10..10).unwrap();
    fill(&s, &mut none, 3.0).unwrap();
    copy_htod(&s, &[], &mut none).unwrap();
    assert_eq!(
        s.dtoh_sync_copy(&buf.slice(4..4).unwrap()).unwrap(),
        Vec::<f32>::new()
    );
    assert_eq!(buf.to_vec(&s).unwrap(), vec![0.0; 10]);
}

#[test]
fn a_copy_on_another_stream_records_that_stream_on_the_block() {
    let Some(([s0, s1], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let n = 1 << 16;
    let mut buf = DeviceBuffer::<u32>::new(n, &s0).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    fill(&s1, &mut buf, 7).unwrap(); // held back on stream 1
    assert_block_not_reused(buf, &s0, &gate, "stream 1's fill of it");
    s1.synchronize().unwrap();
}

#[test]
fn copies_across_devices_are_staged_through_pinned_memory() {
    let Some(([a, b], _ext)) = fresh_streams([0, 1]) else {
        return;
    };
    let host = ramp(333);
    let src = DeviceBuffer::from_slice(&host, &a).unwrap();
    let copy = src.to_device(&a, &b).unwrap();
    assert_eq!(copy.device(), 1);
    assert_eq!(copy.to_vec(&b).unwrap(), host);

    // Odd offsets on both sides; the source write is still gated when the copy is called.
    let mut dst = DeviceBuffer::<f32>::zeroed(100, &b).unwrap();
    let mut src = src;
    let gate = Gate::new(0).unwrap();
    gate.block(&a).unwrap();
    fill(&a, &mut src.slice_mut(11..14).unwrap(), 42.0).unwrap();
    open_gate_during(&gate, || {
        copy_peer(
            &a,
            &src.slice(7..50).unwrap(),
            &b,
            &mut dst.slice_mut(1..44).unwrap(),
        )
        .unwrap();
    });
    let v = dst.to_vec(&b).unwrap();
    let mut want = host[7..50].to_vec();
    want[4..7].copy_from_slice(&[42.0; 3]);
    assert_eq!(v[0], 0.0);
    assert_eq!(v[1..44], want[..]);
    assert!(v[44..].iter().all(|&x| x == 0.0));

    // A stream of the wrong device is a typed error, on either side.
    assert_eq!(
        copy_peer(&b, &src, &b, &mut dst.slice_mut(0..0).unwrap()).unwrap_err(),
        MemoryError::LengthMismatch { src: 333, dst: 0 }
    );
    let wrong_stream = [
        ("to_vec", to_vec(&b, &src).map(drop), (1, 0)),
        (
            "copy_dtod",
            copy_dtod(&a, &src.slice(0..100).unwrap(), &mut dst),
            (0, 1),
        ),
    ];
    for (call, result, (stream, device)) in wrong_stream {
        let want = MemoryError::StreamDevice { stream, device };
        assert_eq!(result.unwrap_err(), want, "{call}");
    }
}

#[test]
fn pinned_uploads_copy_the_callers_pinned_bytes_without_staging() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let host = ramp(37);
    let mut pinned = xpu_alloc::host::host_allocate_on(0, 37 * 4).unwrap();
    pinned.copy_from_slice(bytemuck::cast_slice(&host));
    let mut buf = DeviceBuffer::<f32>::zeroed(40, &s).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    copy_htod_pinned(&s, &pinned, &mut buf.slice_mut(3..).unwrap()).unwrap();
    drop(pinned); // safe: the block is not reused before the gated copy ran
    gate.open().unwrap();
    let v = buf.to_vec(&s).unwrap();
    assert_eq!(v[..3], [0.0; 3]);
    assert_eq!(v[3..], host[..]);
    let short = xpu_alloc::host::host_allocate_on(0, 7).unwrap();
    assert_eq!(
        copy_htod_pinned(&s, &short, &mut buf).unwrap_err(),
        MemoryError::PinnedLength {
            bytes: 7,
            expected: 160
        }
    );
}

/// A non-blocking download into the caller's pinned memory: held behind a gate, the copy has
/// not run when the call returns; reading the pinned bytes waits for it, and they are the
/// elements; a block under a queued copy is not handed out again.
#[test]
fn pinned_downloads_are_waited_for_by_the_reader() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let host = ramp(37);
    let buf = DeviceBuffer::<f32>::from_slice(&host, &s).unwrap();
    let mut pinned = xpu_alloc::host::host_allocate_on(0, 34 * 4).unwrap();
    pinned.as_mut_slice().fill(0xAB);
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    copy_dtoh_pinned(&s, &buf.slice(3..).unwrap(), &mut pinned).unwrap();
    // The gate opens once the read returned, or after 300 ms while it waits: a read that did
    // not wait sees the 0xAB bytes (the gated copy has not run).
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let bytes = std::thread::scope(|scope| {
        scope.spawn(move || {
            let _ = done_rx.recv_timeout(std::time::Duration::from_millis(300));
            gate.open().unwrap();
        });
        let bytes = pinned.as_slice().to_vec();
        let _ = done_tx.send(());
        bytes
    });
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), &host[3..]);
    // Dropped while a second gated copy is queued: the block is not handed out again first.
    let mut again = xpu_alloc::host::host_allocate_on(0, 34 * 4).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    copy_dtoh_pinned(&s, &buf.slice(..34).unwrap(), &mut again).unwrap();
    let at = again.address();
    drop(again);
    let other = xpu_alloc::host::host_allocate_on(0, 34 * 4).unwrap();
    assert_ne!(
        other.address(),
        at,
        "a block under a queued copy was handed out again"
    );
    gate.open().unwrap();
    s.synchronize().unwrap();
    let mut short = xpu_alloc::host::host_allocate_on(0, 7).unwrap();
    assert_eq!(
        copy_dtoh_pinned(&s, &buf, &mut short).unwrap_err(),
        MemoryError::PinnedLength {
            bytes: 7,
            expected: 148
        }
    );
}

// Byte-offset overflow of a user's region, and pinned host copies on another stream.

/// A region (of a user's `DeviceRegion` impl) whose element offset overflows in bytes: the
/// typed copies refuse it with an error from the block's range check instead of panicking
/// on the overflow in `DeviceRegion::byte_offset` (it used to panic: "attempt to multiply
/// with overflow").
#[test]
fn a_region_whose_byte_offset_overflows_is_an_error_not_a_panic() {
    let Some(s) = xpu_testing::devices(1).then(|| xpu_stream::get_stream_from_pool(0, 0).unwrap())
    else {
        return;
    };
    let buf = DeviceBuffer::<f32>::from_slice(&[1.0; 16], &s).unwrap();
    let region = Claimed {
        ptr: buf.data_ptr(),
        offset: usize::MAX / 2,
        len: 1,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut out = [0f32; 1];
        xpu_kernel::memory::copy_dtoh(&s, &region, &mut out)
    }));
    let r = r.unwrap_or_else(|p| {
        panic!(
            "copy_dtoh panicked: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or(p.downcast_ref::<&str>().copied())
        )
    });
    assert!(
        matches!(r, Err(MemoryError::Alloc(AllocError::OutOfRange { .. }))),
        "{r:?}"
    );
    assert_eq!(buf.to_vec(&s).unwrap(), vec![1.0; 16]);
}

/// xpu-host's whole-allocation pinned copies (`HostCopy::copy_from_host` /
/// `copy_to_host`) on a stream other than a `DataPtr`'s allocation stream record that
/// stream on the device block (as the typed copies do): freeing the pointer while the copy is
/// held back by a gate does not hand its block to a new allocation on the allocation stream,
/// so the late copy cannot land in (or read) the new owner's bytes. Before, the block was
/// reused at once and the gated upload overwrote the new allocation.
#[test]
fn pinned_host_copies_on_another_stream_record_it_on_the_device_block() {
    use xpu_alloc::host::{host_allocate_on, HostCopy};
    let Some((s1, s2, _queues)) = xpu_testing::devices(1).then(|| {
        let q1 = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
        let q2 = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
        (q1.stream(), q2.stream(), (q1, q2))
    }) else {
        return;
    };
    const BYTES: usize = 4096;
    for upload in [true, false] {
        let p = xpu_alloc::allocate(BYTES as u64, &s1).unwrap();
        p.view().unwrap().write(&s1, 0, &[0x22; BYTES]).unwrap();
        let mut host = host_allocate_on(0, BYTES).unwrap();
        host.as_mut_slice().fill(0xAB);
        let gate = xpu_event::Gate::new(0).unwrap();
        gate.block(&s2).unwrap();
        if upload {
            s2.copy_from_host(&host, &p).unwrap();
        } else {
            s2.copy_to_host(&p, &mut host).unwrap();
        }
        let old = p.address();
        drop(p);
        // s1 is idle: a block freed without a record of s2 is reusable here at once.
        let q = xpu_alloc::allocate(BYTES as u64, &s1).unwrap();
        let reused = q.address() == old;
        q.view().unwrap().write(&s1, 0, &[0x11; BYTES]).unwrap();
        gate.open().unwrap();
        s2.synchronize().unwrap();
        let mut back = vec![0u8; BYTES];
        q.view().unwrap().read(&s1, 0, &mut back).unwrap();
        let what = if upload {
            "copy_from_host"
        } else {
            "copy_to_host"
        };
        assert!(
            !reused,
            "{what}: the block was reused while the gated copy on another stream was queued"
        );
        assert!(
            back.iter().all(|&b| b == 0x11),
            "{what}: the new allocation changed"
        );
        if !upload {
            assert!(
                host.iter().all(|&b| b == 0x22),
                "{what}: read the reused block"
            );
        }
    }
}
