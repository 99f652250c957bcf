//! Freed blocks waiting for stream markers (reference §5: `free` with recorded streams,
//! `process_events`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use xpu_event::{Event, EventFlags};
use xpu_stream::Stream;

use super::block::Block;
use super::stats::Counters;

/// A freed block and the markers of the streams that used it.
#[derive(Debug)]
struct Entry {
    block: Box<Block>,
    markers: Vec<Event>,
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
/// nothing is pending.
#[derive(Debug, Default)]
pub(crate) struct PendingQueue {
    queue: Mutex<VecDeque<Entry>>,
}

/// True once the marker's work has finished. A marker whose status cannot be read, or whose
/// work terminated abnormally, no longer has running work: it counts as finished (logged).
fn finished(marker: &Event) -> bool {
    match marker.query() {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!("pinned host block: marker query failed ({e}); treating it as finished");
            true
        }
    }
}

/// Records one marker on `stream`; when that fails, synchronizes the stream instead (no
/// marker needed then). `Err` when neither worked.
fn mark(stream: &Stream) -> Result<Option<Event>, ()> {
    let mut marker = Event::new(EventFlags::default());
    match marker.record(stream) {
        Ok(()) => Ok(Some(marker)),
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
        queue.push_back(Entry { block, markers });
        // Counted under the lock, so that processing never sees an entry it cannot count.
        counters.pending_markers.fetch_add(n, Ordering::Relaxed);
        counters.pending_blocks.fetch_add(1, Ordering::Release);
        Parked::Waiting
    }

    /// Hands every block whose markers all completed to `reusable`, oldest first, stopping at
    /// the first block with an unfinished marker. With `wait_for_lock` false, returns at once
    /// when another thread is processing or nothing is pending (the cached path's check is
    /// one atomic load).
    pub(crate) fn process(
        &self,
        counters: &Counters,
        wait_for_lock: bool,
        mut reusable: impl FnMut(Box<Block>),
    ) {
        if counters.pending_blocks.load(Ordering::Acquire) == 0 {
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
        while let Some(front) = queue.front_mut() {
            let before = front.markers.len();
            front.markers.retain(|m| !finished(m));
            let done = (before - front.markers.len()) as u64;
            counters.pending_markers.fetch_sub(done, Ordering::Relaxed);
            // A copy made on the block's buffer without record_stream still counts as a use
            // (atomic loads when none was made; else status queries, never a wait).
            if !front.markers.is_empty() || front.block.buffer.has_copies_in_flight() {
                break;
            }
            if let Some(entry) = queue.pop_front() {
                counters.pending_blocks.fetch_sub(1, Ordering::Release);
                reusable(entry.block);
            }
        }
    }
}
