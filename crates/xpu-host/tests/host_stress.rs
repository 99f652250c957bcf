//! Eight threads allocating, copying and freeing at once: no block is ever handed out twice,
//! every copy round-trips intact, and the statistics balance at the end.

mod host_common;

use std::collections::HashSet;
use std::sync::Arc;

use host_common::{device_buffer, have_devices};
use parking_lot::Mutex;
use xpu_host::{HostAllocator, HostBytes, HostCopy, HostError};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

const THREADS: usize = 8;
const ROUNDS: usize = 1000;

#[test]
fn eight_threads_never_share_a_block() -> Result<(), HostError> {
    if !have_devices(1, "eight_threads_never_share_a_block") {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let live: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let alloc = alloc.clone();
        let live = Arc::clone(&live);
        handles.push(std::thread::spawn(move || -> Result<(), HostError> {
            let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
            let dev = device_buffer(0, 8192)?;
            let mut x = t as u64 + 1;
            for round in 0..ROUNDS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let size = 1 + (x % 8192) as usize; // classes 2^0 ..= 2^13, shared by threads
                let mut h = alloc.allocate_on(0, size)?;
                assert!(live.lock().insert(h.address()), "block handed out twice");
                let tag = (t * 31 + round) as u8;
                h.fill(tag);
                if round % 4 == 0 {
                    // A copy in flight when the block is freed.
                    stream.copy_pinned(&dev, 0, HostBytes::From(&h), 0, size)?;
                    let mut back = alloc.allocate_on(0, size)?;
                    assert!(live.lock().insert(back.address()), "block handed out twice");
                    stream.copy_pinned(&dev, 0, HostBytes::Into(&mut back), 0, size)?;
                    live.lock().remove(&h.address());
                    drop(h);
                    stream.synchronize()?;
                    assert!(back.iter().all(|&b| b == tag), "thread {t} round {round}");
                    live.lock().remove(&back.address());
                } else {
                    assert!(h.iter().all(|&b| b == tag), "thread {t} round {round}");
                    live.lock().remove(&h.address());
                }
            }
            Ok(())
        }));
    }
    for h in handles {
        match h.join() {
            Ok(r) => r?,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
    // Each thread's last `back` was freed after its synchronize, so its marker may still be
    // queued (markers are not flushed on record): finish every queue of the device first.
    xpu_stream::synchronize(0)?;
    alloc.process_events();
    let s = alloc.memory_stats();
    let total = (THREADS * ROUNDS + THREADS * ROUNDS / 4) as i64;
    assert_eq!(s.allocation.current, 0);
    assert_eq!(s.allocated_bytes.current, 0);
    assert_eq!((s.allocation.allocated, s.allocation.freed), (total, total));
    assert_eq!((s.pending_blocks, s.pending_markers), (0, 0));
    assert_eq!(s.segment.current as u64, s.num_host_alloc);
    // Pending blocks count as allocated, so the peak is bounded by the blocks that exist.
    assert!(s.allocation.peak >= 1 && s.allocation.peak <= s.segment.peak);
    alloc.empty_cache();
    let s = alloc.memory_stats();
    assert_eq!((s.segment.current, s.reserved_bytes.current), (0, 0));
    Ok(())
}
