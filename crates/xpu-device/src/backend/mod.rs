//! All OpenCL FFI of the runtime: the one module of the workspace with `unsafe` code.
//!
//! Every handle here is RAII: `Clone` retains the OpenCL object, `Drop` releases it, and a
//! failed release never panics: it is logged with `tracing` and kept, and the next
//! [`CommandQueue::finish`] reports it (see [`take_release_error`]). Every failed call becomes a
//! [`ClError`] naming the OpenCL function and the symbolic status code.
//!
//! The raw handles (`as_raw()`) are for interop with other OpenCL or SYCL code that shares the
//! platform, device, context or queue; they stay valid as long as the wrapper that returned them.
//!
//! Thread safety: all OpenCL API calls are thread-safe except `clSetKernelArg` and
//! `clSetKernelExecInfo` (OpenCL 3.0 specification, appendix A.2 "Multiple Host Threads"), so
//! every handle is `Send + Sync` except [`Kernel`], which is `Send` only.

mod callbacks;
mod command_buffer;
mod context;
pub mod device_id;
mod event;
mod forwards;
mod held;
mod live;
mod memory;
mod pinned;
mod platform;
mod program;
mod queue;
mod release;

pub use callbacks::{on_callback_thread, wait_for_callbacks};
pub use command_buffer::{command_buffer_support, CommandBuffer, CommandBufferSupport};
pub use context::{Context, DeviceLimits};
pub use device_id::DeviceId;
pub use event::{ClEvent, EventStatus, ProfilingInfo, DROPPED_UNSET_STATUS};
pub use live::{live_objects, LiveObjects};
pub use memory::{Buffer, MemFlags};
pub use pinned::PinnedBuffer;
pub use platform::Platform;
pub use program::{BufferElement, Kernel, KernelScalar, Program};
pub use queue::{CommandQueue, PinnedBytes, QueueOptions, QueuePriority};
pub use release::take_release_error;

/// Raw OpenCL handle types, for interop.
pub mod raw {
    pub use opencl3::types::{
        cl_command_queue, cl_context, cl_device_id, cl_event, cl_mem, cl_platform_id,
    };
}

use crate::error::ClError;

/// Maps a cl3 result to our typed error.
pub(crate) fn cl<T>(function: &'static str, r: Result<T, i32>) -> Result<T, ClError> {
    r.map_err(|code| ClError::new(function, code))
}

/// Refuses a zero-byte allocation (OpenCL 3.0 §5.2.1 has no empty memory object):
/// `InvalidArgument` naming `what`.
pub(crate) fn check_nonzero_size(what: &str, size: usize) -> crate::error::Result<()> {
    if size == 0 {
        return Err(crate::error::DeviceError::InvalidArgument(format!(
            "{what} size must be at least 1 byte"
        )));
    }
    Ok(())
}

/// Collects raw event handles for a wait list.
pub(crate) fn wait_list(events: &[&ClEvent]) -> Vec<raw::cl_event> {
    events.iter().map(|e| e.as_raw()).collect()
}
