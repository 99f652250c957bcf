//! `xpu-stream`: streams (in-order OpenCL command queues), per-device stream pools, the
//! current stream of each thread, [`StreamGuard`] and external streams, modeled on
//! `torch.xpu`'s streams (`c10::xpu::XPUStream`).
//!
//! - A [`Stream`] is a `Copy` handle (device, id). Its queue is in-order with profiling enabled
//!   and lives in the device's pool: 3 priority levels x 32 queues plus a default queue,
//!   created on the first touch of the device ([`get_stream_from_pool`], [`default_stream`]).
//! - Priorities: low = 1, normal = 0, high = -1 ([`priority_range`]); others clamp
//!   ([`clamp_priority`]). They reach the driver only through `cl_khr_priority_hints`, where
//!   the device reports it; elsewhere (PoCL, NVIDIA) the priority is recorded on the stream
//!   only.
//! - [`current_stream`] / [`set_stream`] per thread and device; every thread starts on the
//!   default stream. [`StreamGuard`] as `torch.xpu.stream(s)`.
//! - [`synchronize`] waits on every stream of a device, external ones included.
//! - Each queue knows, without asking the driver, what completed: commands numbered with
//!   [`QueueRef::submission`] are [`QueueRef::is_known_complete`] once a synchronize of their
//!   stream (or a `true` [`Stream::query`]) that began after them returned (what makes
//!   `xpu_event::Event::query` exact after a synchronize).
//! - [`ExternalStream`] wraps a user's queue after validating it.
//!
//! Events (record, wait, timing) and stream methods that need them are in `xpu-event`.
//!
//! ```
//! # fn main() -> Result<(), xpu_stream::StreamError> {
//! # if xpu_device::device_count() == 0 { return Ok(()); }
//! let s = xpu_stream::get_stream_from_pool(xpu_stream::PRIORITY_HIGH, 0)?;
//! {
//!     let _g = xpu_stream::StreamGuard::new(s)?;
//!     assert_eq!(xpu_stream::current_stream(0)?, s);
//! }
//! assert!(xpu_stream::current_stream(0)?.is_default());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod capture;
mod current;
mod error;
mod external;
mod guard;
mod id;
mod pool;
mod priority;
mod progress;
mod state;
mod stream;
mod sync;

pub use capture::{device_is_capturing, hooks, CaptureGuard, DirectQueue, PERMIT_DRAIN_LIMIT};
pub use current::{current_stream, current_stream_here, set_stream};
pub use error::StreamError;
pub use external::ExternalStream;
pub use guard::StreamGuard;
pub use pool::{default_stream, get_stream_from_pool, MAX_DEVICES, STREAMS_PER_LEVEL};
pub use priority::{
    clamp_priority, priority_range, LEVELS, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL,
};
pub use progress::Submission;
pub use stream::{QueueRef, Stream};
pub use sync::synchronize;
