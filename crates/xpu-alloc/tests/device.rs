//! The allocator on a real OpenCL device (PoCL in CI): buffers, kernel arguments,
//! views, record_stream with a gate, cross-stream reuse with real markers, the
//! crate-level API and a second device, streams of another device refused, and a stream
//! released before its first allocation. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.

mod common;

use xpu_alloc::{
    AllocConfig, AllocError, BufferSource, ClBackend, ClStream, DeviceAllocator, DeviceCore,
    DevicePtr, MarkerError, MemoryKind, StreamKey,
};
use xpu_caching::Backend;
use xpu_device::ClError;
use xpu_event::Gate;
use xpu_stream::{Stream, StreamError};
use xpu_testing::devices;

use common::{device_stream, fresh_stream, MIB};

fn private(config: &str) -> DeviceAllocator {
    DeviceAllocator::new(0, AllocConfig::parse(config).unwrap()).unwrap()
}

#[test]
fn a_failed_marker_keeps_the_stream_error_and_its_opencl_code() {
    let Some(_) = device_stream() else {
        return;
    };
    // A marker behind a command that terminates abnormally (a failed user event it waits
    // for, OpenCL 3.0 §5.11): waiting for it fails with the driver's code.
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let external = fresh_stream(0);
    let stream = external.stream();
    let _blocked = stream.queue().unwrap().enqueue_marker(&[&user]).unwrap();
    let shared = ClStream::shared(stream);
    let marker = ClBackend::record_marker(&shared).unwrap();
    user.set_failed(-5).unwrap();
    let failed = ClBackend::wait(&marker).unwrap_err();
    assert_eq!(
        failed.downcast_ref::<StreamError>(),
        Some(&StreamError::OpenCl(ClError::new(
            "clWaitForEvents",
            -14 // CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
        ))),
        "{failed:?}"
    );
    assert_eq!(
        failed.to_string(),
        "stream marker operation failed: clWaitForEvents failed: \
         CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST (-14)"
    );
    let alloc = AllocError::from(failed.clone());
    assert_eq!(alloc, AllocError::Stream(failed));
    assert!(!alloc.is_bad_fork());

    // An external stream dropped before its queue was taken: it can run no work, so its
    // marker is complete at once, but a device-side wait on it fails with the stream error.
    let external = fresh_stream(0);
    let stream = external.stream();
    drop(external);
    let stale = ClStream::shared(stream);
    let idle = ClBackend::record_marker(&stale).unwrap();
    assert!(matches!(idle, xpu_alloc::StreamMarker::Idle));
    assert!(ClBackend::marker_complete(&idle));
    let other = ClBackend::record_marker(&ClStream::shared(fresh_stream(0).stream())).unwrap();
    let released: MarkerError = ClBackend::stream_wait(&stale, &other).unwrap_err();
    assert!(
        matches!(
            released.downcast_ref(),
            Some(StreamError::ExternalReleased { device: 0, id }) if *id == stream.id()
        ),
        "{released:?}"
    );
    assert!(!AllocError::from(released).is_bad_fork());
}

#[test]
fn buffers_kernel_arguments_and_views() {
    let Some(s) = device_stream() else {
        return;
    };
    // Split segments (a 2 MiB small-pool segment for both), whatever the platform's default.
    let alloc = private("split_segments:True");
    let a = alloc.allocate(1000, &s).unwrap();
    let b = alloc.allocate(3000, &s).unwrap();
    assert_eq!(alloc.memory_kind(), MemoryKind::Buffer);
    let (mem_a, off_a) = a.cl_mem_and_offset().unwrap();
    let (mem_b, off_b) = b.cl_mem_and_offset().unwrap();
    assert_eq!(mem_a, mem_b, "both blocks live in one 2 MiB segment buffer");
    assert_eq!((off_a, off_b), (0, 1024));
    assert_eq!(b.address(), a.address() + 1024);
    // `{:?}`: the device and the allocator's block (address, requested size, allocation
    // stream); an empty pointer has no block.
    assert_eq!(
        format!("{a:?}"),
        format!(
            "DataPtr {{ device: 0, allocation: Some(Allocation {{ address: {:#x}, size: 1000, \
             stream: {:?} }}) }}",
            a.address(),
            a.stream().unwrap()
        )
    );
    assert_eq!(
        format!("{:?}", xpu_alloc::DataPtr::empty(0)),
        "DataPtr { device: 0, allocation: None }"
    );
    // Write a's and b's bytes through their views, read both back: the regions are the
    // blocks' own (no overlap, right offsets).
    let da = vec![0xA5u8; 1000];
    let db: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    a.view().unwrap().write(&s, 0, &da).unwrap();
    b.view().unwrap().write(&s, 0, &db).unwrap();
    let (mut ra, mut rb) = (vec![0u8; 1000], vec![0u8; 3000]);
    a.view().unwrap().read(&s, 0, &mut ra).unwrap();
    b.view().unwrap().read(&s, 0, &mut rb).unwrap();
    assert_eq!((ra, rb), (da, db));
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.allocated_bytes.all.current,
            st.reserved_bytes.all.current
        ),
        (1024 + 3072, 2 * MIB as i64)
    );
    assert_eq!(
        xpu_alloc::PoolKind::for_size(1024),
        xpu_alloc::PoolKind::Small
    );
}

#[test]
fn record_stream_waits_for_gated_work() {
    if !devices(1) {
        return;
    }
    let alloc = private("");
    let s0 = fresh_stream(0);
    let s1 = fresh_stream(0);
    let gate = Gate::new(0).unwrap();
    gate.block(&s1.stream()).unwrap();
    let a = alloc.allocate(64 * 1024, &s0.stream()).unwrap();
    let addr = a.address();
    alloc.record_stream(&a, &s1.stream()).unwrap();
    drop(a);
    assert_eq!(alloc.memory_stats().active.all.current, 1);
    let b = alloc.allocate(64 * 1024, &s0.stream()).unwrap();
    assert_ne!(
        b.address(),
        addr,
        "the block is pending while stream 1 is blocked"
    );
    gate.open().unwrap();
    s1.stream().synchronize().unwrap();
    let c = alloc.allocate(64 * 1024, &s0.stream()).unwrap();
    assert_eq!(c.address(), addr);
    assert_eq!(alloc.memory_stats().active.all.current, 2);
}

#[test]
fn cross_stream_reuse_with_real_markers() {
    if !devices(1) {
        return;
    }
    let alloc = private("release_policy:on_oom");
    let total = xpu_device::get_device_properties(0).unwrap().total_memory;
    alloc
        .core()
        .set_memory_fraction(64.0 * MIB as f64 / total as f64)
        .unwrap();
    let s0 = fresh_stream(0);
    let s1 = fresh_stream(0);
    let a = alloc.allocate(40 * MIB, &s0.stream()).unwrap();
    let addr = a.address();
    drop(a);
    // Stream 0 has no wait pending: stream 1 reuses its cached segment after a device-side
    // wait for a marker of stream 0.
    let b = alloc.allocate(40 * MIB, &s1.stream()).unwrap();
    assert_eq!(
        b.address(),
        addr,
        "stream 1 reuses stream 0's cached segment"
    );
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.num_device_alloc,
            st.num_device_free,
            st.num_alloc_retries
        ),
        (1, 0, 0)
    );
    drop(b);
    // Stream 1 (now the segment's stream) waits for a gate: a device-side wait for a marker
    // of stream 1 would not order stream 0 after stream 1's work should the gate fail (PoCL
    // then completes the marker with the work before it still queued; review h29), so the
    // segment is not taken over: the allocation releases it once stream 1's work is done
    // (a host wait: the gate's watchdog opens it after 2 s) and makes a new one.
    let gate = Gate::with_open_limit(0, std::time::Duration::from_secs(2)).unwrap();
    gate.block(&s1.stream()).unwrap();
    let c = alloc.allocate(40 * MIB, &s0.stream()).unwrap();
    assert!(
        gate.is_open(),
        "the allocation waited for stream 1's gated work"
    );
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.num_device_alloc,
            st.num_device_free,
            st.num_alloc_retries
        ),
        (2, 1, 1)
    );
    drop(c);
}

#[test]
fn fraction_exceeded_and_too_large_on_a_device() {
    if !devices(1) {
        return;
    }
    let alloc = private("");
    let props = xpu_device::get_device_properties(0).unwrap();
    let s = fresh_stream(0);
    assert!(matches!(
        alloc.allocate(props.max_alloc_size + 1, &s.stream()),
        Err(AllocError::TooLarge { .. })
    ));
    alloc
        .core()
        .set_memory_fraction(16.0 * MIB as f64 / props.total_memory as f64)
        .unwrap();
    let err = alloc.allocate(20 * MIB, &s.stream()).unwrap_err();
    let AllocError::MemoryFractionExceeded(r) = err else {
        panic!("{err:?}")
    };
    assert_eq!((r.requested, r.total), (20 * MIB, props.total_memory));
}

#[test]
fn crate_level_api() {
    if !devices(1) {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let before = xpu_alloc::memory_allocated(0).unwrap();
    let p = xpu_alloc::allocate(3 * MIB, &s).unwrap();
    assert_eq!(p.device(), 0);
    assert_eq!(p.stream(), Some(StreamKey::new(0, s.id())));
    assert!(xpu_alloc::memory_allocated(0).unwrap() >= before + 3 * MIB);
    // A 20 MiB large-pool segment, or exactly the block where segments are not split.
    let segment = if xpu_alloc::device_splits_segments(0).unwrap() {
        20 * MIB
    } else {
        3 * MIB
    };
    assert!(xpu_alloc::memory_reserved(0).unwrap() >= segment);
    let (free, total) = xpu_alloc::mem_get_info(0).unwrap();
    assert!(free <= total - segment);
    assert!(
        xpu_alloc::memory_stats_flat(0).unwrap()["allocated_bytes.all.current"] >= 3 * MIB as i64
    );
    let raw = xpu_alloc::raw_alloc(4096).unwrap();
    assert!(!raw.is_null());
    xpu_alloc::raw_delete(raw).unwrap();
    let err = xpu_alloc::raw_delete(raw).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid device pointer: {:#x}", raw.address())
    );
    assert!(xpu_alloc::raw_delete(DevicePtr::new(0, 0)).is_ok());
    let empty = xpu_alloc::allocate_current(0).unwrap();
    assert!(empty.is_empty());
    xpu_alloc::record_stream(&p, &xpu_stream::get_stream_from_pool(0, 0).unwrap()).unwrap();
    drop(p);
    assert!(matches!(
        xpu_alloc::set_memory_fraction(0.0, 0),
        Err(AllocError::InvalidFraction { .. })
    ));
    assert!(matches!(
        xpu_alloc::memory_stats(99),
        Err(AllocError::InvalidDevice { device: 99 })
    ));
    let err = xpu_alloc::set_config("max_split_size_mb:1").unwrap_err();
    assert!(err.to_string().contains("max_split_size_mb"));
    xpu_alloc::empty_cache();
}

#[test]
fn every_allocator_is_made_of_copyable_buffers() {
    if !devices(1) {
        return;
    }
    let alloc = private("memory_kind:buffer");
    assert_eq!(alloc.memory_kind(), MemoryKind::Buffer);
    let s = fresh_stream(0);
    let p = alloc.allocate(MIB, &s.stream()).unwrap();
    assert!(p.cl_mem_and_offset().is_ok());
    let v = p.view().unwrap();
    v.write(&s.stream(), 5, &[1, 2, 3]).unwrap();
    let mut back = [0u8; 3];
    v.read(&s.stream(), 5, &mut back).unwrap();
    assert_eq!(back, [1, 2, 3]);
}

#[test]
fn second_device_and_stream_device_mismatch() {
    if !devices(2) {
        return;
    }
    let s1: Stream = xpu_stream::get_stream_from_pool(0, 1).unwrap();
    let p = xpu_alloc::allocate(MIB, &s1).unwrap();
    assert_eq!(p.device(), 1);
    let alloc0 = private("");
    assert!(matches!(
        alloc0.allocate(MIB, &s1),
        Err(AllocError::StreamDevice {
            stream: 1,
            device: 0
        })
    ));
}

// A device's allocator serves only streams of its device: the allocation's device is the
// memory's device.

#[test]
fn a_device_core_refuses_a_stream_of_another_device() {
    if !xpu_testing::devices(2) {
        return;
    }
    let core = DeviceCore::new(
        Box::new(BufferSource::new(0).unwrap()),
        AllocConfig::default(),
    );
    let other = common::fresh_stream(1);
    let s1 = other.stream();
    let result = core.allocate(4096, &ClStream::shared(s1));
    match result {
        Ok(ptr) => {
            let dev = ptr.device();
            let write = ptr.view().unwrap().write(&s1, 0, &[1u8; 64]);
            panic!(
                "allocated on device 0's memory for a stream of device 1: DataPtr device \
                 {dev}, write on device 1's stream: {write:?}"
            );
        }
        Err(e) => assert!(
            matches!(
                e,
                xpu_alloc::AllocError::StreamDevice {
                    stream: 1,
                    device: 0
                }
            ),
            "{e}"
        ),
    }
    assert_eq!(
        core.memory_reserved(),
        0,
        "nothing reserved for the refused stream"
    );
    // The device's own streams are served.
    let own = common::fresh_stream(0);
    let ptr = core
        .allocate(4096, &ClStream::shared(own.stream()))
        .unwrap();
    assert_eq!(ptr.device(), 0);
}

/// `record_stream` refuses a stream a graph is capturing through every entry point, as
/// `DataPtr::record_stream` does: the captured work runs at replay, after any marker the
/// allocator could record at the free, so no marker could order the block's reuse after it.
#[test]
fn record_stream_refuses_a_capturing_stream_through_the_device_allocator() {
    let Some([s, c]) = common::device_streams() else {
        return;
    };
    let ptr = xpu_alloc::allocate(4096, &s).unwrap();
    let capture = xpu_stream::CaptureGuard::begin(&c).unwrap();
    let direct = ptr.record_stream(&c).unwrap_err();
    let through_device = xpu_alloc::record_stream(&ptr, &c);
    drop(capture);
    assert!(
        matches!(direct, xpu_alloc::AllocError::Capturing { .. }),
        "{direct}"
    );
    match through_device {
        Err(xpu_alloc::AllocError::Capturing {
            device,
            stream,
            operation,
        }) => assert_eq!((device, stream, operation), (0, c.id(), "record_stream")),
        other => panic!("xpu_alloc::record_stream on a capturing stream: {other:?}"),
    }
    // Nothing was recorded: the block is reusable at once on its stream after the free.
    let address = ptr.address();
    drop(ptr);
    let again = xpu_alloc::allocate(4096, &s).unwrap();
    assert_eq!(again.address(), address);
}

// An allocation stream whose external queue was released before the allocator first saw it
// (a stale `Stream` handle of a dropped `ExternalStream`): no work can ever be enqueued on
// it, so its cached segments are released by `empty_cache` like any other (they stayed
// reserved for good: every release needs a marker on the stream, which failed).

#[test]
fn empty_cache_releases_the_segments_of_a_stream_released_before_its_first_allocation() {
    if !xpu_testing::devices(1) {
        return;
    }
    let alloc = DeviceAllocator::new(0, AllocConfig::default()).unwrap();
    let stale = {
        let external = fresh_stream(0);
        external.stream()
    }; // unregistered: its queue is released
    assert!(stale.queue().is_err());
    let block = alloc.allocate(4 * MIB, &stale).unwrap();
    assert!(alloc.core().memory_reserved() >= 4 * MIB);
    drop(block);
    alloc.empty_cache();
    let stats = alloc.memory_stats();
    assert_eq!(
        (stats.reserved_bytes.all.current, stats.segment.all.current),
        (0, 0),
        "the stale stream's cached segment is released"
    );
    assert_eq!(stats.num_device_free, 1);
}
