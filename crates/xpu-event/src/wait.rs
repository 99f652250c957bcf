//! Making a stream wait for a recorded point, within one OpenCL context or across two.
//!
//! Contexts are per device, and an OpenCL wait list may only hold events of the waiting queue's
//! context. `Event::wait` on another device's stream therefore creates a user event on the waiting
//! device and sets it from the recorded event's completion callback (`ClEvent::forward_to`: the
//! driver's callback sets the status itself, no user code). PoCL never calls a completion callback
//! for a failed command, so each forward is also kept until its source is over, and a sweep at
//! every failure the runtime starts (`set_failed`, an unset user event failed on drop, a forward
//! passing a failure on) sets the bridge to the source's error status: the waiting stream's
//! commands terminate instead of waiting forever.

use xpu_stream::Stream;

use crate::error::EventError;
use crate::recorded::{failure, Recorded, FAILED_WAIT};

/// Enqueues on `stream` a barrier that waits for `r`. No host blocking.
pub(crate) fn stream_waits_for(stream: &Stream, r: &Recorded) -> Result<(), EventError> {
    if *stream == r.stream && r.in_stream_order {
        // In-order: later work on the same queue already follows the marker (not an
        // adopted user event, which no queue orders).
        return Ok(());
    }
    // Known over (a synchronize of the recording stream covered it): nothing to wait for. A
    // barrier on a marker that a failed wait failed (NVIDIA fails it with the wait) is refused
    // by NVIDIA's enqueue even after the synchronize that handled the failure (-5 on an H100,
    // 2026-12-07).
    if r.is_known_complete() || r.marker().is_some_and(|m| m.drained_by_finish()) {
        return Ok(());
    }
    // A marker after a failed wait of its stream orders nothing: the driver may complete it
    // while the commands before it stay queued (PoCL: review h67), and PoCL also runs the
    // commands after a barrier whose wait failed, so a barrier cannot pass the failure on.
    // The failure is reported instead, as `synchronize` reports it (until a synchronize of
    // the recording stream, after which the stream's work is known done).
    if let Some(m) = r.marker() {
        if m.follows_failed_wait() {
            return Err(failure(r.failed_before().unwrap_or(FAILED_WAIT)));
        }
    }
    // OpenCL 3.0 §5.13: an event used in another queue's wait list must have been flushed.
    r.flush_once()?;
    let queue = stream.enqueue_queue("event wait")?;
    if stream.device() == r.stream.device() {
        // One context per device: the event can sit in the wait list directly.
        queue.enqueue_barrier(&[r.event()])?;
        return Ok(());
    }
    // Another device means another context, whose wait lists cannot hold this event
    // (CL_INVALID_CONTEXT). Bridge with a user event of the waiting device.
    if r.event().is_complete()? {
        return Ok(());
    }
    let bridge = xpu_device::device(stream.device())?.create_user_event()?;
    // The driver's callback sets the bridge to the event's final status (a negative one fails
    // the waiting commands too), without going through the callback thread of user closures.
    r.event().forward_to(&bridge)?;
    queue.enqueue_barrier(&[&bridge])?;
    Ok(())
}
