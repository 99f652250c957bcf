//! Typed errors of the event layer.

use xpu_device::{ClError, DeviceError};
use xpu_stream::StreamError;

/// Errors of events, cross-stream waits, timing and the test gate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The process is a child forked after its parent initialized OpenCL: events cannot be
    /// used (see `xpu_device::fork`). Returned at once, without a driver call.
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// Re-recording on a stream of another device than the first record's (torch: "Event
    /// device {d} does not match recording stream's device {s}.").
    #[error("event device {event} does not match recording stream's device {stream}")]
    DeviceMismatch {
        /// The device fixed by the event's first record.
        event: usize,
        /// The device of the stream passed to `record`.
        stream: usize,
    },
    /// A timing event recorded on an external stream whose queue has no profiling.
    #[error(
        "event has enable_timing but the queue of stream {stream:#x} on device {device} was \
         created without CL_QUEUE_PROFILING_ENABLE"
    )]
    TimingUnavailable {
        /// The stream id.
        stream: u64,
        /// The device index.
        device: usize,
    },
    /// An OpenCL user event adopted with `Event::from_cl_event` and `enable_timing`: a user
    /// event has no profiling information (OpenCL 3.0 §5.14), so no elapsed time can be
    /// measured from it.
    #[error(
        "an adopted user event (device {device}) has no profiling information: adopt it \
         without enable_timing"
    )]
    UserEventTiming {
        /// The stream's device.
        device: usize,
    },
    /// `elapsed_time` check 1: an event lacks `enable_timing`.
    #[error("both events must be created with enable_timing = true")]
    TimingNotEnabled,
    /// `elapsed_time` check 2: an event was never recorded.
    #[error("both events must be recorded before calculating elapsed time")]
    NotRecorded,
    /// `elapsed_time` check 3: the events are on different devices (their clocks differ).
    #[error("both events must be on the same device to calculate elapsed time (start on device {start}, end on device {end})")]
    DifferentDevices {
        /// The start event's device.
        start: usize,
        /// The end event's device.
        end: usize,
    },
    /// `elapsed_time` check 4: an event's work has not completed.
    #[error("both events must be completed before calculating elapsed time")]
    NotCompleted,
    /// A gate blocked a stream of another device than its own.
    #[error("gate of device {gate} cannot block a stream of device {stream}")]
    GateDevice {
        /// The gate's device.
        gate: usize,
        /// The stream's device.
        stream: usize,
    },
    /// An OpenCL event adopted with `Event::from_cl_event` belongs to another context than
    /// the queue of the stream it was said to come from.
    #[error(
        "the adopted cl_event does not belong to the OpenCL context of device {device}'s stream"
    )]
    ForeignContext {
        /// The stream's device.
        device: usize,
    },
    /// An OpenCL event adopted with `Event::from_cl_event` is the event of a command of
    /// another queue than the stream's.
    #[error("the adopted cl_event is of a command of another queue than stream {stream:#x} on device {device}")]
    ForeignQueue {
        /// The stream id.
        stream: u64,
        /// The stream's device.
        device: usize,
    },
    /// A stream-layer failure.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A device-layer failure; a failed OpenCL call on an event is a
    /// [`DeviceError::OpenCl`] here.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

xpu_device::impl_from_via!(EventError::Device(DeviceError) <- ClError);

xpu_device::impl_is_bad_fork! {
    /// True for a bad fork (see `xpu_device::fork`): [`EventError::BadFork`], or a `BadFork`
    /// of the stream or device layer this error wraps ([`StreamError::is_bad_fork`],
    /// [`DeviceError::is_bad_fork`]).
    EventError { own: BadFork; wraps: Stream, Device; }
}
