//! In a bad fork child (see `xpu_device::fork`) the allocator's memory entry points refuse at
//! once with a bad-fork error, before any driver call (`clCreateBuffer`, `clRetainMemObject`,
//! `clCreateSubBuffer`): the OpenCL buffer source used directly, a view of an allocation and
//! its reads and writes, and an allocation's exact `cl_mem`; a stream operation refused by
//! the stream layer stays a bad fork (`record_stream`, a backend marker). The parent's state (a source, a
//! stream, an allocation, a view) is reproduced in a fresh process that then becomes a bad
//! fork (`simulate_bad_fork`: this crate may not fork), so a call that reached the driver
//! would succeed there and is caught as a wrong result.

use xpu_alloc::{
    AllocConfig, AllocError, BufferSource, ClBackend, ClStream, DeviceCore, MemoryStats,
    SegmentSource, SourceError,
};
use xpu_caching::{Backend, CacheError};
use xpu_device::DeviceError;
use xpu_stream::{get_stream_from_pool, StreamError, PRIORITY_NORMAL};
use xpu_testing::bad_fork::{assert_bad_fork, bad_fork_test, done};

/// Runs `body` as the bad-fork scenario `scenario`; skipped without a device.
fn on_a_device(scenario: &str, body: fn()) {
    if xpu_testing::devices(1) {
        bad_fork_test(scenario, body);
    }
}

#[test]
fn allocator_memory_entry_points_refuse_in_a_bad_fork_child() {
    on_a_device("alloc-memory-bad-fork", run);
}

fn run() {
    let source = BufferSource::new(0).expect("buffer source");
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let ptr = xpu_alloc::allocate(4096, &stream).expect("allocation");
    let view = ptr.view().expect("view");
    let raw = xpu_alloc::raw_alloc_with_stream(4096, &stream).expect("raw allocation");

    xpu_device::fork::simulate_bad_fork();

    let segment = source.allocate(4096).map(|s| s.size);
    println!("BufferSource::allocate = {segment:?}");
    let refused = match &segment {
        Err(SourceError::Device(failure)) => failure.downcast_ref::<DeviceError>().cloned(),
        _ => None,
    };
    assert_eq!(
        refused,
        Some(DeviceError::BadFork),
        "BufferSource::allocate: {segment:?}"
    );
    assert_bad_fork("DataPtr::view", ptr.view().map(drop));
    // The segment's `cl_mem` is read under the stream's lock.
    assert_bad_fork("DataPtr::cl_mem_and_offset", ptr.cl_mem_and_offset());
    assert_bad_fork(
        "raw_cl_mem_and_offset",
        xpu_alloc::raw_cl_mem_and_offset(raw),
    );
    assert_bad_fork(
        "with_raw_view",
        xpu_alloc::with_raw_view(raw, |v| v.data_ptr().size()),
    );
    assert_bad_fork("BlockView::write", view.write(&stream, 0, &[1; 16]));
    assert_bad_fork("BlockView::read", view.read(&stream, 0, &mut [0; 16]));
    let cl_mem = ptr.block_cl_mem().map(|(_, size)| size);
    println!("DataPtr::block_cl_mem = {cl_mem:?}");
    assert!(
        matches!(&cl_mem, Err(xpu_alloc::BlockArgError::Alloc(e)) if *e == xpu_alloc::AllocError::BadFork),
        "DataPtr::block_cl_mem: {cl_mem:?}"
    );
    done();
}

#[test]
fn a_stream_failure_in_a_bad_fork_child_is_a_bad_fork() {
    on_a_device("alloc-stream-bad-fork", stream_failures);
}

/// A stream operation the allocator needs, refused in a bad fork child by the stream layer
/// (`Stream::queue`), stays a bad fork as an allocator error.
fn stream_failures() {
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let other = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let captured = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let ptr = xpu_alloc::allocate(4096, &stream).expect("allocation");
    let capture = xpu_stream::CaptureGuard::begin(&captured).expect("capture");
    // A stream handle of the parent's, holding its queue, and a marker recorded on it.
    let held = ClStream::shared(stream);
    let parent_marker = ClBackend::record_marker(&held).expect("marker");
    ClBackend::wait(&parent_marker).expect("wait");
    let objects = xpu_device::live_objects();

    xpu_device::fork::simulate_bad_fork();

    // The stream layer's refusal becomes the allocator's own.
    assert_bad_fork("DataPtr::record_stream", ptr.record_stream(&other));
    // Also on a stream the parent captures: the capture check takes no lock in the child.
    assert_bad_fork(
        "DataPtr::record_stream (captured stream)",
        ptr.record_stream(&captured),
    );
    drop(capture);
    // The backend used directly: a marker on a stream whose queue the child cannot resolve
    // fails with the stream layer's `BadFork`, kept typed in the allocator's error.
    let marker = ClBackend::record_marker(&ClStream::shared(other)).map(drop);
    println!("ClBackend::record_marker = {marker:?}");
    let marker = marker.expect_err("a marker in a bad fork child");
    assert_eq!(marker.downcast_ref(), Some(&StreamError::BadFork));
    let marker = AllocError::from(marker);
    assert!(marker.is_bad_fork(), "ClBackend::record_marker: {marker:?}");
    // The same through the parent's handle, whose queue is already resolved: every marker
    // operation refuses before the driver (a completion query answers "complete").
    let is_bad_fork = |what: &str, r: Result<(), xpu_alloc::MarkerError>| {
        println!("{what} = {r:?}");
        let e = r.expect_err(what);
        assert_eq!(e.downcast_ref(), Some(&StreamError::BadFork), "{what}");
    };
    is_bad_fork(
        "ClBackend::record_marker (parent's handle)",
        ClBackend::record_marker(&held).map(drop),
    );
    is_bad_fork("ClBackend::wait", ClBackend::wait(&parent_marker));
    is_bad_fork(
        "ClBackend::stream_wait",
        ClBackend::stream_wait(&held, &parent_marker),
    );
    is_bad_fork("ClBackend::synchronize", ClBackend::synchronize(&held));
    assert!(ClBackend::marker_complete(&parent_marker));
    assert_eq!(
        xpu_device::live_objects(),
        objects,
        "a driver object was created or released in the child"
    );
    done();
}

/// A device allocator with a live private pool and a past peak, in the child: listing its
/// pools refuses (the registry's lock may have been held at the fork), and resetting its
/// statistics or replacing its configuration does nothing (no lock of the parent's taken).
#[test]
fn device_allocator_reads_and_resets_refuse_in_a_bad_fork_child() {
    on_a_device("alloc-registry-bad-fork", registry_run);
}

fn registry_run() {
    let allocator = xpu_alloc::device_allocator(0).expect("device allocator");
    let pool = xpu_alloc::MemPool::new(0).expect("pool");
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    drop(allocator.allocate(1 << 20, &stream).expect("allocation"));
    stream.synchronize().expect("synchronize");
    let peak = |what: &str| {
        let s = allocator.core().memory_stats();
        let (peak, current) = (s.allocated_bytes.all.peak, s.allocated_bytes.all.current);
        println!("{what}: allocated peak {peak}, current {current}");
        (peak, current)
    };
    let before = peak("parent");
    assert!(before.0 > before.1, "the parent has a past peak");
    let config: xpu_alloc::AllocConfig = (*allocator.core().config()).clone();
    let other = xpu_alloc::AllocConfig::parse("garbage_collection_threshold:0.5").expect("config");
    assert_ne!(config, other);

    xpu_device::fork::simulate_bad_fork();

    assert_bad_fork("DeviceAllocator::mem_pools", allocator.mem_pools());
    allocator.reset_peak_stats();
    allocator.reset_accumulated_stats();
    allocator.set_config(other);
    drop(pool);
    // What the calls left, read as an ordinary process (the readers refuse in the child).
    xpu_device::fork::end_simulated_bad_fork();
    assert_eq!(
        peak("after reset_peak_stats and reset_accumulated_stats"),
        before,
        "a reset ran"
    );
    assert_eq!(*allocator.core().config(), config, "set_config ran");
    done();
}

/// The last handle of a private pool with a cached segment, dropped in the child: the pool
/// is leaked (its segment stays the parent's), not torn down: no segment release reaches the
/// driver (nor the `xpu-pool-release` thread) and the pool registry's lock, which a thread
/// of the parent may have held at the fork, is not taken.
#[test]
fn dropping_a_private_pool_in_a_bad_fork_child_leaks_it() {
    on_a_device("alloc-pool-drop-bad-fork", pool_drop_run);
}

fn pool_drop_run() {
    let pool = xpu_alloc::MemPool::new(0).expect("pool");
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    {
        let _routed = xpu_alloc::use_mem_pool(&pool).expect("route to the pool");
        drop(xpu_alloc::allocate(1 << 20, &stream).expect("allocation in the pool"));
    }
    stream.synchronize().expect("synchronize");
    let cached = pool.memory_reserved();
    println!(
        "pool reserves {cached} bytes, allocates {}",
        pool.memory_allocated()
    );
    assert!(cached >= 1 << 20, "the pool caches a segment");
    assert_eq!(pool.memory_allocated(), 0);
    let buffers = || xpu_device::live_objects().buffers;
    let before = buffers();

    xpu_device::fork::simulate_bad_fork();

    drop(pool);
    // Every release handed to the `xpu-pool-release` thread before this point has run when
    // the flush returns (a FIFO barrier): a teardown handed over by the drop would have
    // released the segment by now.
    xpu_alloc::flush_release_thread();
    println!(
        "live buffers: {before} before the drop, {} after",
        buffers()
    );
    assert_eq!(
        buffers(),
        before,
        "the pool's segment was released in the child"
    );
    done();
}

/// A caching allocator core in the child: one handed out by the device allocator
/// (`DeviceAllocator::core`), one the user built (`DeviceCore::new`), the backend-independent
/// allocator inside (`DeviceCore::caching`, and its methods through `Deref`), its device-wide
/// state (`SharedState`), its shards (`WeakShard`) and a block of it (`Allocation`). Every
/// method refuses with `BadFork` or does nothing / answers a neutral value (as the
/// `DeviceAllocator` method of the same name), before any lock a parent thread may have held
/// or any driver call; dropping a block, a shard or the last handle of a core leaks them. No
/// driver object is created or released in the child (live-object counts), and what the
/// no-ops must not have changed is read once the process leaves the simulated bad fork.
#[test]
fn device_core_entry_points_refuse_in_a_bad_fork_child() {
    on_a_device("alloc-core-bad-fork", core_run);
}

#[allow(clippy::too_many_lines)]
fn core_run() {
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let other = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let (sref, oref) = (ClStream::shared(stream), ClStream::shared(other));
    let config =
        AllocConfig::parse("garbage_collection_threshold:0.5,split_segments:True").expect("config");
    assert_ne!(config, AllocConfig::default());
    let user_core = |config: &AllocConfig| {
        DeviceCore::new(
            Box::new(BufferSource::new(0).expect("buffer source")),
            config.clone(),
        )
    };
    let own = user_core(&config);
    own.set_memory_fraction(0.75).expect("fraction");
    own.memory_history().record_memory_history(true, 100);
    let ptr = own.allocate(4096, &sref).expect("allocation");
    let raw = own
        .raw_alloc(4096, sref.key(), || sref.clone())
        .expect("raw allocation");
    let live = own
        .caching()
        .allocate(2 << 20, &sref)
        .expect("allocation")
        .expect("a block");
    // A cached whole segment (what `empty_cache` and `release_cached` would release).
    drop(own.allocate(8 << 20, &sref).expect("large allocation"));
    // A core whose last handle drops in the child, with a cached segment.
    let idle = user_core(&AllocConfig::default());
    drop(idle.allocate(8 << 20, &sref).expect("allocation"));
    let device = xpu_alloc::device_allocator(0)
        .expect("device allocator")
        .core()
        .clone();
    drop(device.allocate(4096, &sref).expect("allocation"));
    stream.synchronize().expect("synchronize");
    let stats = own.memory_stats();
    let reserved = own.memory_reserved();
    println!(
        "parent: allocated {}, reserved {reserved}",
        own.memory_allocated()
    );
    assert!(own.memory_allocated() > 0 && reserved > own.memory_allocated() + (4 << 20));
    assert!(!own.memory_history().entries().is_empty());
    let weak = own.weak_shards();
    assert!(!weak.is_empty());
    let objects = xpu_device::live_objects();

    xpu_device::fork::simulate_bad_fork();

    // Calls with a result refuse.
    assert_bad_fork("DeviceCore::allocate", own.allocate(4096, &sref));
    assert_bad_fork(
        "DeviceCore::allocate (device allocator's core)",
        device.allocate(4096, &sref),
    );
    assert_bad_fork(
        "DeviceCore::raw_alloc",
        own.raw_alloc(4096, sref.key(), || sref.clone()),
    );
    assert_bad_fork("DeviceCore::raw_delete", own.raw_delete(raw));
    assert_bad_fork(
        "DeviceCore::with_raw",
        own.with_raw(raw, xpu_alloc::DataPtr::size),
    );
    assert_bad_fork("DeviceCore::record_stream", own.record_stream(&ptr, &oref));
    assert_bad_fork(
        "DeviceCore::set_memory_fraction",
        own.set_memory_fraction(0.5),
    );
    assert_bad_fork(
        "CachingAllocator::allocate",
        own.caching().allocate(4096, &sref).map(|a| a.is_some()),
    );
    assert_bad_fork(
        "CachingAllocator::record_stream",
        own.caching().record_stream(&live, &oref),
    );
    let segment = own
        .shared()
        .allocate_segment_from(own.source(), 4096)
        .map(|s| s.size);
    println!("SharedState::allocate_segment_from = {segment:?}");
    assert!(
        matches!(&segment, Err(SourceError::Device(f)) if f.downcast_ref::<CacheError>() == Some(&CacheError::BadFork)),
        "SharedState::allocate_segment_from: {segment:?}"
    );

    // Readers answer a neutral value.
    for (what, stats) in [
        ("DeviceCore::memory_stats", own.memory_stats()),
        (
            "memory_stats (device allocator's core)",
            device.memory_stats(),
        ),
        ("SharedState::memory_stats", own.shared().memory_stats()),
    ] {
        assert_eq!(stats, MemoryStats::default(), "{what}");
    }
    let figures = (
        own.memory_allocated(),
        own.memory_reserved(),
        own.max_memory_allocated(),
        own.max_memory_reserved(),
        own.reserved_bytes(),
        own.shared().reserved(),
    );
    println!("byte figures = {figures:?}");
    assert_eq!(figures, (0, 0, 0, 0, 0, 0));
    assert_eq!(own.shared().allowed(), None, "SharedState::allowed");
    assert!(
        (own.memory_fraction() - 1.0).abs() < f64::EPSILON,
        "memory_fraction"
    );
    assert_eq!(own.mem_get_info(), (0, 0), "mem_get_info");
    assert!(own.snapshot().is_empty(), "snapshot");
    assert!(own.weak_shards().is_empty(), "weak_shards");
    assert!(own.memory_history().entries().is_empty(), "memory_history");
    assert!(!own.memory_history().is_enabled(), "memory_history");
    assert!(own.shared().history().entries().is_empty(), "history");
    assert_eq!(*own.config(), AllocConfig::default(), "config");
    assert_eq!(live.with_segment(|s, _| s.size), None, "with_segment");

    // Calls without a result do nothing; drops leak.
    own.empty_cache();
    device.empty_cache();
    for shard in &weak {
        shard.release_cached();
    }
    own.reset_peak_stats();
    own.reset_accumulated_stats();
    own.set_config(AllocConfig::default());
    own.shared().reset_peak_stats();
    own.shared().reset_accumulated_stats();
    own.shared().set_config(AllocConfig::default());
    live.record_stream(&oref);
    drop(live);
    drop(ptr);
    drop(idle);
    assert_eq!(
        xpu_device::live_objects(),
        objects,
        "a driver object was created or released in the child"
    );

    // What the child's calls left, read as an ordinary process.
    xpu_device::fork::end_simulated_bad_fork();
    assert_eq!(
        own.memory_stats(),
        stats,
        "the child changed the statistics"
    );
    assert_eq!(own.memory_reserved(), reserved, "a segment was released");
    assert_eq!(*own.config(), config, "set_config ran");
    assert!(
        (own.memory_fraction() - 0.75).abs() < f64::EPSILON,
        "the fraction changed"
    );
    done();
}
