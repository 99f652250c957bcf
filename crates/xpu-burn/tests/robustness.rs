//! The backend on inputs a framework legitimately passes: zero-sized tensors, shapes whose
//! size overflows, non-contiguous views into every kernel family, many threads at once.
//!
//! ## From `review_h16.rs` (the tests at the end of this file)
//!
//! Review h16 (fresh eyes, data transfer): defects found in xpu-burn's shapes. Each test here
//! failed on the reviewed commit (05fdca0: a panic on overflow in a debug build) and passes
//! since `contiguous_strides` saturates and `matmul` counts its batch with `elem_count`.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).
use burn_tensor::backend::Backend;
use burn_tensor::{DType, Int, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice, XpuTensor};

fn dev() -> XpuDevice {
    XpuDevice::default()
}

fn vals<const D: usize>(t: Tensor<Xpu, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

fn ivals<const D: usize>(t: Tensor<Xpu, D, Int>) -> Vec<i64> {
    t.into_data().to_vec::<i64>().unwrap()
}

/// `[2^62]` f32 elements are 2^64 bytes: the byte count wrapped to 0 without overflow checks
/// (a release build), where the tensor got a 1-byte block (`numel 2^62, storage bytes 1`) and
/// `Tensor::zeros([1 << 62])` launched its fill over it: PoCL aborted the process (SIGABRT in
/// its scheduler); a GPU would write past the block. With checks it panicked on the overflow.
#[test]
fn empty_tensor_whose_byte_count_overflows_is_an_error() {
    let r = XpuTensor::empty(0, &[1usize << 62], DType::F32);
    let e = r.expect_err("an allocation of 2^64 bytes succeeded");
    assert!(e.to_string().contains("more than usize::MAX bytes"), "{e}");
}

#[test]
fn zero_sized_tensors_pass_through_every_op_family() {
    let d = dev();
    let z = Tensor::<Xpu, 2>::zeros([0, 3], &d);
    assert_eq!(
        z.clone().reshape(burn_tensor::Shape::new([3, 0])).dims(),
        [3, 0]
    );
    let zt = z.clone().transpose();
    assert_eq!(zt.clone().reshape(burn_tensor::Shape::new([0])).dims(), [0]);
    let a = Tensor::<Xpu, 2>::ones([2, 3], &d);
    let c = Tensor::cat(vec![z.clone(), a.clone(), z.clone()], 0);
    assert_eq!(vals(c), vec![1.0; 6]);
    // matmul with a zero inner dim: zeros
    let l = Tensor::<Xpu, 2>::ones([2, 0], &d);
    let r = Tensor::<Xpu, 2>::ones([0, 3], &d);
    assert_eq!(vals(l.matmul(r)), vec![0.0; 6]);
    // matmul with a zero inner dim, big enough for a blas path
    let l = Tensor::<Xpu, 2>::ones([128, 0], &d);
    let r = Tensor::<Xpu, 2>::ones([0, 128], &d);
    assert_eq!(vals(l.matmul(r)), vec![0.0; 128 * 128]);
    // reductions over an empty dim
    let e = Tensor::<Xpu, 2>::ones([3, 0], &d);
    assert_eq!(vals(e.clone().sum_dim(1)), vec![0.0; 3]);
    assert_eq!(vals(e.clone().prod_dim(1)), vec![1.0; 3]);
    assert_eq!(vals(e.clone().sum()), vec![0.0]);
    assert_eq!(vals(e.clone().prod()), vec![1.0]);
    let ei = Tensor::<Xpu, 2, Int>::ones([3, 0], &d);
    assert_eq!(ivals(ei.clone().sum_dim(1)), vec![0; 3]);
    assert_eq!(ivals(ei.clone().prod_dim(1)), vec![1; 3]);
    // sort / argsort / cumsum on empty
    assert_eq!(e.clone().sort(1).dims(), [3, 0]);
    assert_eq!(e.clone().argsort(1).dims(), [3, 0]);
    assert_eq!(e.clone().cumsum(1).dims(), [3, 0]);
    assert_eq!(e.clone().sort(0).dims(), [3, 0]);
    // gather / scatter with empty indices
    let idx = Tensor::<Xpu, 2, Int>::zeros([2, 0], &d);
    assert_eq!(a.clone().gather(1, idx.clone()).dims(), [2, 0]);
    let v = Tensor::<Xpu, 2>::zeros([2, 0], &d);
    assert_eq!(vals(a.clone().scatter(1, idx, v)), vec![1.0; 6]);
    // select with empty indices
    let si = Tensor::<Xpu, 1, Int>::zeros([0], &d);
    assert_eq!(a.clone().select(0, si.clone()).dims(), [0, 3]);
    let sv = Tensor::<Xpu, 2>::zeros([0, 3], &d);
    assert_eq!(vals(a.clone().select_assign(0, si, sv)), vec![1.0; 6]);
    // slice_assign of an empty slice
    // scatter into a tensor with a zero dim along dim with many indices
    let t0 = Tensor::<Xpu, 2>::zeros([2, 0], &d);
    let idx = Tensor::<Xpu, 2, Int>::zeros([2, 0], &d);
    assert_eq!(t0.scatter(1, idx, Tensor::zeros([2, 0], &d)).dims(), [2, 0]);
    // select_assign with many indices into a zero-size dim of the values
    let big = Tensor::<Xpu, 2>::zeros([0, 4], &d);
    let si = Tensor::<Xpu, 1, Int>::zeros([20], &d);
    let sv = Tensor::<Xpu, 2>::zeros([0, 20], &d);
    assert_eq!(big.select_assign(1, si, sv).dims(), [0, 4]);
    // max over an empty tensor dims kept
    let m = Tensor::<Xpu, 2>::ones([0, 4], &d).max_dim(0);
    assert_eq!(m.dims(), [1, 4]);
    let _ = m.into_data();
    // repeat / expand / flip of empty
    assert_eq!(z.clone().flip([0, 1]).dims(), [0, 3]);
    assert_eq!(z.clone().repeat_dim(0, 3).dims(), [0, 3]);
    // mean over empty is NaN (as ndarray)
    assert!(vals(e.mean_dim(1)).iter().all(|v| v.is_nan()));
}

fn host(v: &[f32], shape: [usize; 3]) -> Tensor<Xpu, 3> {
    Tensor::from_data(TensorData::new(v.to_vec(), shape), &dev())
}

/// Materialized through the host: contiguous, same values.
fn through_host<const D: usize>(t: Tensor<Xpu, D>) -> Tensor<Xpu, D> {
    Tensor::from_data(t.into_data(), &dev())
}

fn through_host_i<const D: usize>(t: Tensor<Xpu, D, Int>) -> Tensor<Xpu, D, Int> {
    Tensor::from_data(t.into_data(), &dev())
}

#[test]
fn non_contiguous_views_give_the_values_of_their_copies() {
    let d = dev();
    let data: Vec<f32> = (0..60).map(|i| ((i * 37) % 23) as f32 - 11.0).collect();
    let base = host(&data, [3, 4, 5]);
    let views: Vec<Tensor<Xpu, 3>> = vec![
        base.clone().permute([2, 0, 1]),
        base.clone().swap_dims(0, 2),
        base.clone().slice([0..3, 1..4, 0..5]),
        base.clone().flip([1]),
        base.clone().slice([0..2, 0..4, 0..1]).expand([2, 4, 6]),
        base.clone().slice_dim(2, burn_tensor::s![..;2]),
        base.clone().slice_dim(1, burn_tensor::s![..;-1]),
    ];
    for (k, v) in views.into_iter().enumerate() {
        let c = through_host(v.clone());
        let dims = v.dims();
        let chk = |a: Vec<f32>, b: Vec<f32>, what: &str| {
            assert_eq!(a.len(), b.len(), "view {k} {what}");
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-3 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()),
                    "view {k} {what}: {a:?} vs {b:?}"
                );
            }
        };
        let chki = |a: Vec<i64>, b: Vec<i64>, what: &str| assert_eq!(a, b, "view {k} {what}");
        // The view and its contiguous copy through the same op: float and int results.
        let same = |f: &dyn Fn(Tensor<Xpu, 3>) -> Tensor<Xpu, 3>, what: &str| {
            chk(vals(f(v.clone())), vals(f(c.clone())), what);
        };
        let same_i = |f: &dyn Fn(Tensor<Xpu, 3>) -> Tensor<Xpu, 3, Int>, what: &str| {
            chki(ivals(f(v.clone())), ivals(f(c.clone())), what);
        };
        for dim in 0..3 {
            same(&|t| t.sum_dim(dim), "sum_dim");
            same(&|t| t.prod_dim(dim), "prod_dim");
            same(&|t| t.max_dim(dim), "max_dim");
            same_i(&|t| t.argmin(dim), "argmin");
            same(&|t| t.cumsum(dim), "cumsum");
            same(&|t| t.cummax(dim), "cummax");
            same(&|t| t.sort(dim), "sort");
            same_i(&|t| t.argsort(dim), "argsort");
            let idx = Tensor::<Xpu, 3, Int>::from_data(
                TensorData::new(
                    (0..dims.iter().product::<usize>())
                        .map(|i| (i % dims[dim]) as i64)
                        .rev()
                        .collect::<Vec<_>>(),
                    dims,
                ),
                &d,
            );
            same(&|t| t.gather(dim, idx.clone()), "gather");
            same(&|t| t.clone().scatter(dim, idx.clone(), t), "scatter");
            let idxv = idx.clone().permute([0, 1, 2]).flip([0]);
            chk(
                vals(v.clone().gather(dim, idxv.clone())),
                vals(c.clone().gather(dim, through_host_i(idxv))),
                "gather-view-idx",
            );
            let si =
                Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![0i64, 1, 0, 1, 1], [5]), &d)
                    .flip([0]);
            same(&|t| t.select(dim, si.clone()), "select");
            same(&|t| t.mean_dim(dim), "mean_dim");
        }
        chk(vals(v.clone().sum()), vals(c.clone().sum()), "sum");
        same(&|t| t.exp().log(), "exp-log");
        let vt = v.clone().swap_dims(1, 2);
        chk(
            vals(v.clone().matmul(vt.clone())),
            vals(c.clone().matmul(through_host(vt))),
            "matmul",
        );
        chk(
            vals(v.clone().reshape([-1])),
            vals(c.clone().reshape([-1])),
            "reshape",
        );
        same(&|t| Tensor::cat(vec![t.clone(), t], 1), "cat");
        let [a0, a1, a2] = dims;
        same(
            &|t| {
                t.slice_assign(
                    [0..a0, 0..a1.min(2), 0..a2],
                    Tensor::ones([a0, a1.min(2), a2], &d),
                )
            },
            "slice_assign",
        );
        same(&|t| t.greater_elem(0.0).float(), "cmp");
        chk(
            vals(v.clone().topk(2, 2)),
            vals(c.clone().topk(2, 2)),
            "topk",
        );
    }
}

/// Eight threads at once: 32 x 32 f32 matmuls (CLBlast's size where it is installed), syncs
/// and drops. Before CLBlast's calls were serialized (xpu-device's `foreign::clblast`), this
/// crashed the process with SIGSEGV inside CLBlast in 4 of 20 runs on PoCL.
#[test]
fn many_threads_launch_sync_and_drop() {
    let d = dev();
    let before = xpu::memory_allocated(Some(d.index)).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for i in 0..20 {
                    let a = Tensor::<Xpu, 2>::full([32, 32], (t * 100 + i) as f32, &d);
                    let b = a.clone().matmul(Tensor::<Xpu, 2>::ones([32, 32], &d));
                    Xpu::sync(&d);
                    let got = vals(b.sum_dim(1).slice([0..1, 0..1]));
                    assert_eq!(got, vec![(t * 100 + i) as f32 * 32.0 * 32.0]);
                }
            });
        }
    });
    Xpu::sync(&d);
    let after = xpu::memory_allocated(Some(d.index)).unwrap();
    println!("allocated before {before} after {after}");
}

fn panic_message(r: std::thread::Result<()>) -> String {
    match r {
        Ok(()) => "no panic".into(),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

/// Runs `f`, which must panic with the backend's typed-error message (burn's methods return
/// tensors, so the backend's errors are panics starting `xpu backend:`), not with an
/// arithmetic overflow of its own.
fn assert_backend_error(what: &str, f: impl FnOnce() + std::panic::UnwindSafe) {
    let msg = panic_message(std::panic::catch_unwind(f));
    assert!(
        msg.starts_with("xpu backend:"),
        "{what}: expected the backend's typed error, got: {msg}"
    );
}

#[test]
fn shapes_whose_size_overflows_usize_fail_with_a_typed_error() {
    let d = dev();
    let huge = [1usize << 32, 1 << 32];
    assert_backend_error("zeros", || {
        let _ = Tensor::<Xpu, 2>::zeros(huge, &d);
    });
    assert_backend_error("from_data of an empty byte vector", || {
        let data = TensorData {
            bytes: burn_tensor::Bytes::from_elems(Vec::<f32>::new()),
            shape: vec![1usize << 62, 4],
            dtype: DType::F32,
        };
        let _ = Tensor::<Xpu, 2>::from_data(data, &d);
    });
    let view = || Tensor::<Xpu, 2>::ones([1, 1], &d).expand(huge);
    assert_backend_error("exp of a broadcast view", || {
        let _ = view().exp();
    });
    assert_backend_error("sum of a broadcast view", || {
        let _ = view().sum();
    });
    assert_backend_error("cumsum of a broadcast view", || {
        let _ = view().cumsum(1);
    });
    assert_backend_error("sort of a broadcast view", || {
        let _ = view().sort(1);
    });
    assert_backend_error("into_data of a broadcast view", || {
        let _ = view().into_data();
    });
    // Allocations that fit usize but no device get the allocator's error.
    assert_backend_error("zeros of 2^61 f32", || {
        let _ = Tensor::<Xpu, 1>::zeros([1usize << 61], &d);
    });
    // The device still works.
    assert_eq!(vals(Tensor::<Xpu, 1>::ones([3], &d)), vec![1.0; 3]);
}

/// `x / MAX` of an unsigned int tensor is 0 and `x % MAX` is `x` (for `x < MAX`), as Rust and
/// burn-ndarray compute them: the trap-free division must not read the all-ones divisor of
/// an unsigned type as `-1`. For u64 the all-ones divisor comes as a tensor only: burn's
/// scalars are i64, and -1 for a u64 tensor is refused (review h65).
#[test]
fn unsigned_int_division_by_the_type_maximum_is_not_negation() {
    use burn_tensor::IntDType;
    let d = dev();
    for (dtype, max) in [
        (IntDType::U8, u8::MAX as i64),
        (IntDType::U16, u16::MAX as i64),
        (IntDType::U32, u32::MAX as i64),
        (IntDType::U64, -1i64), // u64::MAX, as the i64 that casts to it
    ] {
        let ints =
            |v: Vec<i64>| Tensor::<Xpu, 1, Int>::from_data(TensorData::new(v, [3]), &d).cast(dtype);
        let as_i64 = |t: Tensor<Xpu, 1, Int>| {
            // Through u64 so that u64::MAX reads back as -1.
            ivals(t.cast(IntDType::U64).cast(IntDType::I64))
        };
        let x = ints(vec![5, 7, max]);
        let m = ints(vec![max, max, 2]);
        let q = as_i64(x.clone().div(m.clone()));
        let r = as_i64(x.clone().remainder(m.clone()));
        let half = if dtype == IntDType::U64 {
            i64::MAX
        } else {
            max / 2
        };
        assert_eq!(q, vec![0, 0, half], "{dtype:?}: x / m");
        assert_eq!(r, vec![5, 7, 1], "{dtype:?}: x % m");
        if dtype == IntDType::U64 {
            // u64::MAX is no i64 scalar: -1 is refused, as burn's NdArray refuses it (review
            // h65: scalars are not wrapped to a narrower or unsigned type).
            let x = std::panic::AssertUnwindSafe(x.clone());
            assert_backend_error("u64 tensor / -1", move || {
                let x = x;
                let _ = x.0.div_scalar(-1).into_data();
            });
            continue;
        }
        let qs = as_i64(x.clone().div_scalar(max));
        let rs = as_i64(x.clone().remainder_scalar(max));
        assert_eq!(qs, vec![0, 0, 1], "{dtype:?}: x / MAX");
        assert_eq!(rs, vec![5, 7, 0], "{dtype:?}: x % MAX");
    }
    // Signed types keep their trap-free `MIN / -1` and `x % -1`.
    let i = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![i64::MIN, -7, 5], [3]), &d);
    assert_eq!(ivals(i.clone().div_scalar(-1)), vec![i64::MIN, 7, -5]);
    assert_eq!(ivals(i.remainder_scalar(-1)), vec![0, 0, 0]);
}

/// Tensors of two devices in one op: burn's check or the backend's typed error, never a
/// kernel reading another device's buffer.
#[test]
fn ops_mixing_devices_fail_with_a_typed_error() {
    if xpu::device_count() < 2 {
        return;
    }
    let d0 = XpuDevice::new(0);
    let d1 = XpuDevice::new(1);
    let a = Tensor::<Xpu, 4>::ones([1, 2, 4, 4], &d0);
    let w = Tensor::<Xpu, 4>::ones([3, 2, 3, 3], &d1);
    type Case = (&'static str, Box<dyn FnOnce()>);
    let cases: Vec<Case> = vec![
        (
            "add",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let _ = (a.slice([0..1, 0..2, 0..3, 0..3]) + w.slice([0..1, 0..2, 0..3, 0..3]))
                        .into_data();
                }
            }),
        ),
        (
            "conv2d",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let _ = burn_tensor::module::conv2d(
                        a,
                        w,
                        None,
                        burn_tensor::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
                    )
                    .into_data();
                }
            }),
        ),
        (
            "matmul",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let _ = a
                        .slice([0..1, 0..1, 0..3, 0..3])
                        .matmul(w.slice([0..1, 0..1, 0..3, 0..3]))
                        .into_data();
                }
            }),
        ),
        (
            "cat",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let _ = Tensor::cat(
                        vec![
                            a.slice([0..1, 0..2, 0..3, 0..3]),
                            w.slice([0..1, 0..2, 0..3, 0..3]),
                        ],
                        0,
                    )
                    .into_data();
                }
            }),
        ),
        (
            "mask_where",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let a = a.slice([0..1, 0..2, 0..3, 0..3]);
                    let w = w.slice([0..1, 0..2, 0..3, 0..3]);
                    let _ = a
                        .clone()
                        .mask_where(w.clone().greater_elem(0.0), w)
                        .into_data();
                }
            }),
        ),
        (
            "gather",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 4, Int>::zeros([1, 2, 4, 4], &XpuDevice::new(1));
                    let _ = a.gather(3, i).into_data();
                }
            }),
        ),
        (
            "select",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 1, Int>::zeros([3], &XpuDevice::new(1));
                    let _ = a.select(3, i).into_data();
                }
            }),
        ),
        (
            "select_assign big",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 1, Int>::zeros([20], &XpuDevice::new(1));
                    let v = Tensor::<Xpu, 4>::ones([1, 2, 4, 20], &XpuDevice::new(0));
                    let _ = a.select_assign(3, i, v).into_data();
                }
            }),
        ),
        (
            "scatter big",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 4, Int>::zeros([1, 2, 4, 20], &XpuDevice::new(1));
                    let v = Tensor::<Xpu, 4>::ones([1, 2, 4, 20], &XpuDevice::new(0));
                    let _ = a.scatter(3, i, v).into_data();
                }
            }),
        ),
        (
            "slice_assign",
            Box::new({
                let (a, w) = (a.clone(), w.clone());
                move || {
                    let _ = a
                        .slice_assign([0..1, 0..2, 0..3, 0..3], w.slice([0..1, 0..2, 0..3, 0..3]))
                        .into_data();
                }
            }),
        ),
    ];
    for (name, f) in cases {
        let msg = panic_message(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        assert!(
            msg.starts_with("xpu backend:") || msg.starts_with("=== Tensor Operation Error"),
            "{name}: {msg}"
        );
    }
    assert_eq!(vals(Tensor::<Xpu, 1>::ones([3], &d0)), vec![1.0; 3]);
}

#[test]
fn long_line_reductions_scans_and_sorts_match_a_host_reference() {
    let d = dev();
    for len in [1025usize, 5000, 70001] {
        for lines in [1usize, 3] {
            let mut v: Vec<f32> = (0..len * lines)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
                .collect();
            // ties: the max 5.0 at several positions per line, min -5 likewise
            for l in 0..lines {
                for &p in &[len - 1, len / 2, 3 + l, len / 3] {
                    v[l * len + p] = 5.0;
                }
                for &p in &[len - 2, 7 + l, len / 2 + 1] {
                    v[l * len + p] = -5.0;
                }
            }
            let t = Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [lines, len]), &d);
            let tt = Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [lines, len]), &d)
                .transpose()
                .transpose();
            let tr = through_host(t.clone().transpose()); // [len, lines] contiguous
            let first = |x: f32, l: usize| (0..len).find(|&p| v[l * len + p] == x).unwrap() as i64;
            let wmax: Vec<i64> = (0..lines).map(|l| first(5.0, l)).collect();
            let wmin: Vec<i64> = (0..lines).map(|l| first(-5.0, l)).collect();
            assert_eq!(
                ivals(t.clone().argmax(1)),
                wmax,
                "argmax len {len} lines {lines}"
            );
            assert_eq!(
                ivals(t.clone().argmin(1)),
                wmin,
                "argmin len {len} lines {lines}"
            );
            assert_eq!(
                ivals(tt.clone().argmax(1)),
                wmax,
                "argmax tt len {len} lines {lines}"
            );
            assert_eq!(
                ivals(tr.clone().argmax(0)),
                wmax,
                "argmax dim0 len {len} lines {lines}"
            );
            assert_eq!(
                ivals(tr.clone().argmin(0)),
                wmin,
                "argmin dim0 len {len} lines {lines}"
            );
            let (mv, mi) = t.clone().max_dim_with_indices(1);
            assert_eq!(vals(mv), vec![5.0; lines]);
            assert_eq!(ivals(mi), wmax, "max_dim_with_indices len {len}");
            let (mv, mi) = tr.clone().min_dim_with_indices(0);
            assert_eq!(vals(mv), vec![-5.0; lines]);
            assert_eq!(ivals(mi), wmin, "min_dim_with_indices len {len}");
            // cummax along long lines
            let cm = vals(t.clone().cummax(1));
            let cmr = vals(tr.clone().cummin(0).transpose());
            for l in 0..lines {
                let mut m = f32::MIN;
                let mut n = f32::MAX;
                for p in 0..len {
                    m = m.max(v[l * len + p]);
                    n = n.min(v[l * len + p]);
                    assert_eq!(cm[l * len + p], m, "cummax len {len} line {l} pos {p}");
                    assert_eq!(cmr[l * len + p], n, "cummin len {len} line {l} pos {p}");
                }
            }
            // integer cumsum exact
            let ti = Tensor::<Xpu, 2, Int>::ones([lines, len], &d);
            let cs = ivals(ti.clone().cumsum(1));
            for l in 0..lines {
                for p in 0..len {
                    assert_eq!(cs[l * len + p], p as i64 + 1, "cumsum len {len}");
                }
            }
            assert_eq!(ivals(ti.clone().sum_dim(1)), vec![len as i64; lines]);
            assert_eq!(
                ivals(ti.clone().transpose().sum_dim(0)),
                vec![len as i64; lines]
            );
            // sort with indices stable for ties
            let (sv, si) = t.clone().sort_with_indices(1);
            let sv = vals(sv);
            let si = ivals(si);
            for l in 0..lines {
                let mut idx: Vec<usize> = (0..len).collect();
                idx.sort_by(|&a, &b| v[l * len + a].total_cmp(&v[l * len + b]));
                let want: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
                assert_eq!(
                    &si[l * len..(l + 1) * len],
                    &want[..],
                    "argsort stable len {len}"
                );
                assert_eq!(sv[l * len + len - 1], 5.0);
            }
        }
    }
}

/// A convolution over zero input channels sums nothing: its output is the bias (zeros
/// without one), as burn-ndarray computes it. A fresh empty tensor whose zero-sized dimension
/// is not the first one counts as contiguous (it has no element to address), so the
/// convolution's contiguity check accepts it.
#[test]
fn convolution_over_zero_input_channels_gives_the_bias() {
    use burn_tensor::module::{conv1d, conv2d, conv_transpose2d};
    use burn_tensor::ops::{ConvOptions, ConvTransposeOptions};
    let d = dev();
    let bias = || Tensor::<Xpu, 1>::from_floats([1.5, -2.0], &dev());
    let x = Tensor::<Xpu, 4>::zeros([1, 0, 4, 4], &d);
    let w = Tensor::<Xpu, 4>::ones([2, 0, 3, 3], &d);
    let opts = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
    let y = conv2d(x.clone(), w.clone(), Some(bias()), opts.clone());
    assert_eq!(y.dims(), [1, 2, 2, 2]);
    assert_eq!(vals(y), [vec![1.5; 4], vec![-2.0; 4]].concat());
    assert_eq!(vals(conv2d(x, w, None, opts)), vec![0.0; 8]);
    let x1 = Tensor::<Xpu, 3>::zeros([2, 0, 5], &d);
    let w1 = Tensor::<Xpu, 3>::ones([2, 0, 2], &d);
    let y1 = conv1d(x1, w1, Some(bias()), ConvOptions::new([1], [0], [1], 1));
    assert_eq!(y1.dims(), [2, 2, 4]);
    assert_eq!(
        vals(y1),
        [vec![1.5; 4], vec![-2.0; 4], vec![1.5; 4], vec![-2.0; 4]].concat()
    );
    let xt = Tensor::<Xpu, 4>::zeros([1, 0, 2, 2], &d);
    let wt = Tensor::<Xpu, 4>::ones([0, 2, 3, 3], &d);
    let yt = conv_transpose2d(
        xt,
        wt,
        Some(bias()),
        ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1),
    );
    assert_eq!(yt.dims(), [1, 2, 4, 4]);
    assert_eq!(vals(yt), [vec![1.5; 16], vec![-2.0; 16]].concat());
}

#[test]
fn scatter_and_select_assign_with_many_entries_per_line_match_a_host_reference() {
    let d = dev();
    // t: [4, 6, 5]; scatter along each dim with indices of 40 entries along dim.
    let shape = [4usize, 6, 5];
    let tv: Vec<f32> = (0..120).map(|i| i as f32).collect();
    let t = Tensor::<Xpu, 3>::from_data(TensorData::new(tv.clone(), shape), &d);
    for dim in 0..3 {
        let mut ishape = shape;
        ishape[dim] = 40;
        // smaller along another dim
        let od = (dim + 1) % 3;
        let _ = od;
        let n: usize = ishape.iter().product();
        let idx: Vec<i64> = (0..n).map(|i| ((i * 31 + 7) % shape[dim]) as i64).collect();
        let val: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
        // host reference
        let mut want = tv.clone();
        let st = [30usize, 5, 1];
        let ist = [ishape[1] * ishape[2], ishape[2], 1];
        for e in 0..n {
            let c = [e / ist[0], (e / ist[1]) % ishape[1], e % ishape[2]];
            let mut tc = c;
            tc[dim] = idx[e] as usize;
            want[tc[0] * st[0] + tc[1] * st[1] + tc[2] * st[2]] += val[e];
        }
        let it = Tensor::<Xpu, 3, Int>::from_data(TensorData::new(idx.clone(), ishape), &d);
        let vt = Tensor::<Xpu, 3>::from_data(TensorData::new(val.clone(), ishape), &d);
        let got = vals(t.clone().scatter(dim, it.clone(), vt.clone()));
        assert_eq!(got, want, "scatter dim {dim}");
        // non-contiguous views of t, indices and values (flip twice = same values, strided)
        let tf = t.clone().flip([0, 1, 2]).flip([0, 1, 2]);
        let itf = it.clone().flip([2]).flip([2]);
        let vtf = vt.clone().flip([1]).flip([1]);
        assert_eq!(
            vals(tf.scatter(dim, itf, vtf)),
            want,
            "scatter views dim {dim}"
        );
    }
    // select_assign with 40 indices, duplicates
    for dim in 0..3 {
        let si: Vec<i64> = (0..40).map(|i| ((i * 7) % shape[dim]) as i64).collect();
        let mut vshape = shape;
        vshape[dim] = 40;
        let n: usize = vshape.iter().product();
        let val: Vec<f32> = (0..n).map(|i| (i % 11) as f32).collect();
        let mut want = tv.clone();
        let st = [30usize, 5, 1];
        let vst = [vshape[1] * vshape[2], vshape[2], 1];
        for (e, v) in val.iter().enumerate() {
            let c = [e / vst[0], (e / vst[1]) % vshape[1], e % vshape[2]];
            let mut tc = c;
            tc[dim] = si[c[dim]] as usize;
            want[tc[0] * st[0] + tc[1] * st[1] + tc[2] * st[2]] += v;
        }
        let sit = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(si.clone(), [40]), &d);
        let vt = Tensor::<Xpu, 3>::from_data(TensorData::new(val.clone(), vshape), &d);
        assert_eq!(
            vals(t.clone().select_assign(dim, sit.clone(), vt.clone())),
            want,
            "select_assign dim {dim}"
        );
        let sitf = sit.flip([0]).flip([0]);
        let _ = sitf;
        let inter: Vec<i64> = si.iter().flat_map(|&v| [v, 99]).collect();
        let sitv = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(inter, [80]), &d)
            .slice(burn_tensor::s![0..80;2]);
        assert_eq!(
            vals(t.clone().select_assign(
                dim,
                sitv,
                vt.clone().flip([dim as isize]).flip([dim as isize])
            )),
            want,
            "select_assign views dim {dim}"
        );
    }
}

#[test]
fn nn_ops_on_non_contiguous_views_give_the_values_of_their_copies() {
    use burn_tensor::module::*;
    use burn_tensor::ops::{
        ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    };
    type A = burn_autodiff::Autodiff<Xpu>;
    let d = dev();
    let data: Vec<f32> = (0..2 * 3 * 5 * 6)
        .map(|i| ((i * 37) % 29) as f32 * 0.25 - 3.0)
        .collect();
    let wdata: Vec<f32> = (0..4 * 3 * 2 * 3)
        .map(|i| ((i * 13) % 7) as f32 * 0.5 - 1.5)
        .collect();
    // x as a [2, 3, 5, 6] view: stored as [6, 5, 3, 2] and permuted.
    let xs = Tensor::<Xpu, 4>::from_data(TensorData::new(data.clone(), [2, 3, 5, 6]), &d);
    let stored = through_host(xs.clone().permute([3, 2, 1, 0]));
    let xv = stored.permute([3, 2, 1, 0]);
    let w = Tensor::<Xpu, 4>::from_data(TensorData::new(wdata.clone(), [4, 3, 2, 3]), &d);
    let wv = through_host(w.clone().flip([3])).flip([3]);
    type Op = Box<dyn Fn(Tensor<Xpu, 4>, Tensor<Xpu, 4>) -> Tensor<Xpu, 4>>;
    let ops: Vec<(&str, Op)> = vec![
        (
            "conv2d",
            Box::new(|x, w| conv2d(x, w, None, ConvOptions::new([1, 2], [1, 0], [1, 1], 1))),
        ),
        (
            "conv_t",
            Box::new(|x, w| {
                conv_transpose2d(
                    x,
                    w.swap_dims(0, 1),
                    None,
                    ConvTransposeOptions::new([2, 1], [0, 1], [1, 0], [1, 1], 1),
                )
            }),
        ),
        (
            "max_pool",
            Box::new(|x, _| max_pool2d(x, [2, 3], [1, 2], [1, 1], [1, 1])),
        ),
        (
            "avg_pool",
            Box::new(|x, _| avg_pool2d(x, [3, 2], [2, 1], [1, 1], false)),
        ),
        ("adaptive", Box::new(|x, _| adaptive_avg_pool2d(x, [3, 4]))),
        (
            "bilinear",
            Box::new(|x, _| {
                interpolate(
                    x,
                    [7, 4],
                    InterpolateOptions::new(InterpolateMode::Bilinear),
                )
            }),
        ),
        (
            "bicubic",
            Box::new(|x, _| {
                interpolate(x, [3, 9], InterpolateOptions::new(InterpolateMode::Bicubic))
            }),
        ),
        (
            "nearest",
            Box::new(|x, _| {
                interpolate(x, [8, 5], InterpolateOptions::new(InterpolateMode::Nearest))
            }),
        ),
    ];
    for (name, f) in &ops {
        let want = vals(f(xs.clone(), w.clone()));
        assert_eq!(
            vals(f(xv.clone(), wv.clone())),
            want,
            "{name} forward on views"
        );
    }
    // Gradients through the same views (autodiff's backward kernels).
    let grads = |x: Tensor<Xpu, 4>, w: Tensor<Xpu, 4>, k: usize| {
        let x = Tensor::<A, 4>::from_inner(x).require_grad();
        let w = Tensor::<A, 4>::from_inner(w).require_grad();
        let y = match k {
            0 => conv2d(
                x.clone(),
                w.clone(),
                None,
                ConvOptions::new([1, 2], [1, 0], [1, 1], 1),
            ),
            1 => {
                max_pool2d(x.clone(), [2, 3], [1, 2], [1, 1], [1, 1]) + w.clone().sum().unsqueeze()
            }
            2 => avg_pool2d(x.clone(), [3, 2], [2, 1], [1, 1], false) + w.clone().sum().unsqueeze(),
            3 => adaptive_avg_pool2d(x.clone(), [3, 4]) + w.clone().sum().unsqueeze(),
            _ => {
                interpolate(
                    x.clone(),
                    [7, 4],
                    InterpolateOptions::new(InterpolateMode::Bilinear),
                ) + w.clone().sum().unsqueeze()
            }
        };
        let g = (y.clone() * y).sum().backward();
        (vals(x.grad(&g).unwrap()), vals(w.grad(&g).unwrap()))
    };
    for k in 0..5 {
        assert_eq!(
            grads(xv.clone(), wv.clone(), k),
            grads(xs.clone(), w.clone(), k),
            "grads {k}"
        );
    }
}

/// burn reads a bool tensor's bytes as `bool`s without checking them (`TensorData::to_vec`
/// transmutes: only 0 and 1 are valid), so every bool tensor a backend hands out must hold
/// 0 or 1, an empty one included — burn-ndarray's `bool_empty` gives `false`s. Here the bool
/// tensor reuses the allocator block of dropped `f32` ones (bytes `00 00 80 3f`).
#[test]
fn empty_bool_tensors_hold_valid_bools() {
    let d = dev();
    for _ in 0..4 {
        let ones = Tensor::<Xpu, 1>::ones([4096], &d);
        drop(ones);
        Xpu::sync(&d);
        let b = Tensor::<Xpu, 1, burn_tensor::Bool>::empty([16384], &d);
        let data = b.into_data();
        let bad = data.as_bytes().iter().filter(|&&v| v > 1).count();
        assert_eq!(bad, 0, "bytes of an empty bool tensor that are not a bool");
    }
}

/// Every bool a backend op yields is stored as 0 or 1 (burn reads the bytes unchecked).
#[test]
fn bool_results_of_every_op_family_are_zero_or_one() {
    use burn_tensor::Bool;
    let d = dev();
    let f = Tensor::<Xpu, 2>::from_floats([[2.0, -3.0, f32::NAN], [0.0, 0.5, 7.0]], &d);
    let i = Tensor::<Xpu, 2, Int>::from_ints([[2, -3, 0], [0, 5, 255]], &d);
    let b = f.clone().greater_elem(0.0);
    let outs: Vec<(&str, Tensor<Xpu, 2, Bool>)> = vec![
        ("float bool", f.clone().bool()),
        ("int bool", i.clone().bool()),
        ("any_dim", f.clone().any_dim(1)),
        ("all_dim", f.clone().all_dim(0)),
        ("int any_dim", i.clone().any_dim(0)),
        ("int all_dim", i.clone().all_dim(1)),
        ("any", f.clone().any().unsqueeze()),
        ("all", i.clone().all().unsqueeze()),
        ("bool any", b.clone().any_dim(1)),
        ("is_nan", f.clone().is_nan()),
        ("equal", f.clone().equal(f.clone())),
        ("bool equal", b.clone().equal(b.clone().bool_not())),
        ("not", b.clone().bool_not()),
        ("and", b.clone().bool_and(i.clone().bool())),
        ("or", b.clone().bool_or(i.clone().bool())),
        ("xor", b.clone().bool_xor(i.clone().bool())),
        (
            "bool select_assign",
            b.clone().select_assign(
                1,
                Tensor::<Xpu, 1, Int>::from_ints([0, 0, 2], &d),
                b.clone(),
            ),
        ),
        (
            "bool cat",
            Tensor::cat(vec![b.clone(), i.clone().bool()], 0),
        ),
        (
            "bool from int data",
            Tensor::<Xpu, 2, Bool>::from_data(
                TensorData::new(vec![2i64, 0, 9, 1, 256, 3], [2, 3]),
                &d,
            ),
        ),
        (
            "bool from float data",
            Tensor::<Xpu, 2, Bool>::from_data(
                TensorData::new(vec![0.5f32, 0.0, -1.0, 1.0, 256.0, 3.0], [2, 3]),
                &d,
            ),
        ),
        ("bool repeat", b.clone().repeat_dim(0, 2)),
        (
            "bool slice_assign",
            b.clone()
                .slice_assign([0..1, 0..3], i.clone().slice([1..2, 0..3]).bool()),
        ),
        ("bool flip", b.clone().flip([1]).expand([2, 3])),
        ("bool argwhere-like", b.clone().int().greater_elem(0)),
    ];
    for (name, t) in outs {
        let data = t.into_data();
        assert!(
            data.as_bytes().iter().all(|&v| v <= 1),
            "{name}: {:?}",
            data.as_bytes()
        );
    }
}

/// Threads moving tensors between two devices while others synchronize both: every value
/// arrives intact.
#[test]
fn tensors_moved_between_devices_by_many_threads_keep_their_values() {
    if xpu::device_count() < 2 {
        return;
    }
    let (d0, d1) = (XpuDevice::new(0), XpuDevice::new(1));
    std::thread::scope(|s| {
        for t in 0..6usize {
            s.spawn(move || {
                for i in 0..15usize {
                    let k = (t * 100 + i) as f32;
                    let a = Tensor::<Xpu, 2>::full([33, 17], k, &d0).transpose();
                    let b = a
                        .clone()
                        .to_device(&d1)
                        .sqrt()
                        .powi_scalar(2)
                        .mul_scalar(2.0);
                    let c = b.to_device(&d0).sum_dim(1).to_device(&d1);
                    if i % 4 == 0 {
                        Xpu::sync(&d0);
                        Xpu::sync(&d1);
                    }
                    let got = vals(c);
                    let want = 2.0 * k * 33.0;
                    assert!(
                        got.len() == 17
                            && got.iter().all(|v| (v - want).abs() <= 1e-3 * want.max(1.0)),
                        "thread {t} step {i}: {got:?} vs {want}"
                    );
                }
            });
        }
    });
}

/// Matmuls large enough for CLBlast (where installed) and for the register-blocked tiled
/// kernel, on transposed, sliced, flipped, broadcast (`expand`) and batch-broadcast operands:
/// the values of the same product of contiguous copies.
#[test]
fn large_matmuls_of_views_give_the_values_of_their_copies() {
    let mk = |shape: [usize; 3], seed: usize| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (((i + seed) * 2654435761usize) % 17) as f32 - 8.0)
            .collect();
        Tensor::<Xpu, 3>::from_data(TensorData::new(v, shape), &dev())
    };
    let a = mk([3, 70, 90], 1);
    let b = mk([3, 90, 80], 2);
    let cases: Vec<(&str, Tensor<Xpu, 3>, Tensor<Xpu, 3>)> = vec![
        ("plain", a.clone(), b.clone()),
        (
            "lhs transposed",
            mk([3, 90, 70], 3).swap_dims(1, 2),
            b.clone(),
        ),
        (
            "rhs transposed",
            a.clone(),
            mk([3, 80, 90], 4).swap_dims(1, 2),
        ),
        (
            "sliced rows",
            mk([3, 70, 130], 5).slice([0..3, 0..70, 20..110]),
            b.clone(),
        ),
        ("flipped rows", a.clone().flip([1]), b.clone().flip([2])),
        ("flipped batch", a.clone().flip([0]), b.clone()),
        (
            "expanded rows",
            mk([3, 1, 90], 6).expand([3, 70, 90]),
            b.clone(),
        ),
        (
            "expanded cols",
            a.clone(),
            mk([3, 90, 1], 7).expand([3, 90, 80]),
        ),
        (
            "batch broadcast",
            mk([1, 70, 90], 8).expand([3, 70, 90]),
            b.clone(),
        ),
        (
            "step slice",
            mk([3, 140, 90], 9).slice(burn_tensor::s![.., 0..140;2, ..]),
            b.clone(),
        ),
        (
            "big",
            mk([1, 300, 260], 10),
            mk([1, 260, 280], 11).flip([1]),
        ),
    ];
    for (name, l, r) in cases {
        let want = vals(through_host(l.clone()).matmul(through_host(r.clone())));
        let got = vals(l.clone().matmul(r.clone()));
        assert_eq!(got, want, "{name}");
        // Batch broadcast through a rank difference of the operands.
        let r2: Tensor<Xpu, 2> = r.clone().slice(burn_tensor::s![0..1]).squeeze_dim(0);
        let want = vals(through_host(l.clone()).matmul(through_host(r2.clone()).unsqueeze()));
        assert_eq!(
            vals(l.matmul(r2.unsqueeze())),
            want,
            "{name}, rhs broadcast"
        );
    }
}

/// A device index past `device_count()` (a framework's configuration error): every entry point
/// fails with the backend's typed error or does nothing, and the real devices keep working.
#[test]
fn a_device_index_out_of_range_is_a_typed_error() {
    let bad = XpuDevice::new(xpu::device_count() + 3);
    assert_backend_error("zeros", || {
        let _ = Tensor::<Xpu, 1>::zeros([4], &bad);
    });
    assert_backend_error("from_data", || {
        let _ = Tensor::<Xpu, 1>::from_floats([1.0, 2.0], &bad);
    });
    assert_backend_error("sync", || Xpu::sync(&bad));
    assert_backend_error("to_device", || {
        let _ = Tensor::<Xpu, 1>::ones([4], &dev()).to_device(&bad);
    });
    assert_backend_error("random", || {
        let _ = Tensor::<Xpu, 1>::random([4], burn_tensor::Distribution::Default, &bad);
    });
    Xpu::seed(&bad, 7);
    Xpu::memory_cleanup(&bad);
    let _ = Xpu::name(&bad);
    assert_eq!(vals(Tensor::<Xpu, 1>::ones([3], &dev())), vec![1.0; 3]);
}

/// Threads computing while others call `memory_cleanup` (which releases cached metadata
/// buffers and empties the allocator's cache) and `sync`: every value stays correct.
#[test]
fn memory_cleanup_and_sync_from_other_threads_while_kernels_run() {
    let d = dev();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        for _ in 0..2 {
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    Xpu::memory_cleanup(&d);
                    Xpu::sync(&d);
                }
            });
        }
        let workers: Vec<_> = (0..4usize)
            .map(|t| {
                s.spawn(move || {
                    for i in 0..25usize {
                        let n = 5 + (t * 7 + i) % 23;
                        let a = Tensor::<Xpu, 2>::ones([n, n + 1], &d).transpose();
                        let b = a.clone().matmul(a.transpose()).sum_dim(1);
                        let c = b.flip([0]).cumsum(0).slice([n..n + 1, 0..1]);
                        assert_eq!(
                            vals(c),
                            vec![(n * (n + 1) * (n + 1)) as f32],
                            "thread {t} n {n}"
                        );
                    }
                })
            })
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            if let Err(e) = r {
                std::panic::resume_unwind(e);
            }
        }
    });
}

// ---- Formerly review_h16.rs ----

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
