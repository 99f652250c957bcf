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
