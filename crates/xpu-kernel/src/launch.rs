//! The launch builder: [`LaunchExt::launch`] on a [`Stream`], arguments checked one by one
//! ([`Launch::arg`], or a tuple at once with [`Launch::args`]), [`Launch::enqueue`]
//! (`unsafe`: the kernel is arbitrary code).
//!
//! # What is checked
//! Programs are built with `-cl-kernel-arg-info` always appended, so every argument is checked
//! against the kernel's signature before the driver sees it:
//! - an allocator block is one argument: a sub-buffer of exactly the allocation, cached with
//!   its segment per (offset, size) and shared with the `DataPtr` (or, for a block that is
//!   its whole segment, as always on NVIDIA's OpenCL, the segment's own buffer); a typed `DeviceBuffer<T>` also has its element type checked against the pointer
//!   parameter's type name (`KernelArgProblem::ElementType` when it cannot match: `f64` for
//!   `float*`, `f32` for `uint*`), while byte buffers, untyped blocks, `char*` / `void*` / typedef
//!   / struct parameters, vector components and signedness pass;
//! - scalars by size and kind: an integer for a `float` parameter, or a float for an integer one,
//!   is `KernelArgProblem::KindMismatch`, since OpenCL would reinterpret the bits;
//! - `__local` sizes, within `CL_DEVICE_LOCAL_MEM_SIZE` with each rounded up to 128 bytes
//!   (`KernelArgProblem::LocalMemoryExceeded`, where PoCL would abort the process); buffers and
//!   wait-list events of the kernel's own context; every argument set;
//! - global sizes whose work-item count overflows `usize` are `KernelError::WorkSize`; `enqueue`
//!   checks again that the stream is not capturing, for a launch built before a capture began.
//!
//! Blocks of other streams are recorded with `record_stream`; errors name the kernel and the
//! argument. `.args((a, b, ..))` takes a tuple of 1 to 12 arguments, as cudarc's
//! `launch(cfg, (a, b, c))`. A `Function` is a pool of `cl_kernel`s, so concurrent launches never
//! share one, and a `Kernel` holds the buffers set as its arguments (the driver holds them from the
//! launch until completion, OpenCL 3.0 §5.5.1). There are no SVM blocks (the allocator has none).

use std::marker::PhantomData;

use xpu_alloc::{BlockArgError, BlockPin, DataPtr, PendingMove};
use xpu_device::backend::{BufferElement, Kernel};
use xpu_stream::Stream;

use crate::error::KernelError;
use crate::function::Function;

/// One kernel argument: an allocation of the caching allocator (one `__global`/`__constant`
/// pointer argument covering exactly the allocation), untyped or typed, a scalar by value, or
/// a size of `__local` memory. Built with `From`: `&DataPtr`, `&DeviceBuffer<T>`, `u8`...`u64`,
/// `i8`...`i64`, `f32`, `f64`, [`LocalMem`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Arg<'a> {
    /// An allocation, borrowed until the launch is enqueued (see [`Launch`]).
    Block(&'a DataPtr),
    /// The allocation of a typed buffer ([`crate::DeviceBuffer`]) with its element type, which
    /// must be able to match the pointer parameter's (see
    /// [`Kernel::check_buffer_element`]); `None` for an element type the runtime does not
    /// know, passed as an untyped allocation.
    TypedBlock(&'a DataPtr, Option<BufferElement>),
    /// A by-value scalar.
    Scalar(Scalar),
    /// `__local` memory of this many bytes per work-group.
    Local(usize),
}

/// A by-value scalar argument.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub enum Scalar {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
}

/// `__local` memory for a `__local` pointer parameter: this many bytes per work-group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalMem(pub usize);

macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Arg<'_> {
            fn from(x: $t) -> Self {
                Arg::Scalar(Scalar::$v(x))
            }
        }
    )*};
}
scalar_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
             u64 => U64, i64 => I64, f32 => F32, f64 => F64);

impl<'a> From<&'a DataPtr> for Arg<'a> {
    fn from(p: &'a DataPtr) -> Self {
        Arg::Block(p)
    }
}

/// A typed buffer is one argument, its whole allocation (a `__global T *` parameter), whose
/// element type is checked against the parameter's.
impl<'a, T: bytemuck::Pod> From<&'a crate::memory::DeviceBuffer<T>> for Arg<'a> {
    fn from(b: &'a crate::memory::DeviceBuffer<T>) -> Self {
        Arg::TypedBlock(b.data_ptr(), BufferElement::of::<T>())
    }
}

impl<'a> Arg<'a> {
    /// The allocation of a block argument, typed or not.
    pub(crate) fn block(&self) -> Option<&'a DataPtr> {
        match *self {
            Arg::Block(p) | Arg::TypedBlock(p, _) => Some(p),
            Arg::Scalar(_) | Arg::Local(_) => None,
        }
    }
}

impl From<LocalMem> for Arg<'_> {
    fn from(l: LocalMem) -> Self {
        Arg::Local(l.0)
    }
}

/// Launching on a [`Stream`] (an extension trait: streams live in `xpu-stream`).
pub trait LaunchExt {
    /// Starts a launch of `function` with `global` work-items (1 to 3 dimensions) in
    /// work-groups of `local` (same rank; `None`: the driver chooses), as `clEnqueueNDRangeKernel`
    /// (OpenCL 3.0 §5.10) — CUDA's grid is `global / local` here. Arguments follow with
    /// [`Launch::arg`] (or [`Launch::args`] for a tuple), in parameter order;
    /// [`Launch::enqueue`] queues the kernel.
    ///
    /// # Errors
    /// [`KernelError::Capturing`] on a stream that a graph is capturing (launch through the
    /// capture handle, [`crate::graph::Capture::launch`]);
    /// [`KernelError::StreamDevice`] when the function was built for another device;
    /// [`KernelError::WorkSize`] for 0 or more than 3 dimensions, a zero size, a local size
    /// of another rank or global sizes whose product (the work-item count) overflows `usize`; [`KernelError::Device`] when a kernel cannot be created;
    /// [`KernelError::BadFork`] in a bad fork child (first).
    fn launch<'a>(
        &self,
        function: &Function,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<Launch<'a>, KernelError>;
}

impl LaunchExt for Stream {
    fn launch<'a>(
        &self,
        function: &Function,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<Launch<'a>, KernelError> {
        crate::error::check_fork()?;
        refuse_capturing(self, function)?;
        let (dims, g, l) = check_launch(self, function, global, local)?;
        Ok(Launch {
            stream: *self,
            kernel: Some(function.take()?),
            function: function.clone(),
            next: 0,
            dims,
            global: g,
            local: l,
            foreign_blocks: Vec::new(),
            pins: Vec::new(),
            _args: PhantomData,
        })
    }
}

/// A launch's rank, global size and optional local size, padded to three dimensions.
pub(crate) type WorkSizes = (usize, [usize; 3], Option<[usize; 3]>);

/// [`KernelError::Capturing`] naming `function` when a graph captures `stream`: a launch goes
/// through the capture handle then ([`crate::graph::Capture::launch`]).
fn refuse_capturing(stream: &Stream, function: &Function) -> Result<(), KernelError> {
    if stream.is_capturing() {
        return Err(capturing(stream, function));
    }
    Ok(())
}

fn capturing(stream: &Stream, function: &Function) -> KernelError {
    KernelError::Capturing {
        kernel: function.name().to_owned(),
        device: stream.device(),
        stream: stream.id(),
    }
}

/// The checks of [`LaunchExt::launch`] (device, work sizes), shared with graph capture: the
/// rank and the sizes padded to three dimensions.
pub(crate) fn check_launch(
    stream: &Stream,
    function: &Function,
    global: &[usize],
    local: Option<&[usize]>,
) -> Result<WorkSizes, KernelError> {
    let bad = |reason: &str| KernelError::WorkSize {
        kernel: function.name().to_owned(),
        reason: reason.to_owned(),
    };
    if stream.device() != function.device() {
        return Err(KernelError::StreamDevice {
            kernel: function.name().to_owned(),
            function_device: function.device(),
            stream_device: stream.device(),
        });
    }
    if global.is_empty() || global.len() > 3 {
        return Err(bad("the global size has 1 to 3 dimensions"));
    }
    if global.contains(&0) || local.is_some_and(|l| l.contains(&0)) {
        return Err(bad("work sizes are nonzero"));
    }
    if local.is_some_and(|l| l.len() != global.len()) {
        return Err(bad("the local size has the rank of the global size"));
    }
    // A count of work-items beyond `size_t` cannot run; PoCL wraps the product and its
    // scheduler aborts the process, so it is refused here.
    if global
        .iter()
        .try_fold(1usize, |n, &g| n.checked_mul(g))
        .is_none()
    {
        return Err(bad(
            "the number of work-items (the global sizes' product) fits size_t",
        ));
    }
    let mut g = [1; 3];
    g[..global.len()].copy_from_slice(global);
    let l = local.map(|l| {
        let mut a = [1; 3];
        a[..l.len()].copy_from_slice(l);
        a
    });
    Ok((global.len(), g, l))
}

/// Sets argument `index` of `kernel` (a kernel of `function`, launched on `stream`), checked
/// as [`Launch::arg`] documents; for graph capture, whose kernels keep their arguments for
/// later replays: a block's place is then fixed for good, without waiting on the host for
/// relocation copies that may still use its bytes. Those are returned, and each replay is
/// ordered after them ([`PendingMove::order`]).
pub(crate) fn set_checked_arg(
    kernel: &mut Kernel,
    function: &Function,
    stream: &Stream,
    index: u32,
    arg: Arg<'_>,
) -> Result<Option<PendingMove>, KernelError> {
    Ok(
        match set_arg(kernel, function, stream, index, arg, false)? {
            Held::Pending(pending) => Some(pending),
            Held::Pin(_) | Held::Nothing => None,
        },
    )
}

/// What [`set_arg`] leaves its caller for a block argument.
enum Held<'a> {
    /// A scalar or local argument, or a block that does not move.
    Nothing,
    /// The block is held in place while this lives.
    Pin(BlockPin<'a>),
    /// The block's place is fixed; relocation copies that may still use its bytes.
    Pending(PendingMove),
}

/// [`set_checked_arg`]; with `pinned`, a block that may move (`relocation:merge`) is held
/// in place only while the returned pin lives (a launch enqueued before it drops).
fn set_arg<'a>(
    kernel: &mut Kernel,
    function: &Function,
    stream: &Stream,
    index: u32,
    arg: Arg<'a>,
    pinned: bool,
) -> Result<Held<'a>, KernelError> {
    if index >= kernel.num_args() {
        return Err(KernelError::ArgCount {
            kernel: function.name().to_owned(),
            expected: kernel.num_args(),
            given: index + 1,
        });
    }
    match arg {
        Arg::Block(ptr) | Arg::TypedBlock(ptr, _) => {
            let device = ptr.device();
            if device != stream.device() {
                return Err(KernelError::OtherDevice {
                    kernel: function.name().to_owned(),
                    index,
                    block_device: device,
                    stream_device: stream.device(),
                });
            }
            if let Arg::TypedBlock(_, Some(element)) = arg {
                kernel.check_buffer_element(index, element)?;
            }
            let named = |e| match e {
                BlockArgError::Alloc(source) => KernelError::Block {
                    kernel: function.name().to_owned(),
                    index,
                    source,
                },
                BlockArgError::Device(d) => KernelError::Device(d),
            };
            if pinned {
                return Ok(Held::Pin(
                    ptr.set_kernel_arg_pinned(kernel, index).map_err(named)?,
                ));
            }
            if let Some(pending) = ptr.set_kernel_arg_pending(kernel, index).map_err(named)? {
                return Ok(Held::Pending(pending));
            }
        }
        Arg::Scalar(s) => set_scalar(kernel, index, s)?,
        Arg::Local(bytes) => kernel.set_arg_local(index, bytes)?,
    }
    Ok(Held::Nothing)
}

/// A kernel launch being assembled on a stream ([`LaunchExt::launch`]).
///
/// The allocations given as arguments stay borrowed until the launch is enqueued or dropped,
/// so an allocation cannot be freed between setting it and launching:
/// ```compile_fail
/// # use xpu_kernel::{Function, LaunchExt};
/// # fn f(stream: xpu_stream::Stream, func: Function, x: xpu_alloc::DataPtr) -> Result<(), xpu_kernel::KernelError> {
/// let launch = stream.launch(&func, &[64], None)?.arg(&x)?;
/// drop(x); // error: `x` is borrowed by `launch`
/// unsafe { launch.enqueue() }
/// # }
/// ```
/// After the enqueue, freeing is safe: the block is reused only after the stream's work
/// completes (the caching allocator's stream-ordered reuse; uses on a stream other than the
/// allocation's are recorded with `record_stream` by [`Launch::enqueue`]), and the driver keeps
/// the argument buffers alive until the kernel completes.
///
/// Dropping a launch without enqueueing it returns its kernel to the function's pool.
#[derive(Debug)]
pub struct Launch<'a> {
    stream: Stream,
    function: Function,
    kernel: Option<Kernel>,
    next: u32,
    dims: usize,
    global: [usize; 3],
    local: Option<[usize; 3]>,
    /// Allocations of other streams than the launch's: recorded on it at the enqueue.
    foreign_blocks: Vec<&'a DataPtr>,
    /// The blocks set so far, held in place until the enqueue (`relocation:merge`).
    pins: Vec<BlockPin<'a>>,
    _args: PhantomData<&'a DataPtr>,
}

impl<'a> Launch<'a> {
    /// Sets the next argument (parameter order), checked against the kernel's signature as the
    /// driver reports it (`-cl-kernel-arg-info`): an allocation only for a `__global` or
    /// `__constant` pointer, a scalar only for a by-value parameter of the same size and kind
    /// (an integer literal such as `2` is an `i32`, refused for a `float` parameter: write
    /// `2.0f32`; signedness may differ),
    /// [`LocalMem`] only for a `__local` pointer.
    ///
    /// An allocation is passed as one argument: its segment's buffer and its byte offset in
    /// it, through the offset parameter [`Program::build`](crate::Program::build) adds after
    /// each `__global`/`__constant` pointer ([`DataPtr::set_kernel_arg`]; no sub-buffer, so
    /// segments are split on NVIDIA's OpenCL too). The kernel sees the allocation's first
    /// byte at its pointer's index 0.
    ///
    /// # Errors
    /// [`KernelError::ArgCount`] past the kernel's last parameter; [`KernelError::OtherDevice`]
    /// for an allocation of another device than the stream's; [`KernelError::Block`] for an
    /// empty allocation or one without an OpenCL buffer (simulated memory);
    /// [`KernelError::Device`] with [`xpu_device::DeviceError::KernelArg`] naming the kernel,
    /// the argument index and parameter for a kind or size that does not match, or for a typed
    /// buffer whose element type cannot match the pointer parameter's
    /// ([`xpu_device::KernelArgProblem::ElementType`]: `DeviceBuffer<f64>` for `float*`; a
    /// byte buffer or a `DataPtr` passes to any pointer);
    /// [`KernelError::BadFork`] in a bad fork child (first).
    pub fn arg(mut self, arg: impl Into<Arg<'a>>) -> Result<Launch<'a>, KernelError> {
        crate::error::check_fork()?;
        let index = self.next;
        let kernel = self.kernel.as_mut().expect("present until enqueue or drop");
        let arg = arg.into();
        if let Held::Pin(pin) = set_arg(kernel, &self.function, &self.stream, index, arg, true)? {
            // Only the pins of blocks that may move are kept (no allocation otherwise).
            if pin.is_held() {
                self.pins.push(pin);
            }
        }
        if let Some(ptr) = arg.block() {
            if ptr.stream().is_some_and(|k| k.id != self.stream.id()) {
                self.foreign_blocks.push(ptr);
            }
        }
        self.next += 1;
        Ok(self)
    }

    /// Sets the next arguments from one tuple, in order, as cudarc's
    /// `launch(cfg, (a, b, c))`: `launch.args((a, b, c))?` is `launch.arg(a)?.arg(b)?.arg(c)?`
    /// ([`KernelArgs`] is implemented for tuples of 1 to 12 elements, each `Into<Arg>`), with
    /// every element checked as [`Launch::arg`] documents.
    ///
    /// ```no_run
    /// use xpu_kernel::{LaunchExt, Program};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const SRC: &str = "__kernel void scale(__global float *x, float a, uint n) {
    ///     size_t i = get_global_id(0); if (i < n) x[i] *= a; }";
    /// let scale = Program::build(0, SRC, "")?.function("scale")?;
    /// let stream = xpu_stream::current_stream(0)?;
    /// let x = xpu_alloc::allocate(1024 * 4, &stream)?;
    /// // SAFETY: 1024 work-items touch x[0..1024), the allocation's 4096 bytes; nothing
    /// // borrows them; the kernel terminates.
    /// unsafe {
    ///     stream
    ///         .launch(&scale, &[1024], None)?
    ///         .args((&x, 2.0f32, 1024u32))?
    ///         .enqueue()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Those of [`Launch::arg`] for the first element refused, naming the index that the same
    /// `.arg` chain would name (the launch's next index plus the element's position); the
    /// launch is then dropped, its kernel returned to the function's pool.
    pub fn args(self, args: impl KernelArgs<'a>) -> Result<Launch<'a>, KernelError> {
        args.set_on(self)
    }

    /// Queues the kernel on the stream (`clEnqueueNDRangeKernel`, OpenCL 3.0 §5.10), after the
    /// work enqueued on the stream before it. Allocations of other streams are first recorded
    /// on this one (as `Tensor.record_stream`), so freeing them waits for the kernel.
    /// Non-blocking: synchronize the stream (or record an event) to wait for it.
    ///
    /// # Safety
    /// The kernel is arbitrary code that the runtime cannot check. The caller guarantees that:
    /// - every memory access of every work-item stays inside the allocation (its requested
    ///   size, [`DataPtr::size`]) given for the pointer parameter it goes through, and inside
    ///   the [`LocalMem`] size for `__local` parameters (on a CPU device an out-of-bounds
    ///   access reaches the host process's memory);
    /// - no memory the kernel writes is borrowed by Rust code before the kernel completes, and
    ///   no memory it reads is written by the host meanwhile (allocator blocks are reached by
    ///   the host only through stream-ordered copies; this concerns host-visible memory);
    /// - the kernel terminates (one that never ends hangs every later synchronization of the
    ///   stream and of its device).
    ///
    /// # Errors
    /// [`KernelError::Capturing`] when a graph captures the stream now (also for a launch
    /// built before the capture began; nothing is enqueued);
    /// [`KernelError::ArgCount`] when fewer arguments than the kernel's parameters were given;
    /// [`KernelError::Stream`] for a released stream; [`KernelError::Alloc`] when recording a
    /// foreign-stream allocation fails; [`KernelError::Device`] for a failed enqueue
    /// (`CL_INVALID_WORK_GROUP_SIZE`...); [`KernelError::BadFork`] in a bad fork child
    /// (first: nothing is enqueued).
    #[allow(unsafe_code)]
    pub unsafe fn enqueue(mut self) -> Result<(), KernelError> {
        crate::error::check_fork()?;
        let kernel = self.kernel.take().expect("present until enqueue or drop");
        let result = self.enqueue_with(&kernel);
        self.function.put(kernel);
        result
    }

    #[allow(unsafe_code)]
    fn enqueue_with(&self, kernel: &Kernel) -> Result<(), KernelError> {
        // Checked again here: a launch assembled before a capture began on its stream must not
        // slip onto the capturing stream (`launch` checked only when it was built).
        refuse_capturing(&self.stream, &self.function)?;
        if self.next != kernel.num_args() {
            return Err(KernelError::ArgCount {
                kernel: self.function.name().to_owned(),
                expected: kernel.num_args(),
                given: self.next,
            });
        }
        for ptr in &self.foreign_blocks {
            ptr.record_stream(&self.stream)?;
        }
        // A moved block's copies run before this kernel on another stream.
        for pin in &self.pins {
            pin.prepare_on(&self.stream)?;
        }
        // The capture check that counts: atomic with the enqueue below (the permit held by
        // `queue` keeps a capture of the stream from beginning until the kernel is enqueued).
        let queue = match self.stream.enqueue_queue("kernel launch") {
            Err(xpu_stream::StreamError::Capturing { .. }) => {
                return Err(capturing(&self.stream, &self.function))
            }
            q => q?,
        };
        let local = self.local.as_ref().map(|l| &l[..self.dims]);
        // SAFETY: every argument was set through the kernel's checked setters (kinds, sizes
        // and contexts match its parameters; allocations as sub-buffers of exactly their
        // bytes, kept alive by the kernel and then by the driver until the command completes);
        // the function's program was built for the stream's device. What the kernel code does
        // is the obligation of `enqueue`'s caller, the only caller of this function.
        // No event: this launch returns none (one fewer driver object and release per launch).
        unsafe {
            queue.enqueue_kernel_without_event(kernel, &self.global[..self.dims], local, &[])
        }?;
        Ok(())
    }
}

/// The arguments of [`Launch::args`], set in order: implemented for tuples of 1 to 12
/// elements, each `Into<Arg>` (`&DataPtr`, a typed buffer, a scalar, [`LocalMem`]).
pub trait KernelArgs<'a> {
    /// Sets these arguments on `launch`, in order, each with [`Launch::arg`].
    ///
    /// # Errors
    /// Those of [`Launch::arg`], for the first argument refused.
    fn set_on(self, launch: Launch<'a>) -> Result<Launch<'a>, KernelError>;
}

/// `KernelArgs` for the tuple of all the named element types, then for each shorter tuple
/// (dropping the first type), down to one element.
macro_rules! tuple_args {
    ($first:ident $(, $rest:ident)*) => {
        impl<'a, $first: Into<Arg<'a>>, $($rest: Into<Arg<'a>>),*> KernelArgs<'a>
            for ($first, $($rest,)*)
        {
            #[allow(non_snake_case)] // the elements are named after their types
            fn set_on(self, launch: Launch<'a>) -> Result<Launch<'a>, KernelError> {
                let ($first, $($rest,)*) = self;
                launch.arg($first)$(?.arg($rest))*
            }
        }
        tuple_args!($($rest),*);
    };
    () => {};
}
tuple_args!(A, B, C, D, E, F, G, H, I, J, K, L);

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        // In a bad fork child the kernel is the parent's driver state and the function's pool
        // lock may have been held at the fork: the kernel is leaked, not returned.
        if let Some(k) = xpu_device::fork::take_unless_bad_fork(&mut self.kernel) {
            self.function.put(k);
        }
    }
}

fn set_scalar(kernel: &mut Kernel, index: u32, s: Scalar) -> Result<(), KernelError> {
    match s {
        Scalar::U8(v) => kernel.set_arg(index, v),
        Scalar::I8(v) => kernel.set_arg(index, v),
        Scalar::U16(v) => kernel.set_arg(index, v),
        Scalar::I16(v) => kernel.set_arg(index, v),
        Scalar::U32(v) => kernel.set_arg(index, v),
        Scalar::I32(v) => kernel.set_arg(index, v),
        Scalar::U64(v) => kernel.set_arg(index, v),
        Scalar::I64(v) => kernel.set_arg(index, v),
        Scalar::F32(v) => kernel.set_arg(index, v),
        Scalar::F64(v) => kernel.set_arg(index, v),
    }?;
    Ok(())
}
