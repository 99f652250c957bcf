//! Errors of lazy initialization.

/// A boxed error from an init routine or a queued call.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of [`lazy_init`](crate::lazy_init) and friends.
#[derive(Debug, thiserror::Error)]
pub enum LazyError {
    /// The process is a child forked after the parent initialized the runtime.
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// A backend's init routine failed; nothing was marked initialized, the next call retries.
    #[error("xpu initialization of backend '{backend}' failed: {source}")]
    InitFailed {
        /// The device type whose routine failed.
        backend: &'static str,
        /// What it reported.
        #[source]
        source: BoxError,
    },
    /// A [`lazy_call`](crate::lazy_call) on an initialized runtime ran at once and failed: its
    /// own error, unchanged (as `torch.xpu._lazy_call` calls the function, whose exception
    /// reaches the caller; review h84: it was reported as failed lazily at initialization).
    #[error(transparent)]
    CallFailed(BoxError),
    /// A call queued with [`lazy_call`](crate::lazy_call) failed when initialization ran it.
    /// The runtime stays uninitialized and keeps its queue: the next init re-runs every call.
    #[error(
        "xpu call failed lazily at initialization with error: {source}\n\n\
         xpu call was originally queued at: {origin}"
    )]
    QueuedCallFailed {
        /// Where `lazy_call` was invoked (`file:line:column`).
        origin: String,
        /// The call's error.
        #[source]
        source: BoxError,
    },
    /// Another thread's initialization was running its queued calls (user code; or a routine
    /// registered under [`OPENCL`](crate::OPENCL) in place of the built-in one) for
    /// [`QUEUED_CALLS_WAIT_LIMIT`](crate::QUEUED_CALLS_WAIT_LIMIT) while this thread waited
    /// for it: most likely a queued call is waiting for this very thread (it joins a thread
    /// that calls into the runtime), which would otherwise deadlock. Nothing changed; a later
    /// call initializes or waits again.
    #[error(
        "xpu initialization is running its queued calls on another thread and did not finish within {waited_ms} ms (a queued call waiting for this thread would deadlock)"
    )]
    QueuedCallsPending {
        /// How long this thread waited, in milliseconds.
        waited_ms: u64,
    },
    /// Another thread was running `backend`'s init routine, user code given to
    /// [`register_backend`](crate::register_backend), for
    /// [`QUEUED_CALLS_WAIT_LIMIT`](crate::QUEUED_CALLS_WAIT_LIMIT) while this thread waited for
    /// it: most likely the routine waits for this very thread (it joins a thread that needs
    /// the backend), which would otherwise deadlock. Nothing changed; a later call initializes
    /// or waits again.
    #[error(
        "xpu initialization of backend '{backend}' is running on another thread and did not finish within {waited_ms} ms (an init routine waiting for this thread would deadlock)"
    )]
    InitPending {
        /// The device type whose routine was running.
        backend: &'static str,
        /// How long this thread waited, in milliseconds.
        waited_ms: u64,
    },
    /// No backend is registered under this device type.
    #[error("no backend registered for device type '{0}'")]
    UnknownBackend(String),
}

xpu_device::impl_is_bad_fork! {
    /// True for [`LazyError::BadFork`] (see `xpu_device::fork`), which every entry point of
    /// this crate returns in a bad fork child before running an init routine or a queued
    /// call: the boxed errors of [`LazyError::InitFailed`], [`LazyError::CallFailed`] and
    /// [`LazyError::QueuedCallFailed`] are failures of a routine that ran, so never a bad
    /// fork.
    LazyError { own: BadFork; }
}
