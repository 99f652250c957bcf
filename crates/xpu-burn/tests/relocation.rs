//! burn's tensors under `relocation:merge`: a tensor whose block the allocator moved keeps
//! its values, and burn's ops on it read them at the new place. burn reaches blocks only
//! through launches and views, which hold a block in place only while they enqueue
//! (`xpu_alloc::BlockPin`), so its blocks stay movable. One test in its own process: the
//! configuration is set before burn's first allocation on the device.

use burn_tensor::Tensor;
use xpu_burn::{Xpu, XpuDevice};

/// Rows of 1,024 `f32` (4 KiB) per MiB.
const ROWS_PER_MIB: usize = 256;

fn full(mib: usize, value: f32, device: &XpuDevice) -> Tensor<Xpu, 2> {
    Tensor::full([mib * ROWS_PER_MIB, 1024], value, device)
}

/// The sum of a tensor's values, on the host.
fn sum(t: &Tensor<Xpu, 2>) -> f32 {
    t.clone().sum().into_scalar()
}

#[test]
fn a_moved_tensor_keeps_its_values() {
    xpu::xpu_alloc::set_config("relocation:merge").unwrap();
    let device = XpuDevice::new(0);
    // The layout of xpu-alloc's `relocation_device.rs` on burn's stream: segment A (20 MiB)
    // holds p 6, q 2, r 6 and x 6 MiB, segment B y 6 and z 8 MiB (a 6 MiB free tail).
    let p = full(6, 1.0, &device);
    let q = full(2, 3.0, &device);
    let r = full(6, 1.0, &device);
    let x = full(6, 5.0, &device);
    let y = full(6, 7.0, &device);
    let z = full(8, 11.0, &device);
    drop((p, r));
    // 8 MiB fits no free block: q moves into B's free tail and its old run serves this.
    let big = full(8, 13.0, &device);
    let moved = xpu::xpu_alloc::device_allocator(0)
        .unwrap()
        .core()
        .relocation_stats();
    assert!(moved.moves >= 1, "a block moved: {moved:?}");
    let elements = |mib: usize| (mib * ROWS_PER_MIB * 1024) as f32;
    // burn reads q at its new place (a kernel, then a download); the others are intact.
    assert_eq!(sum(&(q.clone() * 2.0)), 6.0 * elements(2));
    assert_eq!(sum(&q), 3.0 * elements(2));
    assert_eq!(sum(&x), 5.0 * elements(6));
    assert_eq!(sum(&y), 7.0 * elements(6));
    assert_eq!(sum(&z), 11.0 * elements(8));
    assert_eq!(sum(&big), 13.0 * elements(8));
}
