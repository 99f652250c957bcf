//! An op that fails on `XpuFusion` (out of memory under a memory fraction, a shape no
//! allocation holds) panics where its result is read, with the failure's message, and leaves
//! the thread's fused stream working: later ops compute, tensors drop, the consumed inputs'
//! memory comes back.
//!
//! Review h93 (a newcomer's review of `XpuFusion`): a panic inside burn-fusion's execution of
//! a run left burn-fusion 0.19.1's stream half-executed; every later op of that thread on the
//! device then panicked (`Ordering is bigger than operations`, `Cannot get uninitialized
//! handle`), dropping a tensor too (an abort when it happens while unwinding). Before the fix
//! the tests below failed at their first op after the failure (3 of 3 runs).
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`). The file sets a memory
//! fraction: a process of its own, its tests under one lock.

use burn_tensor::backend::Backend;
use burn_tensor::Tensor;
use xpu_burn::{XpuDevice, XpuFusion};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn values<const D: usize>(t: Tensor<XpuFusion, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

/// The panic's message, from `catch_unwind`'s error.
fn message(e: Box<dyn std::any::Any + Send>) -> String {
    match e.downcast::<String>() {
        Ok(s) => *s,
        Err(e) => e
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "<not a string>".into()),
    }
}

/// Runs `f`, which must panic; its message.
fn panics<T>(f: impl FnOnce() -> T) -> String {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic"),
        Err(e) => message(e),
    }
}

/// A few ops of each kind the fused stream runs (a chain, single ops, a reduction, a matmul),
/// checked against their exact values.
fn still_computes(d: &XpuDevice) {
    let x = Tensor::<XpuFusion, 1>::from_floats([1.0, 2.0, 3.0, 4.0], d);
    assert_eq!(values(x.clone() * 2.0 + 1.0), [3.0, 5.0, 7.0, 9.0]);
    assert_eq!(values(x.clone().sum()), [10.0]);
    let m = x.clone().reshape([2, 2]);
    assert_eq!(values(m.clone().matmul(m)), [7.0, 10.0, 15.0, 22.0]);
    drop(x);
}

/// A shape no allocation holds (`zeros` of 2^80 elements: `Xpu` refuses it with a typed error)
/// fails inside a run: reading it or anything computed from it panics with that error, and
/// the same thread's stream keeps working, a tensor made before the failure included.
#[test]
fn a_refused_op_panics_at_the_read_and_the_stream_keeps_working() {
    let _s = serial();
    let d = XpuDevice::new(0);
    still_computes(&d);
    let before = Tensor::<XpuFusion, 1>::from_floats([5.0, 6.0], &d) * 2.0;
    let huge = Tensor::<XpuFusion, 2>::zeros([1usize << 40, 1usize << 40], &d);
    let from_huge = huge.clone().sum() + 1.0;
    let direct = panics(|| values(huge.sum()));
    assert!(direct.contains("usize::MAX bytes"), "{direct}");
    let derived = panics(|| values(from_huge));
    assert!(derived.contains("usize::MAX bytes"), "{derived}");
    still_computes(&d);
    assert_eq!(values(before), [10.0, 12.0]);
}

/// A failed tensor that is dropped unread, and ops that consume it, do not panic; the memory
/// of the inputs a failed run consumed comes back.
#[test]
fn a_failed_tensor_drops_quietly_and_its_inputs_are_freed() {
    let _s = serial();
    let d = XpuDevice::new(0);
    still_computes(&d);
    let x_sum = || (Tensor::<XpuFusion, 1>::ones([1 << 20], &d) * 3.0).sum();
    // The same ops without the failure first, until the device's allocated bytes settle (the
    // first few reductions of this size leave blocks in use, failure or not).
    for _ in 0..6 {
        drop(x_sum() + Tensor::<XpuFusion, 1>::ones([1], &d));
        <XpuFusion as Backend>::sync(&d);
    }
    let base = xpu::memory_allocated(Some(0)).unwrap();
    for _ in 0..3 {
        let huge = Tensor::<XpuFusion, 2>::zeros([1usize << 40, 1usize << 40], &d);
        // Consumes the failed `huge` and a computed sum: the op fails too.
        let y = huge.sum_dim(0).sum() + x_sum();
        drop(y);
        <XpuFusion as Backend>::sync(&d);
    }
    still_computes(&d);
    <XpuFusion as Backend>::sync(&d);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), base);
}

/// Out of memory under a memory fraction inside a run of element-wise ops: the read panics
/// with the allocator's message; with the fraction raised again, the same thread computes.
#[test]
fn out_of_memory_inside_a_run_leaves_the_stream_working() {
    let _s = serial();
    let d = XpuDevice::new(0);
    still_computes(&d);
    <XpuFusion as Backend>::sync(&d);
    // The cache emptied first: the fraction bounds what the run can reserve from here on.
    xpu::empty_cache();
    let (_, total) = xpu::mem_get_info(Some(0)).unwrap();
    xpu::set_per_process_memory_fraction((24u64 << 20) as f64 / total as f64, Some(0)).unwrap();
    let msg = panics(|| {
        let a = Tensor::<XpuFusion, 1>::ones([4 << 20], &d);
        let b = a.clone() * 2.0;
        let c = b.clone().exp() + 1.0;
        values((b + c).sum())
    });
    xpu::set_per_process_memory_fraction(1.0, Some(0)).unwrap();
    assert!(msg.contains("memory fraction exceeded"), "{msg}");
    for _ in 0..3 {
        still_computes(&d);
    }
}
