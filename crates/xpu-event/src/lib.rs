//! `xpu-event`: events (record, query, synchronize, wait, elapsed_time), the stream methods
//! that need them ([`StreamExt`]) and a [`Gate`]: a user event that holds a stream's work
//! back until the host opens it (for deterministic tests, ours and users'). Modeled on `torch.xpu.Event` / `torch.cuda.Event`.
//!
//! An [`Event`] is an OpenCL marker enqueued on a stream's queue at record time; creating an
//! event creates nothing. Waiting is a barrier with a wait list, so the host never blocks.
//!
//! ```
//! use xpu_event::{Event, StreamExt};
//! # fn main() -> Result<(), xpu_event::EventError> {
//! # if xpu_device::device_count() == 0 { return Ok(()); }
//! let a = xpu_stream::get_stream_from_pool(0, 0)?;
//! let b = xpu_stream::get_stream_from_pool(0, 0)?;
//! let (mut start, mut end) = (Event::timing(), Event::timing());
//! start.record(&a)?;
//! // ... work on a ...
//! end.record(&a)?;
//! b.wait_event(&end)?; // b's later work runs after a's
//! end.synchronize()?;
//! assert!(start.elapsed_time(&end)? >= 0.0);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod error;
mod event;
mod ext;
mod gate;
mod recorded;
mod wait;

pub use error::EventError;
pub use event::{Event, EventFlags};
pub use ext::StreamExt;
pub use gate::{Gate, GATE_OPEN_LIMIT};

/// The former home of [`Gate`], kept as an alias so `xpu_event::test_support::Gate` still
/// names it.
#[doc(hidden)]
pub mod test_support {
    pub use crate::gate::Gate;
}
