//! Stream-ordered reuse and release in the caching device allocator: a block or segment used
//! on a stream whose work is held back (by a gate, or before a failed command) is neither
//! handed to a new owner nor given back to the device before that work is over, across
//! streams, threads, configurations, cache calls and devices; statistics return to zero
//! (review h26's findings and probes). Every test uses an allocator of its own.
//!
//! Review h26: defects of the caching allocator's stream order found by a newcomer, each
//! test failing on the reviewed commit (049add3). Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`; run on PoCL with `POCL_DEVICES="pthread pthread"`.
//!
//! Review h26: probes of the caching allocator's stream order across streams, threads,
//! configurations and devices that pass (kept as regression tests). A block used on a gated
//! stream B is freed; its next owner on stream A must not see B's held work land in its
//! bytes. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`; run on PoCL with
//! `POCL_DEVICES="pthread pthread"`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use xpu_alloc::{
    AllocConfig, BufferSource, ClStream, DeviceAllocator, DeviceCore, SegmentMemory, SegmentSource,
    SourceError, SourceSegment,
};
use xpu_event::{Event, Gate, StreamExt};
use xpu_stream::Stream;

use common::{fill, fresh_stream, read, KIB, MIB};

// ---- Review h26 ----

/// A user's segment source (safe code) that keeps the segments the allocator gives back and
/// hands them out again for the next request of their size, as a pooling source may: the
/// trait's contract lets it ("the allocator frees a segment only after the markers of every
/// stream that used its blocks completed ..., so the source may release the memory at
/// once").
struct Recycler {
    inner: BufferSource,
    spare: Mutex<Vec<SourceSegment>>,
    /// An event of the work that used the segments, and whether it was complete at each
    /// `free` (the test's probe).
    used_until: Mutex<Option<Event>>,
    complete_at_free: Mutex<Vec<bool>>,
}

impl SegmentSource for Recycler {
    type Memory = SegmentMemory;
    fn device(&self) -> usize {
        self.inner.device()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn total_memory(&self) -> u64 {
        self.inner.total_memory()
    }
    fn max_alloc_size(&self) -> u64 {
        self.inner.max_alloc_size()
    }
    fn base_addr_align(&self) -> u64 {
        self.inner.base_addr_align()
    }
    fn allocate(&self, size: u64) -> Result<SourceSegment, SourceError> {
        let mut spare = self.spare.lock();
        if let Some(at) = spare.iter().position(|s| s.size == size) {
            return Ok(spare.swap_remove(at));
        }
        drop(spare);
        self.inner.allocate(size)
    }
    fn free(&self, segment: SourceSegment) {
        if let Some(used) = &*self.used_until.lock() {
            self.complete_at_free.lock().push(used.query().unwrap());
        }
        self.spare.lock().push(segment);
    }
}

/// The release policy's consolidation (the default `release_policy:before_grow`) takes two
/// idle 12 MiB segments of stream S out and hands them back to the segment source during an
/// allocation, with S's work on them still queued (held by a gate): the source's `free` ran
/// without any wait for S (`ReleasedSegments::free` synchronized only when the source said
/// `free_needs_sync`, false by default). A source that reuses what it gets back then hands
/// one of them to stream T's next 12 MiB segment, and S's held fill lands in T's new block
/// when the gate opens. The source's contract says the allocator frees a segment only after
/// the work of every stream that used its blocks completed; `empty_cache` and the OOM path
/// wait so, the allocation's own releases (consolidation, garbage collection, oversize
/// release) did not. Now a source that does not say its free is deferred by the driver
/// (`free_needs_sync` defaults to true; OpenCL buffers and simulated memory say false) gets
/// the stream synchronized first: the 20 MiB allocation waits for S's held fill (the gate's
/// watchdog opens it after 3 s; before the fix `free` ran at once, with the gate closed).
#[test]
fn a_segment_released_during_an_allocation_is_given_back_only_after_its_streams_work() {
    if !xpu_testing::devices(1) {
        return;
    }
    let source = Arc::new(Recycler {
        inner: BufferSource::new(0).unwrap(),
        spare: Mutex::new(Vec::new()),
        used_until: Mutex::new(None),
        complete_at_free: Mutex::new(Vec::new()),
    });
    let core = DeviceCore::new(Box::new(source.clone()), AllocConfig::default());
    let (s, t) = (fresh_stream(0), fresh_stream(0));
    let (s, t) = (s.stream(), t.stream());
    let (sr, tr) = (ClStream::shared(s), ClStream::shared(t));
    // Two 12 MiB segments of S, each filled with 0xAA on S behind a gate, then freed.
    let a = core.allocate(12 * MIB, &sr).unwrap();
    let b = core.allocate(12 * MIB, &sr).unwrap();
    assert_eq!(core.memory_reserved(), 24 * MIB);
    let gate = Gate::with_open_limit(0, Duration::from_secs(3)).unwrap();
    gate.block(&s).unwrap();
    fill(&a, &s, 0xAA);
    fill(&b, &s, 0xAA);
    *source.used_until.lock() = Some(s.record_event().unwrap());
    drop((a, b));
    // 20 MiB on S would raise the reserved high-water mark: the two idle segments are
    // consolidated into one of 24 MiB (released to the source, then a new one).
    let c = core.allocate(20 * MIB, &sr).unwrap();
    assert_eq!(
        (source.spare.lock().len(), core.memory_reserved()),
        (2, 24 * MIB),
        "the two 12 MiB segments went back to the source"
    );
    assert_eq!(
        *source.complete_at_free.lock(),
        [true, true],
        "the source got S's segments back while S's fill on them was held by the gate"
    );
    // T's next segment of 12 MiB: the source hands back one of S's.
    let y = core.allocate(12 * MIB, &tr).unwrap();
    fill(&y, &t, 0x55);
    t.synchronize().unwrap();
    gate.open().unwrap();
    s.synchronize().unwrap();
    let seen = read(&y, &t);
    let overwritten = seen.iter().filter(|&&v| v != 0x55).count();
    assert_eq!(
        overwritten, 0,
        "{overwritten} bytes of T's new block were written by S's fill queued before its \
         segment was released"
    );
    drop((c, y));
}

/// A block used on stream E (a fill queued behind gate A) is freed after E also holds a
/// barrier on gate B that has failed. PoCL fails a command whose wait fails at once, while
/// the commands before it stay queued; a marker enqueued after the failed barrier reads
/// pending, but a wait for it (`clWaitForEvents`) returns at once with success and from then
/// on it reads `CL_COMPLETE` (checked: complete while the fill before it is still queued).
/// `empty_cache` waits so for the block's free marker, then frees the block: the next
/// allocation of the size on D gets it, and the fill that runs when A opens overwrites the
/// new owner's bytes. The OOM path's wait for every pending free, a shard's teardown and
/// `empty_cache`'s own release markers trust such a wait alike. (`device_order.rs` covers the free marker recorded
/// *before* the failure, which then fails and keeps the block out.) Fixed: each queue logs
/// the waits of its commands, and the allocator's markers are judged with them
/// (`OrderedMarker`): one after a failed wait reads failed, and the block stays out.
#[test]
fn a_free_marker_recorded_after_a_failed_command_does_not_release_the_block_early() {
    if !xpu_testing::devices(1) {
        return;
    }
    const N: u64 = 64 * 1024;
    let alloc = xpu_alloc::DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let (d, e) = (fresh_stream(0), fresh_stream(0));
    let (d, e) = (d.stream(), e.stream());
    // A live neighbour keeps the segment cached through `empty_cache`.
    let keep = alloc.allocate(N, &d).unwrap();
    let x = alloc.allocate(N, &d).unwrap();
    let x_at = x.address();
    // A driver that keeps the order (NVIDIA) makes `empty_cache` wait for the marker, hence
    // for A: its watchdog opens it after 5 s there. PoCL returns at once.
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).unwrap();
    a.block(&e).unwrap();
    fill(&x, &e, 0xEE);
    let b = Gate::new(0).unwrap();
    b.block(&e).unwrap();
    b.as_cl_event().set_failed(-5).unwrap();
    // The free marker is recorded on E after the failed barrier; `empty_cache` waits for
    // it (the wait returns at once, the marker then reads complete) and frees the block.
    drop(x);
    alloc.empty_cache();
    let y = alloc.allocate(N, &d).unwrap();
    let reused = y.address() == x_at;
    fill(&y, &d, 0x55);
    d.synchronize().unwrap();
    let _ = a.open();
    let _ = e.synchronize();
    let seen = read(&y, &d);
    let overwritten = seen.iter().filter(|&&v| v != 0x55).count();
    assert_eq!(
        (overwritten, reused),
        (0, false),
        "E's queued fill overwrote the new owner's bytes (bytes, block reused at once)"
    );
    drop(keep);
}

/// `empty_cache`'s own release marker, recorded on E after a barrier whose gate failed while
/// E's fill of the segment is still held by gate A, read complete at once on PoCL, and the
/// segment went back to the source (which may hand it out again) under the queued fill.
/// Now the release marker is judged with E's waits: it reads failed, and the segment is kept
/// out (not freed, still reserved).
#[test]
fn empty_cache_keeps_a_segment_whose_release_marker_follows_a_failed_command() {
    if !xpu_testing::devices(1) {
        return;
    }
    let source = Arc::new(Recycler {
        inner: BufferSource::new(0).unwrap(),
        spare: Mutex::new(Vec::new()),
        used_until: Mutex::new(None),
        complete_at_free: Mutex::new(Vec::new()),
    });
    let core = DeviceCore::new(Box::new(source.clone()), AllocConfig::default());
    let e = fresh_stream(0);
    let e = e.stream();
    let er = ClStream::shared(e);
    let x = core.allocate(12 * MIB, &er).unwrap();
    // As above: NVIDIA's `empty_cache` waits for A, opened by its watchdog there.
    let a = Gate::with_open_limit(0, Duration::from_secs(5)).unwrap();
    a.block(&e).unwrap();
    fill(&x, &e, 0xEE);
    *source.used_until.lock() = Some(e.record_event().unwrap());
    let b = Gate::new(0).unwrap();
    b.block(&e).unwrap();
    b.as_cl_event().set_failed(-5).unwrap();
    // Freed on its own stream: cached at once; `empty_cache` releases its idle segment after
    // a marker on E.
    drop(x);
    core.empty_cache();
    let given_back = source.complete_at_free.lock().clone();
    let reserved = core.memory_reserved();
    let _ = a.open();
    let _ = e.synchronize();
    assert_eq!(
        (given_back, reserved),
        (Vec::<bool>::new(), 12 * MIB),
        "the source got E's segment back while E's fill on it was held by gate A (complete at \
         each free; reserved bytes after empty_cache)"
    );
}

// ---- Review h26, probes that held ----

fn private(device: usize, config: &str) -> DeviceAllocator {
    DeviceAllocator::new(device, AllocConfig::parse(config).unwrap()).unwrap()
}

/// How many bytes of `bytes` differ from `byte`.
fn wrong(bytes: &[u8], byte: u8) -> usize {
    bytes.iter().filter(|&&b| b != byte).count()
}

/// x (`size` bytes, on A) gets a fill of 0xAA on B held back by a gate, and is freed; `between`
/// runs; then y (same size, on A, allocated and filled with 0x55 on another thread when
/// `other_thread`) is filled and read back once the gate opened. Returns how many of y's
/// bytes are not 0x55 (B's late fill landing in y), and whether y took x's place.
fn held_fill_then_reuse(
    alloc: &DeviceAllocator,
    size: u64,
    (a, b): (&Stream, &Stream),
    between: impl FnOnce(),
    other_thread: bool,
) -> (usize, bool) {
    let x = alloc.allocate(size, a).unwrap();
    fill(&x, a, 0x11);
    a.synchronize().unwrap();
    let gate = Gate::new(a.device()).unwrap();
    gate.block(b).unwrap();
    fill(&x, b, 0xAA);
    let x_at = x.address();
    drop(x);
    between();
    let reuse = || {
        let y = alloc.allocate(size, a).unwrap();
        fill(&y, a, 0x55);
        a.synchronize().unwrap();
        y
    };
    let y = if other_thread {
        std::thread::scope(|s| s.spawn(reuse).join().unwrap())
    } else {
        reuse()
    };
    let same = y.address() == x_at;
    gate.open().unwrap();
    b.synchronize().unwrap();
    (wrong(&read(&y, a), 0x55), same)
}

const CONFIGS: [&str; 3] = ["relocation:off", "", "relocation:merge_all"];
const SIZES: [u64; 3] = [64 * KIB, 4 * MIB, 24 * MIB];

/// The matrix: every relocation mode, a small, a large and an oversize-ish block, the next
/// owner on this thread and on another, both devices.
#[test]
fn a_block_with_held_work_on_another_stream_is_not_reused_early() {
    for device in 0..2 {
        if !xpu_testing::devices(device + 1) {
            return;
        }
        for config in CONFIGS {
            for size in SIZES {
                for other_thread in [false, true] {
                    let alloc = private(device, config);
                    let (a, b) = (fresh_stream(device), fresh_stream(device));
                    let (bad, same) = held_fill_then_reuse(
                        &alloc,
                        size,
                        (&a.stream(), &b.stream()),
                        || {},
                        other_thread,
                    );
                    assert_eq!(
                        (bad, same),
                        (0, false),
                        "device {device} config {config:?} size {size} other thread \
                         {other_thread}: bytes of y overwritten by B's held fill, y at x's place"
                    );
                }
            }
        }
    }
}

/// The same with a configuration change, a fraction change, `empty_cache` (on another thread:
/// it waits for B's held work) and a relocation-mode switch between the free and the reuse.
#[test]
fn held_work_survives_config_fraction_and_cache_calls_between_free_and_reuse() {
    if !xpu_testing::devices(1) {
        return;
    }
    type Between = fn(&DeviceAllocator);
    let steps: [(&str, Between); 5] = [
        ("set_config merge_all", |a| {
            a.set_config(AllocConfig::parse("relocation:merge_all").unwrap());
        }),
        ("set_config off", |a| {
            a.set_config(AllocConfig::parse("relocation:off").unwrap());
        }),
        ("set_config max_split", |a| {
            a.set_config(AllocConfig::parse("max_split_size_mb:20").unwrap());
        }),
        ("fraction", |a| a.core().set_memory_fraction(0.5).unwrap()),
        ("memory_stats", |a| {
            let _ = a.memory_stats();
        }),
    ];
    for (name, step) in steps {
        for size in SIZES {
            let alloc = private(0, "");
            let (a, b) = (fresh_stream(0), fresh_stream(0));
            let (bad, _) = held_fill_then_reuse(
                &alloc,
                size,
                (&a.stream(), &b.stream()),
                || step(&alloc),
                false,
            );
            assert_eq!(bad, 0, "{name}, size {size}");
        }
    }
}

/// Statistics after a mix of held cross-stream uses on two threads, relocation on: once
/// every handle dropped, the gates opened and the stream allocated again (which processes
/// the completed free markers), allocated, active and requested currents are 0, the snapshot agrees with `memory_stats` at every step, and `empty_cache` returns every
/// reserved byte.
#[test]
fn statistics_return_to_zero_after_held_cross_stream_uses_on_two_threads() {
    if !xpu_testing::devices(1) {
        return;
    }
    let alloc = private(0, "");
    let (a, b) = (fresh_stream(0), fresh_stream(0));
    let (a, b) = (a.stream(), b.stream());
    let agree = |when: &str| {
        let st = alloc.memory_stats();
        let snap = alloc.core().snapshot();
        let reserved: u64 = snap.iter().map(|s| s.size).sum();
        let allocated: u64 = snap
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == xpu_alloc::BlockState::Allocated)
            .map(|b| b.size)
            .sum();
        assert_eq!(
            (reserved, allocated),
            (
                u64::try_from(st.reserved_bytes.all.current).unwrap(),
                u64::try_from(st.allocated_bytes.all.current).unwrap()
            ),
            "snapshot vs memory_stats {when}"
        );
    };
    let gate = Gate::new(0).unwrap();
    gate.block(&b).unwrap();
    std::thread::scope(|scope| {
        for seed in 0..2u8 {
            let alloc = &alloc;
            scope.spawn(move || {
                for (i, size) in [3 * MIB, 64 * KIB, 12 * MIB, 700 * KIB, 5 * MIB]
                    .into_iter()
                    .enumerate()
                {
                    let x = alloc.allocate(size, &a).unwrap();
                    fill(&x, &a, seed);
                    if i % 2 == 0 {
                        fill(&x, &b, 0xAA);
                    }
                    let keep = alloc.allocate(size / 2 + 512, &a).unwrap();
                    drop(x);
                    drop(alloc.allocate(size, &a).unwrap());
                    drop(keep);
                }
            });
        }
    });
    agree("with B's work held");
    gate.open().unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    // Blocks whose free waited for B's markers stay active (as torch's) until the stream's
    // next allocation processes the completed markers.
    assert!(alloc.memory_stats().active_bytes.all.current > 0);
    drop(alloc.allocate(512, &a).unwrap());
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.allocated_bytes.all.current,
            st.active_bytes.all.current,
            st.requested_bytes.all.current,
            st.allocation.all.current
        ),
        (0, 0, 0, 0)
    );
    agree("after the gate opened");
    alloc.empty_cache();
    let st = alloc.memory_stats();
    assert_eq!(
        (st.reserved_bytes.all.current, st.segment.all.current),
        (0, 0),
        "empty_cache returns every segment once nothing is live"
    );
    agree("after empty_cache");
}
