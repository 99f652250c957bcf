//! Captured stream graphs (as `torch.cuda.CUDAGraph` / `torch.cuda.graph`):
//! [`Graph::capture`] records the commands enqueued on a stream through the capture handle
//! ([`Capture`]: kernel launches, device copies, fills, uploads of constant host data, event
//! records and waits between captured streams) without running them, and
//! [`Graph::replay`] enqueues them again, in capture order, with one call.
//!
//! ```no_run
//! use std::sync::Arc;
//! use xpu_kernel::{graph::Graph, DeviceBuffer, Program};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! const SRC: &str = "__kernel void scale(__global float *x, float a, uint n) {
//!     size_t i = get_global_id(0); if (i < n) x[i] *= a; }";
//! let scale = Program::build(0, SRC, "")?.function("scale")?;
//! let stream = xpu_stream::current_stream(0)?;
//! let x = Arc::new(DeviceBuffer::from_slice(&[1.0f32; 1024], &stream)?);
//! let graph = Graph::capture(&stream, |c| {
//!     // SAFETY: 1024 work-items touch x[0..1024), at every replay; the kernel terminates.
//!     unsafe { c.launch(&stream, &scale, &[1024], None)?.arg(&x)?.arg(2.0f32)?.arg(1024u32)?.enqueue() }
//! })?;
//! drop(x); // the graph keeps the buffer alive
//! for _ in 0..10 {
//!     graph.replay(&stream)?; // x *= 2, ten times
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Command buffers, or the recorded replay
//! Each captured kernel keeps its own `cl_kernel` with its arguments set once at capture and
//! never changed. Where the device has a usable `cl_khr_command_buffer`
//! ([`command_buffer_supported`]: PoCL 3.x reports version 0.9.0; NVIDIA's OpenCL has none)
//! and every captured command has a command-buffer form (kernels, fills, device copies; not
//! uploads), a replay is one `clEnqueueCommandBufferKHR` ([`Graph::uses_command_buffer`]).
//! The base extension runs a command buffer only on the queue it was recorded for, so the
//! graph records one per replay stream, at the first replay on it (the capture's own at the
//! capture), each created with simultaneous use: a replay may be enqueued while the previous
//! one is still pending. Elsewhere, with [`ReplayMode::Recorded`] ([`Graph::capture_with`], or
//! `XPU_GRAPH_COMMAND_BUFFER=0` for [`Graph::capture`]), or when recording a command buffer
//! fails (logged), a replay enqueues the recorded commands one by one: one
//! `clEnqueueNDRangeKernel` per kernel (no argument setting, no checks) plus the copies,
//! fills and uploads. Both paths have the same semantics: the captured commands run in
//! capture order on the replay stream, after the work enqueued on it before. On PoCL 3.1 the
//! command buffer is about as fast as the recorded replay for 100 one-work-item kernels
//! (`xpu bench`: `graph_replay_100_ns` vs `graph_recorded_replay_100_ns`, within the run-to-run
//! noise, both below `launch_100_ns`).
//!
//! # Memory held by a graph
//! Allocation arguments are given as `Arc`s ([`GraphArg`]): the graph keeps a clone of each
//! for its lifetime, so a block a replay uses is never freed, and never handed to another
//! allocation, while the graph lives. Allocations made during capture come from the graph's
//! private pool (an `xpu_alloc::MemPool`, as torch's graph-private pool): [`Capture::alloc`]
//! allocates from it, and every other allocation the capturing thread makes on the device
//! while the closure runs is routed to it (`xpu_alloc::use_mem_pool`). By default each
//! graph gets a pool of its own (id `(n, 0)`); [`graph_pool_handle`] makes a pool several
//! captures share ([`Graph::capture_in_pool`], as `torch.cuda.graph(g, pool=handle)`). The
//! graph holds its pool for its lifetime, so the pool's segments stay reserved for the
//! replays. When a graph is dropped its blocks are freed stream-ordered: each replay stream
//! is recorded on each block (as `record_stream`), so a block is reused only after the
//! replays enqueued before the drop complete, and a pool no graph or handle holds any more
//! releases its segments after that work.
//!
//! # Why replay is safe
//! The captured launches are [`CaptureLaunch::enqueue`], an `unsafe fn` whose contract covers
//! every replay of the graph (the same kernel, work sizes and arguments on whichever stream
//! of the device the graph is replayed). A replay enqueues exactly those launches: the same
//! `cl_kernel`s with the same arguments and sizes, the same allocations (kept alive by the
//! graph, never resized), no host memory (host data given at capture is copied into the
//! graph; device-to-host copies cannot be captured). So [`Graph::replay`] adds no obligation
//! of its own and is safe.
//!
//! # Errors during capture
//! Typed, and nothing is enqueued, so the stream stays usable. The capturing state lives in
//! xpu-stream (an [`xpu_stream::CaptureGuard`] per captured stream, dropped with the capture,
//! also when the closure fails or panics), so every layer refuses direct work on a capturing
//! stream: launches and typed-memory commands ([`crate::KernelError::Capturing`],
//! [`crate::MemoryError::Capturing`]); `Stream::synchronize`, `query`, `as_raw` and
//! device-wide `synchronize` ([`xpu_stream::StreamError::Capturing`]); event record / wait and
//! gates; allocator block copies, fills, writes and `record_stream`
//! ([`xpu_alloc::AllocError::Capturing`]); pinned host copies. In the capture handle:
//! [`Capture::synchronize`] ([`GraphError::SynchronizeWhileCapturing`]), a command on a stream
//! that is not part of the capture ([`GraphError::NotCaptured`]), capturing a stream another
//! capture holds ([`GraphError::AlreadyCapturing`]). A closure that returns an error ends the
//! capture without a graph.
//!
//! # Fork safety
//! In a child forked after the parent initialized OpenCL (a bad fork, see `xpu_device::fork`)
//! every graph entry point returns [`GraphError::BadFork`] at once, before any driver call,
//! lock or allocation: the captures ([`Graph::capture`] and its variants, also a capture whose
//! closure was running at the fork: it returns `BadFork` when the closure returns), every
//! [`Capture`] command, [`CaptureLaunch::arg`] and [`CaptureLaunch::enqueue`],
//! [`graph_pool_handle`] and [`Graph::replay`]; [`command_buffer_supported`] returns
//! `DeviceError::BadFork`. The queries ([`Graph::len`], [`Graph::uses_command_buffer`],
//! `Debug`) take no lock. Dropping a [`Graph`], a [`Capture`] or a [`CaptureLaunch`] there
//! leaks what it holds (the parent's objects: kernels, command buffers, blocks, the pool, the
//! streams' capturing marks) instead of releasing it, as a parent's `DataPtr` or `Launch`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::Pod;
use parking_lot::Mutex;
use xpu_alloc::{AllocError, BlockArgError, DataPtr, MemPool, PendingMove};
use xpu_device::backend::{Buffer, CommandBuffer, CommandQueue, Kernel};
use xpu_device::DeviceError;
use xpu_stream::{CaptureGuard, Stream, StreamError};

use crate::error::KernelError;
use crate::function::Function;
use crate::launch::{check_launch, set_checked_arg, Arg, LocalMem, Scalar};
use crate::memory::{DeviceBuffer, MemoryError};

static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`): the first
/// check of every graph entry point.
fn check_fork() -> Result<(), GraphError> {
    xpu_device::fork::refuse_in_bad_fork(GraphError::BadFork)
}

/// In a bad fork child, leaks the captured `nodes` (their kernels), the `blocks` and a handle
/// of `pool` (so the pool is never torn down) and returns `true`: they are the parent's driver
/// objects and allocator state, whose release could call the driver or take a lock a thread of
/// the parent held at the fork (as `xpu_device::fork::take_unless_bad_fork`). Elsewhere does
/// nothing and returns `false`.
fn leak_in_bad_fork(
    nodes: &mut Vec<Node>,
    blocks: &mut Vec<Arc<dyn GraphBlock>>,
    pool: &MemPool,
) -> bool {
    if !xpu_device::fork::is_in_bad_fork() {
        return false;
    }
    std::mem::forget(std::mem::take(nodes));
    std::mem::forget(std::mem::take(blocks));
    std::mem::forget(pool.clone());
    true
}

/// Whether a graph is capturing `stream` (then direct commands on it are refused): as
/// [`Stream::is_capturing`], where the state lives.
#[must_use]
pub fn is_capturing(stream: &Stream) -> bool {
    stream.is_capturing()
}

fn register(stream: &Stream) -> Result<CaptureGuard, GraphError> {
    CaptureGuard::begin(stream).map_err(|e| match e {
        StreamError::AlreadyCapturing { device, id } => {
            GraphError::AlreadyCapturing { device, stream: id }
        }
        e => e.into(),
    })
}

/// Whether graphs of `device` can replay through a `cl_khr_command_buffer`: the device
/// reports the extension at a version whose layout the runtime implements (0.9.0 to 0.9.4,
/// what PoCL 3.x reports), with simultaneous use, and its platform returns the entry points
/// ([`xpu_device::backend::command_buffer_support`], read from the driver at run time).
/// NVIDIA's OpenCL has no command buffers: `false` there.
///
/// # Errors
/// [`DeviceError`] for a bad device index or failed discovery; [`DeviceError::BadFork`] in
/// a bad fork child.
pub fn command_buffer_supported(device: usize) -> Result<bool, DeviceError> {
    let id = xpu_device::device(device)?.id();
    Ok(xpu_device::backend::command_buffer_support(id)?.is_some())
}

/// The environment variable that forces recorded replay for [`ReplayMode::from_env`]: `0`
/// (or `false`, `off`) never uses command buffers.
pub const COMMAND_BUFFER_ENV: &str = "XPU_GRAPH_COMMAND_BUFFER";

/// How a graph replays ([`Graph::capture_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplayMode {
    /// A `cl_khr_command_buffer` per replay queue where the device supports it
    /// ([`command_buffer_supported`]) and every captured command is expressible in one
    /// (uploads are not); otherwise, or when recording one fails, the recorded replay.
    #[default]
    Auto,
    /// The recorded replay on every device: one enqueue per captured command.
    Recorded,
}

impl ReplayMode {
    /// [`ReplayMode::Recorded`] when [`COMMAND_BUFFER_ENV`] is `0`, `false` or `off`, else
    /// [`ReplayMode::Auto`]. Read at each call.
    #[must_use]
    pub fn from_env() -> ReplayMode {
        match std::env::var(COMMAND_BUFFER_ENV) {
            Ok(v) if matches!(v.trim(), "0" | "false" | "off") => ReplayMode::Recorded,
            _ => ReplayMode::Auto,
        }
    }
}

/// A failure of graph capture or replay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// This process is a child forked after its parent initialized OpenCL
    /// ([`xpu_device::fork::is_in_bad_fork`]): graphs cannot be captured nor replayed here
    /// (as torch's "Cannot re-initialize CUDA in forked subprocess"). Returned by every graph
    /// entry point at once, before any driver call, lock or allocation (see the module docs,
    /// "Fork safety").
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// [`Graph::capture`] (or a join through [`Capture::wait_event`]) on a stream that a
    /// capture already holds, or [`Graph::replay`] on a capturing stream.
    #[error("stream {stream} of device {device} is already being captured into a graph")]
    AlreadyCapturing {
        /// The stream's device.
        device: usize,
        /// The stream's id.
        stream: u64,
    },
    /// A command of a capture on a stream that is not part of it: neither the stream the
    /// capture began on nor one joined by waiting on a captured event (as torch.cuda's
    /// capture, which follows streams through events).
    #[error(
        "stream {stream} of device {device} is not part of this capture (join it with \
         Capture::wait_event on an event recorded on a captured stream)"
    )]
    NotCaptured {
        /// The stream's device.
        device: usize,
        /// The stream's id.
        stream: u64,
    },
    /// [`Capture::synchronize`]: a capturing stream has nothing to wait for (its commands
    /// are recorded, not run), as torch.cuda refuses `synchronize` during capture.
    #[error("synchronize on stream {stream} of device {device}, which is being captured")]
    SynchronizeWhileCapturing {
        /// The stream's device.
        device: usize,
        /// The stream's id.
        stream: u64,
    },
    /// [`Graph::replay`] (or a join) on a stream of another device than the graph's.
    #[error("graph of device {graph_device} used on a stream of device {stream_device}")]
    OtherDevice {
        /// The device the graph was captured on.
        graph_device: usize,
        /// The stream's device.
        stream_device: usize,
    },
    /// [`Capture::wait_event`] with an event of another capture.
    #[error("event of another capture")]
    ForeignEvent,
    /// A captured fill of an element size that `clEnqueueFillBuffer` does not take as a
    /// pattern (a power of two up to 128 bytes, OpenCL 3.0 §5.2.3).
    #[error("fill of {size}-byte elements: the pattern is a power of two up to 128 bytes")]
    FillPattern {
        /// `size_of::<T>()`.
        size: usize,
    },
    /// A failure of the launch layer (argument checks, work sizes, enqueue) or of a layer
    /// it wraps, which [`KernelError`]'s variant names: typed memory (range, length,
    /// overlap; [`KernelError::Memory`]), the allocator (a view or `record_stream` at
    /// replay; [`KernelError::Alloc`]), an unresolved stream ([`KernelError::Stream`]), the
    /// device layer ([`KernelError::Device`]).
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

xpu_device::impl_from_via!(
    GraphError::Kernel(KernelError) <- MemoryError, AllocError, StreamError, DeviceError
);

xpu_device::impl_is_bad_fork! {
    /// True for a bad fork (see `xpu_device::fork`): [`GraphError::BadFork`], or a `BadFork`
    /// in the [`KernelError`] this error wraps, asked through its own `is_bad_fork`.
    GraphError { own: BadFork; wraps: Kernel; }
}

mod sealed {
    pub trait Sealed {}
}

/// Memory a graph can hold: an allocation ([`DataPtr`]) or a typed buffer ([`DeviceBuffer`]).
/// Sealed.
pub trait GraphBlock: sealed::Sealed + Send + Sync + fmt::Debug + 'static {
    /// The allocation.
    fn block(&self) -> &DataPtr;

    /// The argument it is: untyped for an allocation, typed (its element type checked against
    /// the parameter's, as [`crate::Launch::arg`]) for a typed buffer.
    fn arg(&self) -> Arg<'_> {
        Arg::Block(self.block())
    }
}

impl sealed::Sealed for DataPtr {}
impl GraphBlock for DataPtr {
    fn block(&self) -> &DataPtr {
        self
    }
}
impl<T: Pod + Send + Sync> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Pod + Send + Sync> GraphBlock for DeviceBuffer<T> {
    fn block(&self) -> &DataPtr {
        self.data_ptr()
    }

    fn arg(&self) -> Arg<'_> {
        Arg::from(self)
    }
}

/// One argument of a captured launch: an allocation shared with the graph (which keeps it
/// alive for its lifetime), a scalar, or `__local` memory. Built with `From`:
/// `&Arc<DataPtr>`, `&Arc<DeviceBuffer<T>>`, the scalar types, [`LocalMem`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum GraphArg {
    /// An allocation; the graph holds a clone of the `Arc`.
    Block(Arc<dyn GraphBlock>),
    /// A by-value scalar.
    Scalar(Scalar),
    /// `__local` memory of this many bytes per work-group.
    Local(usize),
}

impl<B: GraphBlock> From<&Arc<B>> for GraphArg {
    fn from(b: &Arc<B>) -> Self {
        GraphArg::Block(Arc::clone(b) as Arc<dyn GraphBlock>)
    }
}

impl From<LocalMem> for GraphArg {
    fn from(l: LocalMem) -> Self {
        GraphArg::Local(l.0)
    }
}

macro_rules! graph_scalar_from {
    ($($t:ty),*) => {$(
        impl From<$t> for GraphArg {
            fn from(x: $t) -> Self {
                match Arg::from(x) {
                    Arg::Scalar(s) => GraphArg::Scalar(s),
                    _ => unreachable!("a scalar converts to Arg::Scalar"),
                }
            }
        }
    )*};
}
graph_scalar_from!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

enum Node {
    Kernel {
        function: Function,
        /// Arguments set at capture, kept until the graph drops (boxed: a kernel is large
        /// beside the other nodes).
        kernel: Box<Kernel>,
        dims: usize,
        global: [usize; 3],
        local: Option<[usize; 3]>,
    },
    Fill(FillCmd),
    Copy(CopyCmd),
    Write {
        dst: usize,
        offset: usize,
        data: Vec<u8>,
    },
    /// Event record / wait between captured streams: replayed on one stream in capture order,
    /// the order they imposed holds without them.
    Sync,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Kernel {
                function, global, ..
            } => write!(f, "Kernel({:?}, {:?})", function.name(), global),
            Node::Fill(FillCmd { dst, len, .. }) => write!(f, "Fill(block {dst}, {len} B)"),
            Node::Copy(CopyCmd { src, dst, len, .. }) => {
                write!(f, "Copy({src} -> {dst}, {len} B)")
            }
            Node::Write { dst, data, .. } => write!(f, "Write(block {dst}, {} B)", data.len()),
            Node::Sync => write!(f, "Sync"),
        }
    }
}

/// The capture handle given to [`Graph::capture`]'s closure: every command goes through it,
/// on the capture's stream or a stream joined with [`Capture::wait_event`].
///
/// The handle is branded with a lifetime of its own capture, so the handles of two nested
/// captures cannot be exchanged (review h79: `std::mem::swap` of the two made the inner
/// capture end the outer one, on the outer's stream, and the outer build its graph from the
/// inner's commands, a kernel of another device among them):
///
/// ```compile_fail,E0521
/// use xpu_kernel::graph::Graph;
/// let s1 = xpu_stream::get_stream_from_pool(0, 0).unwrap();
/// let s2 = xpu_stream::get_stream_from_pool(0, 0).unwrap();
/// let _ = Graph::capture(&s1, |outer| {
///     Graph::capture(&s2, |inner| {
///         std::mem::swap(outer, inner);
///         Ok(())
///     })?;
///     Ok(())
/// });
/// ```
#[derive(Debug)]
pub struct Capture<'brand> {
    id: u64,
    device: usize,
    /// Captured streams (ids), the first being the one the capture began on.
    streams: Vec<u64>,
    /// The capturing marks of `streams` (dropped with the capture: the streams are usable
    /// again even when the closure fails or panics).
    guards: Vec<CaptureGuard>,
    nodes: Vec<Node>,
    blocks: Vec<Arc<dyn GraphBlock>>,
    /// Relocation copies that may still use the bytes of kernel arguments whose places the
    /// capture fixed: every replay is ordered after them.
    pending: Vec<PendingMove>,
    events: usize,
    /// The pool allocations during capture come from.
    pool: MemPool,
    /// Invariant in `'brand`: no other capture's handle has this type.
    brand: PhantomData<fn(&'brand ()) -> &'brand ()>,
}

impl Drop for Capture<'_> {
    fn drop(&mut self) {
        // In a bad fork child the capturing marks stay too: clearing one takes xpu-stream's
        // lock of the capturing streams, which a thread of the parent may have held.
        if leak_in_bad_fork(&mut self.nodes, &mut self.blocks, &self.pool) {
            std::mem::forget(std::mem::take(&mut self.guards));
        }
    }
}

/// An event recorded during a capture ([`Capture::record_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedEvent {
    capture: u64,
    index: usize,
}

impl<'b> Capture<'b> {
    /// The first check of a command: not in a bad fork child, `stream` part of the capture.
    fn check(&self, stream: &Stream) -> Result<(), GraphError> {
        check_fork()?;
        if stream.device() == self.device && self.streams.contains(&stream.id()) {
            Ok(())
        } else {
            Err(GraphError::NotCaptured {
                device: stream.device(),
                stream: stream.id(),
            })
        }
    }

    fn keep(&mut self, b: Arc<dyn GraphBlock>) -> Result<usize, GraphError> {
        let ptr = b.block();
        if ptr.device() != self.device {
            return Err(MemoryError::StreamDevice {
                stream: self.device,
                device: ptr.device(),
            }
            .into());
        }
        if let Some(i) = self
            .blocks
            .iter()
            .position(|k| std::ptr::addr_eq(Arc::as_ptr(k), Arc::as_ptr(&b)))
        {
            return Ok(i);
        }
        self.blocks.push(b);
        Ok(self.blocks.len() - 1)
    }

    /// The device being captured.
    #[must_use]
    pub fn device(&self) -> usize {
        self.device
    }

    /// The private pool this capture allocates from (the graph's).
    #[must_use]
    pub fn pool(&self) -> &MemPool {
        &self.pool
    }

    /// Starts a captured launch of `function` on `stream` (checked as
    /// [`crate::LaunchExt::launch`]); [`CaptureLaunch::arg`] adds the arguments and
    /// [`CaptureLaunch::enqueue`] records it. Nothing runs until [`Graph::replay`].
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first, as for every command of the
    /// handle); [`GraphError::NotCaptured`] for a stream outside the capture; the launch
    /// layer's errors ([`KernelError::StreamDevice`], [`KernelError::WorkSize`]...).
    pub fn launch(
        &mut self,
        stream: &Stream,
        function: &Function,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<CaptureLaunch<'_, 'b>, GraphError> {
        self.check(stream)?;
        let (dims, global, local) = check_launch(stream, function, global, local)?;
        Ok(CaptureLaunch {
            kernel: Some(function.take()?),
            function: function.clone(),
            stream: *stream,
            capture: self,
            next: 0,
            blocks: Vec::new(),
            dims,
            global,
            local,
        })
    }

    /// Allocates `len` elements on `stream` for the graph from the capture's pool
    /// ([`Capture::pool`]; contents unspecified, as [`DeviceBuffer::new`]): the graph holds
    /// the buffer for its lifetime, so its block stays reserved for the replays (torch's
    /// graph-private pool); the returned `Arc` may be kept to read results or dropped.
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::NotCaptured`];
    /// [`MemoryError`] as [`DeviceBuffer::new`].
    pub fn alloc<T: Pod + Send + Sync>(
        &mut self,
        stream: &Stream,
        len: usize,
    ) -> Result<Arc<DeviceBuffer<T>>, GraphError> {
        self.check(stream)?;
        let b = Arc::new(DeviceBuffer::<T>::new_in_pool(len, stream, &self.pool)?);
        self.keep(Arc::clone(&b) as Arc<dyn GraphBlock>)?;
        Ok(b)
    }

    /// Records a fill of all of `dst` with `value` (`clEnqueueFillBuffer` at each replay).
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::NotCaptured`];
    /// [`GraphError::FillPattern`] unless `size_of::<T>()` is a power of two up to 128;
    /// [`MemoryError::StreamDevice`] for a buffer of another device.
    pub fn fill<T: Pod + Send + Sync>(
        &mut self,
        stream: &Stream,
        dst: &Arc<DeviceBuffer<T>>,
        value: T,
    ) -> Result<(), GraphError> {
        self.check(stream)?;
        let size = std::mem::size_of::<T>();
        if !(size.is_power_of_two() && size <= 128) {
            return Err(GraphError::FillPattern { size });
        }
        let len = dst.len() * size;
        let dst = self.keep(Arc::clone(dst) as Arc<dyn GraphBlock>)?;
        if len > 0 {
            self.nodes.push(Node::Fill(FillCmd {
                dst,
                pattern: bytemuck::bytes_of(&value).to_vec(),
                offset: 0,
                len,
            }));
        }
        Ok(())
    }

    /// Records a device copy of `len` elements from `src[src_offset..]` to
    /// `dst[dst_offset..]` (`clEnqueueCopyBuffer` at each replay). A copy of no bytes (`len`
    /// 0, or a zero-sized `T`) records no command.
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::NotCaptured`];
    /// [`MemoryError::OutOfRange`] for a range outside a buffer, [`MemoryError::Overlap`] for
    /// overlapping ranges of one buffer, [`MemoryError::StreamDevice`] for a buffer of another
    /// device.
    pub fn copy<T: Pod + Send + Sync>(
        &mut self,
        stream: &Stream,
        src: &Arc<DeviceBuffer<T>>,
        src_offset: usize,
        dst: &Arc<DeviceBuffer<T>>,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), GraphError> {
        self.check(stream)?;
        for (off, buf) in [(src_offset, src), (dst_offset, dst)] {
            match off.checked_add(len) {
                Some(end) if end <= buf.len() => {}
                _ => {
                    return Err(MemoryError::OutOfRange {
                        start: off,
                        end: off.saturating_add(len),
                        len: buf.len(),
                    }
                    .into())
                }
            }
        }
        if Arc::ptr_eq(src, dst) && src_offset < dst_offset + len && dst_offset < src_offset + len {
            return Err(MemoryError::Overlap {
                src: src_offset,
                dst: dst_offset,
                len,
            }
            .into());
        }
        let size = std::mem::size_of::<T>();
        let s = self.keep(Arc::clone(src) as Arc<dyn GraphBlock>)?;
        let d = self.keep(Arc::clone(dst) as Arc<dyn GraphBlock>)?;
        // No node when no byte moves (also for zero-sized `T`, whose buffers have no block).
        if len > 0 && size > 0 {
            self.nodes.push(Node::Copy(CopyCmd {
                src: s,
                dst: d,
                src_offset: src_offset * size,
                dst_offset: dst_offset * size,
                len: len * size,
            }));
        }
        Ok(())
    }

    /// Records an upload of `data` into `dst[offset..]`: `data` is copied into the graph now,
    /// and each replay writes that copy (a blocking `clEnqueueWriteBuffer`: the replay returns
    /// after the upload, which runs after the replay's earlier commands). An upload of no
    /// bytes (empty `data`, or a zero-sized `T`) records no command.
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::NotCaptured`];
    /// [`MemoryError::OutOfRange`]; [`MemoryError::StreamDevice`].
    pub fn write<T: Pod + Send + Sync>(
        &mut self,
        stream: &Stream,
        dst: &Arc<DeviceBuffer<T>>,
        offset: usize,
        data: &[T],
    ) -> Result<(), GraphError> {
        self.check(stream)?;
        match offset.checked_add(data.len()) {
            Some(end) if end <= dst.len() => {}
            _ => {
                return Err(MemoryError::OutOfRange {
                    start: offset,
                    end: offset.saturating_add(data.len()),
                    len: dst.len(),
                }
                .into())
            }
        }
        let d = self.keep(Arc::clone(dst) as Arc<dyn GraphBlock>)?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        // No node when no byte moves (also for zero-sized `T`, whose buffers have no block).
        if !bytes.is_empty() {
            self.nodes.push(Node::Write {
                dst: d,
                offset: offset * std::mem::size_of::<T>(),
                data: bytes.to_vec(),
            });
        }
        Ok(())
    }

    /// Records an event on captured `stream` (as `torch.cuda.Event.record` during capture);
    /// another stream joins the capture by waiting on it ([`Capture::wait_event`]).
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::NotCaptured`].
    pub fn record_event(&mut self, stream: &Stream) -> Result<CapturedEvent, GraphError> {
        self.check(stream)?;
        self.nodes.push(Node::Sync);
        self.events += 1;
        Ok(CapturedEvent {
            capture: self.id,
            index: self.events - 1,
        })
    }

    /// Makes `stream` wait for `event` (recorded in this capture). A stream of the device
    /// that is not captured yet joins the capture (as torch.cuda's capture follows a stream
    /// that waits on a capturing stream's event): its later commands through this handle are
    /// recorded, and direct launches on it are refused until the capture ends.
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first); [`GraphError::ForeignEvent`] for
    /// an event of another capture; [`GraphError::OtherDevice`] for a stream of another device;
    /// [`GraphError::AlreadyCapturing`] for a stream another capture holds.
    pub fn wait_event(&mut self, stream: &Stream, event: &CapturedEvent) -> Result<(), GraphError> {
        check_fork()?;
        if event.capture != self.id || event.index >= self.events {
            return Err(GraphError::ForeignEvent);
        }
        if stream.device() != self.device {
            return Err(GraphError::OtherDevice {
                graph_device: self.device,
                stream_device: stream.device(),
            });
        }
        if !self.streams.contains(&stream.id()) {
            self.guards.push(register(stream)?);
            self.streams.push(stream.id());
        }
        self.nodes.push(Node::Sync);
        Ok(())
    }

    /// Synchronizing a capturing stream is refused (its commands are recorded, not run), as
    /// torch.cuda raises on `synchronize` during capture. Nothing happens to the stream.
    ///
    /// # Errors
    /// Always: [`GraphError::SynchronizeWhileCapturing`] for a captured stream,
    /// [`GraphError::NotCaptured`] for another one (synchronize it directly),
    /// [`GraphError::BadFork`] in a bad fork child (first).
    pub fn synchronize(&self, stream: &Stream) -> Result<(), GraphError> {
        self.check(stream)?;
        Err(GraphError::SynchronizeWhileCapturing {
            device: stream.device(),
            stream: stream.id(),
        })
    }
}

/// A launch being captured ([`Capture::launch`]).
#[derive(Debug)]
pub struct CaptureLaunch<'c, 'b> {
    capture: &'c mut Capture<'b>,
    function: Function,
    stream: Stream,
    kernel: Option<Kernel>,
    next: u32,
    blocks: Vec<Arc<dyn GraphBlock>>,
    dims: usize,
    global: [usize; 3],
    local: Option<[usize; 3]>,
}

impl CaptureLaunch<'_, '_> {
    /// Sets the next argument (parameter order), checked as [`crate::Launch::arg`]. An
    /// allocation is shared with the graph, which keeps it alive for its lifetime.
    ///
    /// # Errors
    /// As [`crate::Launch::arg`]; [`GraphError::BadFork`] in a bad fork child (first).
    pub fn arg(mut self, arg: impl Into<GraphArg>) -> Result<Self, GraphError> {
        check_fork()?;
        let index = self.next;
        let kernel = self.kernel.as_mut().expect("present until enqueue or drop");
        match arg.into() {
            GraphArg::Block(b) => {
                let pending =
                    set_checked_arg(kernel, &self.function, &self.stream, index, b.arg())?;
                self.capture.pending.extend(pending);
                self.blocks.push(b);
            }
            GraphArg::Scalar(s) => {
                set_checked_arg(kernel, &self.function, &self.stream, index, Arg::Scalar(s))?;
            }
            GraphArg::Local(n) => {
                set_checked_arg(kernel, &self.function, &self.stream, index, Arg::Local(n))?;
            }
        }
        self.next += 1;
        Ok(self)
    }

    /// Records the launch in the graph (nothing runs now; each [`Graph::replay`] enqueues it).
    ///
    /// # Safety
    /// The obligations of [`crate::Launch::enqueue`], for **every replay** of the graph, on
    /// whichever stream of the device it is replayed, with the memory contents that the
    /// graph's earlier commands and the work ordered before the replay leave: every access of
    /// every work-item stays inside the allocation given for its pointer parameter (its
    /// requested size) and inside the [`LocalMem`] sizes; no memory the kernel writes is
    /// borrowed by Rust code while a replay runs, and none it reads is written by the host
    /// meanwhile; the kernel terminates.
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child (first; the kernel is leaked, not returned
    /// to the function); [`KernelError::ArgCount`] when fewer arguments than the kernel's
    /// parameters were given; [`GraphError::OtherDevice`] cannot occur (checked at
    /// [`CaptureLaunch::arg`]).
    #[allow(unsafe_code)]
    pub unsafe fn enqueue(mut self) -> Result<(), GraphError> {
        check_fork()?;
        let kernel = self.kernel.take().expect("present until enqueue or drop");
        if self.next != kernel.num_args() {
            let e = KernelError::ArgCount {
                kernel: self.function.name().to_owned(),
                expected: kernel.num_args(),
                given: self.next,
            };
            self.function.put(kernel);
            return Err(e.into());
        }
        for b in std::mem::take(&mut self.blocks) {
            self.capture.keep(b)?;
        }
        self.capture.nodes.push(Node::Kernel {
            function: self.function.clone(),
            kernel: Box::new(kernel),
            dims: self.dims,
            global: self.global,
            local: self.local,
        });
        Ok(())
    }
}

impl Drop for CaptureLaunch<'_, '_> {
    fn drop(&mut self) {
        // In a bad fork child the kernel is the parent's driver state and the function's pool
        // lock may have been held at the fork: the kernel is leaked, not returned.
        if let Some(k) = xpu_device::fork::take_unless_bad_fork(&mut self.kernel) {
            self.function.put(k);
        }
    }
}

/// A private pool for graph captures on `device` that several captures may share (as
/// `torch.cuda.graph_pool_handle()`): pass it to [`Graph::capture_in_pool`]. Each graph
/// holds the pool while it lives; its id is `(0, n)` as torch's handles.
///
/// # Errors
/// [`KernelError::Alloc`] (in [`GraphError::Kernel`]) as `xpu_alloc::MemPool::new` (bad
/// device index, configuration); [`GraphError::BadFork`] in a bad fork child.
pub fn graph_pool_handle(device: usize) -> Result<MemPool, GraphError> {
    check_fork()?;
    Ok(MemPool::new(device)?)
}

/// A captured command sequence of one device, replayed with [`Graph::replay`] (as
/// `torch.cuda.CUDAGraph`). `Send`, not `Sync` (its kernel nodes hold OpenCL kernel
/// objects, which are not `Sync`): share one across threads behind a `Mutex`. A replay's
/// enqueues stay together under the graph's lock.
pub struct Graph {
    device: usize,
    /// Replays try command buffers (mode `Auto` and every command expressible).
    command_buffer: bool,
    /// Replays on the capture's stream go through the command buffer recorded at the capture.
    uses_command_buffer: bool,
    /// What replays change; declared before `nodes` and `blocks`: the command buffers are
    /// released before the graph releases its kernels and frees its blocks.
    inner: Mutex<GraphInner>,
    /// The captured commands (fixed at the capture: read without the lock).
    nodes: Vec<Node>,
    blocks: Vec<Arc<dyn GraphBlock>>,
    /// The private pool of the capture's allocations, held for the replays.
    pool: MemPool,
}

struct GraphInner {
    /// One command buffer per replay stream, recorded at the first replay on it (at the
    /// capture for the capture's stream); `None` where that failed (recorded replay there).
    command_buffers: HashMap<u64, Option<CommandBuffer>>,
    /// Replay streams already recorded on the blocks (`record_stream`).
    recorded: HashSet<u64>,
    /// Relocation copies that may still use the bytes of the kernels' block arguments
    /// (their places were fixed at the capture without waiting for them on the host): each
    /// replay stream waits for them on the device first; dropped once complete.
    pending: Vec<PendingMove>,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("device", &self.device)
            .field("command_buffer", &self.uses_command_buffer)
            .field("nodes", &self.nodes)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // In a bad fork child the command buffers are the parent's driver objects too.
        if leak_in_bad_fork(&mut self.nodes, &mut self.blocks, &self.pool) {
            std::mem::forget(std::mem::take(&mut self.inner.get_mut().command_buffers));
        }
    }
}

impl Graph {
    /// Captures the commands `f` enqueues through the [`Capture`] handle on `stream` (and on
    /// streams it joins) into a graph, as `torch.cuda.graph(g, stream=...)`. Nothing runs
    /// during capture. While `f` runs, direct launches and typed-memory commands on the
    /// captured streams are refused with typed errors; when it returns (or panics) the
    /// streams are released, usable as before.
    ///
    /// Allocations during the capture come from a new private pool of the graph (see the
    /// module docs, "Memory held by a graph").
    ///
    /// # Errors
    /// [`GraphError::AlreadyCapturing`] for a stream another capture holds; `f`'s error;
    /// [`KernelError::Alloc`] (in [`GraphError::Kernel`]) when the device's allocator cannot
    /// be created; [`GraphError::BadFork`] in a bad fork child, first, and when the process
    /// became one while `f` ran (a fork in the closure: no graph, the capture is leaked).
    pub fn capture<F>(stream: &Stream, f: F) -> Result<Graph, GraphError>
    where
        F: for<'b> FnOnce(&mut Capture<'b>) -> Result<(), GraphError>,
    {
        Graph::capture_with(stream, ReplayMode::from_env(), f)
    }

    /// [`Graph::capture`] with the replay mode chosen by the caller ([`Graph::capture`]
    /// takes [`ReplayMode::from_env`]). With [`ReplayMode::Auto`] the command buffer of the
    /// capture's stream is recorded before this returns.
    ///
    /// # Errors
    /// As [`Graph::capture`].
    pub fn capture_with<F>(stream: &Stream, mode: ReplayMode, f: F) -> Result<Graph, GraphError>
    where
        F: for<'b> FnOnce(&mut Capture<'b>) -> Result<(), GraphError>,
    {
        check_fork()?;
        let pool = MemPool::for_graph(stream.device())?;
        Self::capture_in_pool_with(stream, &pool, mode, f)
    }

    /// [`Graph::capture`] with the capture's allocations taken from `pool` (as
    /// `torch.cuda.graph(g, pool=handle)`): a pool from [`graph_pool_handle`] (or any
    /// `MemPool` of the device) that several graphs may share; each holds it while it lives.
    ///
    /// # Errors
    /// [`GraphError::OtherDevice`] for a pool of another device than the stream's; as
    /// [`Graph::capture`].
    pub fn capture_in_pool<F>(stream: &Stream, pool: &MemPool, f: F) -> Result<Graph, GraphError>
    where
        F: for<'b> FnOnce(&mut Capture<'b>) -> Result<(), GraphError>,
    {
        Self::capture_in_pool_with(stream, pool, ReplayMode::from_env(), f)
    }

    /// [`Graph::capture_in_pool`] with the replay mode chosen by the caller (see
    /// [`Graph::capture_with`]).
    ///
    /// # Errors
    /// As [`Graph::capture_in_pool`].
    pub fn capture_in_pool_with<F>(
        stream: &Stream,
        pool: &MemPool,
        mode: ReplayMode,
        f: F,
    ) -> Result<Graph, GraphError>
    where
        F: for<'b> FnOnce(&mut Capture<'b>) -> Result<(), GraphError>,
    {
        check_fork()?;
        if pool.device() != stream.device() {
            return Err(GraphError::OtherDevice {
                graph_device: pool.device(),
                stream_device: stream.device(),
            });
        }
        let queue = stream.queue()?;
        let guard = register(stream)?;
        let mut capture = Capture {
            id: NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed),
            device: stream.device(),
            streams: vec![stream.id()],
            guards: vec![guard],
            nodes: Vec::new(),
            blocks: Vec::new(),
            pending: Vec::new(),
            events: 0,
            pool: pool.clone(),
            brand: PhantomData,
        };
        // Every allocation this thread makes on the device during the capture comes from
        // the pool (unless the caller already routes to it).
        let _routed = match xpu_alloc::use_mem_pool(pool) {
            Ok(guard) => Some(guard),
            Err(AllocError::AlreadyRecordingToPool { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        f(&mut capture)?;
        // A fork while `f` ran: the child gets no graph (the capture leaks what it holds).
        check_fork()?;
        let nodes = std::mem::take(&mut capture.nodes);
        let blocks = std::mem::take(&mut capture.blocks);
        let pending = std::mem::take(&mut capture.pending);
        let pool = capture.pool.clone();
        drop(capture);
        let command_buffer = mode == ReplayMode::Auto
            && !nodes.is_empty()
            && !nodes.iter().any(|n| matches!(n, Node::Write { .. }))
            && command_buffer_supported(stream.device()).unwrap_or(false);
        let mut command_buffers = HashMap::new();
        if command_buffer {
            command_buffers.insert(stream.id(), command_buffer_for(&queue, &nodes, &blocks));
        }
        Ok(Graph {
            device: stream.device(),
            command_buffer,
            uses_command_buffer: matches!(command_buffers.get(&stream.id()), Some(Some(_))),
            inner: Mutex::new(GraphInner {
                command_buffers,
                recorded: HashSet::new(),
                pending,
            }),
            nodes,
            blocks,
            pool,
        })
    }

    /// The private pool the graph's capture allocated from (held while the graph lives).
    #[must_use]
    pub fn pool(&self) -> &MemPool {
        &self.pool
    }

    /// The device the graph was captured on.
    #[must_use]
    pub fn device(&self) -> usize {
        self.device
    }

    /// Number of captured commands (kernels, copies, fills, uploads, event records/waits).
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether nothing was captured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether replays on the capture's stream go through a `cl_khr_command_buffer` (one
    /// `clEnqueueCommandBufferKHR` per replay) rather than the recorded replay (one enqueue
    /// per command). See the module docs for when.
    #[must_use]
    pub fn uses_command_buffer(&self) -> bool {
        self.uses_command_buffer
    }

    /// Enqueues the captured commands on `stream`, in capture order, after the work enqueued
    /// on it before (as `CUDAGraph.replay`). Non-blocking, except that a captured upload
    /// ([`Capture::write`]) is a blocking write. The first replay on a stream records it on
    /// the graph's allocations (`record_stream`), so they are freed after its work when the
    /// graph is dropped. Safe: see the module docs ("Why replay is safe").
    ///
    /// # Errors
    /// [`GraphError::BadFork`] in a bad fork child, first; [`GraphError::OtherDevice`] for a
    /// stream of another device and [`GraphError::AlreadyCapturing`] for a stream being
    /// captured, before anything is enqueued (for a capture of the stream begun on another
    /// thread during the replay: at the first command after it began, the commands before
    /// having been enqueued before it); [`KernelError::Stream`] (in
    /// [`GraphError::Kernel`]) for a released stream; a device error of an enqueue (then the
    /// commands before it were enqueued).
    #[allow(unsafe_code)]
    pub fn replay(&self, stream: &Stream) -> Result<(), GraphError> {
        check_fork()?;
        if stream.device() != self.device {
            return Err(GraphError::OtherDevice {
                graph_device: self.device,
                stream_device: stream.device(),
            });
        }
        if is_capturing(stream) {
            return Err(GraphError::AlreadyCapturing {
                device: stream.device(),
                stream: stream.id(),
            });
        }
        let queue = stream.queue()?;
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        if !inner.recorded.contains(&stream.id()) {
            for b in &self.blocks {
                let p = b.block();
                if p.stream().is_some_and(|k| k.id != stream.id()) {
                    p.record_stream(stream)?;
                }
            }
            inner.recorded.insert(stream.id());
        }
        inner.pending.retain(|p| !p.is_complete());
        for p in &inner.pending {
            p.order(stream)?;
        }
        if self.command_buffer {
            let cb = inner
                .command_buffers
                .entry(stream.id())
                .or_insert_with(|| command_buffer_for(&queue, &self.nodes, &self.blocks));
            if let Some(cb) = cb {
                // Under the stream's direct-enqueue permit: no capture of the stream begins
                // between the check and the enqueue.
                let _permit = direct_queue(stream)?;
                drop(cb.enqueue()?);
                return Ok(());
            }
        }
        play(&self.nodes, &self.blocks, &mut OnStream { stream })?;
        Ok(())
    }
}

/// A captured fill: `len` bytes at byte `offset` of the graph's block `dst` (an index into
/// the graph's blocks; [`play`] hands a [`Target`] the block itself).
struct FillCmd {
    dst: usize,
    pattern: Vec<u8>,
    offset: usize,
    len: usize,
}

/// A captured copy: `len` bytes from `src[src_offset..]` to `dst[dst_offset..]`, `src` and
/// `dst` indices into the graph's blocks as for [`FillCmd`].
struct CopyCmd {
    src: usize,
    dst: usize,
    src_offset: usize,
    dst_offset: usize,
    len: usize,
}

/// Where [`play`] sends the captured commands: the replay stream (recorded replay) or a
/// command buffer. Only ever given a graph's nodes: kernels owned by the graph, whose
/// arguments were set through the checked setters at capture and are never changed, naming
/// allocations the graph holds; what they do at every replay, on any stream of the device, is
/// the obligation `CaptureLaunch::enqueue`'s caller took on.
trait Target {
    fn kernel(&mut self, k: &Kernel, global: &[usize], local: Option<&[usize]>) -> Done;
    /// `c` with its block `dst` resolved.
    fn fill(&mut self, dst: &DataPtr, c: &FillCmd) -> Done;
    /// `c` with its blocks `src` and `dst` resolved.
    fn copy(&mut self, src: &DataPtr, dst: &DataPtr, c: &CopyCmd) -> Done;
    /// `false` when the target has no form of an upload.
    fn write(&mut self, dst: &DataPtr, offset: usize, data: &[u8]) -> Result<bool, GraphError>;
}

type Done = Result<(), GraphError>;

/// Sends `nodes` to `target` in capture order; `false` when the target cannot take one.
fn play(
    nodes: &[Node],
    blocks: &[Arc<dyn GraphBlock>],
    target: &mut impl Target,
) -> Result<bool, GraphError> {
    for node in nodes {
        match node {
            Node::Kernel {
                kernel,
                dims,
                global,
                local,
                ..
            } => target.kernel(
                kernel,
                &global[..*dims],
                local.as_ref().map(|l| &l[..*dims]),
            )?,
            Node::Fill(c) => target.fill(blocks[c.dst].block(), c)?,
            Node::Copy(c) => target.copy(blocks[c.src].block(), blocks[c.dst].block(), c)?,
            Node::Write { dst, offset, data } => {
                if !target.write(blocks[*dst].block(), *offset, data)? {
                    return Ok(false);
                }
            }
            Node::Sync => {}
        }
    }
    Ok(true)
}

/// The recorded replay: each command enqueued on the replay stream.
struct OnStream<'a> {
    stream: &'a Stream,
}

/// The stream's queue with its direct-enqueue permit, a capture of it being
/// [`GraphError::AlreadyCapturing`].
fn direct_queue(stream: &Stream) -> Result<xpu_stream::DirectQueue, GraphError> {
    stream.enqueue_queue("graph replay").map_err(|e| match e {
        StreamError::Capturing { device, id, .. } => {
            GraphError::AlreadyCapturing { device, stream: id }
        }
        e => e.into(),
    })
}

impl Target for OnStream<'_> {
    #[allow(unsafe_code)]
    fn kernel(&mut self, k: &Kernel, global: &[usize], local: Option<&[usize]>) -> Done {
        // Each command under its own permit (fills and copies take theirs in the allocator's
        // views): one that a capture begun meanwhile would see is refused, not run on the
        // capturing stream.
        let queue = direct_queue(self.stream)?;
        // SAFETY: a graph's kernel (see `Target`): arguments set through the checked setters
        // and unchanged, allocations alive, the captured sizes, a stream of the graph's device
        // (checked by `replay`); the kernel's behaviour is `CaptureLaunch::enqueue`'s contract.
        // No event: a replay waits for its commands through the stream, as a launch does.
        unsafe { queue.enqueue_kernel_without_event(k, global, local, &[]) }?;
        Ok(())
    }

    fn fill(&mut self, dst: &DataPtr, c: &FillCmd) -> Done {
        Ok(dst.view()?.fill(self.stream, &c.pattern, c.offset, c.len)?)
    }

    fn copy(&mut self, src: &DataPtr, dst: &DataPtr, c: &CopyCmd) -> Done {
        let src = src.view()?;
        let dst = dst.view()?;
        Ok(dst.copy_from(self.stream, &src, c.src_offset, c.dst_offset, c.len)?)
    }

    fn write(&mut self, dst: &DataPtr, offset: usize, data: &[u8]) -> Result<bool, GraphError> {
        dst.view()?.write(self.stream, offset, data)?;
        Ok(true)
    }
}

impl Target for CommandBuffer {
    #[allow(unsafe_code)]
    fn kernel(&mut self, k: &Kernel, global: &[usize], local: Option<&[usize]>) -> Done {
        // SAFETY: a graph's kernel (see `Target`), owned by the graph and never given new
        // arguments (the command buffer's first obligation); the buffer is the graph's,
        // enqueued only by replays, so the kernel's behaviour at each enqueue is
        // `CaptureLaunch::enqueue`'s contract.
        Ok(unsafe { CommandBuffer::kernel(self, k, global, local) }?)
    }

    fn fill(&mut self, dst: &DataPtr, c: &FillCmd) -> Done {
        let dst = block_buffer(dst)?;
        Ok(CommandBuffer::fill(
            self, &dst, &c.pattern, c.offset, c.len,
        )?)
    }

    fn copy(&mut self, src: &DataPtr, dst: &DataPtr, c: &CopyCmd) -> Done {
        let (src, dst) = (block_buffer(src)?, block_buffer(dst)?);
        Ok(CommandBuffer::copy(
            self,
            &src,
            c.src_offset,
            &dst,
            c.dst_offset,
            c.len,
        )?)
    }

    fn write(&mut self, _: &DataPtr, _: usize, _: &[u8]) -> Result<bool, GraphError> {
        Ok(false)
    }
}

/// The command buffer replaying `nodes` on `queue`, or `None` (recorded replay on that queue)
/// when the device offers none or recording fails (logged).
fn command_buffer_for(
    queue: &CommandQueue,
    nodes: &[Node],
    blocks: &[Arc<dyn GraphBlock>],
) -> Option<CommandBuffer> {
    match record_command_buffer(queue, nodes, blocks) {
        Ok(cb) => cb,
        Err(e) => {
            tracing::warn!("graph: recorded replay, the command buffer failed: {e}");
            None
        }
    }
}

/// A retained handle to exactly `block`'s bytes (its cached sub-buffer, `CL_MEM_SIZE` = the
/// allocation's size), for a command buffer.
#[allow(unsafe_code)]
///
/// Never waits on the host: a block whose sub-buffer would first wait for its allocation
/// stream (bytes reused since a sub-buffer was cached over them) fails the command buffer,
/// and the graph replays as recorded (a capture on one stream never waits for another's
/// work, which may be held back by a gate that this thread opens later).
fn block_buffer(block: &DataPtr) -> Result<Buffer, GraphError> {
    let (mem, size) = block
        .try_block_cl_mem()
        .map_err(|e| match e {
            BlockArgError::Alloc(e) => KernelError::Alloc(e),
            BlockArgError::Device(e) => KernelError::Device(e),
        })?
        .ok_or_else(|| {
            KernelError::Device(DeviceError::InvalidArgument(
                "a block's sub-buffer would wait for its allocation stream's work".to_owned(),
            ))
        })?;
    // SAFETY: `mem` is the allocation's live sub-buffer of exactly `size` bytes (held by the
    // `DataPtr`, which the graph holds). The retained handle goes only into the graph's
    // command buffers, which the graph releases before its blocks, and whose enqueues are on
    // replay streams that the graph recorded on every block (`record_stream`): the block is
    // reused only after them (the contract `DataPtr::block_cl_mem` states).
    Ok(unsafe { Buffer::from_raw_retained(mem, size) }.map_err(DeviceError::from)?)
}

fn record_command_buffer(
    queue: &CommandQueue,
    nodes: &[Node],
    blocks: &[Arc<dyn GraphBlock>],
) -> Result<Option<CommandBuffer>, GraphError> {
    let Some(mut cb) = CommandBuffer::new(queue)? else {
        return Ok(None);
    };
    if !play(nodes, blocks, &mut cb)? {
        return Ok(None);
    }
    cb.finalize()?;
    Ok(Some(cb))
}
