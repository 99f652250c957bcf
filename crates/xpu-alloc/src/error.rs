//! Typed errors of the device allocator.

use thiserror::Error;

use crate::config::ConfigError;
use crate::stream::MarkerError;
use xpu_caching::error::CacheError;
pub use xpu_caching::error::{DeviceFailure, OomReport};
use xpu_device::DeviceError;
use xpu_stream::StreamError;

/// An allocator failure.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AllocError {
    /// The process is a child forked after its parent initialized OpenCL: the allocators
    /// cannot be used (see `xpu_device::fork`). Returned at once, before any allocator lock
    /// (a thread of the parent may have held it at the fork) or driver call.
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// The device has no room even after releasing every cached segment.
    #[error("XPU out of memory. {0}")]
    OutOfMemory(OomReport),
    /// The request would take the reserved memory above the per-process memory fraction.
    #[error("XPU memory fraction exceeded. {0}")]
    MemoryFractionExceeded(OomReport),
    /// The request can never be served: larger than the device's largest allocation
    /// (or than 1 EiB).
    #[error("XPU allocation of {requested} bytes can never succeed on device {device}: the largest single allocation is {max} bytes")]
    TooLarge {
        /// Device index.
        device: usize,
        /// Requested size in bytes.
        requested: u64,
        /// Largest possible allocation in bytes.
        max: u64,
    },
    /// `raw_delete` or `record_stream` of a pointer this allocator did not hand out.
    #[error("invalid device pointer: {address:#x}")]
    InvalidDevicePointer {
        /// The address given.
        address: u64,
    },
    /// `set_memory_fraction` outside `(0, 1]`.
    #[error("invalid memory fraction {fraction}: set it within (0, 1]")]
    InvalidFraction {
        /// The fraction given.
        fraction: f64,
    },
    /// [`crate::begin_allocate_to_pool`] (or [`crate::use_mem_pool`]) for a pool the calling
    /// thread already routes its allocations to (torch's message).
    #[error("beginAllocateToPool: already recording to mempool_id ({}, {}) on device {device}", id.0, id.1)]
    AlreadyRecordingToPool {
        /// Device index.
        device: usize,
        /// The pool's id.
        id: (u64, u64),
    },
    /// [`crate::begin_allocate_to_pool`] (or [`crate::use_mem_pool`]) called while the calling
    /// thread exits, from a thread-local destructor that runs after the thread's routing
    /// state was destroyed: there is nothing left to record the routing in (torch has no
    /// such case; its routing is not thread-local state that can be gone).
    #[error("beginAllocateToPool: cannot route to mempool_id ({}, {}) on device {device}: the calling thread is exiting and its pool routing was already destroyed", id.0, id.1)]
    RoutingUnavailable {
        /// Device index.
        device: usize,
        /// The pool's id.
        id: (u64, u64),
    },
    /// [`crate::end_allocate_to_pool`] for a pool the calling thread does not route to
    /// (torch's message).
    #[error("endAllocatePool: not currently recording to mempool_id ({}, {}) on device {device}", id.0, id.1)]
    NotRecordingToPool {
        /// Device index.
        device: usize,
        /// The pool's id.
        id: (u64, u64),
    },
    /// [`crate::MemPool::release`] while allocations of the pool are live or a thread routes
    /// its allocations to it.
    #[error("mempool_id ({}, {}) is in use: {allocations} live allocations, {routing} routing threads", id.0, id.1)]
    PoolInUse {
        /// The pool's id.
        id: (u64, u64),
        /// Live allocations of the pool.
        allocations: u64,
        /// Threads routing their allocations to the pool now.
        routing: u64,
    },
    /// A device index that does not exist.
    #[error("invalid device argument {device}: no such device")]
    InvalidDevice {
        /// The index given.
        device: usize,
    },
    /// A stream of another device was given to a device's allocator.
    #[error("stream of device {stream} given to the allocator of device {device}")]
    StreamDevice {
        /// The stream's device.
        stream: usize,
        /// The allocator's device.
        device: usize,
    },
    /// A byte range outside an allocation (a [`crate::BlockView`] access).
    #[error("byte range {offset}+{len} is outside an allocation of {size} bytes")]
    OutOfRange {
        /// First byte of the range, from the allocation's start.
        offset: u64,
        /// Length of the range in bytes.
        len: u64,
        /// The allocation's requested size in bytes.
        size: u64,
    },
    /// A direct command (`operation`: a block copy, fill, write or read, `record_stream`) on
    /// a stream that a graph is capturing (as torch.cuda's "operation not permitted when
    /// stream is capturing"). Nothing was enqueued or recorded; the stream stays usable.
    #[error("{operation} on stream {stream:#x} of device {device}, which a graph is capturing")]
    Capturing {
        /// The stream's device.
        device: usize,
        /// The stream id.
        stream: u64,
        /// What was refused.
        operation: &'static str,
    },
    /// The operation does not apply (e.g. a view of simulated memory).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A device error other than out-of-memory (an OpenCL call's [`DeviceError::OpenCl`]
    /// with its code, a refused argument...). `From<DeviceError>` makes a device-layer
    /// `BadFork` [`AllocError::BadFork`]. Boxed: a `DeviceError` is large, and every
    /// allocator result carries this error's size.
    #[error("device error: {0}")]
    Device(Box<DeviceError>),
    /// A device error of a segment source that is not an OpenCL device error (the
    /// simulated backend's injected faults, a source breaking its contract); an OpenCL
    /// source's failure is [`AllocError::Device`].
    #[error("device error: {0}")]
    Source(DeviceFailure),
    /// A stream operation failed: the [`MarkerError`] keeps the stream layer's error typed
    /// ([`MarkerError::downcast_ref`] to [`StreamError`], e.g. `ExternalReleased` for a
    /// dropped external stream, or `OpenCl` with the code of a failed marker call).
    #[error(transparent)]
    Stream(#[from] MarkerError),
    /// A bad allocator configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl AllocError {
    /// True when the allocation failed for lack of device memory, as torch raises
    /// `torch.OutOfMemoryError`: [`AllocError::OutOfMemory`] (after releasing every cached
    /// segment), [`AllocError::MemoryFractionExceeded`] (torch's OOM under a fraction),
    /// [`AllocError::TooLarge`] (a request beyond the device's largest allocation, which torch
    /// reports as out of memory too: a smaller request may fit), or a driver's out-of-memory
    /// code in [`AllocError::Device`].
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            AllocError::OutOfMemory(_)
            | AllocError::MemoryFractionExceeded(_)
            | AllocError::TooLarge { .. } => true,
            AllocError::Device(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// True for a bad fork (see `xpu_device::fork`): [`AllocError::BadFork`], which every
    /// allocator entry point returns in a bad fork child, a device-layer `BadFork` in
    /// [`AllocError::Device`] (which `From` turns into `AllocError::BadFork`, but the variant
    /// can hold one), or a stream or device-layer bad fork kept in the [`MarkerError`] of
    /// [`AllocError::Stream`] (a stream operation of the backend refused in a bad fork
    /// child).
    pub fn is_bad_fork(&self) -> bool {
        match self {
            AllocError::BadFork => true,
            AllocError::Device(e) => e.is_bad_fork(),
            AllocError::Stream(e) => {
                e.downcast_ref::<StreamError>()
                    .is_some_and(StreamError::is_bad_fork)
                    || e.downcast_ref::<DeviceError>()
                        .is_some_and(DeviceError::is_bad_fork)
            }
            _ => false,
        }
    }
}

impl From<DeviceError> for AllocError {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::BadFork => Self::BadFork,
            e => Self::Device(Box::new(e)),
        }
    }
}

impl From<StreamError> for AllocError {
    /// A stream-layer failure: its bad fork, device error or OpenCL call keep their type
    /// ([`AllocError::BadFork`], [`AllocError::Device`]), a capture is
    /// [`AllocError::Capturing`]; any other (a released external stream, too many devices)
    /// is a failed stream operation, [`AllocError::Stream`], its [`MarkerError`] holding the
    /// `StreamError`.
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::BadFork => Self::BadFork,
            StreamError::Device(e) => e.into(),
            StreamError::OpenCl(e) => Self::Device(Box::new(e.into())),
            StreamError::Capturing {
                device,
                id,
                operation,
            } => Self::Capturing {
                device,
                stream: id,
                operation,
            },
            e => Self::Stream(MarkerError::new(e)),
        }
    }
}

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`).
pub(crate) fn check_fork() -> Result<(), AllocError> {
    xpu_device::fork::refuse_in_bad_fork(AllocError::BadFork)
}

impl From<CacheError> for AllocError {
    #[inline]
    fn from(e: CacheError) -> Self {
        match e {
            CacheError::OutOfMemory {
                report,
                fraction: true,
            } => Self::MemoryFractionExceeded(report),
            CacheError::OutOfMemory { report, .. } => Self::OutOfMemory(report),
            CacheError::TooLarge {
                requested,
                max,
                device,
            } => Self::TooLarge {
                device,
                requested,
                max,
            },
            CacheError::Foreign(address) => Self::InvalidDevicePointer { address },
            CacheError::StreamDevice { stream, device } => Self::StreamDevice { stream, device },
            CacheError::Fraction(fraction) => Self::InvalidFraction { fraction },
            CacheError::Device(failure) => match failure.downcast_ref::<DeviceError>() {
                Some(e) => e.clone().into(),
                None if failure.downcast_ref::<CacheError>() == Some(&CacheError::BadFork) => {
                    Self::BadFork
                }
                None => Self::Source(failure),
            },
            CacheError::Stream(e) => Self::Stream(e),
            CacheError::BadFork => Self::BadFork,
        }
    }
}
