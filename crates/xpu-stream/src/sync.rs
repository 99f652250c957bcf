//! Device-wide synchronization.

use crate::error::{check_fork, StreamError};
use crate::{external, pool};

/// Blocks until every stream of `device` the runtime knows has finished its work: the default
/// stream, the 96 pool streams (when the pool exists) and every registered external stream.
/// Like `torch.cuda.synchronize`, external streams are included (torch.xpu skips them). All
/// queues are waited on even if one fails; the first error is returned.
///
/// Every event recorded on one of these streams before this call began is then known
/// complete, where that stream's `clFinish` returned `Ok`: `xpu_event::Event::query` answers
/// `true` without asking the driver, as `torch.cuda.Event.query` after
/// `torch.cuda.synchronize` (see [`Stream::synchronize`](crate::Stream::synchronize)).
///
/// # Errors
/// `Device(InvalidDevice)` for a bad index; the first failed `clFinish`; `BadFork` in a bad
/// fork child (at once); [`StreamError::Capturing`] while a graph captures a stream of the
/// device (as `cudaDeviceSynchronize` during a capture), without waiting.
pub fn synchronize(device: usize) -> Result<(), StreamError> {
    check_fork()?;
    xpu_device::check_device(device)?;
    if crate::capture::device_is_capturing(device) {
        return Err(StreamError::Capturing {
            device,
            id: 0,
            operation: "device synchronize",
        });
    }
    let mut first: Option<StreamError> = None;
    let mut note = |r: Result<(), xpu_device::ClError>| {
        if let (Err(e), None) = (r, &first) {
            first = Some(e.into());
        }
    };
    if let Some(p) = pool::existing(device) {
        for q in p.all() {
            // Each queue's finish raises its own watermark (see `progress`).
            note(q.finish());
        }
    }
    for q in external::queues_of(device) {
        note(q.finish());
    }
    first.map_or(Ok(()), Err)
}
