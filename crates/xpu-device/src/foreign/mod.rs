//! Foreign OpenCL libraries loaded at run time (`dlopen`), never linked: a missing library is
//! a typed [`ForeignError::NotAvailable`], not a failure to start. Only this crate may hold
//! FFI, so the bindings live here; the calls are `unsafe fn`s whose `# Safety` sections say
//! what the raw OpenCL handles must satisfy. `xpu_kernel::interop` runs them on xpu streams
//! and caching-allocator memory.

pub mod clblast;

/// A failure to load or call a foreign library.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForeignError {
    /// The shared library, or one of its symbols, could not be loaded.
    #[error("{library} is not available: {reason}")]
    NotAvailable {
        /// The library's file name (e.g. `libclblast.so.1`).
        library: String,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// A library function returned a failure status.
    #[error("{function} returned status {code}")]
    Status {
        /// The function's C name.
        function: &'static str,
        /// The library's status code (for CLBlast a `CLBlastStatusCode`, where OpenCL error
        /// codes keep their values).
        code: i32,
    },
}

impl ForeignError {
    /// The library's status code, for a [`ForeignError::Status`].
    #[must_use]
    pub fn code(&self) -> Option<i32> {
        match self {
            ForeignError::Status { code, .. } => Some(*code),
            ForeignError::NotAvailable { .. } => None,
        }
    }
}
