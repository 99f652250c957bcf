//! The facade's error: every layer's error, unchanged, behind one type.
//!
//! `Error` has `From` for every layer's error (`ClError`, `HostError`, `ConfigError`,
//! `MemoryError`, ...), so `?` works in user code, with one variant per layer error: a `ClError`
//! lands in `Device`, a `ConfigError` or `MarkerError` in `Alloc`, as their layers wrap them; a
//! `KernelError::Memory` / `KernelError::Interop` converts to `Error::Memory` / `Error::Interop`.
//! `init()` fails with the `XPU_ALLOC_CONF` parse error (`Error::Alloc(AllocError::Config)`).
//! Trace replay is not part of the runtime: its `ReplayError` belongs to the `xpu-replay` tool
//! crate and has no variant here. Below the facade, errors wrap the error of the layer they call
//! directly, not every layer below it (`GraphError` wraps `KernelError`, which names the memory,
//! allocator, stream or device failure); `xpu_device::impl_from_via!` gives them `From` for the
//! errors below, through that layer's own conversion (`InteropError`'s one OpenCL call, a query
//! of the stream's queue, fails as `InteropError::Stream(StreamError::OpenCl)`). `GraphError` is
//! not wrapped by the facade: ask it directly.

/// Any error of the xpu runtime. Each variant wraps the layer's own typed error, whose message
/// is shown unchanged.
///
/// One failure has one shape, whichever function returned it: an error that a layer's error
/// type only carries for an error type of the same layer which has a variant here (a
/// typed-memory or interop failure inside a [`KernelError`](xpu_kernel::KernelError)) converts
/// to that variant, so matching `Error::Memory(_)` catches every typed-memory failure. Errors of
/// lower layers stay inside the layer error that met them (`Error::Memory(MemoryError::Alloc(..))`:
/// a typed-memory operation whose allocation failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Lazy initialization failed, or the process is a bad fork child.
    #[error(transparent)]
    Lazy(#[from] xpu_lazy::LazyError),
    /// Device layer: invalid index, no runtime, a failed OpenCL call of the backend
    /// (`xpu_device::backend`, kernels, programs: [`DeviceError::OpenCl`]).
    ///
    /// [`DeviceError::OpenCl`]: xpu_device::DeviceError::OpenCl
    #[error(transparent)]
    Device(#[from] xpu_device::DeviceError),
    /// Stream layer.
    #[error(transparent)]
    Stream(#[from] xpu_stream::StreamError),
    /// Event layer.
    #[error(transparent)]
    Event(#[from] xpu_event::EventError),
    /// A foreign library loaded at run time (`xpu_device::foreign`, e.g. CLBlast): not
    /// installed, or a failure status.
    #[error(transparent)]
    Foreign(#[from] xpu_device::foreign::ForeignError),
    /// Caching device allocator (out of memory, bad size, unknown pointer), a bad allocator
    /// configuration (`XPU_ALLOC_CONF`, `set_config`: [`AllocError::Config`], which
    /// [`init`](crate::init) reports), or a stream operation it needed
    /// ([`AllocError::Stream`]).
    ///
    /// [`AllocError::Config`]: xpu_alloc::AllocError::Config
    /// [`AllocError::Stream`]: xpu_alloc::AllocError::Stream
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Alloc(#[from] xpu_alloc::AllocError),
    /// Pinned host allocator and host<->device copies (boxed: it is the largest layer error).
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Host(Box<xpu_alloc::HostError>),
    /// A segment source (device memory behind the allocator).
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Source(#[from] xpu_alloc::SourceError),
    /// Exporting a memory snapshot or history.
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Observe(#[from] xpu_alloc::observe::ObserveError),
    /// Typed device memory (`xpu_kernel::memory`: ranges, lengths, copies; boxed, as `Host`),
    /// whether it comes from a function returning [`MemoryError`] or one returning
    /// [`KernelError`] (whose [`KernelError::Memory`] converts to this variant).
    ///
    /// [`MemoryError`]: xpu_kernel::MemoryError
    /// [`KernelError`]: xpu_kernel::KernelError
    /// [`KernelError::Memory`]: xpu_kernel::KernelError::Memory
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Memory(Box<xpu_kernel::MemoryError>),
    /// A foreign OpenCL library on xpu's streams and memory (`xpu_kernel::interop`: region
    /// bounds, index-type overflows, the library's status code), whether it comes from a
    /// function returning [`InteropError`] or one returning [`KernelError`] (whose
    /// [`KernelError::Interop`] converts to this variant).
    ///
    /// [`InteropError`]: xpu_kernel::InteropError
    /// [`KernelError`]: xpu_kernel::KernelError
    /// [`KernelError::Interop`]: xpu_kernel::KernelError::Interop
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Interop(#[from] xpu_kernel::InteropError),
    /// Programs, functions and launches (`xpu_kernel`: build logs, argument checks naming the
    /// kernel and index; boxed, as `Host`). Never holds a [`KernelError::Memory`] or
    /// [`KernelError::Interop`] made by `From` (they are [`Error::Memory`] and
    /// [`Error::Interop`]).
    ///
    /// [`KernelError::Memory`]: xpu_kernel::KernelError::Memory
    /// [`KernelError::Interop`]: xpu_kernel::KernelError::Interop
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Kernel(Box<xpu_kernel::KernelError>),
}

xpu_device::impl_from_via!(Error::Device(xpu_device::DeviceError) <- xpu_device::ClError);

#[cfg(feature = "alloc")]
xpu_device::impl_from_via!(
    Error::Alloc(xpu_alloc::AllocError) <- xpu_alloc::ConfigError, xpu_alloc::MarkerError
);

/// A typed-memory or interop failure becomes [`Error::Memory`] / [`Error::Interop`] (one shape
/// per failure); the kernel layer's own errors [`Error::Kernel`].
#[cfg(feature = "kernel")]
impl From<xpu_kernel::KernelError> for Error {
    fn from(e: xpu_kernel::KernelError) -> Self {
        match e {
            xpu_kernel::KernelError::Memory(e) => Error::Memory(e),
            xpu_kernel::KernelError::Interop(e) => Error::Interop(*e),
            e => Error::Kernel(Box::new(e)),
        }
    }
}

#[cfg(feature = "alloc")]
impl From<xpu_alloc::HostError> for Error {
    fn from(e: xpu_alloc::HostError) -> Self {
        Error::Host(Box::new(e))
    }
}

#[cfg(feature = "kernel")]
impl From<xpu_kernel::MemoryError> for Error {
    fn from(e: xpu_kernel::MemoryError) -> Self {
        Error::Memory(Box::new(e))
    }
}

impl Error {
    /// True when the error is a bad fork: this process is a child forked after its parent
    /// initialized OpenCL, and every entry point of every layer refuses at once (see
    /// `xpu_device::fork`; as torch's "Cannot re-initialize CUDA in forked subprocess"). Asks
    /// the wrapped layer error's own `is_bad_fork`, which answers for its `BadFork` and for
    /// a `BadFork` of any lower-layer error it wraps, however deep.
    pub fn is_bad_fork(&self) -> bool {
        match self {
            Error::Lazy(e) => e.is_bad_fork(),
            Error::Device(e) => e.is_bad_fork(),
            Error::Stream(e) => e.is_bad_fork(),
            Error::Event(e) => e.is_bad_fork(),
            // A foreign library's load or status; a segment source's (backend-independent:
            // a device failure is kept as its message); file and encoder failures.
            Error::Foreign(_) => false,
            #[cfg(feature = "alloc")]
            Error::Source(_) | Error::Observe(_) => false,
            #[cfg(feature = "alloc")]
            Error::Alloc(e) => e.is_bad_fork(),
            #[cfg(feature = "alloc")]
            Error::Host(e) => e.is_bad_fork(),
            #[cfg(feature = "kernel")]
            Error::Memory(e) => e.is_bad_fork(),
            #[cfg(feature = "kernel")]
            Error::Interop(e) => e.is_bad_fork(),
            #[cfg(feature = "kernel")]
            Error::Kernel(e) => e.is_bad_fork(),
        }
    }
}

impl Error {
    /// True when the failure is a lack of device memory, as `torch.OutOfMemoryError`,
    /// whichever layer it came through: the allocator's out-of-memory or memory-fraction
    /// report ([`AllocError::is_out_of_memory`](xpu_alloc::AllocError::is_out_of_memory)),
    /// directly or inside a typed-memory, interop or kernel error, and a driver's
    /// out-of-memory code (`CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CL_OUT_OF_RESOURCES`,
    /// `CL_INVALID_BUFFER_SIZE`: [`DeviceError::is_out_of_memory`]) in the device, host or
    /// kernel layers, and the pinned-host allocator's out-of-memory
    /// ([`HostError::is_out_of_memory`](xpu_alloc::HostError::is_out_of_memory)), directly
    /// or inside a typed-memory error (a pinned staging block); and any of those returned by a
    /// [`lazy_call`](crate::lazy_call)'s function (review h84: an out-of-memory from a call
    /// run at once read as no out-of-memory).
    ///
    /// [`DeviceError::is_out_of_memory`]: xpu_device::DeviceError::is_out_of_memory
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Error::Lazy(e) => lazy_oom(e),
            Error::Device(e) => e.is_out_of_memory(),
            #[cfg(feature = "alloc")]
            Error::Alloc(e) => e.is_out_of_memory(),
            #[cfg(feature = "alloc")]
            Error::Host(e) => e.is_out_of_memory(),
            #[cfg(feature = "kernel")]
            Error::Memory(e) => memory_oom(e),
            #[cfg(feature = "kernel")]
            Error::Interop(e) => interop_oom(e),
            #[cfg(feature = "kernel")]
            Error::Kernel(e) => kernel_oom(e),
            _ => false,
        }
    }
}

/// A lazy call's error: its function's boxed error, looked into.
fn lazy_oom(e: &xpu_lazy::LazyError) -> bool {
    match e {
        xpu_lazy::LazyError::CallFailed(source)
        | xpu_lazy::LazyError::QueuedCallFailed { source, .. } => {
            boxed_is_out_of_memory(source.as_ref())
        }
        _ => false,
    }
}

#[cfg(feature = "kernel")]
fn memory_oom(e: &xpu_kernel::MemoryError) -> bool {
    match e {
        xpu_kernel::MemoryError::Alloc(a) => a.is_out_of_memory(),
        // A pinned staging block (review h58: missed before).
        xpu_kernel::MemoryError::Host(h) => h.is_out_of_memory(),
        _ => false,
    }
}

#[cfg(feature = "kernel")]
fn interop_oom(e: &xpu_kernel::InteropError) -> bool {
    matches!(e, xpu_kernel::InteropError::Alloc(a) if a.is_out_of_memory())
}

#[cfg(feature = "kernel")]
fn kernel_oom(e: &xpu_kernel::KernelError) -> bool {
    match e {
        xpu_kernel::KernelError::Alloc(a) => a.is_out_of_memory(),
        xpu_kernel::KernelError::Device(d) => d.is_out_of_memory(),
        xpu_kernel::KernelError::Memory(m) => memory_oom(m),
        xpu_kernel::KernelError::Interop(i) => interop_oom(i),
        _ => false,
    }
}

/// Whether a boxed error (a lazy call's function's) is one of the errors that
/// [`Error::is_out_of_memory`] counts, of any layer the facade wraps (review h85: a kernel,
/// interop or nested lazy call's out-of-memory was missed).
fn boxed_is_out_of_memory(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    if let Some(e) = e.downcast_ref::<Error>() {
        return e.is_out_of_memory();
    }
    if let Some(e) = e.downcast_ref::<xpu_lazy::LazyError>() {
        return lazy_oom(e);
    }
    if let Some(e) = e.downcast_ref::<xpu_device::DeviceError>() {
        return e.is_out_of_memory();
    }
    #[cfg(feature = "alloc")]
    {
        if let Some(e) = e.downcast_ref::<xpu_alloc::AllocError>() {
            return e.is_out_of_memory();
        }
        if let Some(e) = e.downcast_ref::<xpu_alloc::HostError>() {
            return e.is_out_of_memory();
        }
    }
    #[cfg(feature = "kernel")]
    {
        if let Some(e) = e.downcast_ref::<xpu_kernel::KernelError>() {
            return kernel_oom(e);
        }
        if let Some(e) = e.downcast_ref::<xpu_kernel::MemoryError>() {
            return memory_oom(e);
        }
        if let Some(e) = e.downcast_ref::<xpu_kernel::InteropError>() {
            return interop_oom(e);
        }
    }
    false
}

/// Result alias of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
