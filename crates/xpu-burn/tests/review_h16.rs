//! Review h16 (fresh eyes, data transfer): defects found in xpu-burn's shapes. Each test here
//! failed on the reviewed commit (05fdca0: a panic on overflow in a debug build) and passes
//! since `contiguous_strides` saturates and `matmul` counts its batch with `elem_count`.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use burn_tensor::{DType, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice, XpuTensor};

/// An empty tensor (one dimension is 0) whose other dimensions multiply past `isize::MAX`:
/// it holds no element and needs no memory, and `byte_len` rightly says 0 bytes. But
/// `contiguous_strides` (crates/xpu-burn/src/tensor.rs, `acc *= shape[d].max(1) as isize`)
/// multiplies the non-zero dimensions with unchecked `isize` arithmetic: a debug build panics
/// with "attempt to multiply with overflow" inside library code (a release build wraps to
/// garbage strides). burn-ndarray returns the empty tensor.
#[test]
fn an_empty_tensor_with_huge_other_dims_is_made_without_a_panic() {
    let shape = [0usize, 1 << 32, 1 << 32];
    let r = std::panic::catch_unwind(|| XpuTensor::empty(0, &shape, DType::F32).map(|t| t.numel()));
    match r {
        Ok(Ok(n)) => assert_eq!(n, 0),
        Ok(Err(e)) => panic!("an empty tensor was refused: {e}"),
        Err(p) => panic!(
            "XpuTensor::empty panicked on an empty shape {shape:?}: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
        ),
    }
}

/// The same through burn's API: `from_data` of an empty `TensorData` (valid: 0 elements) and
/// back through `into_data`.
#[test]
fn from_data_of_an_empty_tensor_with_huge_other_dims_round_trips() {
    let d = XpuDevice::default();
    let shape = [0usize, 1 << 32, 1 << 32];
    let r = std::panic::catch_unwind(|| {
        let data = TensorData::new(Vec::<f32>::new(), shape);
        let t = Tensor::<Xpu, 3>::from_data(data, &d);
        t.into_data().to_vec::<f32>().unwrap().len()
    });
    assert_eq!(
        r.ok(),
        Some(0),
        "from_data/into_data of an empty [0, 2^32, 2^32] tensor panicked in the backend"
    );
}

/// `reshape` of an empty tensor into such a shape goes through the same `contiguous_strides`
/// (crates/xpu-burn/src/ops/layout.rs:27): burn checks only that the element counts match
/// (0 == 0), then the backend panics.
#[test]
fn reshape_of_an_empty_tensor_into_huge_other_dims_does_not_panic() {
    let d = XpuDevice::default();
    let r = std::panic::catch_unwind(|| {
        let t = Tensor::<Xpu, 1>::zeros([0], &d);
        t.reshape([0usize, 1 << 32, 1 << 32]).dims()
    });
    assert_eq!(
        r.ok(),
        Some([0, 1 << 32, 1 << 32]),
        "reshape of an empty tensor to [0, 2^32, 2^32] panicked in the backend"
    );
}

/// Found while fixing the above: `matmul` of empty tensors whose batch dimensions multiply
/// past `usize::MAX` counted the batch with an unchecked product (crates/xpu-burn/src/ops/
/// matmul.rs, `batch.iter().product()`), which panics on overflow in a debug build.
#[test]
fn matmul_of_empty_tensors_with_huge_batch_dims_does_not_panic() {
    let d = XpuDevice::default();
    let r = std::panic::catch_unwind(|| {
        let a = Tensor::<Xpu, 4>::zeros([1usize << 32, 1 << 32, 0, 3], &d);
        let b = Tensor::<Xpu, 4>::zeros([1usize << 32, 1 << 32, 3, 0], &d);
        a.matmul(b).dims()
    });
    assert_eq!(
        r.ok(),
        Some([1 << 32, 1 << 32, 0, 0]),
        "matmul of empty [2^32, 2^32, 0, 3] x [2^32, 2^32, 3, 0] panicked in the backend"
    );
}
