//! Typed errors of the stream layer.

use xpu_device::{ClError, DeviceError};

/// Errors of streams, pools, the current stream and external streams.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The process is a child forked after its parent initialized OpenCL: no stream can be
    /// used (see `xpu_device::fork`). Returned at once, without a driver call or a lock.
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// A device-layer failure (bad index, context creation...). A device-layer `BadFork`
    /// converts to [`StreamError::BadFork`].
    #[error(transparent)]
    Device(DeviceError),
    /// A failed OpenCL call on a stream's queue.
    #[error(transparent)]
    OpenCl(#[from] ClError),
    /// The device index is valid but above what the stream layer supports.
    #[error("device {index} is beyond the {max} devices the stream layer supports")]
    TooManyDevices {
        /// The device index.
        index: usize,
        /// [`MAX_DEVICES`](crate::MAX_DEVICES).
        max: usize,
    },
    /// External stream check 1: the queue handle is null.
    #[error("external queue must not be null")]
    ExternalNull,
    /// External stream check 2: the queue is out-of-order.
    #[error("external queue must be in-order (it has CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)")]
    ExternalNotInOrder,
    /// External stream check 3: the queue belongs to another device.
    #[error("external queue doesn't match device {device}: it was created for another device")]
    ExternalDeviceMismatch {
        /// The device index the caller gave.
        device: usize,
    },
    /// External stream check 4: the queue was created on another context.
    #[error(
        "external queue must be created with the same context as the runtime uses for device \
         {device} (see xpu_device::Device::context)"
    )]
    ExternalContextMismatch {
        /// The device index the caller gave.
        device: usize,
    },
    /// The stream is an external stream whose [`ExternalStream`](crate::ExternalStream) owner
    /// was dropped.
    #[error(
        "external stream {id:#x} on device {device} was dropped; its queue is no longer registered"
    )]
    ExternalReleased {
        /// The stream id.
        id: u64,
        /// The device index.
        device: usize,
    },
    /// A direct command (`operation`) on a stream that a graph is capturing (as torch.cuda's
    /// "operation not permitted when stream is capturing"): during a capture, commands go
    /// through the capture handle, and synchronizing has nothing to wait for. Nothing was
    /// enqueued; the stream stays usable.
    #[error(
        "{operation} on stream {id:#x} of device {device}, which a graph is capturing \
         (enqueue through the capture handle)"
    )]
    Capturing {
        /// The stream's device.
        device: usize,
        /// The stream id.
        id: u64,
        /// What was refused (`"synchronize"`, `"copy"`, ...).
        operation: &'static str,
    },
    /// [`CaptureGuard::begin`](crate::CaptureGuard::begin) on a thread that holds a
    /// direct-enqueue permit (a live [`DirectQueue`](crate::DirectQueue)): the capture would
    /// wait for that permit, which the waiting thread itself holds. Nothing was marked.
    #[error(
        "cannot begin a capture of stream {id:#x} of device {device} while this thread holds a direct-enqueue permit (a live DirectQueue): drop it first"
    )]
    PermitHeld {
        /// The stream's device.
        device: usize,
        /// The stream id.
        id: u64,
    },
    /// A capture's beginning waited [`PERMIT_DRAIN_LIMIT`](crate::PERMIT_DRAIN_LIMIT) for a
    /// direct-enqueue permit of the stream that was not released: a
    /// [`DirectQueue`](crate::DirectQueue) kept across a wait, or forgotten
    /// (`std::mem::forget`, which keeps its permit for ever). The stream is left as it was,
    /// not capturing.
    #[error(
        "cannot begin a capture of stream {id:#x} of device {device}: a direct-enqueue permit of the stream was not released within {waited_ms} ms (a DirectQueue kept across a wait, or forgotten with std::mem::forget)"
    )]
    PermitNotReleased {
        /// The stream's device.
        device: usize,
        /// The stream id.
        id: u64,
        /// How long the capture waited, in milliseconds.
        waited_ms: u64,
    },
    /// A capture began on a stream that another capture holds.
    #[error("stream {id:#x} of device {device} is already being captured into a graph")]
    AlreadyCapturing {
        /// The stream's device.
        device: usize,
        /// The stream id.
        id: u64,
    },
}

xpu_device::impl_is_bad_fork! {
    /// True for a bad fork (see `xpu_device::fork`): [`StreamError::BadFork`], or a
    /// device-layer `BadFork` in [`StreamError::Device`] (which `From` turns into
    /// `StreamError::BadFork`, but the variant can hold one).
    StreamError { own: BadFork; wraps: Device; }
}

impl From<DeviceError> for StreamError {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::BadFork => StreamError::BadFork,
            e => StreamError::Device(e),
        }
    }
}

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`).
pub(crate) fn check_fork() -> Result<(), StreamError> {
    xpu_device::fork::refuse_in_bad_fork(StreamError::BadFork)
}
