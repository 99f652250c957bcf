//! Pending frees: per-stream FIFOs of (marker, block) recorded when a block used on other
//! streams (record_stream) is freed.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::backend::{Backend, MarkerStatus};
use crate::stream::StreamKey;

/// Markers of one stream with the blocks they free, oldest first.
type Fifo<M> = VecDeque<(Arc<M>, u32)>;

/// Markers waiting to complete, one FIFO per stream they were recorded on (with whether its
/// head was reported failed).
pub(crate) struct Pending<B: Backend> {
    fifos: Vec<(StreamKey, Fifo<B::Marker>, bool)>,
    count: usize,
}

impl<B: Backend> Default for Pending<B> {
    fn default() -> Self {
        Self {
            fifos: Vec::new(),
            count: 0,
        }
    }
}

impl<B: Backend> Pending<B> {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(crate) fn push(&mut self, stream: StreamKey, marker: Arc<B::Marker>, block: u32) {
        self.count += 1;
        if let Some((_, fifo, _)) = self.fifos.iter_mut().find(|(k, _, _)| *k == stream) {
            fifo.push_back((marker, block));
        } else {
            self.fifos
                .push((stream, VecDeque::from([(marker, block)]), false));
        }
    }

    /// Pops the completed markers at the front of every FIFO, stopping each FIFO at its first
    /// marker that is not (no head-of-line blocking across streams), and returns their
    /// blocks in order, and the blocks of the failed markers newly met at a FIFO's head with
    /// their stream ([`MarkerStatus::Failed`]: the work before them may still be queued; they
    /// stay, and are asked again, until the backend reads them complete, as xpu-alloc's does
    /// once the stream was synchronized after them: review h60, they were dropped and their
    /// blocks kept out for good). Emptied FIFOs are dropped (a stream's FIFO is re-created,
    /// last in order, by its next pending free).
    pub(crate) fn pop_completed(&mut self) -> (Vec<u32>, Vec<(StreamKey, u32)>) {
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        for (stream, fifo, told) in &mut self.fifos {
            while let Some((marker, block)) = fifo.front() {
                match B::marker_status(marker) {
                    MarkerStatus::Complete => done.push(*block),
                    MarkerStatus::Failed => {
                        if !*told {
                            *told = true;
                            failed.push((*stream, *block));
                        }
                        break;
                    }
                    MarkerStatus::Pending => break,
                }
                fifo.pop_front();
                *told = false;
            }
        }
        self.count -= done.len();
        self.fifos.retain(|(_, fifo, _)| !fifo.is_empty());
        (done, failed)
    }

    /// Every marker (oldest first per stream), to be waited for without the shard's lock.
    pub(crate) fn markers(&self) -> Vec<(StreamKey, Arc<B::Marker>)> {
        self.fifos
            .iter()
            .flat_map(|(k, fifo, _)| fifo.iter().map(move |(m, _)| (*k, m.clone())))
            .collect()
    }
}

/// Waits for `markers` (call without any allocator lock or open statistics write).
pub(crate) fn wait_markers<B: Backend>(markers: &[(StreamKey, Arc<B::Marker>)]) {
    for (stream, marker) in markers {
        if let Err(e) = B::wait(marker) {
            tracing::warn!(stream = ?stream, error = %e, "waiting for a stream marker failed");
        }
    }
}
