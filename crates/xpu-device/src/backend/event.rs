//! OpenCL events (`cl_event`): markers, barriers, user events, status and profiling.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opencl3::error_codes as clerr;
use opencl3::event as cle;

use super::{cl, raw, release, Context};
use crate::error::ClError;

extern "C" fn forward_status(event: raw::cl_event, status: i32, user_data: *mut c_void) {
    // `user_data` is the key of the target's clone (`forwards::hold_target`); a sweep that
    // passed on the source's failure may have taken it already.
    let Some((mut target, absorbs)) = super::forwards::take_target(user_data as usize) else {
        return;
    };
    // The guard is dropped after the status is set (then it does nothing), while the
    // reference released last keeps the event live.
    let guard = target.2.take();
    let raw = std::mem::ManuallyDrop::new(target).0;
    // The reference is uncounted before the status is set, so that a thread that observed the
    // status (a waiter on the target) sees the live counts settled.
    super::live::released(super::live::Kind::Event);
    // NVIDIA calls a failed marker's `CL_COMPLETE` callback with 0 while the event reads its
    // error (as `on_complete`'s closures, `callbacks::final_status`): passed on as 0, the
    // target would complete, and commands waiting for it would run as if the source had not
    // failed (review h46, H100: a forward's target read not failed, its queue finished clean).
    let status = super::callbacks::final_status(event, status);
    let status = if absorbs {
        // `complete_when_over`: the source is over, whatever its status.
        cle::CL_COMPLETE
    } else if status > 0 {
        clerr::CL_INVALID_VALUE
    } else {
        status
    };
    let set = ForwardSet { raw, status, guard };
    // A driver may call the target's own callbacks within the call that sets its status (PoCL
    // does, on this thread): a chain of forwards would nest one call per link and overflow
    // the stack (review h51: 3,000 links on a 2 MiB stack). Within a forward's set, the next
    // one waits in the list of the outermost forward's set on this thread, which sets them
    // all in a loop. The list lives in that frame, reached through a thread-local pointer
    // without a destructor: it is there while the thread's other thread-locals are destroyed
    // too (review h52: a chain completed from a thread-local's destructor).
    let outer = DEFERRED_FORWARDS.with(Cell::get);
    if !outer.is_null() {
        // SAFETY: the pointer is non-null only while the outermost `forward_status` of this
        // thread runs, and points at its frame's list, which that frame reaches only through
        // this pointer and only between the sets it makes; this call runs within one of those
        // sets, on the same thread, and returns before it ends.
        unsafe { (*outer).push(set) };
        return;
    }
    let mut list: Vec<ForwardSet> = Vec::new();
    let own = std::ptr::addr_of_mut!(list);
    DEFERRED_FORWARDS.with(|p| p.set(own));
    let mut next = Some(set);
    while let Some(set) = next {
        set.apply();
        // SAFETY: `own` points at `list`, live in this frame and reached only through the
        // pointer (the nested calls of `apply` have returned: none touches it now).
        next = unsafe { (*own).pop() };
    }
    DEFERRED_FORWARDS.with(|p| p.set(std::ptr::null_mut()));
}

/// A forward's target to set to `status`, with the reference and unset guard its callback
/// took (see [`forward_status`]).
struct ForwardSet {
    raw: raw::cl_event,
    status: i32,
    guard: Option<Arc<UnsetGuard>>,
}

impl ForwardSet {
    /// Sets the target, drops the guard, passes a failure on and releases the reference.
    fn apply(self) {
        // clSetUserEventStatus is non-blocking and allowed in a callback (§5.11.4); a target
        // already set refuses the second status, which is all there is to do then.
        let set = super::held::set_user_status(self.raw, self.status);
        // Read after the set, while the guard keeps the event's note (see `forwards::WAITED`).
        let waited =
            set.is_ok() && self.status < 0 && super::forwards::may_be_waited(self.raw as usize);
        drop(self.guard);
        if set.is_ok() && self.status < 0 {
            // The failure may fail commands that other forwards wait for (see `forwards`).
            super::forwards::sweep_after_failure(self.raw as usize, waited);
        }
        // SAFETY: the reference owned by the forward's clone, released once (clReleaseEvent
        // is non-blocking and allowed in a callback).
        release::note("clReleaseEvent", unsafe { cle::release_event(self.raw) });
    }
}

thread_local! {
    /// The list of the outermost forward's set running on this thread (see
    /// [`forward_status`]); null outside one. No destructor: readable while the thread's
    /// other thread-locals are destroyed.
    static DEFERRED_FORWARDS: Cell<*mut Vec<ForwardSet>> = const { Cell::new(std::ptr::null_mut()) };
}

thread_local! {
    /// Status queries made by this thread through [`ClEvent::status`].
    static STATUS_QUERIES: Cell<u64> = const { Cell::new(0) };
}

/// How many times the calling thread has asked the driver for an event's execution status
/// (`clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)`) through [`ClEvent::status`] and what
/// uses it ([`ClEvent::is_complete`], `xpu_event::Event::query` / `synchronize`), since the
/// thread started. A per-thread count (a thread-local cell, no atomics), for tests and
/// diagnostics of the driver calls one operation makes: take the difference of two readings
/// around it on one thread. Status reads the runtime makes on its own behalf elsewhere
/// (releasing markers, failing unset user events) are not counted.
pub fn status_queries_on_this_thread() -> u64 {
    STATUS_QUERIES.try_with(Cell::get).unwrap_or(0)
}

/// The execution status of the live event `raw` (`clGetEventInfo`), counted in
/// [`status_queries_on_this_thread`]: [`ClEvent::status`], and the wait log's events.
pub(super) fn raw_status(raw: raw::cl_event) -> Result<EventStatus, ClError> {
    // `try_with`: a thread-local destructor may query an event.
    let _ = STATUS_QUERIES.try_with(|c| c.set(c.get() + 1));
    let v = cl(
        "clGetEventInfo",
        cle::get_event_info(raw, cle::CL_EVENT_COMMAND_EXECUTION_STATUS),
    )?;
    Ok(match v.to_int() {
        0 => EventStatus::Complete,
        1 => EventStatus::Running,
        2 => EventStatus::Submitted,
        3 => EventStatus::Queued,
        e => EventStatus::Error(e),
    })
}

/// `CL_EVENT_COMMAND_EXECUTION_STATUS` (OpenCL 3.0 §5.11, table 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    /// `CL_QUEUED`.
    Queued,
    /// `CL_SUBMITTED`.
    Submitted,
    /// `CL_RUNNING`.
    Running,
    /// `CL_COMPLETE`.
    Complete,
    /// A negative code: the command terminated abnormally.
    Error(i32),
}

/// `clGetEventProfilingInfo` timestamps (OpenCL 3.0 §5.14), device time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfilingInfo {
    /// `CL_PROFILING_COMMAND_QUEUED`.
    Queued,
    /// `CL_PROFILING_COMMAND_SUBMIT`.
    Submit,
    /// `CL_PROFILING_COMMAND_START`.
    Start,
    /// `CL_PROFILING_COMMAND_END`.
    End,
}

/// A reference-counted OpenCL event. `Clone` retains, `Drop` releases: at once, except for a
/// command's event of PoCL before 4.0 (or a wrapped raw event of a command) whose command is
/// not over yet, whose reference the runtime keeps until it is (PoCL 3 aborts the process
/// when such a command fails after its event was released; see the `held` module).
///
/// The second field says what the event is (`Role`); the third, only for user events made by
/// [`ClEvent::user`], is shared by the wrapper's clones and fails the event when the last of
/// them drops unset (`UnsetGuard`).
#[derive(Debug)]
pub struct ClEvent(raw::cl_event, Role, Option<Arc<UnsetGuard>>);

/// What a [`ClEvent`] is, as far as its wrapper cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A command's event, released at once on drop (its driver fails commands safely).
    Command,
    /// A command's event kept until the command is over when the last wrapper drops: a
    /// command of a driver that frees a failed command's event under its own lock (PoCL
    /// before 4.0, see the `held` module), or a wrapped raw event, whose driver is not known.
    Held,
    /// A user event: the wrapper may set its status.
    User,
}

impl Role {
    /// The role of a raw event, from its `CL_EVENT_COMMAND_TYPE`: a user event, else a
    /// command's event kept until it is over (the driver is not known; also when the type
    /// cannot be read).
    fn of(raw: raw::cl_event) -> Role {
        match cle::get_event_info(raw, cle::CL_EVENT_COMMAND_TYPE).map(|t| t.to_uint()) {
            Ok(cle::CL_COMMAND_USER) => Role::User,
            _ => Role::Held,
        }
    }
}

/// The status a user event gets when every wrapper of it dropped before it was set:
/// `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`, which terminates the commands waiting on it.
pub const DROPPED_UNSET_STATUS: i32 = -14;

/// Fails a user event made by [`ClEvent::user`] when its last wrapper drops while it is
/// still unset. OpenCL 3.0 §5.11.2 (`clReleaseEvent`): commands waiting on a user event
/// nobody can set any more wait forever, and so does every later synchronization of their
/// in-order queue. Disarmed when the raw handle is handed out ([`ClEvent::into_raw`]).
#[derive(Debug)]
pub(crate) struct UnsetGuard {
    raw: raw::cl_event,
    armed: AtomicBool,
}

// SAFETY: the guard owns no reference: the raw handle is only used in `Drop`, which runs
// inside the last `ClEvent` wrapper's `Drop` before that wrapper releases its reference (the
// guard lives in the wrappers' shared `Arc`, so it drops with the last of them), so the event
// is live then, whichever thread drops it. The calls made there, clGetEventInfo and
// clSetUserEventStatus, are thread-safe (OpenCL 3.0 appendix A.2); a concurrent set through
// another handle makes the second one fail with CL_INVALID_OPERATION, not race. `armed` is
// atomic.
unsafe impl Send for UnsetGuard {}
// SAFETY: as above; `&self` only reads `armed` or clears it (`into_raw`), atomically.
unsafe impl Sync for UnsetGuard {}

impl Drop for UnsetGuard {
    fn drop(&mut self) {
        // Runs inside the last wrapper's `Drop`, before its reference is released, so the
        // event is live. Both calls are non-blocking and allowed in a callback (§5.11.4).
        if !self.armed.load(Ordering::Acquire) {
            // Handed out (`into_raw`): its owner may still set it, and it stays noted.
            return;
        }
        struct Forget(raw::cl_event);
        impl Drop for Forget {
            fn drop(&mut self) {
                // Set below if it was not (no later failure of it): no longer noted.
                super::forwards::forget_waited(self.0 as usize);
            }
        }
        let _forget = Forget(self.raw);
        let submitted = cle::get_event_info(self.raw, cle::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .is_ok_and(|v| v.to_int() == cle::CL_SUBMITTED);
        if submitted {
            // A concurrent set by foreign code through a raw handle wins: then this fails
            // harmlessly with CL_INVALID_OPERATION.
            if super::held::set_user_status(self.raw, DROPPED_UNSET_STATUS).is_ok() {
                super::forwards::sweep();
            }
        }
    }
}

// SAFETY: cl_event is reference counted and clGetEventInfo / clWaitForEvents /
// clSetUserEventStatus are thread-safe (OpenCL 3.0 appendix A.2); we own one reference.
unsafe impl Send for ClEvent {}
// SAFETY: as above.
unsafe impl Sync for ClEvent {}

impl ClEvent {
    /// Wraps one owned reference, counted in [`super::live_objects`].
    fn counted(raw: raw::cl_event, role: Role) -> Self {
        super::live::created(super::live::Kind::Event);
        ClEvent(raw, role, None)
    }

    /// Takes ownership of a reference returned by an enqueue call of a queue whose driver
    /// fails commands safely: released at once on drop.
    pub(crate) fn from_owned(raw: raw::cl_event) -> Self {
        ClEvent::counted(raw, Role::Command)
    }

    /// Takes ownership of a reference returned by an enqueue call of a queue whose driver
    /// frees a failed command's event under its own lock
    /// ([`Platform::frees_failed_events`](super::Platform::frees_failed_events)): kept until
    /// the command is over when the last wrapper drops.
    pub(crate) fn from_owned_held(raw: raw::cl_event) -> Self {
        ClEvent::counted(raw, Role::Held)
    }

    /// Takes over one reference to a raw event that the caller owns and hands over (an event
    /// returned by a foreign OpenCL library's enqueue call, which the caller would otherwise
    /// release): no `clRetainEvent`; the wrapper releases it on drop. Status setting as
    /// [`ClEvent::from_raw_retained`].
    ///
    /// # Safety
    /// `raw` must be a valid `cl_event` and the caller must own one reference to it, which it
    /// gives up (it must not release it itself).
    pub unsafe fn from_raw_owned(raw: raw::cl_event) -> ClEvent {
        ClEvent::counted(raw, Role::of(raw))
    }

    /// Wraps a raw event, retaining it (the caller keeps its own reference). The wrapper can set
    /// the status ([`ClEvent::set_complete`]) only when the driver reports the event as a user
    /// event (`CL_COMMAND_USER`).
    ///
    /// # Safety
    /// `raw` must be a valid `cl_event`.
    ///
    /// # Errors
    /// A failed `clRetainEvent`.
    pub unsafe fn from_raw_retained(raw: raw::cl_event) -> Result<ClEvent, ClError> {
        // SAFETY: the caller guarantees `raw` is a valid event (clRetainEvent precondition).
        cl("clRetainEvent", unsafe { cle::retain_event(raw) })?;
        Ok(ClEvent::counted(raw, Role::of(raw)))
    }

    /// A user event (`clCreateUserEvent`, OpenCL 3.0 §5.11.2): host-controlled, starts
    /// `CL_SUBMITTED`; commands that wait on it stay blocked until [`ClEvent::set_complete`]
    /// or [`ClEvent::set_failed`]. When the last clone of the wrapper drops while the event is
    /// still unset, it is set to [`DROPPED_UNSET_STATUS`], so the commands waiting on it
    /// terminate instead of blocking their queue forever (nobody could set it any more);
    /// [`ClEvent::into_raw`] turns this off (the raw handle's owner may still set it).
    ///
    /// # Errors
    /// A failed `clCreateUserEvent`.
    pub fn user(context: &Context) -> Result<ClEvent, ClError> {
        ClEvent::user_in(context.as_raw(), context.frees_failed_events())
    }

    /// [`ClEvent::user`] in the live context `context`, registered in `notify_lists` when
    /// `frees_failed_events` (the context's platform's
    /// [`Platform::frees_failed_events`](super::Platform::frees_failed_events)).
    pub(super) fn user_in(
        context: raw::cl_context,
        frees_failed_events: bool,
    ) -> Result<ClEvent, ClError> {
        let raw = cl("clCreateUserEvent", cle::create_user_event(context))?;
        if frees_failed_events {
            super::notify_lists::register_user(raw);
        }
        let mut event = ClEvent::counted(raw, Role::User);
        event.2 = Some(Arc::new(UnsetGuard {
            raw,
            armed: AtomicBool::new(true),
        }));
        Ok(event)
    }

    /// Sets a user event to `CL_COMPLETE`, releasing every command waiting on it.
    ///
    /// # Errors
    /// `CL_INVALID_EVENT` for a non-user event (checked before the driver is called),
    /// `CL_INVALID_OPERATION` when already set.
    pub fn set_complete(&self) -> Result<(), ClError> {
        self.check_unset()?;
        cl(
            "clSetUserEventStatus",
            super::held::set_user_status(self.0, 0),
        )
    }

    /// OpenCL 3.0 §5.11.2: a user event's status can be set only once
    /// (`CL_INVALID_OPERATION` otherwise). NVIDIA's driver accepts a second call, so the check
    /// is made here for every driver: a user event not in its initial `CL_SUBMITTED` state has
    /// been set.
    fn check_unset(&self) -> Result<(), ClError> {
        self.check_user()?;
        match self.status()? {
            EventStatus::Submitted => Ok(()),
            _ => Err(ClError::new("clSetUserEventStatus", -59)),
        }
    }

    /// `CL_INVALID_EVENT` unless this is a user event: one made by [`ClEvent::user`], or wrapped
    /// from a raw event whose `CL_EVENT_COMMAND_TYPE` is `CL_COMMAND_USER` (read once, when
    /// wrapped). The status of a command's event is the driver's alone (§5.11.2).
    fn check_user(&self) -> Result<(), ClError> {
        if self.1 == Role::User {
            Ok(())
        } else {
            Err(ClError::new(
                "clSetUserEventStatus",
                clerr::CL_INVALID_EVENT,
            ))
        }
    }

    /// Sets a user event to a negative error status: commands waiting on it terminate
    /// (OpenCL 3.0 §5.11.2: a negative `execution_status` is an error status).
    ///
    /// # Errors
    /// As [`ClEvent::set_complete`]; `CL_INVALID_VALUE` when `code >= 0` (0 would mean
    /// `CL_COMPLETE`, positive values are not final states), checked before the driver is
    /// called, so the event is left untouched.
    pub fn set_failed(&self, code: i32) -> Result<(), ClError> {
        if code >= 0 {
            return Err(ClError::new(
                "clSetUserEventStatus",
                clerr::CL_INVALID_VALUE,
            ));
        }
        self.check_unset()?;
        cl(
            "clSetUserEventStatus",
            super::held::set_user_status(self.0, code),
        )?;
        // Commands failed through this event may be the sources of forwards (`forwards`).
        super::forwards::sweep();
        Ok(())
    }

    /// The execution status (`clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)`): one driver
    /// call, no host blocking.
    ///
    /// # Errors
    /// A failed `clGetEventInfo`.
    pub fn status(&self) -> Result<EventStatus, ClError> {
        raw_status(self.0)
    }

    /// The event's reference count (`clGetEventInfo(CL_EVENT_REFERENCE_COUNT)`): one driver
    /// call. Stale as soon as it is read (OpenCL 3.0 §5.11 gives it for identifying leaks);
    /// for tests and diagnostics (the runtime retains an event listed in a command's wait list
    /// while it logs the command, so a count above the caller's own references tells that such
    /// an enqueue is in progress or logged).
    ///
    /// # Errors
    /// A failed `clGetEventInfo`.
    pub fn reference_count(&self) -> Result<u32, ClError> {
        const REFERENCE_COUNT: u32 = 0x11D2;
        cl(
            "clGetEventInfo",
            cle::get_event_info(self.0, REFERENCE_COUNT).map(|v| v.to_uint()),
        )
    }

    /// True once the command completed.
    ///
    /// # Errors
    /// A failed query, or the command's own negative status (reported as a `ClError` of
    /// `"command execution"`).
    pub fn is_complete(&self) -> Result<bool, ClError> {
        match self.status()? {
            EventStatus::Complete => Ok(true),
            EventStatus::Error(code) => Err(ClError::new("command execution", code)),
            _ => Ok(false),
        }
    }

    /// Blocks the host until the command completes (`clWaitForEvents`).
    ///
    /// # Errors
    /// A failed wait, e.g. `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`.
    pub fn wait(&self) -> Result<(), ClError> {
        cl("clWaitForEvents", cle::wait_for_events(&[self.0]))
    }

    /// A profiling timestamp in device nanoseconds. Needs a queue created with profiling and a
    /// completed command (OpenCL 3.0 §5.14).
    ///
    /// # Errors
    /// `CL_PROFILING_INFO_NOT_AVAILABLE` when profiling is off or the command is not complete.
    pub fn profiling(&self, what: ProfilingInfo) -> Result<u64, ClError> {
        let param = match what {
            ProfilingInfo::Queued => 0x1280,
            ProfilingInfo::Submit => 0x1281,
            ProfilingInfo::Start => 0x1282,
            ProfilingInfo::End => 0x1283,
        };
        let v = cl(
            "clGetEventProfilingInfo",
            cle::get_event_profiling_info(self.0, param),
        )?;
        Ok(v.to_ulong())
    }

    /// Runs `f` once when the command completes or terminates abnormally
    /// (`clSetEventCallback` for `CL_COMPLETE`, OpenCL 3.0 §5.11.4). `f` receives the final
    /// execution status: 0 (`CL_COMPLETE`) or the negative error code.
    ///
    /// `f` runs on the runtime's callback thread (`xpu-callbacks`, one per process, started by
    /// the first registration), never on a driver thread: the driver's callback only hands it
    /// over. So `f` may block, call `finish()` or wait for events. Closures run one at a time,
    /// in the order the driver reports completions: a slow closure delays the others, and a
    /// closure that waits for something only a later callback provides never returns. A panic
    /// in `f` is caught and logged (its payload dropped safely); it never aborts the process.
    /// [`wait_for_callbacks`](super::wait_for_callbacks) waits for the closures handed over.
    ///
    /// A command that terminated abnormally runs `f` too, with its negative status, also on a
    /// driver that never calls back for it (PoCL, for a command failed through its wait list):
    /// the runtime hands `f` over itself when it sees the failure, right after a failure that
    /// starts in the runtime ([`ClEvent::set_failed`], an unset user event failed on drop), or
    /// at the latest at the next such failure, [`live_objects`](super::live_objects) read, or
    /// registration that finds the waiting closures doubled (a failure set by foreign code
    /// through a raw handle). The closure holds one reference to the event until it ran.
    ///
    /// # Errors
    /// A failed `clRetainEvent` or `clSetEventCallback` (then `f` is dropped without running);
    /// `CL_OUT_OF_HOST_MEMORY` (reported as from `clSetEventCallback`) when the callback thread
    /// cannot be started.
    pub fn on_complete(&self, f: impl FnOnce(i32) + Send + 'static) -> Result<(), ClError> {
        if let Err(e) = super::callbacks::start() {
            tracing::error!(%e, "cannot start the xpu-callbacks thread");
            return Err(ClError::new(
                "clSetEventCallback",
                clerr::CL_OUT_OF_HOST_MEMORY,
            ));
        }
        super::callbacks::register(self.0, Box::new(f))
            .map_err(|code| ClError::new("clSetEventCallback", code))
    }

    /// Sets the user event `target` (of this event's context or another one) to this event's
    /// final status when this event completes: `CL_COMPLETE`, or the negative error code.
    /// Runs no user code: the driver's callback sets the status directly (allowed in callbacks,
    /// OpenCL 3.0 §5.11.4), independent of the callback thread. This is how a queue of one
    /// context waits for an event of another context. A target already set keeps its status.
    ///
    /// A failure reaches the target also where the driver never calls the completion callback
    /// of a failed command (PoCL 3.1): the runtime sets the target when the failure starts
    /// from the runtime (a user event set to an error status through [`ClEvent::set_failed`],
    /// or failed on drop), or at the latest at the next such failure or registration, for a
    /// failure set by foreign code through a raw handle.
    ///
    /// A forward from a user event to itself, or to a user event that already forwards back to
    /// it (directly or through other forwards between user events), is refused: the forwards
    /// would keep each other's targets unset for ever once the application dropped them. A
    /// cycle through a command (a command waiting on a user event, forwarded to another) is
    /// not seen: like a user event leaked unset, it leaves its waiters waiting.
    ///
    /// # Errors
    /// `CL_INVALID_EVENT` when `target` is not a user event; a failed `clSetEventCallback`;
    /// [`CODE_FORWARD_CYCLE`](crate::CODE_FORWARD_CYCLE) for a forward that would close a
    /// cycle (none made).
    pub fn forward_to(&self, target: &ClEvent) -> Result<(), ClError> {
        self.forward(target, false)
    }

    /// Sets the user event `target` (of this event's context or another one) to `CL_COMPLETE`
    /// once this event's command is over, whether it completed or failed: an ordering edge
    /// that does not pass a failure on. The runtime orders its own conflicting accesses so
    /// (a pinned copy after another queue's copy of the same bytes, which it ran for the
    /// bytes' sake, not because the user asked the second command to depend on the first).
    /// Otherwise as [`ClEvent::forward_to`].
    ///
    /// # Errors
    /// As [`ClEvent::forward_to`].
    pub fn complete_when_over(&self, target: &ClEvent) -> Result<(), ClError> {
        self.forward(target, true)
    }

    fn forward(&self, target: &ClEvent, absorbs: bool) -> Result<(), ClError> {
        target.check_user()?;
        let key = super::forwards::hold_target(target, absorbs);
        // Kept before the callback is registered, so that a refused forward never had one.
        if !super::forwards::keep(self, target, key, absorbs, self.1 == Role::User) {
            drop(super::forwards::take_target(key));
            return Err(ClError::new("forward_to", crate::error::CODE_FORWARD_CYCLE));
        }
        match cle::set_event_callback(self.0, cle::CL_COMPLETE, forward_status, key as *mut c_void)
        {
            Ok(()) => {
                // This event may have failed already (then the driver may never call back).
                super::forwards::registered(self, key, self.1 == Role::User);
                Ok(())
            }
            Err(code) => {
                // The driver never saw the key.
                super::forwards::unkeep(key);
                drop(super::forwards::take_target(key));
                Err(ClError::new("clSetEventCallback", code))
            }
        }
    }

    /// The raw context of the event (`clGetEventInfo(CL_EVENT_CONTEXT)`).
    ///
    /// # Errors
    /// A failed `clGetEventInfo`.
    pub fn context_raw(&self) -> Result<raw::cl_context, ClError> {
        Ok(self.handle_info(cle::CL_EVENT_CONTEXT)? as raw::cl_context)
    }

    /// The raw queue of the event's command (`clGetEventInfo(CL_EVENT_COMMAND_QUEUE)`); null
    /// for a user event.
    ///
    /// # Errors
    /// A failed `clGetEventInfo`.
    pub fn queue_raw(&self) -> Result<raw::cl_command_queue, ClError> {
        Ok(self.handle_info(cle::CL_EVENT_COMMAND_QUEUE)? as raw::cl_command_queue)
    }

    /// The OpenCL handle `clGetEventInfo` reports for `param` (not retained).
    fn handle_info(&self, param: cle::cl_event_info) -> Result<isize, ClError> {
        let v = cl("clGetEventInfo", cle::get_event_info(self.0, param))?;
        Ok(v.to_ptr())
    }

    /// The raw `cl_event`, valid while `self` lives.
    pub fn as_raw(&self) -> raw::cl_event {
        self.0
    }

    /// Gives up the wrapper's reference without releasing it: the caller now owns one
    /// reference to the returned event (release it with `clReleaseEvent`, or hand it to
    /// [`ClEvent::from_raw_owned`]). Leaks the event if dropped unused.
    pub fn into_raw(mut self) -> raw::cl_event {
        super::live::released(super::live::Kind::Event);
        if let Some(guard) = self.2.take() {
            // The raw handle's owner may set the event later: never fail it on drop.
            guard.armed.store(false, Ordering::Release);
        }
        if self.1 == Role::User {
            // Its owner may list it in wait lists the runtime does not see.
            super::forwards::note_waited(self.0 as usize);
        }
        let raw = self.0;
        std::mem::forget(self);
        raw
    }
}

impl ClEvent {
    /// Notes that a command is about to list this event in its wait list (the queue's wait
    /// lists call it before the enqueue): a user event's failure is passed on to the forwards
    /// from commands only where one may have waited for it (see `forwards::WAITED`). Nothing
    /// for an event that is not a user event (its failure is the driver's to pass on).
    pub(super) fn note_waited(&self) {
        if self.1 == Role::User {
            super::forwards::note_waited(self.0 as usize);
        }
    }

    /// A clone that does not keep a user event's unset guard alive: the runtime's own
    /// long-lived clones (a forward's source, kept until it is over) must not stop the
    /// application's last wrapper from failing an unset user event on drop, or the event would
    /// never be over and every command waiting on it would wait forever.
    pub(super) fn clone_unguarded(&self) -> ClEvent {
        // SAFETY: self.0 is live (we own a reference), so retaining it is valid.
        release::note("clRetainEvent", unsafe { cle::retain_event(self.0) });
        ClEvent::counted(self.0, self.1)
    }
}

impl Clone for ClEvent {
    fn clone(&self) -> Self {
        // SAFETY: self.0 is live (we own a reference), so retaining it is valid.
        release::note("clRetainEvent", unsafe { cle::retain_event(self.0) });
        let mut clone = ClEvent::counted(self.0, self.1);
        clone.2.clone_from(&self.2);
        clone
    }
}

impl Drop for ClEvent {
    fn drop(&mut self) {
        // The unset guard first (it may fail the event), while our reference keeps it live.
        drop(self.2.take());
        if self.1 == Role::Held && !crate::fork::is_in_bad_fork() && !super::held::is_over(self.0) {
            // Kept (and still counted) until the command is over: see the `held` module.
            for _ in 0..super::held::hold(self.0) {
                super::live::released(super::live::Kind::Event);
            }
            return;
        }
        super::live::released(super::live::Kind::Event);
        // SAFETY: we own exactly one reference to a live event; releasing it once is valid.
        release::note("clReleaseEvent", unsafe { cle::release_event(self.0) });
    }
}

impl PartialEq for ClEvent {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for ClEvent {}
