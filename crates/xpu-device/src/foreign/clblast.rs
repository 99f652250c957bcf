//! CLBlast (an OpenCL BLAS; Debian package `libclblast1`), loaded at run time from
//! [`LIBRARY`]: `CLBlastSgemm`, `CLBlastSgemmWithTempBuffer` and `CLBlastSGemmTempBufferSize` of
//! its C API (`clblast_c.h`, CLBlast 1.5). [`Clblast::get`] loads it once per process and keeps
//! it loaded; without it every entry point is [`ForeignError::NotAvailable`]. Calls into
//! CLBlast are serialized process-wide: CLBlast 1.5 fills its caches without a lock
//! (CNugteren/CLBlast#486), so concurrent calls from several threads crashed it.
//!
//! ```
//! use xpu_device::foreign::{clblast::Clblast, ForeignError};
//! match Clblast::get() {
//!     Ok(_) => println!("CLBlast loaded"),
//!     Err(ForeignError::NotAvailable { reason, .. }) => println!("no CLBlast: {reason}"),
//!     Err(e) => panic!("{e}"),
//! }
//! ```

use std::ptr;
use std::sync::OnceLock;

use libloading::Library;

use super::ForeignError;
use crate::backend::raw::{cl_command_queue, cl_event, cl_mem};

/// The shared library loaded by [`Clblast::get`].
pub const LIBRARY: &str = "libclblast.so.1";

/// `CLBlastLayout`: storage order of the matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Layout {
    /// `CLBlastLayoutRowMajor`.
    RowMajor = 101,
    /// `CLBlastLayoutColMajor`.
    ColMajor = 102,
}

/// `CLBlastTranspose`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Transpose {
    /// `CLBlastTransposeNo`.
    No = 111,
    /// `CLBlastTransposeYes`.
    Yes = 112,
}

/// One SGEMM, `C = alpha * op(A) * op(B) + beta * C` with `op(A)` `m x k`, `op(B)` `k x n` and
/// `C` `m x n`. Offsets and leading dimensions are in elements (floats), as CLBlast takes them.
#[derive(Debug, Clone, Copy)]
pub struct Sgemm {
    /// Storage order of A, B and C.
    pub layout: Layout,
    /// Whether A is transposed.
    pub a_transpose: Transpose,
    /// Whether B is transposed.
    pub b_transpose: Transpose,
    /// Rows of `op(A)` and C.
    pub m: usize,
    /// Columns of `op(B)` and C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// A's buffer.
    pub a: cl_mem,
    /// A's first element in `a`.
    pub a_offset: usize,
    /// A's leading dimension.
    pub a_ld: usize,
    /// B's buffer.
    pub b: cl_mem,
    /// B's first element in `b`.
    pub b_offset: usize,
    /// B's leading dimension.
    pub b_ld: usize,
    /// Scale of C's old value.
    pub beta: f32,
    /// C's buffer (written).
    pub c: cl_mem,
    /// C's first element in `c`.
    pub c_offset: usize,
    /// C's leading dimension.
    pub c_ld: usize,
}

impl Sgemm {
    /// A row-major SGEMM without transposes of contiguous `m x k` A, `k x n` B and `m x n` C
    /// (leading dimensions `k`, `n`, `n`; offsets 0), `alpha` 1 and `beta` 0.
    #[must_use]
    pub fn row_major(m: usize, n: usize, k: usize, a: cl_mem, b: cl_mem, c: cl_mem) -> Sgemm {
        Sgemm {
            layout: Layout::RowMajor,
            a_transpose: Transpose::No,
            b_transpose: Transpose::No,
            m,
            n,
            k,
            alpha: 1.0,
            a,
            a_offset: 0,
            a_ld: k,
            b,
            b_offset: 0,
            b_ld: n,
            beta: 0.0,
            c,
            c_offset: 0,
            c_ld: n,
        }
    }
}

/// The C type of CLBlast's SGEMM entry points: `CLBlastSgemm`'s arguments, then `extra`.
#[rustfmt::skip]
macro_rules! sgemm_fn {
    ($($extra:ty),*) => {
        unsafe extern "C" fn(
            i32, i32, i32, // layout, a_transpose, b_transpose
            usize, usize, usize, f32, // m, n, k, alpha
            cl_mem, usize, usize, // a_buffer, a_offset, a_ld
            cl_mem, usize, usize, f32, // b_buffer, b_offset, b_ld, beta
            cl_mem, usize, usize, // c_buffer, c_offset, c_ld
            *mut cl_command_queue, *mut cl_event // queue, event
            $(, $extra)*
        ) -> i32
    };
}

type SgemmFn = sgemm_fn!();
type SgemmTempFn = sgemm_fn!(cl_mem);

/// `CLBlastSGemmTempBufferSize`'s C type.
#[rustfmt::skip]
type TempSizeFn = unsafe extern "C" fn(
    i32, i32, i32, // layout, a_transpose, b_transpose
    usize, usize, usize, // m, n, k
    usize, usize, usize, usize, usize, usize, // a_offset, a_ld, b_offset, b_ld, c_offset, c_ld
    *mut cl_command_queue, *mut usize, // queue, temp_buffer_size
) -> i32;

/// The loaded library: its entry points, valid while it stays loaded (for [`Clblast::get`]'s
/// instance, the whole process).
#[derive(Debug)]
pub struct Clblast {
    sgemm: SgemmFn,
    sgemm_temp: SgemmTempFn,
    temp_size: TempSizeFn,
    _lib: Library,
}

/// Calls a CLBlast SGEMM entry point with `g`'s arguments, the queue and event out-pointers,
/// and any trailing arguments.
macro_rules! sgemm_call {
    ($f:expr, $g:expr, $q:expr, $event:expr $(, $extra:expr)*) => {
        ($f)(
            $g.layout as i32,
            $g.a_transpose as i32,
            $g.b_transpose as i32,
            $g.m,
            $g.n,
            $g.k,
            $g.alpha,
            $g.a,
            $g.a_offset,
            $g.a_ld,
            $g.b,
            $g.b_offset,
            $g.b_ld,
            $g.beta,
            $g.c,
            $g.c_offset,
            $g.c_ld,
            $q,
            $event
            $(, $extra)*
        )
    };
}

/// Serializes every call into CLBlast. CLBlast 1.5 keeps its compiled programs and tuning
/// databases in process-wide caches that it reads and fills without a lock, so calls from
/// several threads at once crash it (a segmentation fault copying a `clblast::Database`
/// while another thread stores one: CNugteren/CLBlast#486, fixed upstream in July 2023 by its
/// PR #495; Debian's 1.5.3 predates it).
/// A call only enqueues (the GEMM runs later on the device), so holding this lock costs the
/// host-side enqueue and, on a routine's first use, CLBlast's program build; no allocator
/// lock is held by the callers while they wait for it.
static CALLS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn status(function: &'static str, code: i32) -> Result<(), ForeignError> {
    match code {
        0 => Ok(()),
        code => Err(ForeignError::Status { function, code }),
    }
}

impl Clblast {
    /// CLBlast, loaded from [`LIBRARY`] on the first call and kept for the process.
    ///
    /// # Errors
    /// [`ForeignError::NotAvailable`] when the library or a symbol cannot be loaded (every
    /// call gives the same answer).
    pub fn get() -> Result<&'static Clblast, ForeignError> {
        static LOADED: OnceLock<Result<Clblast, ForeignError>> = OnceLock::new();
        LOADED
            // SAFETY: LIBRARY is the name of CLBlast's shared library (Debian's libclblast1);
            // a different library installed under that name is the system's configuration,
            // as for any library linked by name.
            .get_or_init(|| unsafe { Clblast::open(LIBRARY) })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads CLBlast from `library` (a file name the dynamic loader searches, or a path).
    /// [`Clblast::get`] is the safe way: it loads the system's [`LIBRARY`].
    ///
    /// Loading runs the library's initializers, and the entry points are then called with the
    /// C signatures of CLBlast: any other library exporting those names would be called with
    /// the wrong types. So a caller-chosen library is `unsafe` (as `libloading::Library::new`):
    ///
    /// ```compile_fail,E0133
    /// let _ = xpu_device::foreign::clblast::Clblast::open("libclblast.so.1");
    /// ```
    ///
    /// # Safety
    /// `library` must be CLBlast's C API (`clblast_c.h`, CLBlast 1.5 or a compatible release):
    /// its `CLBlastSgemm`, `CLBlastSgemmWithTempBuffer` and `CLBlastSGemmTempBufferSize` have
    /// the signatures this module declares, and loading it (its initializers) is sound in
    /// this process.
    ///
    /// # Errors
    /// [`ForeignError::NotAvailable`] when the library or one of the three symbols cannot be
    /// loaded.
    #[allow(unsafe_code)]
    pub unsafe fn open(library: &str) -> Result<Clblast, ForeignError> {
        let unavailable = |e: libloading::Error| ForeignError::NotAvailable {
            library: library.to_owned(),
            reason: e.to_string(),
        };
        // SAFETY: the caller guarantees that `library` is CLBlast, whose initializers (C++
        // static initializers of its caches) do not depend on this process's state (this
        // function's # Safety).
        let lib = unsafe { Library::new(library) }.map_err(unavailable)?;
        // SAFETY: the symbols have the C signatures declared above (clblast_c.h of CLBlast
        // 1.5: the library is CLBlast, this function's # Safety); the copied function
        // pointers are used only while `_lib` keeps the library loaded (they are fields of
        // the same struct).
        unsafe {
            let sgemm = *lib.get::<SgemmFn>(b"CLBlastSgemm\0").map_err(unavailable)?;
            let sgemm_temp = *lib
                .get::<SgemmTempFn>(b"CLBlastSgemmWithTempBuffer\0")
                .map_err(unavailable)?;
            let temp_size = *lib
                .get::<TempSizeFn>(b"CLBlastSGemmTempBufferSize\0")
                .map_err(unavailable)?;
            Ok(Clblast {
                sgemm,
                sgemm_temp,
                temp_size,
                _lib: lib,
            })
        }
    }

    /// `CLBlastSgemm`: enqueues `g` on `queue`, returns the event of its last command (one
    /// reference, now the caller's) or `None`.
    ///
    /// # Errors
    /// [`ForeignError::Status`] with CLBlast's status (e.g. `-1008` for a C buffer too small).
    ///
    /// # Safety
    /// `queue` is a live command queue; `g.a`, `g.b`, `g.c` are live buffers of its context
    /// holding the elements the shapes, offsets and leading dimensions reach (CLBlast checks
    /// them against `CL_MEM_SIZE`, so a buffer larger than the caller's data, such as an
    /// allocator segment, is not protected by that check); nothing else reads or writes C, or
    /// writes A and B, until the returned event (or the queue) completes; the caller releases
    /// the returned event.
    #[allow(unsafe_code)]
    pub unsafe fn sgemm(
        &self,
        g: &Sgemm,
        queue: cl_command_queue,
    ) -> Result<Option<cl_event>, ForeignError> {
        // SAFETY: the caller's obligations are this function's.
        unsafe { self.run_sgemm(g, queue, None) }
    }

    /// `CLBlastSgemmWithTempBuffer`: as [`Clblast::sgemm`] with `temp` as CLBlast's temporary
    /// buffer instead of one it would create (and release) itself.
    ///
    /// # Errors
    /// As [`Clblast::sgemm`].
    ///
    /// # Safety
    /// As [`Clblast::sgemm`], and `temp` is a live buffer of the queue's context of at least
    /// [`Clblast::sgemm_temp_buffer_size`] bytes for `g`, used by nothing else until the
    /// returned event (or the queue) completes.
    #[allow(unsafe_code)]
    pub unsafe fn sgemm_with_temp_buffer(
        &self,
        g: &Sgemm,
        queue: cl_command_queue,
        temp: cl_mem,
    ) -> Result<Option<cl_event>, ForeignError> {
        // SAFETY: the caller's obligations are this function's.
        unsafe { self.run_sgemm(g, queue, Some(temp)) }
    }

    /// `CLBlastSgemm`, or `CLBlastSgemmWithTempBuffer` with `temp`.
    ///
    /// # Safety
    /// As [`Clblast::sgemm`] / [`Clblast::sgemm_with_temp_buffer`].
    #[allow(unsafe_code)]
    unsafe fn run_sgemm(
        &self,
        g: &Sgemm,
        queue: cl_command_queue,
        temp: Option<cl_mem>,
    ) -> Result<Option<cl_event>, ForeignError> {
        let (mut q, mut event): (cl_command_queue, cl_event) = (queue, ptr::null_mut());
        let _one_at_a_time = CALLS.lock();
        // SAFETY: the signatures are CLBlast's; the caller guarantees the handles, extents
        // and temporary buffer; `q` and `event` are valid out-pointers.
        let (function, code) = unsafe {
            match temp {
                None => (
                    "CLBlastSgemm",
                    sgemm_call!(self.sgemm, g, &mut q, &mut event),
                ),
                Some(t) => (
                    "CLBlastSgemmWithTempBuffer",
                    sgemm_call!(self.sgemm_temp, g, &mut q, &mut event, t),
                ),
            }
        };
        status(function, code)?;
        Ok((!event.is_null()).then_some(event))
    }

    /// `CLBlastSGemmTempBufferSize`: the temporary buffer `g` needs on `queue`'s device, bytes
    /// (0 when the direct kernel runs without one). Enqueues nothing.
    ///
    /// # Errors
    /// [`ForeignError::Status`] with CLBlast's status.
    ///
    /// # Safety
    /// `queue` is a live command queue.
    #[allow(unsafe_code)]
    pub unsafe fn sgemm_temp_buffer_size(
        &self,
        g: &Sgemm,
        queue: cl_command_queue,
    ) -> Result<usize, ForeignError> {
        let (mut q, mut bytes) = (queue, 0usize);
        let _one_at_a_time = CALLS.lock();
        // SAFETY: the signature is CLBlastSGemmTempBufferSize's; the caller guarantees the
        // queue; it reads only the queue's device and the sizes; out-pointers are valid.
        let code = unsafe {
            (self.temp_size)(
                g.layout as i32,
                g.a_transpose as i32,
                g.b_transpose as i32,
                g.m,
                g.n,
                g.k,
                g.a_offset,
                g.a_ld,
                g.b_offset,
                g.b_ld,
                g.c_offset,
                g.c_ld,
                &mut q,
                &mut bytes,
            )
        };
        status("CLBlastSGemmTempBufferSize", code)?;
        Ok(bytes)
    }
}
