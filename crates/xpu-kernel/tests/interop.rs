//! Foreign OpenCL code on xpu's streams and caching-allocator blocks (PoCL in CI). The
//! "foreign library" here is raw OpenCL through `xpu_device`'s unsafe API, as a C library
//! would use it: it gets the stream's raw queue and the regions' raw `cl_mem`s, and returns
//! an owned `cl_event`. CLBlast itself runs in `crates/xpu/examples/clblast_gemm.rs`.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use xpu_device::backend::{Buffer, CommandQueue};
use xpu_event::test_support::Gate;
use xpu_kernel::{ClRegion, DeviceBuffer, ForeignExt, ForeignQueue, InteropError, StreamMemoryExt};
use xpu_testing::devices;

use common::{assert_block_not_reused, device0_stream, fresh_stream, fresh_streams, ramp, Claimed};

/// Held by every test of this file: they assert the device's allocated bytes
/// (`xpu_alloc::memory_allocated`), which the other tests' allocations would move when
/// `cargo test` runs them on threads of one process.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn a_region_is_the_exact_block_with_offsets_in_elements() {
    let _serial = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut buf = DeviceBuffer::from_slice(&ramp(1000), &s).unwrap();
    // The region names the block's segment buffer and counts its offset from the segment's
    // first byte, as kernels take blocks (no sub-buffer).
    let (segment_mem, at) = buf.data_ptr().cl_mem_and_offset().unwrap();
    let subs = xpu_device::live_objects().sub_buffers;
    let mut view = buf.slice_mut(10..300).unwrap();
    let region = ClRegion::new_mut(&mut view).unwrap();
    assert_eq!(
        xpu_device::live_objects().sub_buffers,
        subs,
        "no sub-buffer made"
    );
    assert_eq!(at % 4, 0);
    assert_eq!((region.offset(), region.len()), (at as usize / 4 + 10, 290));
    assert_eq!(region.cl_mem(), segment_mem);
    assert!(region.is_writable());
    let block_size = (at as usize) + 4000;
    let (mem, offset) = (region.cl_mem(), region.offset());
    let library = |q: &ForeignQueue<'_>| {
        // SAFETY: `q.queue()` is the stream's live queue and `mem` a live buffer of at least
        // `block_size` bytes (the segment, which holds the block's 4000 at `at`), both valid
        // during the call.
        let (queue, buffer) = unsafe {
            (
                CommandQueue::from_raw_borrowed(q.queue()).map_err(|_| -1)?,
                Buffer::from_raw_retained(mem, block_size).map_err(|_| -2)?,
            )
        };
        let data: Vec<u8> = [100.0f32, 101.0, 102.0, 103.0, 104.0]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        queue.write(&buffer, offset * 4, &data).map_err(|_| -3)?;
        Ok(None)
    };
    // SAFETY: `library` writes 5 floats at elements 10..15 of the region's buffer (inside
    // the region, which is writable), on the given queue, blocking; it keeps no handle.
    let event = unsafe { s.foreign().uses_elements(&region, 5).unwrap().call(library) }.unwrap();
    event.synchronize().unwrap();
    let mut want = ramp(1000);
    want[10..15].copy_from_slice(&[100.0, 101.0, 102.0, 103.0, 104.0]);
    assert_eq!(buf.to_vec(&s).unwrap(), want);
}

#[test]
fn offsets_beyond_a_library_index_type_are_refused() {
    let _serial = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::<u8>::zeroed(200, &s).unwrap();
    let view = buf.slice(100..150).unwrap();
    let region = ClRegion::new(&view).unwrap();
    assert_eq!(region.offset_as::<i32>().unwrap(), 100);
    assert_eq!(region.offset_as::<usize>().unwrap(), 100);
    match region.offset_as::<i8>() {
        Err(InteropError::OffsetOverflow {
            offset: 100,
            end: 150,
            ty: "i8",
            ..
        }) => {}
        other => panic!("expected OffsetOverflow, got {other:?}"),
    }
    let low = buf.slice(0..127).unwrap();
    assert_eq!(ClRegion::new(&low).unwrap().offset_as::<i8>().unwrap(), 0);
}

#[test]
fn an_over_long_matrix_is_refused_before_the_library_sees_it() {
    let _serial = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut a = DeviceBuffer::<f32>::zeroed(100, &s).unwrap();
    let neighbour = DeviceBuffer::from_slice(&ramp(512), &s).unwrap();
    let region = ClRegion::new_mut(&mut a).unwrap();
    let ran = AtomicBool::new(false);
    // 512 floats past a 100-float block: refused while building the call.
    let refused = s.foreign().uses_elements(&region, 612).map(|call| {
        // SAFETY: never reached in a passing test; the closure touches nothing.
        unsafe {
            call.call(|_| {
                ran.store(true, Ordering::SeqCst);
                Ok(None)
            })
        }
    });
    match refused {
        Err(InteropError::RegionTooShort {
            needed: 612,
            len: 100,
            offset: 0,
        }) => {}
        other => panic!("expected RegionTooShort, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst));
    // The BLAS extent of a matrix: (rows - 1) * ld + cols.
    assert!(region.require_matrix(10, 10, 10).is_ok());
    assert!(matches!(
        region.require_matrix(16, 16, 32),
        Err(InteropError::RegionTooShort { needed: 496, .. })
    ));
    assert!(matches!(
        region.require_matrix(2, 8, 4),
        Err(InteropError::RegionTooShort {
            needed: usize::MAX,
            ..
        })
    ));
    assert!(region.require_matrix(0, 1000, 1000).is_ok());
    assert_eq!(neighbour.to_vec(&s).unwrap(), ramp(512));
}

#[test]
fn a_foreign_event_is_an_event_that_other_streams_wait_for() {
    let _serial = serial();
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let gate = Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    let library = |q: &ForeignQueue<'_>| {
        // SAFETY: `q.queue()` is the stream's live queue during the call.
        let queue = unsafe { CommandQueue::from_raw_borrowed(q.queue()) }.map_err(|_| -1)?;
        let marker = queue.enqueue_marker(&[]).map_err(|_| -2)?;
        Ok(Some(marker.into_raw()))
    };
    // SAFETY: `library` enqueues one marker on the given queue and hands over its one
    // reference; it touches no memory and keeps no handle.
    let foreign = unsafe { s1.foreign().call(library) }.unwrap();
    assert!(foreign.is_recorded());
    assert_eq!(foreign.stream().map(|s| s.id()), Some(s1.id()));
    assert!(foreign.flags().enable_timing, "the queue profiles");
    assert!(
        !foreign.query().unwrap(),
        "the marker is behind the closed gate"
    );

    let mut out = DeviceBuffer::<u32>::zeroed(64, &s2).unwrap();
    foreign.wait(&s2).unwrap();
    s2.memset_zeros(&mut out).unwrap();
    xpu_kernel::memory::fill(&s2, &mut out, 9).unwrap();
    let mut after = xpu_event::Event::timing();
    after.record(&s2).unwrap();
    for _ in 0..3 {
        assert!(
            !after.query().unwrap(),
            "stream 2 ran past the foreign event"
        );
    }
    gate.open().unwrap();
    after.synchronize().unwrap();
    assert!(foreign.query().unwrap());
    assert_eq!(out.to_vec(&s2).unwrap(), vec![9; 64]);
    assert!(foreign.elapsed_time(&after).unwrap() >= 0.0);

    if devices(2) {
        let other = fresh_stream(1);
        let other = other.stream();
        foreign.wait(&other).unwrap();
        other.synchronize().unwrap();
    }
}

#[test]
fn a_foreign_call_records_blocks_of_other_streams_and_frees_its_workspace_stream_ordered() {
    let _serial = serial();
    let Some(([s0, s1], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let n = 1 << 16;
    let buf = DeviceBuffer::<u32>::zeroed(n, &s0).unwrap();
    s0.synchronize().unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    let region = ClRegion::new(&buf).unwrap();
    let before = xpu_alloc::memory_allocated(0).unwrap();
    let seen = std::sync::Mutex::new((0u64, 0usize));
    // SAFETY: the closure only reads the allocator statistics and the workspace's length.
    let event = unsafe {
        s1.foreign()
            .uses(&region)
            .unwrap()
            .workspace(3000)
            .call(|q| {
                let ws = q.workspace().expect("3000 bytes asked");
                *seen.lock().unwrap() = (xpu_alloc::memory_allocated(0).unwrap(), ws.len());
                Ok(None)
            })
    }
    .unwrap();
    let (during, ws_len) = *seen.lock().unwrap();
    assert_eq!(ws_len, 3000);
    assert!(
        during >= before + 3000,
        "the workspace is counted by the caching allocator ({before} -> {during})"
    );
    assert_eq!(xpu_alloc::memory_allocated(0).unwrap(), before);
    assert_block_not_reused(buf, &s0, &gate, "the foreign call on stream 1");
    event.synchronize().unwrap();
}

#[test]
fn a_library_failure_is_a_typed_error() {
    let _serial = serial();
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    // SAFETY: the closure does nothing.
    let err = unsafe { s.foreign().call(|_| Err(-1011)) }.unwrap_err();
    assert!(
        matches!(err, InteropError::Library { code: -1011 }),
        "{err}"
    );
}

#[test]
fn an_event_of_another_device_or_queue_is_not_adopted_for_a_stream() {
    let _serial = serial();
    let Some(([s0, s1], _ext)) = fresh_streams([0, 1]) else {
        return;
    };
    let marker = s1.queue().unwrap().enqueue_marker(&[]).unwrap();
    let err = xpu_event::Event::from_cl_event(marker.clone(), &s0, Default::default()).unwrap_err();
    assert!(
        matches!(err, xpu_event::EventError::ForeignContext { device: 0 }),
        "{err}"
    );
    // Of the right device, but of another stream's queue.
    let s1b = fresh_stream(1);
    let err = xpu_event::Event::from_cl_event(marker.clone(), &s1b.stream(), Default::default())
        .unwrap_err();
    assert!(
        matches!(err, xpu_event::EventError::ForeignQueue { device: 1, .. }),
        "{err}"
    );
    let ok = xpu_event::Event::from_cl_event(marker, &s1, Default::default()).unwrap();
    ok.synchronize().unwrap();
    assert_eq!(ok.device(), Some(1));
}

// `ClRegion::new` checks a region against its allocation.

/// `ClRegion::new` checks the region against its allocation (element range within
/// `DataPtr::size`) rather than trusting the `DeviceRegion` impl, so `require` /
/// `require_matrix` (what `clblast_sgemm`'s safety rests on) hold for the memory really
/// there. A region claiming 2^20 elements of a 16-element allocation used to become a
/// `ClRegion` of 2^20 elements.
#[test]
fn a_region_beyond_its_allocation_is_refused() {
    let _serial = serial();
    if !xpu_testing::devices(1) {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let buf = DeviceBuffer::<f32>::from_slice(&[1.0; 16], &s).unwrap();
    for (offset, len) in [(0, 1 << 20), (10, 7), (17, 0), (usize::MAX / 2, 1)] {
        let claimed = Claimed {
            ptr: buf.data_ptr(),
            offset,
            len,
        };
        let r = ClRegion::new(&claimed).map(|r| r.len());
        assert!(
            matches!(
                &r,
                Err(InteropError::OutsideAllocation { offset: o, len: l, elements: 16 })
                    if (*o, *l) == (offset, len)
            ),
            "elements {offset}+{len} of 16: {r:?}"
        );
    }
    // The whole allocation and an empty range at its end are fine.
    for (offset, len) in [(0, 16), (16, 0), (3, 13)] {
        let claimed = Claimed {
            ptr: buf.data_ptr(),
            offset,
            len,
        };
        assert_eq!(ClRegion::new(&claimed).unwrap().len(), len);
    }
}
