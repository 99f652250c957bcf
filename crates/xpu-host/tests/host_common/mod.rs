//! Shared helpers of the pinned-host allocator tests.
#![allow(dead_code, unused_imports)]

use xpu_device::backend::{Buffer, MemFlags};

use xpu_event::Gate;
use xpu_host::{HostAllocator, HostError, HostPtr};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};
pub use xpu_testing::child::test_name;
pub use xpu_testing::{have_devices, pattern};

/// What a test or helper returns when it uses more than the pinned-host allocator (a gate is
/// an event-layer object, whose errors are not [`HostError`]s).
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A device buffer of `size` bytes on `device`.
pub fn device_buffer(device: usize, size: usize) -> Result<Buffer, HostError> {
    let ctx = xpu_device::device(device)?.context()?;
    Ok(Buffer::new(ctx, size, MemFlags::default())?)
}

/// An allocator of the test's own (so that its statistics are the test's); `None` when the
/// test is skipped for want of a device ([`have_devices`]).
pub fn allocator() -> Option<HostAllocator> {
    have_devices(1, &test_name()).then(HostAllocator::new)
}

/// [`allocator`] and a pool stream of device 0.
pub fn allocator_and_stream() -> Result<Option<(HostAllocator, Stream)>, HostError> {
    let Some(alloc) = allocator() else {
        return Ok(None);
    };
    Ok(Some((alloc, get_stream_from_pool(PRIORITY_NORMAL, 0)?)))
}

/// What a copy test starts from: [`allocator_and_stream`] and a device buffer of `size` bytes
/// on device 0.
pub fn copy_setup(size: usize) -> Result<Option<(HostAllocator, Stream, Buffer)>, HostError> {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(None);
    };
    Ok(Some((alloc, stream, device_buffer(0, size)?)))
}

/// [`allocator_and_stream`] and a closed gate that holds back the work enqueued on the stream
/// until the test opens it.
pub fn gated_stream() -> TestResult<Option<(HostAllocator, Stream, Gate)>> {
    let Some((alloc, stream)) = allocator_and_stream()? else {
        return Ok(None);
    };
    let gate = Gate::new(0)?;
    gate.block(&stream)?;
    Ok(Some((alloc, stream, gate)))
}

/// The scene of the tests of a block whose use is held back: [`gated_stream`], and a block of
/// `size` bytes on device 0 with its address.
#[allow(clippy::type_complexity)]
pub fn gated_block(
    size: usize,
) -> TestResult<Option<(HostAllocator, Stream, Gate, HostPtr, usize)>> {
    let Some((alloc, stream, gate)) = gated_stream()? else {
        return Ok(None);
    };
    let block = alloc.allocate_on(0, size)?;
    let addr = block.address();
    Ok(Some((alloc, stream, gate, block, addr)))
}

/// `len` bytes of `buffer` from `offset`, read on `stream`'s queue (blocking, after the work
/// enqueued before).
pub fn read_back(
    stream: &Stream,
    buffer: &Buffer,
    offset: usize,
    len: usize,
) -> Result<Vec<u8>, HostError> {
    let mut bytes = vec![0u8; len];
    stream.queue()?.read(buffer, offset, &mut bytes)?;
    Ok(bytes)
}

/// `addr` is the block of a `size`-byte class, freed while work recorded on it is held back
/// on `stream` by `gate`: the next allocation of the class is another block while `addr` stays
/// pending; once the gate is open and `stream` finished, the next allocation is `addr` again.
pub fn assert_reused_only_after_the_gate(
    alloc: &HostAllocator,
    gate: &Gate,
    stream: &Stream,
    size: usize,
    addr: usize,
) -> TestResult {
    let other = alloc.allocate_on(0, size)?;
    assert_ne!(other.address(), addr, "reused while its work is held back");
    let stats = alloc.memory_stats();
    assert_eq!(stats.pending_blocks, 1);
    assert!(stats.pending_markers >= 1);
    gate.open()?;
    stream.synchronize()?;
    let again = alloc.allocate_on(0, size)?;
    assert_eq!(again.address(), addr, "not reused once its work completed");
    Ok(())
}

/// Polls `done` until it holds or `limit` passed; whether it held. For what a driver finishes
/// asynchronously with no event to wait on (NVIDIA calls completion callbacks on a thread of
/// its own, a little after the command), never for ordering.
pub fn settles(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Whether the count of live buffers comes back to `before` within 10 s, the callbacks due
/// run at each look ([`settles`]: NVIDIA calls a copy's completion callback, which holds the
/// pinned buffer, a little after `clFinish` returned, and its status may read pending until
/// then, so `wait_for_callbacks` alone may return first).
pub fn buffers_settle_to(before: usize) -> bool {
    settles(std::time::Duration::from_secs(10), || {
        xpu_device::backend::wait_for_callbacks();
        xpu_device::backend::live_objects().buffers == before
    })
}

/// Other code's in-order queue on device 0's context: its own reference
/// (`CommandQueue::foreign_reference`, released on drop). Made through the runtime only to get
/// a queue of the right context; that wrapper is dropped at once (reviews h61, h63).
pub fn their_queue() -> TestResult<xpu_device::backend::ForeignQueue> {
    let q = xpu_device::device(0)?.create_queue(xpu_device::backend::QueueOptions::default())?;
    Ok(q.foreign_reference()?)
}

/// An external stream registered over other code's queue (alive: other code holds a
/// reference).
pub fn external_over(
    theirs: &xpu_device::backend::ForeignQueue,
) -> TestResult<xpu_stream::ExternalStream> {
    Ok(xpu_stream::ExternalStream::new(theirs.wrap()?, 0)?)
}
