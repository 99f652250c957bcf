//! Stream-ordered correctness on a real OpenCL device (PoCL in CI): a recorded use
//! survives its stream, `empty_cache` waits for queued work, driver error classes. Skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_alloc::{
    AllocConfig, AllocError, BufferSource, DataPtr, DeviceAllocator, DeviceCore, HookedSource,
    ReleasePolicy, SegmentSource, SourceError, SourceHooks,
};
use xpu_event::Event;
use xpu_event::Gate;
use xpu_stream::{ExternalStream, Stream};

use common::{fresh_stream, MIB};

fn device() -> bool {
    xpu_testing::devices(1)
}

/// A private allocator of device 0 with a block `x` of `len` bytes allocated on a
/// [`fresh_stream`]; `None` (the test is skipped) without a device.
fn block_on_fresh_stream(len: u64) -> Option<(DeviceAllocator, ExternalStream, DataPtr)> {
    device().then(|| {
        let alloc = private("");
        let s = fresh_stream(0);
        let x = alloc.allocate(len, &s.stream()).unwrap();
        (alloc, s, x)
    })
}

/// Gates `stream`, enqueues on it a copy of the first MiB of `x` into a block of `outs`
/// ([`copy_out`]) and frees `x`: queued work reads `x`'s segment until the returned gate
/// opens. Returns the gate, the copy's block and the event recorded after the copy.
fn free_under_a_gated_read(
    x: DataPtr,
    stream: &Stream,
    outs: &DeviceAllocator,
) -> (Gate, DataPtr, Event) {
    let gate = Gate::new(0).unwrap();
    gate.block(stream).unwrap();
    let (out, copy) = copy_out(&x, stream, outs, MIB);
    drop(x);
    (gate, out, copy)
}

/// Fills all of `x` with `0xAA` on `d`, then gates `e` and enqueues on it a copy of `x` into
/// a block of `outs` ([`copy_out`]), recorded on `e` with `record_stream`: `x` has a pending
/// use on `e` until the returned gate opens. Returns the gate, the copy's block and the event
/// recorded after the copy.
fn fill_then_gated_recorded_read(
    alloc: &DeviceAllocator,
    x: &DataPtr,
    d: &Stream,
    e: &Stream,
    outs: &DeviceAllocator,
) -> (Gate, DataPtr, Event) {
    let len = x.size();
    x.view()
        .unwrap()
        .write(d, 0, &vec![0xAA; len as usize])
        .unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(e).unwrap();
    let (out, read) = copy_out(x, e, outs, len);
    alloc.record_stream(x, e).unwrap();
    (gate, out, read)
}

/// Opens `gate`, waits for the gated copy (`read`) and returns what it copied into `out`
/// (read back on `d`).
fn open_and_read(gate: Gate, read: &Event, out: &DataPtr, d: &Stream) -> Vec<u8> {
    gate.open().unwrap();
    read.synchronize().unwrap();
    let mut seen = vec![0u8; out.size() as usize];
    out.view().unwrap().read(d, 0, &mut seen).unwrap();
    seen
}

fn private(config: &str) -> DeviceAllocator {
    DeviceAllocator::new(0, AllocConfig::parse(config).unwrap()).unwrap()
}

/// Enqueues on `stream` a copy of `len` bytes of `src` into a block of the separate allocator
/// `out_alloc` (so it counts in no statistic of the allocator under test); returns that block
/// and an event recorded after the copy.
fn copy_out(
    src: &DataPtr,
    stream: &Stream,
    out_alloc: &DeviceAllocator,
    len: u64,
) -> (DataPtr, Event) {
    let out = out_alloc.allocate(len, stream).unwrap();
    out.view()
        .unwrap()
        .copy_from(stream, &src.view().unwrap(), 0, 0, len as usize)
        .unwrap();
    let mut done = Event::new(Default::default());
    done.record(stream).unwrap();
    stream.queue().unwrap().flush().unwrap();
    (out, done)
}

/// Allocate X on D; gated stream E reads X; record_stream(X, E); drop E; drop X; allocate
/// the same size on D and fill it: E's read must still see X's contents.
#[test]
fn recorded_use_on_a_dropped_stream_still_orders_reuse() {
    const N: u64 = 64 * 1024;
    let Some((alloc, d, x)) = block_on_fresh_stream(N) else {
        return;
    };
    let e = fresh_stream(0);
    let x_addr = x.address();
    let outs = private("");
    let (gate, out, read) =
        fill_then_gated_recorded_read(&alloc, &x, &d.stream(), &e.stream(), &outs);
    drop(e);
    drop(x);
    let y = alloc.allocate(N, &d.stream()).unwrap();
    let reused = y.address() == x_addr;
    y.view()
        .unwrap()
        .write(&d.stream(), 0, &vec![0x55; N as usize])
        .unwrap();
    let seen = open_and_read(gate, &read, &out, &d.stream());
    assert!(
        seen.iter().all(|&b| b == 0xAA),
        "E's gated read saw D's fill (block reused at once: {reused})"
    );
    assert!(!reused);
}

/// The thread's freed-block cache holds blocks of D's size (a pair first); X of that size
/// is read by gated stream E (record_stream) and dropped: the next allocations of that
/// size on D, served by the thread's cache when they can be, never get X before E's read
/// completes, and E's read sees X's contents.
#[test]
fn a_block_freed_with_a_pending_recorded_use_is_not_handed_out_from_the_thread_cache() {
    if !device() {
        return;
    }
    const N: u64 = 64 * 1024;
    let alloc = private("");
    let d = fresh_stream(0);
    let e = fresh_stream(0);
    drop(alloc.allocate(N, &d.stream()).unwrap()); // the thread's bin of (D, N)
    let x = alloc.allocate(N, &d.stream()).unwrap();
    let x_addr = x.address();
    let outs = private("");
    let (gate, out, read) =
        fill_then_gated_recorded_read(&alloc, &x, &d.stream(), &e.stream(), &outs);
    drop(x);
    let mut reused = false;
    for _ in 0..3 {
        let y = alloc.allocate(N, &d.stream()).unwrap();
        reused |= y.address() == x_addr;
        y.view()
            .unwrap()
            .write(&d.stream(), 0, &vec![0x55; N as usize])
            .unwrap();
    }
    let seen = open_and_read(gate, &read, &out, &d.stream());
    assert!(!reused, "X handed out again while E's read was queued");
    assert!(
        seen.iter().all(|&b| b == 0xAA),
        "E's gated read saw D's fill"
    );
}

/// Gate stream S; S copies from X; drop X; `empty_cache` must not release X's segment
/// while that copy is queued (reserved stays 24 MiB until the work completes).
#[test]
fn empty_cache_waits_for_queued_work_on_the_segment() {
    let Some((alloc, s, x)) = block_on_fresh_stream(12 * MIB) else {
        return;
    };
    let _keep = alloc.allocate(12 * MIB, &s.stream()).unwrap();
    assert_eq!(alloc.core().memory_reserved(), 24 * MIB);
    let outs = private("");
    let (gate, _out, copy) = free_under_a_gated_read(x, &s.stream(), &outs);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let core = alloc.core().clone();
        scope.spawn(move || {
            core.empty_cache();
            let _ = tx.send(core.memory_reserved());
        });
        // A correct empty_cache cannot return before the gate opens, whatever the timing.
        let early = rx.recv_timeout(Duration::from_millis(300)).ok();
        let during = alloc.core().memory_reserved();
        gate.open().unwrap();
        assert_eq!(
            early, None,
            "empty_cache returned while a queued copy still reads the segment"
        );
        assert_eq!(during, 24 * MIB, "reserved while the work is queued");
        assert_eq!(rx.recv().unwrap(), 12 * MIB);
    });
    copy.synchronize().unwrap();
}

#[test]
fn buffer_source_reports_a_size_above_the_max_allocation_as_too_large() {
    if !device() {
        return;
    }
    let source = BufferSource::new(0).unwrap();
    let max = source.max_alloc_size();
    let err = source.allocate(max + 512).unwrap_err();
    assert!(
        matches!(err, SourceError::TooLarge { size } if size == max + 512),
        "{err:?}"
    );
}

/// Hooks on device 0's buffers that claim a larger max allocation than the device's.
struct Claims;

impl SourceHooks<BufferSource> for Claims {
    fn total_memory(&self, inner: &BufferSource) -> u64 {
        inner.total_memory().max(inner.max_alloc_size() * 4)
    }
    fn max_alloc_size(&self, inner: &BufferSource) -> u64 {
        inner.max_alloc_size() * 2
    }
}

#[test]
fn a_request_the_driver_can_never_serve_is_too_large_without_retries() {
    if !device() {
        return;
    }
    let max = BufferSource::new(0).unwrap().max_alloc_size();
    // PyTorch's release rules: the subject is the retry after a refused segment. Under the
    // default `before_grow`, unsplit segments (NVIDIA's platform) release the idle 1 MiB
    // segment before growing, a policy release and no retry, which `num_device_free` counts
    // too (it failed on the H200 for that reason alone).
    let config = AllocConfig {
        release_policy: ReleasePolicy::OnOom,
        ..AllocConfig::default()
    };
    let core = DeviceCore::new(
        Box::new(HookedSource::new(BufferSource::new(0).unwrap(), Claims)),
        config,
    );
    let s = fresh_stream(0);
    let sr = xpu_alloc::ClStream::shared(s.stream());
    drop(core.allocate(MIB, &sr).unwrap());
    let err = core.allocate(max + 4 * MIB, &sr).unwrap_err();
    assert!(matches!(err, AllocError::TooLarge { .. }), "{err:?}");
    let st = core.memory_stats();
    assert_eq!(
        (st.num_alloc_retries, st.num_ooms, st.num_device_free),
        (0, 0, 0),
        "no free-and-retry for a request that can never fit"
    );
    let segment = if xpu_alloc::device_splits_segments(0).unwrap() {
        2 * MIB
    } else {
        MIB
    };
    assert_eq!(core.memory_reserved(), segment, "the cache was kept");
}

/// As `empty_cache`: dropping an allocator releases a segment only once the work queued
/// on its stream has completed (the drop waits for it).
#[test]
fn dropping_an_allocator_waits_for_queued_work_on_its_segments() {
    let Some((alloc, s, x)) = block_on_fresh_stream(12 * MIB) else {
        return;
    };
    let outs = private("");
    let (gate, _out, copy) = free_under_a_gated_read(x, &s.stream(), &outs);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            drop(alloc);
            let _ = tx.send(());
        });
        // A correct drop cannot return before the gate opens, whatever the timing.
        let early = rx.recv_timeout(Duration::from_millis(300)).is_ok();
        gate.open().unwrap();
        assert!(
            !early,
            "the allocator was dropped (its segments released) while a queued copy still reads one"
        );
        rx.recv().unwrap();
    });
    copy.synchronize().unwrap();
}

/// A block used on stream E (`record_stream`) is freed while E holds, in order: a fill of the
/// block (queued behind gate A), then a barrier on gate B. B then fails: PoCL fails the
/// later commands at once (the barrier and the free marker after it) while the fill stays
/// queued behind A. The failed marker says nothing about the fill, so the block must stay
/// out of the cache: a new allocation must not get it, and the fill that runs when A opens
/// must not overwrite the new owner's bytes.
/// Before: a marker with an error status counted as complete (`is_complete().unwrap_or(true)`),
/// the block went to the next allocation of its size, and A's fill overwrote its bytes.
#[test]
fn a_failed_free_marker_keeps_the_block_out_of_the_cache_while_earlier_work_is_queued() {
    const N: usize = 64 * 1024;
    let Some((alloc, d, x)) = block_on_fresh_stream(N as u64) else {
        return;
    };
    let e = fresh_stream(0);
    let x_addr = x.address();
    let a = Gate::new(0).unwrap();
    a.block(&e.stream()).unwrap();
    x.view().unwrap().fill(&e.stream(), &[0xEE], 0, N).unwrap();
    let b = Gate::new(0).unwrap();
    b.block(&e.stream()).unwrap();
    alloc.record_stream(&x, &e.stream()).unwrap();
    // The free marker is recorded on E, behind B's barrier.
    drop(x);
    b.as_cl_event().set_failed(-5).unwrap();
    let y = alloc.allocate(N as u64, &d.stream()).unwrap();
    let reused = y.address() == x_addr;
    y.view()
        .unwrap()
        .write(&d.stream(), 0, &vec![0x55; N])
        .unwrap();
    a.open().unwrap();
    // E's marker waited on the failed event: NVIDIA's clFinish then reports the failure
    // (CL_OUT_OF_RESOURCES), PoCL's does not; either way E's queue is drained, which is all
    // this needs before reading the new owner's bytes.
    let _ = e.stream().synchronize();
    let mut seen = vec![0u8; N];
    y.view().unwrap().read(&d.stream(), 0, &mut seen).unwrap();
    let overwritten = seen.iter().filter(|&&v| v != 0x55).count();
    assert_eq!(
        overwritten, 0,
        "the queued fill overwrote the new owner's bytes (block reused: {reused})"
    );
    assert!(
        !reused,
        "the block was reused while the fill on it was queued"
    );
}
