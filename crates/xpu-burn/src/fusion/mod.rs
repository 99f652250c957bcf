//! Operation fusion: [`XpuFusion`] is burn-fusion's decorator on [`Xpu`], so a chain of
//! element-wise float ops (burn's Adam step, an activation after a bias add, their
//! gradients) runs as one kernel instead of one launch per op.
//!
//! burn-fusion records each op as burn's IR ([`burn_ir::OperationIr`]) and asks this
//! backend's optimization builders which runs of ops they can take. Every op that no chain
//! takes runs by itself on [`Xpu`], as burn-fusion recorded it, through
//! [`single::SingleOpBuilder`], which keeps the tensors the IR reads read-only (burn-fusion
//! 0.19.1's own op-by-op path frees a tensor that another thread still uses: [`single`]).
//! The chain builder ([`elementwise::ElementwiseBuilder`]) takes runs of `f32` element-wise ops whose results share one shape (arithmetic with
//! tensors or scalars, and the unary math functions but `ceil` and `trunc`; inputs from
//! outside the run may broadcast to the shape or be strided views) and executes them through
//! the op layer's [`crate::ops::fused`] chains. A run it cannot resolve at run time (a
//! missing handle, shapes beyond a chain's limits) runs op by op instead, so fusion never
//! changes which values an op computes.
//!
//! ```no_run
//! use burn_tensor::Tensor;
//! use xpu_burn::{XpuDevice, XpuFusion};
//!
//! let device = XpuDevice::default();
//! let x = Tensor::<XpuFusion, 1>::from_floats([1.0, 2.0, 3.0], &device);
//! // One launch for the three ops.
//! let y = (x.clone() * 2.0 + 1.0).sqrt();
//! println!("{y}");
//! ```

pub mod elementwise;
pub mod handle;
pub mod single;

use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FusionBackend, FusionRuntime, NumOperations, Optimization, OptimizationBuilder};
use burn_ir::{BackendIr, TensorHandle};
use burn_tensor::ops::{BoolTensor, FloatTensor, FloatTensorOps, IntTensor, QuantizedTensor};

use crate::backend::qtensor::refuse;
use crate::backend::XpuQTensor;
use crate::{Xpu, XpuDevice};

use elementwise::{ElementwiseBuilder, ElementwiseOptimization, ElementwiseState};
pub use handle::XpuHandle;
use single::{SingleOpBuilder, SingleOpOptimization};

/// burn's backend on xpu with operation fusion (burn-fusion's `Fusion` over [`Xpu`]).
///
/// # Threads
///
/// Tensors that several threads use while ops on them are still queued (recorded, not run)
/// can make a thread panic with `Should have handle for tensor`: burn-fusion 0.19.1 drops
/// such a tensor one op early for a thread whose stream already exists (its shared-tensor
/// cursor; the cause and the measured rates are with `tests/fusion.rs`' ignored
/// `threads_read_lazy_tensors_through_unfused_ops`; a sync before the threads start does not
/// avoid it). burn's own `multi_threads` tests pass. And a tensor made on a thread that has
/// ended, then dropped on another thread, is never freed: burn-fusion's drop of a tensor
/// shared between streams waits for the maker's stream, which no longer runs (review h95: the
/// tensor's bytes stay allocated after every such round; `tests/fusion.rs`' ignored
/// `a_tensor_made_on_an_ended_thread_is_freed`). Where threads share tensors that way, use
/// [`Xpu`], which records nothing.
///
/// # Failed ops
///
/// burn's ops report a failure by panicking. An op of `XpuFusion` runs later than the call
/// that records it, so a failed op (out of memory, a shape no allocation holds) panics where
/// a tensor it made, or one computed from it, is read (`into_data`, a move to another
/// device), with the failure's message; the thread's stream keeps working, and dropping such
/// a tensor unread is quiet ([`handle`]; `tests/fusion_failed_ops.rs`).
///
/// # Where burn-fusion 0.19.1 gives other results than `Xpu`
///
/// - Integer `powi` and `powi_scalar`: burn-fusion does not forward them to the backend, so
///   burn's default computes them through `f32`, rounding results beyond 2^24 (`3^16` gives
///   43,046,720); `Xpu` computes them exactly.
/// - An op whose tensors are on two devices: burn-fusion names tensors by ids counted per
///   device and runs the op on the first tensor's device, where the other tensor's id names
///   another tensor or none; burn's API checks the devices of some ops only (not `gather`'s
///   indices). Such an op reads the wrong tensor or panics; `Xpu` refuses it with a typed
///   error. Keep an op's tensors on one device (`Tensor::to_device`).
pub type XpuFusion = burn_fusion::Fusion<Xpu>;

/// The fusion runtime of [`Xpu`]: its handles are [`XpuHandle`]s (a tensor, or the failure of
/// the op that was to make it), its optimizations the element-wise chain and the single op
/// ([`XpuOptimization`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct XpuFusionRuntime;

impl FusionRuntime for XpuFusionRuntime {
    type OptimizationState = XpuOptimizationState;
    type Optimization = XpuOptimization;
    type FusionHandle = XpuHandle;
    type FusionDevice = XpuDevice;
    /// Bools are bytes on xpu.
    type BoolRepr = u8;

    /// The single op first: burn-fusion takes the last builder of the best score, so a chain
    /// of one op is preferred to it.
    fn optimizations(_device: XpuDevice) -> Vec<Box<dyn OptimizationBuilder<XpuOptimization>>> {
        vec![
            Box::new(SingleOpBuilder::new()),
            Box::new(ElementwiseBuilder::new()),
        ]
    }
}

/// What [`XpuFusionRuntime`]'s builders make: a run of element-wise ops as one chain, or one
/// op run as recorded.
#[derive(Debug)]
pub enum XpuOptimization {
    /// [`elementwise::ElementwiseOptimization`].
    Chain(ElementwiseOptimization),
    /// [`single::SingleOpOptimization`].
    Single(SingleOpOptimization),
}

/// The serializable form of an [`XpuOptimization`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum XpuOptimizationState {
    /// A chain's recorded ops.
    Chain(ElementwiseState),
    /// A single op's read-only inputs.
    Single(SingleOpOptimization),
}

impl NumOperations for XpuOptimization {
    fn len(&self) -> usize {
        match self {
            XpuOptimization::Chain(c) => c.len(),
            XpuOptimization::Single(_) => 1,
        }
    }
}

impl Optimization<XpuFusionRuntime> for XpuOptimization {
    fn execute(
        &mut self,
        context: &mut Context<'_, XpuHandle>,
        execution: &OrderedExecution<XpuFusionRuntime>,
    ) {
        match self {
            XpuOptimization::Chain(c) => c.execute(context, execution),
            XpuOptimization::Single(s) => s.execute(context, execution),
        }
    }

    fn to_state(&self) -> XpuOptimizationState {
        match self {
            XpuOptimization::Chain(c) => XpuOptimizationState::Chain(c.to_state()),
            XpuOptimization::Single(s) => XpuOptimizationState::Single(s.clone()),
        }
    }

    fn from_state(_device: &XpuDevice, state: XpuOptimizationState) -> Self {
        match state {
            XpuOptimizationState::Chain(c) => {
                XpuOptimization::Chain(ElementwiseOptimization::from_state(c))
            }
            XpuOptimizationState::Single(s) => XpuOptimization::Single(s),
        }
    }
}

/// A handle's tensor: [`XpuHandle::into_tensor`], which panics with the failure's message for
/// the handle of a failed op (burn-fusion converts a handle where an op or a read takes it).
impl BackendIr for Xpu {
    type Handle = XpuHandle;

    fn float_tensor(handle: TensorHandle<XpuHandle>) -> FloatTensor<Self> {
        handle.handle.into_tensor()
    }

    fn int_tensor(handle: TensorHandle<XpuHandle>) -> IntTensor<Self> {
        handle.handle.into_tensor()
    }

    fn bool_tensor(handle: TensorHandle<XpuHandle>) -> BoolTensor<Self> {
        handle.handle.into_tensor()
    }

    fn quantized_tensor(_handle: TensorHandle<XpuHandle>) -> QuantizedTensor<Self> {
        refuse()
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> XpuHandle {
        XpuHandle::Tensor(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> XpuHandle {
        XpuHandle::Tensor(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> XpuHandle {
        XpuHandle::Tensor(tensor)
    }

    fn quantized_tensor_handle(_tensor: XpuQTensor) -> XpuHandle {
        refuse()
    }
}

impl FusionBackend for Xpu {
    type FusionRuntime = XpuFusionRuntime;
    type FullPrecisionBackend = Xpu;

    fn cast_float(tensor: FloatTensor<Self>, dtype: burn_tensor::DType) -> XpuHandle {
        XpuHandle::Tensor(Xpu::float_cast(tensor, dtype.into()))
    }
}
