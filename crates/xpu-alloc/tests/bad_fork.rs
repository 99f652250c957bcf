//! In a bad fork child (see `xpu_device::fork`) the allocator's memory entry points refuse at
//! once with a bad-fork error, before any driver call (`clCreateBuffer`, `clRetainMemObject`,
//! `clCreateSubBuffer`): the OpenCL buffer source used directly, a view of an allocation and
//! its reads and writes, and an allocation's exact `cl_mem`; a stream operation refused by
//! the stream layer stays a bad fork (`record_stream`, a backend marker). The parent's state (a source, a
//! stream, an allocation, a view) is reproduced in a fresh process that then becomes a bad
//! fork (`simulate_bad_fork`: this crate may not fork), so a call that reached the driver
//! would succeed there and is caught as a wrong result.

use xpu_alloc::{AllocError, BufferSource, ClBackend, ClStream, SegmentSource, SourceError};
use xpu_caching::Backend;
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
    let ptr = xpu_alloc::allocate(4096, &stream).expect("allocation");

    xpu_device::fork::simulate_bad_fork();

    // The stream layer's refusal becomes the allocator's own.
    assert_bad_fork("DataPtr::record_stream", ptr.record_stream(&other));
    // The backend used directly: a marker on a stream whose queue the child cannot resolve
    // fails with the stream layer's `BadFork`, kept typed in the allocator's error.
    let marker = ClBackend::record_marker(&ClStream::shared(other)).map(drop);
    println!("ClBackend::record_marker = {marker:?}");
    let marker = marker.expect_err("a marker in a bad fork child");
    assert_eq!(marker.downcast_ref(), Some(&StreamError::BadFork));
    let marker = AllocError::from(marker);
    assert!(marker.is_bad_fork(), "ClBackend::record_marker: {marker:?}");
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
    assert_eq!(
        peak("after reset_peak_stats"),
        before,
        "reset_peak_stats ran"
    );
    allocator.reset_accumulated_stats();
    assert_eq!(
        peak("after reset_accumulated_stats"),
        before,
        "reset_accumulated_stats ran"
    );
    allocator.set_config(other);
    assert_eq!(*allocator.core().config(), config, "set_config ran");
    drop(pool);
    done();
}

/// How long the child watches for a release it must not make (the release thread runs a
/// handed-over teardown within microseconds on an idle stream).
const RELEASE_WATCH: std::time::Duration = std::time::Duration::from_secs(2);

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
    let start = std::time::Instant::now();
    while buffers() == before && start.elapsed() < RELEASE_WATCH {
        std::thread::yield_now();
    }
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
