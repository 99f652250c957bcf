//! The copy seam of the OpenCL backend (`ClBackend::enqueue_copy`, stage 1 of
//! `docs/relocation.md`) on a real OpenCL device (PoCL in CI): `clEnqueueCopyBuffer` between
//! segments of a `BufferSource` (written and read by their owner, the test), exact bytes
//! read back; the runtime's own refusals
//! (out-of-range, overlapping ranges of one buffer) before any driver call; stream order
//! made deterministic with a user-event gate. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`. No sleeps.

mod common;

use xpu_alloc::{
    BufferMemory, BufferSource, ClBackend, ClStream, SegmentMemory, SegmentSource, SourceSegment,
    StreamRef,
};
use xpu_caching::{Backend, CopyEnd, CopyError};
use xpu_event::{Gate, StreamExt};
use xpu_stream::{ExternalStream, StreamError};

use common::fresh_stream;

/// Bytes whose value changes with every position, with no short period (a copy landing at a
/// wrong offset, even by a multiple of 256, reads back different).
fn bytes(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let i = u32::try_from(i).expect("test sizes fit u32");
            i.wrapping_add(seed)
                .wrapping_mul(0x9E37_79B1)
                .rotate_right(11)
                .to_le_bytes()[0]
        })
        .collect()
}

/// A device stream on a queue of its own (gating it holds back no other test), as the
/// allocator sees it; `None` without a device.
fn device_stream() -> Option<(ExternalStream, StreamRef)> {
    if !xpu_testing::devices(1) {
        return None;
    }
    let external = fresh_stream(0);
    let shared = ClStream::try_shared(external.stream()).expect("live stream");
    Some((external, shared))
}

/// A segment of `size` bytes from device 0's buffer source, as the allocator gets one.
fn segment(source: &BufferSource, size: u64) -> SourceSegment {
    source.allocate(size).expect("segment")
}

fn memory(segment: &mut SourceSegment) -> &mut BufferMemory {
    match &mut segment.memory {
        SegmentMemory::Buffer(memory) => memory,
        SegmentMemory::Simulated(_) => panic!("a BufferSource segment is a buffer"),
    }
}

/// A blocking write by the segment's owner (the test: no allocator holds it).
fn write(stream: &ExternalStream, segment: &mut SourceSegment, offset: usize, data: &[u8]) {
    let queue = stream.stream().queue().expect("queue");
    memory(segment).write(&queue, offset, data).expect("write");
}

fn read(stream: &ExternalStream, segment: &mut SourceSegment) -> Vec<u8> {
    let memory = memory(segment);
    let mut out = vec![0; memory.size()];
    let queue = stream.stream().queue().expect("queue");
    memory.read(&queue, 0, &mut out).expect("read");
    out
}

const SEG: usize = 256 * 1024;

#[test]
fn a_copy_between_two_segments_moves_exactly_the_range() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let (mut a, mut b) = (segment(&source, SEG as u64), segment(&source, SEG as u64));
    let (src, dst) = (bytes(1, SEG), bytes(2, SEG));
    write(&s, &mut a, 0, &src);
    write(&s, &mut b, 0, &dst);

    // Unaligned offsets and length, the source range ending at the segment's last byte.
    let (from, to, len) = (SEG - 70_001, 12_345, 70_001);
    ClBackend::enqueue_copy(
        &shared,
        &a.memory,
        from as u64,
        &b.memory,
        to as u64,
        len as u64,
    )
    .expect("copy");
    // A copy of 0 bytes at the very end of both: nothing to do, Ok.
    ClBackend::enqueue_copy(&shared, &a.memory, SEG as u64, &b.memory, SEG as u64, 0)
        .expect("empty copy");
    // The blocking read is ordered after the copy on the stream's in-order queue.
    let mut expected = dst;
    expected[to..to + len].copy_from_slice(&src[from..]);
    assert!(read(&s, &mut b) == expected, "destination bytes differ");
    assert!(read(&s, &mut a) == src, "the source is unchanged");
    source.free(a);
    source.free(b);
}

#[test]
fn a_copy_between_disjoint_ranges_of_one_segment() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let mut a = segment(&source, SEG as u64);
    let data = bytes(3, SEG);
    write(&s, &mut a, 0, &data);

    let mut expected = data;
    // Forward, touching: [1000, 9000) -> [9000, 17000).
    ClBackend::enqueue_copy(&shared, &a.memory, 1000, &a.memory, 9000, 8000).expect("forward");
    expected.copy_within(1000..9000, 9000);
    // Backward, far apart, after the first copy on the stream (it reads what that one wrote).
    ClBackend::enqueue_copy(&shared, &a.memory, 9001, &a.memory, 100_003, 7999).expect("backward");
    expected.copy_within(9001..17_000, 100_003);
    assert!(read(&s, &mut a) == expected, "segment bytes differ");
    source.free(a);
}

#[test]
fn overlapping_ranges_of_one_segment_are_refused_before_the_driver() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let mut a = segment(&source, SEG as u64);
    let data = bytes(4, SEG);
    write(&s, &mut a, 0, &data);

    for (from, to) in [(0, 4096), (4096, 0), (512, 512), (0, 8191)] {
        let refused = ClBackend::enqueue_copy(&shared, &a.memory, from, &a.memory, to, 8192)
            .expect_err("overlap");
        // The runtime's own error, not the driver's CL_MEM_COPY_OVERLAP in `Device`: no
        // command was enqueued.
        assert_eq!(
            refused,
            CopyError::Overlap {
                src_offset: from,
                dst_offset: to,
                len: 8192
            }
        );
    }
    // Another handle to the same buffer would be the same memory object, which the copy
    // check refuses too (`ClBackend::enqueue_copy` compares the `cl_mem`s); safe code cannot
    // make one: a segment's buffer is exclusive (`ExclusiveBuffer`).
    assert!(read(&s, &mut a) == data, "nothing was copied");
    source.free(a);
}

#[test]
fn ranges_out_of_either_segment_are_refused_before_the_driver() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let (mut a, mut b) = (segment(&source, SEG as u64), segment(&source, 4096));
    let (src, dst) = (bytes(5, SEG), bytes(6, 4096));
    write(&s, &mut a, 0, &src);
    write(&s, &mut b, 0, &dst);
    let copy = |from: u64, to: u64, len: u64| {
        ClBackend::enqueue_copy(&shared, &a.memory, from, &b.memory, to, len)
    };

    // Inside the 256 KiB source, one byte past the 4 KiB destination.
    assert_eq!(
        copy(0, 1, 4096),
        Err(CopyError::OutOfRange {
            end: CopyEnd::Destination,
            offset: 1,
            len: 4096,
            size: 4096
        })
    );
    // One byte past the source.
    assert_eq!(
        copy(SEG as u64 - 99, 0, 100),
        Err(CopyError::OutOfRange {
            end: CopyEnd::Source,
            offset: SEG as u64 - 99,
            len: 100,
            size: SEG as u64
        })
    );
    // offset + len overflowing u64, and an empty range past the end: refused, no panic.
    assert!(matches!(
        copy(1, 0, u64::MAX),
        Err(CopyError::OutOfRange {
            end: CopyEnd::Source,
            ..
        })
    ));
    assert!(matches!(
        copy(0, 4097, 0),
        Err(CopyError::OutOfRange {
            end: CopyEnd::Destination,
            ..
        })
    ));
    // Simulated memory on a device stream: refused, not guessed at.
    let simulated = SegmentMemory::Simulated(xpu_caching::source::Simulated::new(0x1000, 4096));
    assert!(matches!(
        ClBackend::enqueue_copy(&shared, &a.memory, 0, &simulated, 0, 16),
        Err(CopyError::Unsupported(_))
    ));
    assert!(read(&s, &mut b) == dst, "nothing was copied");
    source.free(a);
    source.free(b);
}

/// Stream order, made deterministic by a user-event gate: the copies are enqueued behind the
/// gate without waiting, the marker and the event recorded after them stay incomplete until
/// the gate opens, and then both copies ran, in enqueue order.
#[test]
fn a_copy_runs_in_stream_order_behind_a_gate() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let (mut a, mut b, mut c) = (
        segment(&source, SEG as u64),
        segment(&source, SEG as u64),
        segment(&source, SEG as u64),
    );
    let (src, zeros) = (bytes(7, SEG), vec![0u8; SEG]);
    write(&s, &mut a, 0, &src);
    write(&s, &mut b, 0, &zeros);
    write(&s, &mut c, 0, &zeros);

    let gate = Gate::new(0).expect("gate");
    gate.block(&s.stream()).expect("block");
    ClBackend::enqueue_copy(&shared, &a.memory, 0, &b.memory, 0, SEG as u64).expect("a -> b");
    // Enqueued after the first copy: it must copy what the first one wrote into `b`.
    ClBackend::enqueue_copy(&shared, &b.memory, 0, &c.memory, 0, SEG as u64).expect("b -> c");
    let marker = ClBackend::record_marker(&shared).expect("marker");
    let event = s.stream().record_event().expect("event");
    assert!(
        !ClBackend::marker_complete(&marker),
        "the gate holds the copies"
    );
    assert!(!event.query().expect("query"), "the gate holds the copies");
    // The enqueue calls returned with the gate closed: they did not wait for the copies.

    gate.open().expect("open");
    ClBackend::wait(&marker).expect("wait");
    assert!(ClBackend::marker_complete(&marker));
    // The event was recorded after the marker: it completes after it, not necessarily with
    // it (asserting its query right after the marker's wait failed once under load).
    event.synchronize().expect("event");
    assert!(read(&s, &mut b) == src, "a -> b");
    assert!(read(&s, &mut c) == src, "b -> c ran after a -> b");
    source.free(a);
    source.free(b);
    source.free(c);
}

/// A stream a graph is capturing refuses the copy (`Stream::enqueue_queue`), as it refuses
/// every direct enqueue: the error is the stream's, kept typed.
#[test]
fn a_capturing_stream_refuses_the_copy() {
    let Some((s, shared)) = device_stream() else {
        return;
    };
    let source = BufferSource::new(0).expect("source");
    let a = segment(&source, 4096);
    let capture = xpu_stream::CaptureGuard::begin(&s.stream()).expect("capture");
    let refused = ClBackend::enqueue_copy(&shared, &a.memory, 0, &a.memory, 2048, 1024);
    drop(capture);
    match refused {
        Err(CopyError::Device(failure)) => assert!(
            matches!(
                failure.downcast_ref::<StreamError>(),
                Some(StreamError::Capturing { .. })
            ),
            "{failure:?}"
        ),
        other => panic!("a copy on a capturing stream: {other:?}"),
    }
    source.free(a);
}
