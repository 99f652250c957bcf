//! The facade's error: every layer's error, unchanged, behind one type.

/// Any error of the xpu runtime. Each variant wraps the layer's own typed error, whose message
/// is shown unchanged.
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
    /// Replaying an allocator trace.
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Replay(#[from] xpu_alloc::replay::ReplayError),
    /// Typed device memory (`xpu_kernel::memory`: ranges, lengths, copies; boxed, as `Host`).
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Memory(Box<xpu_kernel::MemoryError>),
    /// A foreign OpenCL library on xpu's streams and memory (`xpu_kernel::interop`: region
    /// bounds, index-type overflows, the library's status code).
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Interop(#[from] xpu_kernel::InteropError),
    /// Programs, functions and launches (`xpu_kernel`: build logs, argument checks naming the
    /// kernel and index; boxed, as `Host`).
    #[cfg(feature = "kernel")]
    #[error(transparent)]
    Kernel(Box<xpu_kernel::KernelError>),
}

xpu_device::impl_from_via!(Error::Device(xpu_device::DeviceError) <- xpu_device::ClError);

#[cfg(feature = "alloc")]
xpu_device::impl_from_via!(
    Error::Alloc(xpu_alloc::AllocError) <- xpu_alloc::ConfigError, xpu_alloc::MarkerError
);

#[cfg(feature = "kernel")]
impl From<xpu_kernel::KernelError> for Error {
    fn from(e: xpu_kernel::KernelError) -> Self {
        Error::Kernel(Box::new(e))
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
    /// True when the error is a layer's `BadFork`: this process is a child forked after its
    /// parent initialized OpenCL (see `xpu_device::fork`).
    pub fn is_bad_fork(&self) -> bool {
        match self {
            Error::Lazy(e) => matches!(e, xpu_lazy::LazyError::BadFork),
            Error::Device(e) => matches!(e, xpu_device::DeviceError::BadFork),
            Error::Stream(e) => matches!(e, xpu_stream::StreamError::BadFork),
            Error::Event(e) => matches!(
                e,
                xpu_event::EventError::BadFork
                    | xpu_event::EventError::Stream(xpu_stream::StreamError::BadFork)
                    | xpu_event::EventError::Device(xpu_device::DeviceError::BadFork)
            ),
            #[cfg(feature = "alloc")]
            Error::Alloc(e) => matches!(e, xpu_alloc::AllocError::BadFork),
            #[cfg(feature = "alloc")]
            Error::Host(e) => matches!(
                **e,
                xpu_alloc::HostError::BadFork
                    | xpu_alloc::HostError::Device(xpu_device::DeviceError::BadFork)
                    | xpu_alloc::HostError::Stream(xpu_stream::StreamError::BadFork)
            ),
            #[cfg(feature = "kernel")]
            Error::Memory(e) => matches!(
                **e,
                xpu_kernel::MemoryError::Alloc(xpu_alloc::AllocError::BadFork)
                    | xpu_kernel::MemoryError::Host(
                        xpu_alloc::HostError::BadFork
                            | xpu_alloc::HostError::Device(xpu_device::DeviceError::BadFork)
                            | xpu_alloc::HostError::Stream(xpu_stream::StreamError::BadFork)
                    )
            ),
            #[cfg(feature = "kernel")]
            Error::Kernel(e) => matches!(
                **e,
                xpu_kernel::KernelError::BadFork
                    | xpu_kernel::KernelError::Device(xpu_device::DeviceError::BadFork)
                    | xpu_kernel::KernelError::Stream(xpu_stream::StreamError::BadFork)
                    | xpu_kernel::KernelError::Alloc(xpu_alloc::AllocError::BadFork)
            ),
            _ => false,
        }
    }
}

/// Result alias of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
