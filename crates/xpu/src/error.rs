//! The facade's error: every layer's error, unchanged, behind one type.

/// Any error of the xpu runtime. Each variant wraps the layer's own typed error, whose message
/// is shown unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Lazy initialization failed, or the process is a bad fork child.
    #[error(transparent)]
    Lazy(#[from] xpu_lazy::LazyError),
    /// Device layer: invalid index, no runtime, OpenCL failure.
    #[error(transparent)]
    Device(#[from] xpu_device::DeviceError),
    /// Stream layer.
    #[error(transparent)]
    Stream(#[from] xpu_stream::StreamError),
    /// Event layer.
    #[error(transparent)]
    Event(#[from] xpu_event::EventError),
    /// Caching device allocator (out of memory, bad size, bad config, unknown pointer).
    #[cfg(feature = "alloc")]
    #[error(transparent)]
    Alloc(#[from] xpu_alloc::AllocError),
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
        }
    }
}

/// Result alias of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
