//! [`KernelError`]: what the program, function and launch layer can fail with.

use xpu_alloc::AllocError;
use xpu_device::{DeviceError, KernelArgProblem};
use xpu_stream::StreamError;

/// An error of the program / function / launch layer. Argument errors name the kernel and the
/// argument index ([`KernelError::arg`] gives them back as values).
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// This process is a child forked after its parent initialized OpenCL
    /// ([`xpu_device::fork::is_in_bad_fork`]): programs cannot be built nor kernels launched
    /// here (as torch's "Cannot re-initialize CUDA in forked subprocess"). Returned at once,
    /// without a driver call.
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// A device-layer failure: a build error with the compiler log
    /// ([`DeviceError::Build`]), an argument refused by the kernel's signature
    /// ([`DeviceError::KernelArg`], naming kernel, index and parameter), a failed enqueue...
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The stream could not be resolved (released external stream, bad device...).
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A caching-allocator failure (`record_stream` on a stream of another allocator...).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A foreign-library call ([`crate::interop`]) failed, or the library is not installed
    /// (boxed: the error stays small).
    #[error(transparent)]
    Interop(Box<crate::interop::InteropError>),
    /// A typed-memory operation failed (boxed: the error stays small).
    #[error(transparent)]
    Memory(Box<crate::memory::MemoryError>),
    /// The launch did not give the kernel exactly its number of arguments.
    #[error("kernel {kernel:?} takes {expected} arguments, {given} given")]
    ArgCount {
        /// The kernel's function name.
        kernel: String,
        /// `CL_KERNEL_NUM_ARGS`.
        expected: u32,
        /// Arguments given (counting the one refused, when too many).
        given: u32,
    },
    /// An allocation of one device given to a launch on another device's stream.
    #[error(
        "kernel {kernel:?}, argument {index}: an allocation of device {block_device} given to a \
         launch on device {stream_device}"
    )]
    OtherDevice {
        /// The kernel's function name.
        kernel: String,
        /// The argument index.
        index: u32,
        /// The allocation's device.
        block_device: usize,
        /// The stream's device.
        stream_device: usize,
    },
    /// An allocation that cannot be a kernel argument: empty (zero-size), or memory without
    /// an OpenCL buffer (a simulated allocator).
    #[error("kernel {kernel:?}, argument {index}: {source}")]
    Block {
        /// The kernel's function name.
        kernel: String,
        /// The argument index.
        index: u32,
        /// Why the allocation was refused.
        #[source]
        source: AllocError,
    },
    /// A function built for one device launched on a stream of another device.
    #[error("function {kernel:?} was built for device {function_device}, launched on a stream of device {stream_device}")]
    StreamDevice {
        /// The kernel's function name.
        kernel: String,
        /// The device the program was built for.
        function_device: usize,
        /// The stream's device.
        stream_device: usize,
    },
    /// A direct launch on a stream that a graph is capturing (as torch.cuda's "operation not
    /// permitted when stream is capturing"): during a capture, launches go through the
    /// capture handle ([`crate::graph::Capture::launch`]). Nothing was enqueued; the stream
    /// stays usable.
    #[error(
        "launch of {kernel:?} on stream {stream} of device {device}, which a graph is \
         capturing: launch through the capture handle"
    )]
    Capturing {
        /// The kernel's function name.
        kernel: String,
        /// The stream's device.
        device: usize,
        /// The stream's id.
        stream: u64,
    },
    /// Bad work sizes: 1 to 3 dimensions, nonzero, a local size of the same rank.
    #[error("launch of {kernel:?}: {reason}")]
    WorkSize {
        /// The kernel's function name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
}

impl KernelError {
    /// For an error about one argument: the kernel name, the argument index and the device
    /// layer's description of the problem (`None` for this layer's own argument errors,
    /// [`KernelError::OtherDevice`] and [`KernelError::Block`]). `None` for other errors,
    /// [`KernelError::ArgCount`] included (it is about the count, not one argument).
    pub fn arg(&self) -> Option<(&str, u32, Option<&KernelArgProblem>)> {
        match self {
            KernelError::Device(DeviceError::KernelArg {
                kernel,
                index,
                problem,
                ..
            }) => Some((kernel, *index, Some(problem))),
            KernelError::OtherDevice { kernel, index, .. }
            | KernelError::Block { kernel, index, .. } => Some((kernel, *index, None)),
            _ => None,
        }
    }

    /// True for a bad fork (see `xpu_device::fork`): [`KernelError::BadFork`], or a
    /// `BadFork` in the lower-layer or typed-memory / interop error this error wraps (or
    /// holds as the source of [`KernelError::Block`]), asked through that error's own
    /// `is_bad_fork`.
    pub fn is_bad_fork(&self) -> bool {
        match self {
            KernelError::BadFork => true,
            KernelError::Device(e) => e.is_bad_fork(),
            KernelError::Stream(e) => e.is_bad_fork(),
            KernelError::Alloc(e) | KernelError::Block { source: e, .. } => e.is_bad_fork(),
            KernelError::Interop(e) => e.is_bad_fork(),
            KernelError::Memory(e) => e.is_bad_fork(),
            _ => false,
        }
    }
}

impl From<crate::interop::InteropError> for KernelError {
    fn from(e: crate::interop::InteropError) -> Self {
        KernelError::Interop(Box::new(e))
    }
}

impl From<crate::memory::MemoryError> for KernelError {
    fn from(e: crate::memory::MemoryError) -> Self {
        KernelError::Memory(Box::new(e))
    }
}

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`).
pub(crate) fn check_fork() -> Result<(), KernelError> {
    xpu_device::fork::refuse_in_bad_fork(KernelError::BadFork)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use xpu_alloc::HostError;
    use xpu_device::ClError;

    use super::*;
    use crate::graph::GraphError;
    use crate::interop::InteropError;
    use crate::memory::MemoryError;

    /// `GraphError` wraps only `KernelError`: a lower layer's error converts into the
    /// `KernelError` variant of its layer, with the lower error's message and source (the
    /// example MLP's `MlpError` likewise: `crates/xpu/tests/mlp.rs`).
    #[test]
    fn lower_layer_errors_reach_graph_errors_through_kernel_error() {
        let g = GraphError::from(AllocError::InvalidDevice { device: 7 });
        assert!(
            matches!(
                g,
                GraphError::Kernel(KernelError::Alloc(AllocError::InvalidDevice { device: 7 }))
            ),
            "{g:?}"
        );
        assert_eq!(g.to_string(), "invalid device argument 7: no such device");
        let g = GraphError::from(DeviceError::BadFork);
        assert!(
            matches!(
                g,
                GraphError::Kernel(KernelError::Device(DeviceError::BadFork))
            ),
            "{g:?}"
        );

        let oom = || {
            MemoryError::Host(HostError::OutOfMemory {
                device: 1,
                size: 4096,
                source: DeviceError::InvalidArgument("no room".into()),
            })
        };
        for e in [
            GraphError::from(oom()),
            GraphError::from(KernelError::from(oom())),
        ] {
            assert!(
                matches!(&e, GraphError::Kernel(KernelError::Memory(m)) if matches!(**m, MemoryError::Host(_))),
                "{e:?}"
            );
            assert_eq!(e.to_string(), oom().to_string());
            assert_eq!(
                e.source().map(ToString::to_string).as_deref(),
                Some("invalid argument: no room")
            );
        }
    }

    /// `GraphError::is_bad_fork`: its own `BadFork`, and a bad fork of a lower layer wrapped in
    /// its `KernelError`; nothing else.
    #[test]
    fn graph_errors_answer_is_bad_fork_for_their_own_and_wrapped_ones() {
        assert!(GraphError::BadFork.is_bad_fork());
        assert!(GraphError::from(DeviceError::BadFork).is_bad_fork());
        assert!(GraphError::from(KernelError::BadFork).is_bad_fork());
        assert!(GraphError::from(AllocError::BadFork).is_bad_fork());
        assert!(!GraphError::ForeignEvent.is_bad_fork());
        assert!(!GraphError::from(StreamError::ExternalNull).is_bad_fork());
    }

    /// The OpenCL call that interop makes itself is a query of the stream's queue: its
    /// failure is the stream layer's, with the OpenCL error's message.
    #[test]
    fn a_failed_opencl_call_of_interop_is_a_stream_error() {
        let e = InteropError::from(ClError::new("clGetCommandQueueInfo", -36));
        assert!(
            matches!(e, InteropError::Stream(StreamError::OpenCl(_))),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "clGetCommandQueueInfo failed: CL_INVALID_COMMAND_QUEUE (-36)"
        );
    }
}
