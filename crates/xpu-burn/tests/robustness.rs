//! The backend on inputs a framework legitimately passes: zero-sized tensors, shapes whose
//! size overflows, non-contiguous views into every kernel family, many threads at once.
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

/// `[2^62]` f32 elements are 2^64 bytes: the byte count wraps to 0 in a release build, where
/// the tensor got a 1-byte block that its fill kernel then wrote 2^62 elements past.
#[test]
fn empty_tensor_whose_byte_count_overflows_is_an_error() {
    let r = XpuTensor::empty(0, &[1usize << 62], DType::F32);
    let e = r.expect_err("an allocation of 2^64 bytes succeeded");
    assert!(e.to_string().contains("more than usize::MAX bytes"), "{e}");
}

#[test]
fn zero_dims_through_op_families() {
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
        for dim in 0..3 {
            chk(
                vals(v.clone().sum_dim(dim)),
                vals(c.clone().sum_dim(dim)),
                "sum_dim",
            );
            chk(
                vals(v.clone().prod_dim(dim)),
                vals(c.clone().prod_dim(dim)),
                "prod_dim",
            );
            chk(
                vals(v.clone().max_dim(dim)),
                vals(c.clone().max_dim(dim)),
                "max_dim",
            );
            chki(
                ivals(v.clone().argmin(dim)),
                ivals(c.clone().argmin(dim)),
                "argmin",
            );
            chk(
                vals(v.clone().cumsum(dim)),
                vals(c.clone().cumsum(dim)),
                "cumsum",
            );
            chk(
                vals(v.clone().cummax(dim)),
                vals(c.clone().cummax(dim)),
                "cummax",
            );
            chk(vals(v.clone().sort(dim)), vals(c.clone().sort(dim)), "sort");
            chki(
                ivals(v.clone().argsort(dim)),
                ivals(c.clone().argsort(dim)),
                "argsort",
            );
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
            chk(
                vals(v.clone().gather(dim, idx.clone())),
                vals(c.clone().gather(dim, idx.clone())),
                "gather",
            );
            chk(
                vals(v.clone().scatter(dim, idx.clone(), v.clone())),
                vals(c.clone().scatter(dim, idx.clone(), c.clone())),
                "scatter",
            );
            let idxv = idx.clone().permute([0, 1, 2]).flip([0]);
            chk(
                vals(v.clone().gather(dim, idxv.clone())),
                vals(c.clone().gather(dim, through_host_i(idxv))),
                "gather-view-idx",
            );
            let si =
                Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![0i64, 1, 0, 1, 1], [5]), &d)
                    .flip([0]);
            chk(
                vals(v.clone().select(dim, si.clone())),
                vals(c.clone().select(dim, si.clone())),
                "select",
            );
            chk(
                vals(v.clone().mean_dim(dim)),
                vals(c.clone().mean_dim(dim)),
                "mean_dim",
            );
        }
        chk(vals(v.clone().sum()), vals(c.clone().sum()), "sum");
        chk(
            vals(v.clone().exp().log()),
            vals(c.clone().exp().log()),
            "exp-log",
        );
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
        chk(
            vals(Tensor::cat(vec![v.clone(), v.clone()], 1)),
            vals(Tensor::cat(vec![c.clone(), c.clone()], 1)),
            "cat",
        );
        let [a0, a1, a2] = dims;
        chk(
            vals(v.clone().slice_assign(
                [0..a0, 0..a1.min(2), 0..a2],
                Tensor::ones([a0, a1.min(2), a2], &d),
            )),
            vals(c.clone().slice_assign(
                [0..a0, 0..a1.min(2), 0..a2],
                Tensor::ones([a0, a1.min(2), a2], &d),
            )),
            "slice_assign",
        );
        chk(
            vals(v.clone().greater_elem(0.0).float()),
            vals(c.clone().greater_elem(0.0).float()),
            "cmp",
        );
        chk(
            vals(v.clone().topk(2, 2)),
            vals(c.clone().topk(2, 2)),
            "topk",
        );
    }
}

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

#[test]
fn probe_values() {
    let d = dev();
    let f = Tensor::<Xpu, 1>::from_floats(
        [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            3.7,
            -3.7,
        ],
        &d,
    );
    println!("float->int: {:?}", ivals(f.clone().int()));
    let f64t = f.clone().cast(burn_tensor::FloatDType::F64);
    println!("f64->int: {:?}", ivals(f64t.int()));
    let u =
        Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![5i64, 7, u32::MAX as i64], [3]), &d)
            .cast(burn_tensor::IntDType::U32);
    let m = Tensor::<Xpu, 1, Int>::from_data(
        TensorData::new(vec![u32::MAX as i64, u32::MAX as i64, 2], [3]),
        &d,
    )
    .cast(burn_tensor::IntDType::U32);
    println!("u dtype {:?}", u.dtype());
    println!(
        "u32 div: {:?}",
        u.clone().div(m.clone()).into_data().to_vec::<u32>()
    );
    println!(
        "u32 rem: {:?}",
        u.clone().remainder(m.clone()).into_data().to_vec::<u32>()
    );
    println!(
        "u32 div scalar: {:?}",
        u.clone()
            .div_scalar(u32::MAX as i64)
            .into_data()
            .to_vec::<u32>()
    );
    println!("u32 abs: {:?}", u.clone().abs().into_data());
    println!("u32 sign: {:?}", u.clone().sign().into_data());
    println!("u32 cumsum: {:?}", u.clone().cumsum(0).into_data());
    println!(
        "u32 sort desc: {:?}",
        u.clone().sort_descending(0).into_data()
    );
    println!("u32 argmax: {:?}", u.clone().argmax(0).into_data());
    println!("u32 max: {:?}", u.clone().max().into_data());
    println!("u32 lower_elem: {:?}", u.clone().lower_elem(6).into_data());
    println!("u32 to float: {:?}", u.clone().float().into_data());
    let i = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![i64::MIN, -1, 5, 300], [4]), &d);
    println!("i64 div -1: {:?}", i.clone().div_scalar(-1).into_data());
    println!(
        "i64 rem -1: {:?}",
        i.clone().remainder_scalar(-1).into_data()
    );
    println!("i64 bool: {:?}", i.clone().bool().into_data());
    println!(
        "i64 cast i8: {:?}",
        i.clone().cast(burn_tensor::IntDType::I8).into_data()
    );
    println!("i64 abs: {:?}", i.clone().abs().into_data());
    println!("f sort nan: {:?}", f.clone().sort(0).into_data());
    println!("f argmax nan: {:?}", f.clone().argmax(0).into_data());
    println!("f max nan: {:?}", f.clone().max().into_data());
    println!("f clamp: {:?}", f.clone().clamp(-1.0, 1.0).into_data());
    println!("f bool: {:?}", f.clone().bool().into_data());
    let b =
        Tensor::<Xpu, 1, burn_tensor::Bool>::from_data(TensorData::new(vec![2u8, 0, 1], [3]), &d);
    println!(
        "bool from u8 2: {:?} dtype {:?}",
        b.clone().into_data(),
        b.dtype()
    );
    println!("bool not: {:?}", b.clone().bool_not().into_data());
    println!("bool int: {:?}", b.clone().int().into_data());
}

/// `x / MAX` of an unsigned int tensor is 0 and `x % MAX` is `x` (for `x < MAX`), as Rust and
/// burn-ndarray compute them: the trap-free division must not read the all-ones divisor of
/// an unsigned type as `-1`.
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
        let qs = as_i64(x.clone().div_scalar(max));
        let rs = as_i64(x.clone().remainder_scalar(max));
        let half = if dtype == IntDType::U64 {
            i64::MAX
        } else {
            max / 2
        };
        assert_eq!(q, vec![0, 0, half], "{dtype:?}: x / m");
        assert_eq!(r, vec![5, 7, 1], "{dtype:?}: x % m");
        assert_eq!(qs, vec![0, 0, 1], "{dtype:?}: x / MAX");
        assert_eq!(rs, vec![5, 7, 0], "{dtype:?}: x % MAX");
    }
    // Signed types keep their trap-free `MIN / -1` and `x % -1`.
    let i = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![i64::MIN, -7, 5], [3]), &d);
    assert_eq!(ivals(i.clone().div_scalar(-1)), vec![i64::MIN, 7, -5]);
    assert_eq!(ivals(i.remainder_scalar(-1)), vec![0, 0, 0]);
}

#[test]
fn probe_cross_device() {
    if xpu::device_count() < 2 {
        return;
    }
    let d0 = XpuDevice::new(0);
    let d1 = XpuDevice::new(1);
    let a = Tensor::<Xpu, 4>::ones([1, 2, 4, 4], &d0);
    let w = Tensor::<Xpu, 4>::ones([3, 2, 3, 3], &d1);
    let cases: Vec<(&str, Box<dyn FnOnce()>)> = vec![
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
        (
            "max_pool",
            Box::new({
                let a = a.clone();
                move || {
                    let g = Tensor::<Xpu, 4>::ones([1, 2, 2, 2], &XpuDevice::new(1));
                    let _ = burn_tensor::module::max_pool2d_with_indices(
                        a,
                        [2, 2],
                        [2, 2],
                        [0, 0],
                        [1, 1],
                    );
                    let _ = g;
                }
            }),
        ),
    ];
    for (name, f) in cases {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        println!("{name}: {}", panic_message(r));
    }
    assert_eq!(vals(Tensor::<Xpu, 1>::ones([3], &d0)), vec![1.0; 3]);
}

#[test]
fn probe_long_line_reductions() {
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

#[test]
fn probe_nn_edges() {
    use burn_tensor::module::*;
    use burn_tensor::ops::{
        ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    };
    let run = |name: &str, f: Box<dyn FnOnce() -> Vec<f32>>| {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        match r {
            Ok(v) => println!("{name}: {:?}", &v[..v.len().min(12)]),
            Err(e) => println!("{name}: PANIC {}", panic_message(Err(e))),
        }
    };
    let x = || {
        Tensor::<Xpu, 4>::from_data(
            TensorData::new((0..16).map(|i| i as f32).collect::<Vec<_>>(), [1, 1, 4, 4]),
            &dev(),
        )
    };
    let one = || Tensor::<Xpu, 4>::full([1, 1, 1, 1], 7.0, &dev());
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        let m1 = mode.clone();
        run(
            &format!("interp 1x1->3x3 {mode:?}"),
            Box::new(move || vals(interpolate(one(), [3, 3], InterpolateOptions::new(m1)))),
        );
        let m2 = mode.clone();
        run(
            &format!("interp 4x4->1x1 {mode:?}"),
            Box::new(move || vals(interpolate(x(), [1, 1], InterpolateOptions::new(m2)))),
        );
        let m3 = mode.clone();
        run(
            &format!("interp 4x4->1x5 {mode:?}"),
            Box::new(move || vals(interpolate(x(), [1, 5], InterpolateOptions::new(m3)))),
        );
        let m4 = mode.clone();
        run(
            &format!("interp 4x4->0x3 {mode:?}"),
            Box::new(move || vals(interpolate(x(), [0, 3], InterpolateOptions::new(m4)))),
        );
        let m5 = mode.clone();
        run(
            &format!("interp empty batch {mode:?}"),
            Box::new(move || {
                vals(interpolate(
                    Tensor::<Xpu, 4>::zeros([0, 1, 4, 4], &dev()),
                    [2, 2],
                    InterpolateOptions::new(m5),
                ))
            }),
        );
    }
    run(
        "conv zero batch",
        Box::new(move || {
            vals(conv2d(
                Tensor::<Xpu, 4>::zeros([0, 1, 4, 4], &dev()),
                Tensor::ones([2, 1, 3, 3], &dev()),
                None,
                ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv kernel > input, pad 0",
        Box::new(move || {
            vals(conv2d(
                x(),
                Tensor::ones([2, 1, 5, 5], &dev()),
                None,
                ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv kernel > input, pad 1",
        Box::new(move || {
            vals(conv2d(
                x(),
                Tensor::ones([2, 1, 5, 5], &dev()),
                Some(Tensor::ones([2], &dev())),
                ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv big pad stride 3 dil 2",
        Box::new(move || {
            vals(conv2d(
                x(),
                Tensor::ones([1, 1, 3, 3], &dev()),
                None,
                ConvOptions::new([3, 3], [5, 5], [2, 2], 1),
            ))
        }),
    );
    run(
        "conv zero in-channels",
        Box::new(move || {
            vals(conv2d(
                Tensor::<Xpu, 4>::zeros([1, 0, 4, 4], &dev()),
                Tensor::ones([2, 0, 3, 3], &dev()),
                Some(Tensor::ones([2], &dev())),
                ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv transpose pad > k",
        Box::new(move || {
            vals(conv_transpose2d(
                x(),
                Tensor::ones([1, 1, 3, 3], &dev()),
                None,
                ConvTransposeOptions::new([2, 2], [2, 2], [1, 1], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv transpose zero batch",
        Box::new(move || {
            vals(conv_transpose2d(
                Tensor::<Xpu, 4>::zeros([0, 1, 4, 4], &dev()),
                Tensor::ones([1, 1, 3, 3], &dev()),
                None,
                ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1),
            ))
        }),
    );
    run(
        "conv1d kernel 1 len 0",
        Box::new(move || {
            vals(conv1d(
                Tensor::<Xpu, 3>::zeros([1, 1, 0], &dev()),
                Tensor::ones([1, 1, 1], &dev()),
                None,
                ConvOptions::new([1], [0], [1], 1),
            ))
        }),
    );
    run(
        "max_pool k>in pad",
        Box::new(move || vals(max_pool2d(x(), [5, 5], [1, 1], [2, 2], [1, 1]))),
    );
    run(
        "max_pool k3s2p1",
        Box::new(move || vals(max_pool2d(x(), [3, 3], [2, 2], [1, 1], [1, 1]))),
    );
    run(
        "avg_pool k3s2p1",
        Box::new(move || vals(avg_pool2d(x(), [3, 3], [2, 2], [1, 1], true))),
    );
    run(
        "avg_pool ceil nopad-count",
        Box::new(move || vals(avg_pool2d(x(), [3, 3], [2, 2], [1, 1], false))),
    );
    run(
        "avg_pool 1d len0",
        Box::new(move || {
            vals(avg_pool1d(
                Tensor::<Xpu, 3>::zeros([1, 1, 0], &dev()),
                1,
                1,
                0,
                true,
            ))
        }),
    );
    run(
        "adaptive 4->6",
        Box::new(move || vals(adaptive_avg_pool2d(x(), [6, 6]))),
    );
    run(
        "adaptive 4->0",
        Box::new(move || vals(adaptive_avg_pool2d(x(), [0, 2]))),
    );
    run(
        "adaptive empty in",
        Box::new(move || {
            vals(adaptive_avg_pool2d(
                Tensor::<Xpu, 4>::zeros([1, 1, 0, 4], &dev()),
                [2, 2],
            ))
        }),
    );
    run(
        "embedding idx oob",
        Box::new(move || {
            vals(embedding(
                Tensor::<Xpu, 2>::ones([3, 2], &dev()),
                Tensor::<Xpu, 2, Int>::from_data(
                    TensorData::new(vec![0i64, 5, -1], [1, 3]),
                    &dev(),
                ),
            ))
        }),
    );
    run(
        "unfold4d",
        Box::new(move || {
            let t = unfold4d(
                x(),
                [3, 3],
                burn_tensor::ops::UnfoldOptions::new([1, 1], [0, 0], [1, 1]),
            );
            vals(t)
        }),
    );
    run(
        "max_pool1d",
        Box::new(move || {
            vals(max_pool1d(
                Tensor::<Xpu, 3>::from_data(
                    TensorData::new(vec![1.0f32, 3.0, 2.0], [1, 1, 3]),
                    &dev(),
                ),
                2,
                1,
                0,
                1,
            ))
        }),
    );
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
