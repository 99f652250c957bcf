//! `Event`: a lazily created marker on a stream, as `torch.xpu.Event`.

use std::fmt;

use xpu_device::backend::{raw, ClEvent, EventStatus};
use xpu_device::HasDevice;
use xpu_stream::Stream;

use crate::error::EventError;
use crate::recorded::{failure, Recorded, FAILED_WAIT};
use crate::wait;

/// How an event behaves, as `torch.cuda.Event(enable_timing, blocking)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Allow [`Event::elapsed_time`] (profiling timestamps). Streams of the runtime always have
    /// profiling enabled, so this costs nothing on them.
    pub enable_timing: bool,
    /// [`Event::synchronize`] sleeps in `clWaitForEvents` instead of polling (CUDA's
    /// `cudaEventBlockingSync`).
    pub blocking: bool,
}

/// Polls of [`Event::synchronize`] before it falls back to `clWaitForEvents`.
const POLLS_BEFORE_BLOCKING: u32 = 256;

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`).
pub(crate) fn check_fork() -> Result<(), EventError> {
    xpu_device::fork::refuse_in_bad_fork(EventError::BadFork)
}

/// An event: a point in a stream's work, as `torch.xpu.Event` / `torch.cuda.Event`.
///
/// - [`Event::new`] creates nothing (no driver call); the OpenCL event is a marker enqueued by
///   the first [`Event::record`], which also fixes the event's device. Re-recording captures a
///   new point (a new marker; the old one is released).
/// - `Send + Sync`, move-only; the OpenCL event is released on drop.
///
/// Flushing: OpenCL only guarantees progress for flushed commands, but a flush is a driver call
/// the common `record` + `query` pair does not need on drivers that submit at enqueue time. So
/// `record` never flushes; `query` flushes the queue the second time it finds the recording
/// incomplete (so a polling loop always terminates, and one `query` costs exactly one status
/// call); `synchronize`, `wait` on another stream and `elapsed_time` flush as needed.
///
/// Completion the runtime already knows is not asked of the driver (whose status may lag its
/// waits: NVIDIA's OpenCL was seen reading a marker incomplete right after `clWaitForEvents`
/// or `clFinish` covering it returned): after [`Event::synchronize`], or a
/// [`Stream::synchronize`], device-wide [`xpu_stream::synchronize`] or `true`
/// [`Stream::query`] that began after the record, [`Event::query`] is `true` with no driver
/// call, as `torch.cuda.Event.query` after `synchronize`.
pub struct Event {
    flags: EventFlags,
    recorded: Option<Recorded>,
}

impl Event {
    /// A new, unrecorded event. Creates nothing.
    pub const fn new(flags: EventFlags) -> Event {
        Event {
            flags,
            recorded: None,
        }
    }

    /// A new event with timing enabled (`Event::new(EventFlags { enable_timing: true, .. })`).
    pub const fn timing() -> Event {
        Event::new(EventFlags {
            enable_timing: true,
            blocking: false,
        })
    }

    /// Adopts an OpenCL event made by foreign code on `stream`'s queue (an OpenCL library's
    /// returned `cl_event`, wrapped first with `ClEvent::from_raw_retained`, which is where
    /// the `unsafe` is) as a recorded xpu event: [`Event::query`], [`Event::synchronize`],
    /// [`Event::wait`] on any stream (another device's included) and, with `flags.enable_timing`
    /// on a profiling queue, [`Event::elapsed_time`] work on it as on a recorded marker.
    /// Re-recording replaces it with a marker of its own, as usual.
    ///
    /// A command of the stream's queue adopted here is covered by later synchronizes of the
    /// stream as a marker recorded now would be (see [`Event::query`]), and judged in order as
    /// one: after a wait logged on the queue failed, it reports that failure as such a marker
    /// does (see [`Event::record`]); an adopted user event
    /// is no command of the queue, so only its own status (or [`Event::synchronize`]) tells
    /// its completion.
    ///
    /// # Errors
    /// [`EventError::ForeignContext`] when the event belongs to another OpenCL context than
    /// the stream's queue (it was not made on that stream's device);
    /// [`EventError::ForeignQueue`] when it is the event of a command of another queue (a
    /// user event, which has no queue, is accepted);
    /// [`EventError::TimingUnavailable`] for `enable_timing` on a queue without profiling;
    /// [`EventError::UserEventTiming`] for `enable_timing` with a user event (it has no
    /// profiling information, OpenCL 3.0 §5.14); `Stream(ExternalReleased)`; a failed `clGetEventInfo` / `clGetCommandQueueInfo`.
    pub fn from_cl_event(
        event: ClEvent,
        stream: &Stream,
        flags: EventFlags,
    ) -> Result<Event, EventError> {
        check_fork()?;
        let queue = stream.queue()?;
        if event.context_raw()? != queue.context_raw()? {
            return Err(EventError::ForeignContext {
                device: stream.device(),
            });
        }
        // Flushes go to the stream's queue: an event of another queue could then never be
        // submitted by a polling `query` (OpenCL 3.0 §5.15). User events have no queue.
        let of = event.queue_raw()?;
        if !of.is_null() && of != queue.as_raw() {
            return Err(EventError::ForeignQueue {
                stream: stream.id(),
                device: stream.device(),
            });
        }
        if flags.enable_timing && of.is_null() {
            return Err(EventError::UserEventTiming {
                device: stream.device(),
            });
        }
        if flags.enable_timing && !stream.has_profiling()? {
            return Err(EventError::TimingUnavailable {
                stream: stream.id(),
                device: stream.device(),
            });
        }
        let recorded = if of.is_null() {
            // A user event is no command of the queue: waits on its own stream are real.
            Recorded::adopted(*stream, queue, event)
        } else {
            // A command of the queue: judged in order with the waits logged on it, as a
            // marker recorded now (review h83: PoCL completes a command after a failed wait
            // while earlier ones stay queued, and it read complete over a closed gate).
            let marker = queue.adopt_in_order(event);
            Recorded::new(*stream, queue, marker)
        };
        Ok(Event {
            flags,
            recorded: Some(recorded),
        })
    }

    /// The flags given at creation.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// The device fixed by the first record; `None` before it.
    pub fn device(&self) -> Option<usize> {
        self.recorded.as_ref().map(|r| r.stream.device())
    }

    /// The stream of the latest record.
    pub fn stream(&self) -> Option<Stream> {
        self.recorded.as_ref().map(|r| r.stream)
    }

    /// True once recorded.
    pub fn is_recorded(&self) -> bool {
        self.recorded.is_some()
    }

    /// The raw `cl_event` of the latest record (`None` before the first), valid while the event
    /// is not re-recorded or dropped.
    pub fn as_raw(&self) -> Option<raw::cl_event> {
        self.recorded.as_ref().map(|r| r.event().as_raw())
    }

    /// Captures the work submitted to `stream` so far: one marker (`clEnqueueMarkerWithWaitList`,
    /// one driver call, no flush), numbered among the stream's commands (an atomic increment)
    /// so that a later synchronize of the stream makes [`Event::query`] exact. Forgets what was
    /// known of the former point's completion.
    ///
    /// The marker is judged with the waits enqueued on the stream before it
    /// (`CommandQueue::enqueue_ordered_marker`): a driver may complete a marker after a
    /// failed wait while earlier commands stay queued (PoCL does), so after a wait of the
    /// stream failed, [`Event::query`], [`Event::synchronize`] and [`Event::elapsed_time`]
    /// report that failure and [`Event::wait`] refuses, until a synchronize of the stream
    /// (as a CUDA error is sticky; reviews h67, h68).
    ///
    /// # Errors
    /// `DeviceMismatch` when the event was recorded before on another device;
    /// `TimingUnavailable` for a timing event on an external queue without profiling;
    /// `Stream(ExternalReleased)`; a failed enqueue.
    pub fn record(&mut self, stream: &Stream) -> Result<(), EventError> {
        check_fork()?;
        if let Some(r) = &self.recorded {
            if r.stream.device() != stream.device() {
                return Err(EventError::DeviceMismatch {
                    event: r.stream.device(),
                    stream: stream.device(),
                });
            }
        }
        if self.flags.enable_timing && !stream.has_profiling()? {
            return Err(EventError::TimingUnavailable {
                stream: stream.id(),
                device: stream.device(),
            });
        }
        let queue = stream.enqueue_queue("event record")?;
        // Judged with the waits enqueued before it (see `Recorded`).
        let marker = queue.enqueue_ordered_marker()?;
        // Numbered after the enqueue returned (see `Recorded`).
        self.recorded = Some(Recorded::new(*stream, queue.queue_ref(), marker));
        Ok(())
    }

    /// Records on the current stream of the current device.
    ///
    /// # Errors
    /// As [`Event::record`] and [`xpu_stream::current_stream`]; `BadFork` in a bad fork child.
    pub fn record_current(&mut self) -> Result<(), EventError> {
        check_fork()?;
        let s = xpu_stream::current_stream_here()?;
        self.record(&s)
    }

    /// True when the captured work has completed; true when never recorded; never blocks, as
    /// `torch.cuda.Event.query` (`cudaEventQuery`).
    ///
    /// Exact after a synchronize, as `torch.cuda.Event.query` after `Event.synchronize` /
    /// `Stream.synchronize`: `true`, from the runtime's own knowledge, with no driver call,
    /// once any of these returned successfully after the record (for a re-recorded event,
    /// after its latest record):
    /// - [`Event::synchronize`] of this event (or a query or synchronize that read the
    ///   marker's status `CL_COMPLETE`);
    /// - [`Stream::synchronize`] of the recording stream, or the device-wide
    ///   [`xpu_stream::synchronize`], begun after the record;
    /// - [`Stream::query`] of the recording stream returning `true`, begun after the record.
    ///
    /// The stream cases do not apply to an adopted user event ([`Event::from_cl_event`]): no
    /// queue orders it. Otherwise: one status call
    /// (`clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)`, OpenCL 3.0 §5.11), plus one flush
    /// on the second incomplete answer (see the type docs).
    ///
    /// # Errors
    /// A failed status query or the abnormal status of the captured work (read from the
    /// driver: a command that failed before a covering stream synchronize reads `true` here
    /// when the driver's `clFinish` did not report the failure, as PoCL's does not;
    /// [`Event::synchronize`] reports it).
    #[inline]
    pub fn query(&self) -> Result<bool, EventError> {
        check_fork()?;
        match &self.recorded {
            None => Ok(true),
            Some(r) => r.poll(),
        }
    }

    /// Blocks the host until the captured work completes; a no-op when never recorded, as
    /// `torch.cuda.Event.synchronize` (`cudaEventSynchronize`). Without `blocking`, polls the
    /// status a few hundred times (yielding the CPU) before sleeping in `clWaitForEvents`;
    /// with `blocking`, sleeps at once. Once it returned `Ok`, the event is known complete:
    /// [`Event::query`] answers `true` without a driver call, and a second `synchronize`
    /// returns at once (until the event is re-recorded).
    ///
    /// After a wait enqueued on the stream before the record failed (see [`Event::record`]),
    /// the driver's completion of the marker is not trusted: the failure is returned (as
    /// `cudaEventSynchronize` returns a sticky error), at once, without waiting for the work
    /// enqueued before it, until a synchronize of the stream.
    ///
    /// # Errors
    /// A failed wait or the abnormal status of the captured work (also after a stream
    /// synchronize that covered it: this asks the driver unless an earlier `synchronize`
    /// of the event succeeded); the status of a wait enqueued before the record that failed.
    pub fn synchronize(&self) -> Result<(), EventError> {
        check_fork()?;
        let Some(r) = &self.recorded else {
            return Ok(());
        };
        if r.is_known_done() {
            return Ok(());
        }
        r.flush_once()?;
        if !self.flags.blocking {
            for i in 0..POLLS_BEFORE_BLOCKING {
                // Judged in order (see below): a failed earlier wait is the event's failure.
                if r.driver_says_complete()? {
                    return Ok(());
                }
                if i < 16 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        // A wait enqueued before the record failed: reported now, as on a driver that
        // completes such a marker at the failure (PoCL). NVIDIA keeps it queued behind the
        // earlier work, so the wait below blocked until that work ran: behind a closed gate a
        // blocking event's `synchronize` never returned (an H100, 2026-12-07).
        if let Some(m) = r.marker() {
            if m.drained_by_finish() {
                // Every command before the marker completed: its status says the rest (a
                // marker failed with a wait that synchronize handled reads complete), where
                // `clWaitForEvents` reports the driver's failure of it (-14 on PoCL for a
                // blocking event whose `query` read true: review h83).
                if r.driver_says_complete()? {
                    return Ok(());
                }
            } else if m.follows_failed_wait() {
                return Err(failure(r.failed_before().unwrap_or(FAILED_WAIT)));
            }
        }
        // `clWaitForEvents` returns `CL_SUCCESS` only once the event completed (OpenCL 3.0,
        // `clWaitForEvents`); the driver's status may still lag it, so this is kept.
        r.event().wait()?;
        // A marker is judged in order: while a wait enqueued before it is pending it is not
        // done (polled, backing off to 1 ms); after such a wait failed, the driver may have
        // completed it while earlier commands stay queued (PoCL: review h67), and nothing
        // tells when those ran, so the failure is reported (sticky until a synchronize of the
        // stream; a drain here would also wait for work enqueued after the record: review
        // h68).
        if r.marker().is_some() {
            let mut pause = std::time::Duration::from_micros(20);
            loop {
                match r.status()? {
                    EventStatus::Complete => break,
                    EventStatus::Error(code) => return Err(failure(code)),
                    _ => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(1));
                    }
                }
            }
        }
        r.set_done();
        Ok(())
    }

    /// Makes all future work on `stream` wait for the captured work, without blocking the host;
    /// a no-op when never recorded, or when the captured work is known over (a synchronize of
    /// the recording stream, or of the event, returned since the record). Same device: a
    /// barrier with this event in its wait list
    /// (`clEnqueueBarrierWithWaitList`). Another device (another OpenCL context): a user event
    /// of the waiting device, completed by a callback when this event completes, in the
    /// barrier's wait list.
    ///
    /// # Errors
    /// A failed enqueue, flush or callback registration; `Stream(ExternalReleased)`; a
    /// `"command execution"` error when a wait enqueued on the recording stream before the
    /// record failed and the stream was not synchronized since: a barrier on such a marker
    /// would not hold `stream` back (see [`Event::record`]).
    pub fn wait(&self, stream: &Stream) -> Result<(), EventError> {
        check_fork()?;
        match &self.recorded {
            None => Ok(()),
            Some(r) => wait::stream_waits_for(stream, r),
        }
    }

    /// Milliseconds from this event to `end`, from the devices' profiling `END` timestamps of
    /// the two markers (as torch.xpu: `(end - start) * 1e-6`). Negative when `end` was
    /// captured first.
    ///
    /// Checks, in CUDA's order (timing first; torch.xpu checks it last), each with its error:
    /// 1. both have `enable_timing` (`TimingNotEnabled`);
    /// 2. both recorded (`NotRecorded`);
    /// 3. same device (`DifferentDevices`; needs both recorded);
    /// 4. both completed (`NotCompleted`; not waited for: synchronize `end` first; a point
    ///    whose failure is already known, its own or a wait's before it, reports it here, as
    ///    [`Event::query`] does);
    /// 5. neither recorded after a failed wait of its stream (its marker's time tells nothing
    ///    of the work before it: a `"command execution"` error with the wait's status, also
    ///    after a synchronize of the stream cleared the failure; review h69).
    ///
    /// # Errors
    /// The five above; a failed profiling query.
    pub fn elapsed_time(&self, end: &Event) -> Result<f64, EventError> {
        check_fork()?;
        if !self.flags.enable_timing || !end.flags.enable_timing {
            return Err(EventError::TimingNotEnabled);
        }
        let (Some(a), Some(b)) = (&self.recorded, &end.recorded) else {
            return Err(EventError::NotRecorded);
        };
        let (da, db) = (a.stream.device(), b.stream.device());
        if da != db {
            return Err(EventError::DifferentDevices { start: da, end: db });
        }
        if !a.poll()? || !b.poll()? {
            return Err(EventError::NotCompleted);
        }
        // A marker recorded after a failed wait has no meaningful time (see `Recorded`).
        if let Some(code) = a.failed_before().or_else(|| b.failed_before()) {
            return Err(failure(code));
        }
        let t0 = a
            .event()
            .profiling(xpu_device::backend::ProfilingInfo::End)?;
        let t1 = b
            .event()
            .profiling(xpu_device::backend::ProfilingInfo::End)?;
        Ok((t1 as f64 - t0 as f64) * 1e-6)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // In a bad fork child the parent's marker is leaked, not released (a driver call).
        drop(xpu_device::fork::take_unless_bad_fork(&mut self.recorded));
    }
}

impl Default for Event {
    fn default() -> Event {
        Event::new(EventFlags::default())
    }
}

impl HasDevice for Event {
    fn device_index(&self) -> Option<usize> {
        self.device()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Event");
        d.field("flags", &self.flags);
        match &self.recorded {
            None => d.field("cl_event", &"uninitialized"),
            Some(r) => d
                .field("device", &r.stream.device())
                .field("cl_event", &r.event().as_raw()),
        };
        d.finish()
    }
}
