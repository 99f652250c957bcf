//! The threads' caches of freed pinned blocks (`thread_cache`): a block freed with no
//! pending use is handed back to the freeing thread's next same-size allocation; a block
//! with a pending use never goes there; an exiting thread returns its blocks; statistics are
//! the slow path's. Ordering is made deterministic with channels and gates, never sleeps.

mod host_common;

use std::sync::mpsc;

use host_common::{allocator, device_buffer, gated_block, have_devices, test_name, TestResult};
use proptest::prelude::*;
use xpu_device::backend::PinnedBytes;
use xpu_host::{HostAllocator, HostMemoryStats, HostPtr};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};

#[test]
fn same_size_pair_is_served_from_the_freeing_threads_cache() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let x = alloc.allocate_on(0, 4096)?;
    let y = alloc.allocate_on(0, 4096)?;
    let (x_addr, y_addr) = (x.address(), y.address());
    let (to_worker, worker_waits) = mpsc::channel::<()>();
    let (to_main, main_waits) = mpsc::channel::<()>();
    let alloc_ref = &alloc;
    let got = std::thread::scope(|s| {
        let worker = s.spawn(move || -> Result<usize, xpu_host::HostError> {
            drop(x); // into this thread's cache
            to_main.send(()).ok();
            worker_waits.recv().ok();
            // `y` was freed after `x`, by another thread: the shared free list's top (the
            // slow path's LIFO answer) would be `y`; this thread's cache answers `x`.
            let again = alloc_ref.allocate_on(0, 4096)?;
            Ok(again.address())
        });
        main_waits.recv().ok();
        drop(y);
        to_worker.send(()).ok();
        worker.join().expect("worker panicked")
    })?;
    assert_eq!(
        got, x_addr,
        "the worker got {got:#x}, not the block it freed ({x_addr:#x}; the other is {y_addr:#x})"
    );
    // And on one thread, a pair takes back the same block, with no driver call.
    let a = alloc.allocate_on(0, 4000)?;
    let a_addr = a.address();
    drop(a);
    assert_eq!(alloc.allocate_on(0, 4096)?.address(), a_addr);
    let s = alloc.memory_stats();
    assert_eq!((s.num_host_alloc, s.segment.current), (2, 2));
    assert_eq!(s.allocation.current, 0);
    assert_eq!((s.allocation.allocated, s.allocation.freed), (5, 5));
    Ok(())
}

#[test]
fn block_with_a_recorded_use_skips_the_thread_cache_until_the_use_completes() -> TestResult {
    let Some((alloc, stream, gate, a, a_addr)) = gated_block(4096)? else {
        return Ok(());
    };
    assert!(a.record_stream(&stream)?);
    drop(a); // its use (work queued on the gated stream) is pending
    assert_pending_block_is_not_handed_out(&alloc, &gate, &stream, a_addr)
}

#[test]
fn block_with_a_copy_in_flight_skips_the_thread_cache_until_the_copy_completes() -> TestResult {
    let Some((alloc, stream, gate, mut a, a_addr)) = gated_block(4096)? else {
        return Ok(());
    };
    let dst = device_buffer(0, 4096)?;
    a.fill(9);
    // A backend copy with no `record_stream`: tracked on the buffer only.
    let pinned = a.pinned().expect("a pinned buffer");
    drop(
        stream
            .queue()?
            .copy_pinned(&dst, 0, PinnedBytes::From(pinned), 0, 4096, &[])?,
    );
    assert!(a.recorded_streams().is_empty());
    drop(a);
    assert_pending_block_is_not_handed_out(&alloc, &gate, &stream, a_addr)
}

/// `a_addr` was freed while its use is held back by `gate`: no allocation of its class gets
/// it (not even after another block made the round through this thread's cache) until the
/// gate is open and the stream finished; then it is reused.
fn assert_pending_block_is_not_handed_out(
    alloc: &HostAllocator,
    gate: &xpu_event::Gate,
    stream: &Stream,
    a_addr: usize,
) -> TestResult {
    let b = alloc.allocate_on(0, 4096)?;
    assert_ne!(b.address(), a_addr, "handed out while its use is pending");
    let b_addr = b.address();
    drop(b); // no use: into this thread's cache
    let c = alloc.allocate_on(0, 4096)?;
    assert_eq!(c.address(), b_addr, "the thread's cached block");
    let d = alloc.allocate_on(0, 4096)?;
    assert_ne!(d.address(), a_addr, "handed out while its use is pending");
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.num_host_alloc), (1, 3));
    gate.open()?;
    stream.synchronize()?;
    let e = alloc.allocate_on(0, 4096)?;
    assert_eq!(e.address(), a_addr, "not reused once its use completed");
    let s = alloc.memory_stats();
    assert_eq!((s.pending_blocks, s.num_host_alloc), (0, 3));
    Ok(())
}

#[test]
fn exiting_thread_returns_its_cached_blocks() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let base = alloc.memory_stats();
    let sizes = [64usize, 4096, 4096, 65536];
    let addrs = std::thread::scope(|s| {
        s.spawn(|| -> Result<Vec<usize>, xpu_host::HostError> {
            let ptrs = sizes
                .iter()
                .map(|&n| alloc.allocate_on(0, n))
                .collect::<Result<Vec<_>, _>>()?;
            let addrs = ptrs.iter().map(HostPtr::address).collect();
            drop(ptrs); // all into this thread's cache
            Ok(addrs)
        })
        .join()
        .expect("worker panicked")
    })?;
    let s = alloc.memory_stats();
    assert_eq!(s.allocation.current, base.allocation.current);
    assert_eq!(s.segment.current, base.segment.current + 4);
    // The exited thread's blocks serve other threads without a driver call.
    let again = alloc.allocate_on(0, 65536)?;
    assert!(addrs.contains(&again.address()));
    drop(again);
    assert_eq!(alloc.memory_stats().num_host_alloc, 4);
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!(
        (s.segment.current, s.reserved_bytes.current, s.num_host_free),
        (base.segment.current, base.reserved_bytes.current, 4),
        "reserved memory not back to the baseline after the thread exited and empty_cache"
    );
    Ok(())
}

#[test]
fn empty_cache_releases_blocks_held_in_another_live_threads_cache() -> TestResult {
    let Some(alloc) = allocator() else {
        return Ok(());
    };
    let (to_worker, worker_waits) = mpsc::channel::<()>();
    let (to_main, main_waits) = mpsc::channel::<()>();
    let alloc_ref = &alloc;
    std::thread::scope(|s| {
        s.spawn(move || {
            if let Ok(p) = alloc_ref.allocate_on(0, 8192) {
                drop(p); // into this thread's cache
            }
            to_main.send(()).ok();
            worker_waits.recv().ok(); // alive while the main thread empties the cache
        });
        main_waits.recv().ok();
        assert_eq!(alloc.memory_stats().segment.current, 1);
        alloc.empty_cache();
        let s = alloc.memory_stats();
        to_worker.send(()).ok();
        assert_eq!((s.segment.current, s.num_host_free), (0, 1));
    });
    Ok(())
}

// --- statistics against the slow path -------------------------------------------------------

/// A thread that runs closures on request (so that two threads' caches take part, in an
/// order fixed by the test).
struct Worker {
    jobs: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn spawn() -> Worker {
        let (tx, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let handle = std::thread::spawn(move || {
            for job in rx {
                job();
            }
        });
        Worker {
            jobs: Some(tx),
            handle: Some(handle),
        }
    }

    /// Runs `f` on the worker and waits for its result.
    fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            tx.send(f()).ok();
        });
        self.jobs
            .as_ref()
            .expect("live")
            .send(job)
            .expect("worker alive");
        rx.recv().expect("worker answered")
    }

    /// Ends the thread (its caches' blocks return) and waits for it.
    fn exit(mut self) {
        drop(self.jobs.take());
        if let Some(h) = self.handle.take() {
            h.join().expect("worker panicked");
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Worker `w` allocates `64 << class` bytes from both allocators.
    Alloc {
        w: usize,
        class: u8,
    },
    /// Worker `w` frees the live pair `pick` (modulo their number).
    Free {
        w: usize,
        pick: usize,
    },
    /// The live pair `pick` is recorded on a stream, freed, the stream synchronized, and the
    /// pending blocks processed.
    FreeRecorded {
        pick: usize,
    },
    EmptyCache,
    ResetPeak,
    ResetAccumulated,
    /// Worker `w` exits and a new one takes its place.
    Respawn {
        w: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..3u8).prop_map(|(w, class)| Op::Alloc { w, class }),
        5 => (0..2usize, any::<usize>()).prop_map(|(w, pick)| Op::Free { w, pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeRecorded { pick }),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::ResetPeak),
        1 => Just(Op::ResetAccumulated),
        1 => (0..2usize).prop_map(|w| Op::Respawn { w }),
    ]
}

/// The statistics that do not depend on timing (durations excluded).
fn exact(s: &HostMemoryStats) -> impl PartialEq + std::fmt::Debug {
    (
        [s.allocation, s.allocated_bytes, s.segment, s.reserved_bytes],
        [
            s.num_host_alloc,
            s.num_host_free,
            s.pending_blocks,
            s.pending_markers,
            s.host_alloc_time.count,
            s.host_free_time.count,
        ],
    )
}

/// Runs `ops` on an allocator with thread caches and on one without, in lockstep, and
/// compares their statistics after every step.
fn run_against_the_slow_path(ops: &[Op], stream: &Stream) {
    let cached = HostAllocator::new();
    let slow = HostAllocator::without_thread_caches();
    let mut workers = [Worker::spawn(), Worker::spawn()];
    let mut live: Vec<(HostPtr, HostPtr)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Alloc { w, class } => {
                let (c, s) = (cached.clone(), slow.clone());
                let n = 64usize << class;
                let pair = workers[w].run(move || (c.allocate_on(0, n), s.allocate_on(0, n)));
                live.push((pair.0.expect("allocation"), pair.1.expect("allocation")));
            }
            Op::Free { w, pick } if !live.is_empty() => {
                let pair = live.swap_remove(pick % live.len());
                workers[w].run(move || drop(pair));
            }
            Op::FreeRecorded { pick } if !live.is_empty() => {
                let (c, s) = live.swap_remove(pick % live.len());
                c.record_stream(stream).expect("record");
                s.record_stream(stream).expect("record");
                drop((c, s));
                stream.synchronize().expect("synchronize");
                cached.process_events();
                slow.process_events();
            }
            Op::EmptyCache => {
                cached.empty_cache();
                slow.empty_cache();
            }
            Op::ResetPeak => {
                cached.reset_peak_stats();
                slow.reset_peak_stats();
            }
            Op::ResetAccumulated => {
                cached.reset_accumulated_stats();
                slow.reset_accumulated_stats();
            }
            Op::Respawn { w } => {
                std::mem::replace(&mut workers[w], Worker::spawn()).exit();
            }
            Op::Free { .. } | Op::FreeRecorded { .. } => {}
        }
        assert_eq!(
            exact(&cached.memory_stats()),
            exact(&slow.memory_stats()),
            "statistics differ after step {step}: {op:?} (ops: {ops:?})"
        );
    }
    drop(live);
    for w in workers {
        w.exit();
    }
    cached.empty_cache();
    slow.empty_cache();
    assert_eq!(exact(&cached.memory_stats()), exact(&slow.memory_stats()));
    assert_eq!(cached.memory_stats().reserved_bytes.current, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn statistics_equal_the_slow_paths(ops in proptest::collection::vec(op(), 1..40)) {
        if have_devices(1, &test_name()) {
            let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
            run_against_the_slow_path(&ops, &stream);
        }
    }
}
