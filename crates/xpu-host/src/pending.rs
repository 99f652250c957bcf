//! Freed blocks waiting for stream markers (reference §5: `free` with recorded streams,
//! `process_events`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use xpu_device::backend::{EventStatus, OrderedMarker};
use xpu_stream::Stream;

use super::block::Block;
use super::stats::Counters;

/// A freed block and the markers of the streams that used it.
#[derive(Debug)]
struct Entry {
    block: Box<Block>,
    markers: Vec<OrderedMarker>,
}

/// What happened to a freed block with recorded streams.
pub(crate) enum Parked {
    /// Waiting for its markers.
    Waiting,
    /// A marker could not be recorded and its stream could not be synchronized: the block
    /// must not be reused (the caller releases it; copies in flight keep the memory alive).
    Unsafe(Box<Block>),
}

/// The pending queue, oldest first, behind one lock that the cached path never takes while
/// nothing is queued; and the blocks kept out after a failed marker, until a finish of the
/// marker's stream shows its work done.
#[derive(Debug, Default)]
pub(crate) struct PendingQueue {
    queue: Mutex<Queues>,
    /// Entries in `Queues::fifo` (the cached path's one atomic load).
    queued: AtomicUsize,
    /// Entries in `Queues::kept_out`.
    kept: AtomicUsize,
}

#[derive(Debug, Default)]
struct Queues {
    fifo: VecDeque<Entry>,
    /// Blocks a failed marker keeps out of the cache (see [`Judged::Failed`]): never reused
    /// nor released while one of their markers reads failed, still counted as pending and
    /// allocated; judged again by the processing that waits for the lock
    /// ([`crate::HostAllocator::process_events`], `empty_cache`), never on the cached path.
    kept_out: Vec<Entry>,
}

/// Where a free-time marker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// Its stream's work before it finished (or its status cannot be read: nothing more can
    /// be learned; or this is a bad fork child, where no driver call is made).
    Finished,
    Pending,
    /// The marker failed, or a wait enqueued before it on its queue did: PoCL fails the
    /// commands after a failed one at once (completing later markers) while earlier ones
    /// stay queued, so nothing tells when the stream's work on the block ends (review h58:
    /// a plain marker's failure counted as finished, and the block was reused while the
    /// recorded work was held back). The block is kept out until a synchronize of the
    /// stream that began after the marker returns with success
    /// ([`OrderedMarker::drained_by_finish`]): then nothing before the marker is queued.
    Failed,
}

/// One status query of `marker`, judged in order with the waits enqueued before it
/// ([`OrderedMarker::status`]).
fn judge(marker: &OrderedMarker) -> Judged {
    if xpu_device::fork::is_in_bad_fork() {
        return Judged::Finished;
    }
    match marker.status() {
        Ok(EventStatus::Complete) => Judged::Finished,
        Ok(EventStatus::Error(_)) if marker.drained_by_finish() => Judged::Finished,
        Ok(EventStatus::Error(_)) => Judged::Failed,
        Ok(_) => Judged::Pending,
        Err(e) => {
            tracing::warn!("pinned host block: marker query failed ({e}); treating it as finished");
            Judged::Finished
        }
    }
}

/// Records one marker on `stream` (judged in order, flushed so that it completes without a
/// later flush); when that fails, synchronizes the stream instead (no marker needed then).
/// `Err` when neither worked.
fn mark(stream: &Stream) -> Result<Option<OrderedMarker>, ()> {
    let marked = stream
        .enqueue_queue("pinned block free marker")
        .and_then(|queue| {
            let marker = queue.enqueue_ordered_marker()?;
            queue.flush()?;
            Ok(marker)
        });
    match marked {
        Ok(marker) => Ok(Some(marker)),
        Err(e) => {
            tracing::warn!(
                "pinned host block: cannot record a marker on {stream:?} ({e}); synchronizing it"
            );
            match stream.synchronize() {
                Ok(()) => Ok(None),
                Err(e) => {
                    tracing::warn!("pinned host block: cannot synchronize {stream:?} ({e}); the block will be released, not reused");
                    Err(())
                }
            }
        }
    }
}

impl PendingQueue {
    /// Parks a freed block whose use recorded streams, or whose buffer has copies in flight:
    /// one marker per recorded stream, then the block waits at the back of the queue until
    /// its markers and its copies completed. The stream set is cleared.
    pub(crate) fn park(&self, mut block: Box<Block>, counters: &Counters) -> Parked {
        let streams = block.streams_mut();
        let mut markers = Vec::with_capacity(streams.len());
        let mut ok = true;
        for s in streams.iter() {
            match mark(s) {
                Ok(Some(m)) => markers.push(m),
                Ok(None) => {}
                Err(()) => ok = false,
            }
        }
        streams.clear();
        if !ok {
            return Parked::Unsafe(block);
        }
        let n = markers.len() as u64;
        let mut queue = self.queue.lock();
        queue.fifo.push_back(Entry { block, markers });
        self.queued.fetch_add(1, Ordering::Release);
        // Counted under the lock, so that processing never sees an entry it cannot count.
        counters.pending_markers.fetch_add(n, Ordering::Relaxed);
        counters.pending_blocks.fetch_add(1, Ordering::Release);
        Parked::Waiting
    }

    /// Whether no block waits for [`PendingQueue::process`] with `wait_for_lock`: none in the
    /// queue (one atomic load: the cached path's check) and, when the lock is waited for,
    /// none kept out.
    pub(crate) fn is_idle(&self, wait_for_lock: bool) -> bool {
        self.queued.load(Ordering::Acquire) == 0
            && (!wait_for_lock || self.kept.load(Ordering::Acquire) == 0)
    }

    /// Whether a block is kept out after a failed marker (one atomic load).
    pub(crate) fn has_kept_out(&self) -> bool {
        self.kept.load(Ordering::Acquire) > 0
    }

    /// Hands every block whose markers all completed to `reusable`, oldest first, stopping at
    /// the first block with an unfinished marker; a block with a failed marker is kept out
    /// for good ([`Judged::Failed`]). With `wait_for_lock` false, returns at once when
    /// another thread is processing or nothing is queued (the cached path's check is one
    /// atomic load).
    pub(crate) fn process(
        &self,
        counters: &Counters,
        wait_for_lock: bool,
        mut reusable: impl FnMut(Box<Block>),
    ) {
        if self.is_idle(wait_for_lock) {
            return;
        }
        let mut queue = if wait_for_lock {
            self.queue.lock()
        } else {
            match self.queue.try_lock() {
                Some(q) => q,
                None => return,
            }
        };
        let queues = &mut *queue;
        while let Some(front) = queues.fifo.front_mut() {
            let before = front.markers.len();
            let mut failed = false;
            front.markers.retain(|m| match judge(m) {
                Judged::Finished => false,
                Judged::Pending => true,
                Judged::Failed => {
                    // Kept with its block: judged again once kept out.
                    failed = true;
                    true
                }
            });
            let done = (before - front.markers.len()) as u64;
            counters.pending_markers.fetch_sub(done, Ordering::Relaxed);
            if failed {
                // Still pending and allocated in the statistics: its work may still run.
                if let Some(entry) = queues.fifo.pop_front() {
                    self.queued.fetch_sub(1, Ordering::Release);
                    kept_out(&entry);
                    queues.kept_out.push(entry);
                    self.kept.fetch_add(1, Ordering::Release);
                }
                continue;
            }
            // A copy made on the block's buffer without record_stream still counts as a use
            // (atomic loads when none was made; else status queries, never a wait).
            if !front.markers.is_empty() || front.block.buffer.has_copies_in_flight() {
                break;
            }
            if let Some(entry) = queues.fifo.pop_front() {
                self.queued.fetch_sub(1, Ordering::Release);
                counters.pending_blocks.fetch_sub(1, Ordering::Release);
                reusable(entry.block);
            }
        }
        if wait_for_lock && !queues.kept_out.is_empty() {
            // The failed markers are kept: a finish of their streams may have drained them.
            let mut i = 0;
            while i < queues.kept_out.len() {
                let entry = &mut queues.kept_out[i];
                let before = entry.markers.len();
                entry.markers.retain(|m| judge(m) != Judged::Finished);
                let done = (before - entry.markers.len()) as u64;
                counters.pending_markers.fetch_sub(done, Ordering::Relaxed);
                if entry.markers.is_empty() && !entry.block.buffer.has_copies_in_flight() {
                    let entry = queues.kept_out.swap_remove(i);
                    self.kept.fetch_sub(1, Ordering::Release);
                    counters.pending_blocks.fetch_sub(1, Ordering::Release);
                    reusable(entry.block);
                } else {
                    i += 1;
                }
            }
        }
    }
}

#[cold]
fn kept_out(entry: &Entry) {
    tracing::error!(
        size = entry.block.size,
        "pinned host block: a free marker failed (or a wait before it did); the block is kept out of the cache until its stream is synchronized"
    );
}

impl Drop for PendingQueue {
    /// The blocks still waiting (the allocator is gone) are released once their markers
    /// finished: at once when they already have, else from the completion callback of their
    /// last marker ([`release_when_over`]). Copies in flight do not hold a block back here: a
    /// tracked copy holds its own reference to the buffer until it completes
    /// ([`xpu_device::backend::PinnedBuffer`]). Before review h78 every block still waiting
    /// was leaked for good. Blocks kept out after a failed marker, and every block in a bad
    /// fork child, are leaked: work that nothing tells the end of may still use their memory,
    /// and nothing may wait here.
    fn drop(&mut self) {
        let queues = std::mem::take(self.queue.get_mut());
        if xpu_device::fork::is_in_bad_fork() {
            // Blocks and markers alike: no release reaches the driver in a bad fork child.
            std::mem::forget(queues);
            return;
        }
        for mut entry in queues.fifo {
            let mut failed = false;
            entry.markers.retain(|m| match judge(m) {
                Judged::Finished => false,
                Judged::Pending => true,
                Judged::Failed => {
                    failed = true;
                    true
                }
            });
            if failed {
                std::mem::forget(entry.block);
            } else if entry.markers.is_empty() {
                drop(entry.block);
            } else {
                release_when_over(entry);
            }
        }
        for entry in queues.kept_out {
            std::mem::forget(entry.block);
        }
    }
}

/// A block of a dropped allocator whose markers had not finished, released by the callback
/// of the last one to complete.
struct Orphan {
    entry: Mutex<Option<Entry>>,
    left: AtomicUsize,
}

impl Orphan {
    /// The end of one marker: after the last, the block is released when every marker judges
    /// finished, else leaked (a failure: nothing tells when the stream's work on it ends).
    fn one_over(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if let Some(entry) = self.entry.lock().take() {
            if entry.markers.iter().all(|m| judge(m) == Judged::Finished) {
                drop(entry.block);
            } else {
                tracing::warn!(
                    size = entry.block.size,
                    "pinned host block of a dropped allocator: a free marker failed; its memory is leaked"
                );
                std::mem::forget(entry.block);
            }
        }
    }

    /// A marker whose end cannot be told: the block is leaked.
    fn leak(&self) {
        if let Some(entry) = self.entry.lock().take() {
            std::mem::forget(entry.block);
        }
    }
}

/// Releases `entry`'s block once its markers (all still pending) are over, from their
/// completion callbacks ([`ClEvent::on_complete`](xpu_device::backend::ClEvent::on_complete),
/// run on the runtime's callback thread: status queries and a non-blocking unmap there, no
/// wait); leaked when a callback cannot be registered.
fn release_when_over(entry: Entry) {
    let events: Vec<_> = entry.markers.iter().map(|m| m.event().clone()).collect();
    let orphan = Arc::new(Orphan {
        left: AtomicUsize::new(events.len()),
        entry: Mutex::new(Some(entry)),
    });
    for event in events {
        let o = Arc::clone(&orphan);
        if event.on_complete(move |_status| o.one_over()).is_err() {
            orphan.leak();
        }
    }
}
