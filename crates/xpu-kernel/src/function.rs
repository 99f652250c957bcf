//! [`Function`]: a `Send + Sync` handle on one kernel of a [`Program`].

use std::sync::Arc;

use parking_lot::Mutex;
use xpu_device::backend::Kernel;

use crate::error::KernelError;
use crate::program::Program;

/// How many idle kernels a function keeps for later launches.
const POOL_MAX: usize = 64;

/// One kernel function of a [`Program`], launched with [`crate::LaunchExt::launch`].
///
/// `Send + Sync` and a cheap `Clone` (`Arc` inside): launching the same function from many
/// threads at once is safe. `clSetKernelArg` on one `cl_kernel` is not thread-safe (OpenCL 3.0
/// appendix A.2), so each launch takes a `cl_kernel` of its own from the function's pool (a new
/// one, `clCreateKernel`, when the pool is empty), sets the arguments, enqueues and puts it back
/// with its arguments forgotten (an idle kernel holds no memory).
///
/// Dropping the last handle in a bad fork child (see `xpu_device::fork`) leaks the pooled
/// kernels and the program instead of releasing them (`clReleaseKernel`): they are the
/// parent's driver objects.
#[derive(Debug, Clone)]
pub struct Function {
    inner: Arc<FunctionInner>,
}

#[derive(Debug)]
struct FunctionInner {
    program: Program,
    name: String,
    num_args: u32,
    pool: Mutex<Vec<Kernel>>,
}

impl Function {
    pub(crate) fn new(program: Program, name: &str) -> Result<Function, KernelError> {
        let kernel = Kernel::new(program.raw(), name)?;
        Ok(Function {
            inner: Arc::new(FunctionInner {
                num_args: kernel.num_args(),
                name: name.to_owned(),
                program,
                pool: Mutex::new(vec![kernel]),
            }),
        })
    }

    /// The kernel's function name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The number of parameters (`CL_KERNEL_NUM_ARGS`).
    pub fn num_args(&self) -> u32 {
        self.inner.num_args
    }

    /// The device the function's program was built for.
    pub fn device(&self) -> usize {
        self.inner.program.device()
    }

    /// The program holding the function.
    pub fn program(&self) -> &Program {
        &self.inner.program
    }

    /// A kernel for one launch: from the pool, or a new one.
    pub(crate) fn take(&self) -> Result<Kernel, KernelError> {
        if let Some(k) = self.inner.pool.lock().pop() {
            return Ok(k);
        }
        Ok(Kernel::new(self.inner.program.raw(), &self.inner.name)?)
    }

    /// Returns a kernel to the pool, its arguments forgotten.
    pub(crate) fn put(&self, mut kernel: Kernel) {
        kernel.reset_args();
        let mut pool = self.inner.pool.lock();
        if pool.len() < POOL_MAX {
            pool.push(kernel);
        } else {
            drop(pool); // clReleaseKernel outside the lock
            drop(kernel);
        }
    }
}

impl Drop for Function {
    /// In a bad fork child the shared state is leaked (one more reference, never dropped),
    /// so that the last handle releases no kernel and no program (neither a driver call nor
    /// the pool's lock, which a thread of the parent may have held at the fork).
    fn drop(&mut self) {
        if xpu_device::fork::is_in_bad_fork() {
            std::mem::forget(Arc::clone(&self.inner));
        }
    }
}
