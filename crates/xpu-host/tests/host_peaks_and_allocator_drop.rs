//! The caching pinned-host allocator's peaks (exact, where torch sums bucket peaks) and a
//! `HostAllocator` dropped while a freed block still waits for its copy (no leak).
//!
//! Review h78 (fresh eyes on the caching pinned-host allocator): its findings. The leak
//! failed before its fix (5 of 5 runs); the peaks are a documented deviation from torch. PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`;
//! skipped without a device unless `XPU_REQUIRE_DEVICE=1`. Ordering by user-event gates,
//! never a sleep. The tests of this file take one lock: the leak test reads process-wide
//! object counts.

mod host_common;

use std::sync::Mutex;

use host_common::{allocator, device_buffer, TestResult};
use xpu_device::backend::{live_objects, wait_for_callbacks};
use xpu_event::Gate;
use xpu_host::{HostBytes, HostCopy};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Review h78's statistics finding, kept as a documented deviation (crates/xpu-host/src/stats.rs):
/// torch's `CachingHostAllocator::getStats` keeps `allocation` and `allocated_bytes` per size
/// bucket and sums them on read, peaks too ("bucket peaks are summed, an over-estimate",
/// reference §5): 1 KiB then 4 KiB, one at a time, would read peaks 2 and 5,120 there. xpu
/// keeps one exact peak over every class: 1 and 4,096, what was in use at once.
#[test]
fn peaks_are_exact_where_torch_sums_bucket_peaks() -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    drop(alloc.allocate_on(0, 1024)?);
    drop(alloc.allocate_on(0, 4096)?);
    let s = alloc.memory_stats();
    assert_eq!(
        (s.allocation.peak, s.allocated_bytes.peak),
        (1, 4096),
        "one exact peak over every size class (torch's sum of bucket peaks would be 2, 5120): {s:?}"
    );
    Ok(())
}

/// Finding (leak, fixed: `PendingQueue`'s drop releases such blocks once their markers are
/// over): an allocator dropped while one of its freed blocks waits for its copy
/// leaks that block's pinned buffer for good, even after the copy completed.
///
/// Sequence: `a = HostAllocator::new()`; pool stream `s` held back by a closed gate;
/// `h = a.allocate_on(0, 4096)`; device-to-host copy into `h` on `s` (held back);
/// `drop(h)` (parked: copy in flight); `drop(a)`; the gate opens, `s.synchronize()`,
/// `wait_for_callbacks()`.
///
/// Expected: once the copy completed nothing uses the block, so the live buffer count
/// (`xpu_device::backend::live_objects().buffers`) is back to what it was before the
/// allocation. Rule: nothing leaks. The copy holds its own reference to the buffer until
/// it completes (`PinnedBuffer::track`), and every device use of a pinned block in safe code
/// is such a tracked copy, so dropping the block at once would be safe.
///
/// Observed (5 of 5 runs): one more live buffer, for ever: `PendingQueue::drop`
/// (crates/xpu-host/src/pending.rs:249-264) `mem::forget`s every block whose markers or
/// copies were unfinished at the drop (and every kept-out block): its `PinnedBuffer` (the
/// mapping, the `cl_mem`, a queue reference) is never released.
#[test]
fn an_allocator_dropped_while_a_freed_block_waits_for_its_copy_leaks_the_block() -> TestResult {
    allocator_dropped_with_a_copy(true)
}

/// Control (held before the fix): the same sequence, but the allocator is dropped after the
/// copy completed and the block rejoined the cache: every buffer is released.
#[test]
fn an_allocator_dropped_after_its_copies_completed_releases_every_block() -> TestResult {
    allocator_dropped_with_a_copy(false)
}

/// A 4 KiB block downloaded into on a gated pool stream and freed; the allocator dropped while
/// the copy waits (`while_waiting`) or after it completed and the block rejoined the cache.
/// The live buffer count must come back to its value before the allocation.
fn allocator_dropped_with_a_copy(while_waiting: bool) -> TestResult {
    let _serial = serial();
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let dev = device_buffer(0, 4096)?;
    // The device cache (its queue) exists before the count is read.
    drop(alloc.allocate_on(0, 64)?);
    alloc.empty_cache();
    wait_for_callbacks();
    let before = live_objects().buffers;
    let gate = Gate::new(0)?;
    gate.block(&stream)?;
    let mut h = alloc.allocate_on(0, 4096)?;
    stream.copy_pinned(&dev, 0, HostBytes::Into(&mut h), 0, 4096)?;
    drop(h);
    assert_eq!(alloc.memory_stats().pending_blocks, 1);
    let mut alloc = Some(alloc);
    if while_waiting {
        drop(alloc.take());
    }
    gate.open()?;
    stream.synchronize()?;
    if let Some(alloc) = alloc {
        alloc.process_events();
        assert_eq!(alloc.memory_stats().pending_blocks, 0);
    }
    assert!(
        host_common::buffers_settle_to(before),
        "live buffers after the copy completed and the allocator was dropped: {}, before \
         the allocation: {before}",
        live_objects().buffers
    );
    Ok(())
}
