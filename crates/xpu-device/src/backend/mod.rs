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
//!
//! # Completion callbacks
//! `ClEvent::on_complete` closures run on one runtime-owned thread per process (`xpu-callbacks`),
//! never on a driver thread: they may block (`finish()` inside one deadlocked PoCL's thread), and a
//! panic is caught, its payload dropped under `catch_unwind` (forgotten if that drop panics too).
//! `wait_for_callbacks` waits for those handed over (and returns at once in a bad-fork child, which
//! has no callback thread). No `Drop` waits for device work there: a caching allocator's shard
//! whose last handle a closure drops (the last block of an allocator already dropped) tears down
//! (waits for its stream, releases its segments) on a thread of its own: the caching allocator's
//! backend asks `on_callback_thread`.
//!
//! # Failed commands
//! - PoCL aborts the process when a command whose event was already released fails through
//!   its wait list (a marker or barrier always; a copy, fill, launch or unmap once a later
//!   command used its buffers or they were freed), and the runtime drops many events at once
//!   (every barrier it enqueues for a wait, launches without an event, unmaps): on PoCL
//!   before 4.0 (`Platform::frees_failed_events`, read once per queue) `ClEvent`'s drop keeps
//!   a command's reference until the command is over, and a launch without an event asks for
//!   one (module `held`, pruned when it doubles and by `live_objects`); a wait list holding
//!   an event that already failed goes through a stand-in user event there (PoCL 3.1 would
//!   never run the command; review h32), and the runtime's error statuses exclude the
//!   wait-list checks and enqueue calls of those queues (`held`'s exclusion: a failure passed
//!   on during an enqueue left the command queued for good). A command whose status
//!   reads failed is not over while an error status the runtime set is still being passed on
//!   (PoCL wakes the command's waiters before it drops its own reference; review h29's abort).
//! - After a failed command PoCL fails the later commands of the queue at once while earlier ones
//!   stay queued, so a failed free marker tells nothing: the caching allocator keeps its block out
//!   of the cache (`MarkerStatus::Failed`), as a failed record. A marker enqueued after the
//!   failed command can also read `CL_COMPLETE` (and a wait on it return) while an earlier
//!   command still waits on an unset user event (review h26): in-order completion no longer
//!   holds on such a queue. So each queue wrapper logs the waits of its commands (module
//!   `waits`), and the markers the allocator frees memory under (`OrderedMarker`) read
//!   complete only once every wait before them completed with success; after a failed wait,
//!   never, until a `finish` of the queue returned with success (what the driver left queued is
//!   not known before). Not handled: a
//!   command failing by itself (not through a wait), and same-stream reuse, which trusts the
//!   queue's own order.
//! - PoCL 3.1 never runs a command enqueued after an event of its wait list failed (it waits
//!   for a notification already sent): the runtime replaces the failed events of a wait list by
//!   a user event it fails right after the enqueue call (`CommandQueue::checked_wait_list`), so
//!   the command fails as OpenCL 3.0 §5.11 says. A failure that starts during the enqueue call
//!   is not caught.
//! - PoCL never calls the completion callback of a command failed through its wait list: an
//!   `on_complete` closure waits in the runtime's registry with its event, and a sweep at every
//!   failure the runtime starts (and at `live_objects`) hands it over with the error status
//!   (module `callbacks`), so it runs, and what it holds (a pinned buffer) is released.
//! - User events dropped unset: when the last wrapper of a `ClEvent::user` drops while the event is
//!   unset, it is set to `DROPPED_UNSET_STATUS` (-14): nobody could set it any more, and its
//!   waiters (and every later `finish` of their queue) would wait forever (OpenCL 3.0 §5.11.2).
//!   `ClEvent::into_raw` disarms this; `xpu_event::Gate` still opens on drop.
//!
//! # Driver differences evened out here
//! - A copy or fill of 0 bytes is a marker after its wait list (PoCL refuses a 0-byte
//!   `clEnqueueCopyBuffer` but runs a 0-byte fill or read).
//! - A blocking `read` / `write` that the driver terminated because an earlier command of the queue
//!   failed is `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, not `Ok` (PoCL returns `CL_SUCCESS`
//!   without transferring).
//! - NVIDIA's OpenCL accepts buffers above `CL_DEVICE_MAX_MEM_ALLOC_SIZE`, sub-buffers at
//!   misaligned offsets (a typed `MisalignedSubBuffer { origin, align }` here) and a second status
//!   on a user event; PoCL accepts wait-list events of another context and aborts on a kernel
//!   argument of another context. The backend checks all of these itself, as the specification
//!   requires, so every platform behaves the same.

pub mod at_exit;
mod callbacks;
mod command_buffer;
mod context;
pub mod device_id;
mod event;
mod forwards;
mod held;
mod keyed;
mod live;
mod memory;
mod notify_lists;
mod offset_params;
mod pinned;
mod platform;
mod program;
mod queue;
mod release;
mod waits;

pub use callbacks::{on_callback_thread, wait_for_callbacks};
pub use command_buffer::{command_buffer_support, CommandBuffer, CommandBufferSupport};
pub use context::{Context, DeviceLimits};
pub use device_id::DeviceId;
pub use event::{
    status_queries_on_this_thread, ClEvent, EventStatus, ProfilingInfo, DROPPED_UNSET_STATUS,
};
pub use forwards::forward_index_steps_on_this_thread;
#[doc(hidden)]
pub use held::user_status_sets;
pub use live::{live_objects, LiveObjects};
pub use memory::{Buffer, ExclusiveBuffer, MemFlags};
pub use offset_params::{add_offset_params, OFFSET_PARAM_PREFIX};
pub use pinned::PinnedBuffer;
pub use platform::Platform;
pub use program::{BufferElement, Kernel, KernelScalar, Program};
pub use queue::{
    markers_enqueued_on_this_thread, CommandQueue, FinishOutcome, ForeignQueue, IdleProbe,
    OrderedMarker, PinnedBytes, QueueOptions, QueuePriority, RawEnqueueScope,
    CODE_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, FINISH_RETRIES,
};
pub use release::take_release_error;
pub use waits::WaitsStatus;

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
