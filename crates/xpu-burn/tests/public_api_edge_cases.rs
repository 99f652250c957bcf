//! Edge cases through burn's public API: integer division and remainder at the edges, NaN and
//! signed zero in extremes, sorts and clamps, scatter and select-assign with out-of-range and
//! strided operands, empty tensors, degenerate and overlapping matmul views, rank-ten views,
//! dropped inputs.
//!
//! Review h17 (fresh eyes, edge cases through burn's public API): PASSING probes, kept as
//! regression tests. Each passed on the reviewed commit (b862d28). On PoCL
//! (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use burn_tensor::backend::Backend;
use burn_tensor::{Bool, Int, IntDType, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice};

fn dev() -> XpuDevice {
    XpuDevice::default()
}

fn fv<const D: usize>(t: Tensor<Xpu, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

fn iv<const D: usize>(t: Tensor<Xpu, D, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().to_vec::<i64>().unwrap()
}

fn ti(v: Vec<i64>) -> Tensor<Xpu, 1, Int> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), &dev())
}

fn tf(v: Vec<f32>) -> Tensor<Xpu, 1> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), &dev())
}

fn t2(v: Vec<f32>, s: [usize; 2]) -> Tensor<Xpu, 2> {
    Tensor::from_data(TensorData::new(v, s), &dev())
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-3 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan()))
}

/// PASSES. Integer division and remainder never trap and follow the documented semantics:
/// `x / 0 == 0`, `MIN / -1 == MIN` (wrapping), truncating division, Python's remainder (the
/// divisor's sign, as burn-ndarray's floor-based `remainder`), `x % 0 == 0`; i64, i32 and u8.
#[test]
fn integer_division_and_remainder_at_the_edges() {
    let min = i64::MIN;
    let a = vec![min, -7, 7, -7, 7, 5, 0, min, i64::MAX, -1];
    let b = vec![-1i64, 2, -2, -2, 0, 0, 3, min, -1, min];
    assert_eq!(
        iv(ti(a.clone()).div(ti(b.clone()))),
        vec![min, -3, -3, 3, 0, 0, 0, 1, -i64::MAX, 0]
    );
    assert_eq!(
        iv(ti(a.clone()).remainder(ti(b.clone()))),
        vec![0, 1, -1, -1, 0, 0, 0, 0, 0, -1]
    );
    assert_eq!(
        iv(ti(a.clone()).remainder_scalar(-3)),
        vec![-2, -1, -2, -1, -2, -1, 0, -2, -2, -1]
    );
    assert_eq!(iv(ti(a.clone()).div_scalar(0)), vec![0; 10]);
    assert_eq!(iv(ti(a.clone()).remainder_scalar(0)), vec![0; 10]);
    assert_eq!(
        iv(ti(vec![7, -7, min]).remainder_scalar(min)),
        vec![7 + min, -7, 0]
    );
    let a32 = ti(vec![i32::MIN as i64, -7, 7, 5]).cast(IntDType::I32);
    let b32 = ti(vec![-1, -2, 0, 3]).cast(IntDType::I32);
    assert_eq!(
        iv(a32.clone().div(b32.clone())),
        vec![i32::MIN as i64, 3, 0, 1]
    );
    assert_eq!(iv(a32.remainder(b32)), vec![0, -1, 0, 2]);
    let u8t = ti(vec![0, 1, 200, 255]).cast(IntDType::U8);
    assert_eq!(iv(u8t.clone().remainder_scalar(7)), vec![0, 1, 4, 3]);
    assert_eq!(iv(u8t.clone().mean()), vec![114]);
    assert_eq!(iv(u8t.sort_descending(0)), vec![255, 200, 1, 0]);
}

/// PASSES. NaN propagates through max/min and their scans, counts as the extreme for
/// argmax/argmin (first one), sorts last ascending / first descending (burn's `total_cmp`,
/// -0 before +0), and stays NaN through clamp; `round` ties to even.
#[test]
fn nan_and_signed_zero_in_extremes_sorts_and_clamps() {
    let n = f32::NAN;
    let v = vec![
        1.0,
        n,
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -3.5,
        2.5,
    ];
    assert!(fv(tf(v.clone()).max())[0].is_nan());
    assert!(fv(tf(v.clone()).min())[0].is_nan());
    assert_eq!(iv(tf(v.clone()).argmax(0)), vec![1]);
    assert_eq!(iv(tf(v.clone()).argmin(0)), vec![1]);
    assert_eq!(iv(tf(v.clone()).argsort(0)), vec![5, 6, 2, 3, 0, 7, 4, 1]);
    let s = fv(tf(v.clone()).sort_descending(0));
    assert!(s[0].is_nan() && s[1] == f32::INFINITY && s[7] == f32::NEG_INFINITY);
    let c = fv(tf(v.clone()).clamp(-1.0, 1.0));
    assert!(close(&c, &[1.0, n, -0.0, 0.0, 1.0, -1.0, -1.0, 1.0]));
    let cm = fv(tf(v.clone()).cummax(0));
    assert!(cm[0] == 1.0 && cm[1..].iter().all(|x| x.is_nan()));
    assert_eq!(
        fv(tf(vec![0.5, 1.5, 2.5, -0.5, -1.5]).round()),
        vec![0.0, 2.0, 2.0, -0.0, -2.0]
    );
    // Long lines (split reductions): the first NaN / first extreme wins across partials.
    let len = 5000;
    let mk = |f: &dyn Fn(usize) -> f32| tf((0..len).map(f).collect());
    let nan_at = |i: usize| if i == 100 || i == 3000 { n } else { i as f32 };
    assert_eq!(iv(mk(&nan_at).argmax(0)), vec![100]);
    let ties = |i: usize| if i % 7 == 3 { -5.0 } else { 1.0 };
    assert_eq!(iv(mk(&ties).argmin(0)), vec![3]);
    assert_eq!(iv(mk(&|_| f32::NEG_INFINITY).argmax(0)), vec![0]);
    let (val, idx) = mk(&|i| match i {
        2500 => -0.0,
        10 => 0.0,
        _ => 1.0,
    })
    .min_dim_with_indices(0);
    assert_eq!((fv(val), iv(idx)), (vec![0.0], vec![10]));
}

/// The host reference of burn's `scatter` (which sums) along `dim` of a 2-D tensor;
/// out-of-range indices are skipped (xpu's documented behaviour).
fn host_scatter(
    t: &[f32],
    shape: [usize; 2],
    dim: usize,
    idx: &[i64],
    ishape: [usize; 2],
    vals: &[f32],
) -> Vec<f32> {
    let mut out = t.to_vec();
    for r in 0..ishape[0] {
        for c in 0..ishape[1] {
            let k = idx[r * ishape[1] + c];
            let lim = shape[dim] as i64;
            if k < 0 || k >= lim {
                continue;
            }
            let (tr, tc) = if dim == 0 {
                (k as usize, c)
            } else {
                (r, k as usize)
            };
            out[tr * shape[1] + tc] += vals[r * ishape[1] + c];
        }
    }
    out
}

/// PASSES. Scatter and select_assign with more than 16 entries per line (the `Segments`
/// path), negative and out-of-range indices (ignored), flipped and broadcast (stride-0)
/// indices and values, along either dimension; gather/select read 0 out of range.
#[test]
fn scatter_and_select_assign_with_out_of_range_and_strided_operands() {
    let d = dev();
    let shape = [3usize, 5];
    let tv: Vec<f32> = (0..15).map(|i| i as f32).collect();
    let t = t2(tv.clone(), shape);
    let ishape = [3usize, 40];
    let idx: Vec<i64> = (0..120).map(|i| ((i * 7) % 9) as i64 - 2).collect();
    let vals: Vec<f32> = (0..120).map(|i| (i % 13) as f32 * 0.5).collect();
    let it = Tensor::<Xpu, 2, Int>::from_data(TensorData::new(idx.clone(), ishape), &d);
    let want = host_scatter(&tv, shape, 1, &idx, ishape, &vals);
    assert_eq!(
        fv(t.clone().scatter(1, it.clone(), t2(vals.clone(), ishape))),
        want
    );
    let rev_i: Vec<i64> = idx.iter().rev().cloned().collect();
    let rev_v: Vec<f32> = vals.iter().rev().cloned().collect();
    let itf = Tensor::<Xpu, 2, Int>::from_data(TensorData::new(rev_i, ishape), &d).flip([0, 1]);
    let vtf = t2(rev_v, ishape).flip([0, 1]);
    assert_eq!(fv(t.clone().scatter(1, itf, vtf)), want, "flipped");
    let vb = t2(vals[..40].to_vec(), [1, 40]).expand([3, 40]);
    let vbh: Vec<f32> = (0..120).map(|i| vals[i % 40]).collect();
    let wantb = host_scatter(&tv, shape, 1, &idx, ishape, &vbh);
    assert_eq!(fv(t.clone().scatter(1, it, vb)), wantb, "broadcast values");
    let ishape0 = [40usize, 5];
    let idx0: Vec<i64> = (0..200).map(|i| ((i * 5) % 7) as i64 - 2).collect();
    let vals0: Vec<f32> = (0..200).map(|i| (i % 11) as f32).collect();
    let want0 = host_scatter(&tv, shape, 0, &idx0, ishape0, &vals0);
    let it0 = Tensor::<Xpu, 2, Int>::from_data(TensorData::new(idx0, ishape0), &d);
    assert_eq!(
        fv(t.clone().scatter(0, it0, t2(vals0, ishape0))),
        want0,
        "dim 0"
    );
    let si: Vec<i64> = (0..30).map(|i| (i % 8) as i64 - 1).collect();
    let sv: Vec<f32> = (0..90).map(|i| i as f32).collect();
    let mut wants = tv.clone();
    for r in 0..3 {
        for (j, &k) in si.iter().enumerate() {
            if (0..5).contains(&k) {
                wants[r * 5 + k as usize] += sv[r * 30 + j];
            }
        }
    }
    let sir: Vec<i64> = si.iter().rev().cloned().collect();
    assert_eq!(
        fv(t.clone().select_assign(1, ti(si), t2(sv.clone(), [3, 30]))),
        wants
    );
    assert_eq!(
        fv(t.clone()
            .select_assign(1, ti(sir).flip([0]), t2(sv, [3, 30]))),
        wants,
        "flipped indices"
    );
    let gi = Tensor::<Xpu, 2, Int>::from_data(
        TensorData::new(vec![-1i64, 5, 4, i64::MAX, i64::MIN, 0], [3, 2]),
        &d,
    );
    assert_eq!(
        fv(t.clone().gather(1, gi)),
        vec![0.0, 0.0, 9.0, 0.0, 0.0, 10.0]
    );
    let sel = fv(t.select(0, ti(vec![-1, 3, 2])));
    assert_eq!(sel[..10], [0.0; 10]);
    assert_eq!(sel[10..], [10.0, 11.0, 12.0, 13.0, 14.0]);
}

/// PASSES. Empty tensors through the nn, index, scan and matmul families: zero batch in
/// convolutions (1-d, 2-d, transposed), pooling, adaptive pooling and interpolation; zero
/// output channels; cat/stack of empties; gather/select/scatter into an empty dimension;
/// matmul with an empty inner dimension; short scans and sorts over an empty batch.
#[test]
fn empty_tensors_through_nn_index_and_matmul() {
    use burn_tensor::module::*;
    use burn_tensor::ops::{
        ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    };
    let d = dev();
    let x0 = Tensor::<Xpu, 4>::zeros([0, 2, 5, 5], &d);
    let w = Tensor::<Xpu, 4>::ones([3, 2, 3, 3], &d);
    let o = ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
    assert_eq!(
        conv2d(x0.clone(), w.clone(), None, o.clone()).dims(),
        [0, 3, 3, 3]
    );
    let wt = Tensor::<Xpu, 4>::ones([2, 3, 3, 3], &d);
    let ot = ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1);
    assert_eq!(
        conv_transpose2d(x0.clone(), wt, None, ot).dims(),
        [0, 3, 7, 7]
    );
    assert_eq!(
        max_pool2d(x0.clone(), [2, 2], [1, 1], [0, 0], [1, 1]).dims(),
        [0, 2, 4, 4]
    );
    assert_eq!(
        avg_pool2d(x0.clone(), [2, 2], [1, 1], [0, 0], true).dims(),
        [0, 2, 4, 4]
    );
    assert_eq!(adaptive_avg_pool2d(x0.clone(), [2, 2]).dims(), [0, 2, 2, 2]);
    let im = InterpolateOptions::new(InterpolateMode::Bilinear);
    assert_eq!(interpolate(x0, [3, 3], im).into_data().num_elements(), 0);
    let x1 = Tensor::<Xpu, 3>::ones([0, 1, 4], &d);
    let w1 = Tensor::<Xpu, 3>::ones([1, 1, 2], &d);
    let o1 = ConvOptions::new([1], [0], [1], 1);
    assert_eq!(conv1d(x1, w1, None, o1).dims(), [0, 1, 3]);
    let xc = Tensor::<Xpu, 4>::ones([1, 2, 5, 5], &d);
    let w0 = Tensor::<Xpu, 4>::ones([0, 2, 3, 3], &d);
    assert_eq!(conv2d(xc, w0, None, o).dims(), [1, 0, 3, 3]);

    let e = Tensor::<Xpu, 2>::zeros([3, 0], &d);
    let e0 = Tensor::<Xpu, 2>::zeros([0, 3], &d);
    assert_eq!(Tensor::cat(vec![e.clone(), e.clone()], 0).dims(), [6, 0]);
    assert_eq!(
        Tensor::stack::<3>(vec![e.clone(), e.clone()], 0).dims(),
        [2, 3, 0]
    );
    let gi = Tensor::<Xpu, 2, Int>::zeros([3, 2], &d);
    assert_eq!(fv(e.clone().gather(1, gi.clone())), vec![0.0; 6]);
    assert_eq!(fv(e.clone().select(1, ti(vec![0, 1]))), vec![0.0; 6]);
    let sv = Tensor::<Xpu, 2>::ones([3, 40], &d);
    let many = Tensor::<Xpu, 2, Int>::zeros([3, 40], &d);
    assert_eq!(e.clone().scatter(1, many, sv.clone()).dims(), [3, 0]);
    let many1 = Tensor::<Xpu, 1, Int>::zeros([40], &d);
    assert_eq!(e.clone().select_assign(1, many1, sv).dims(), [3, 0]);
    assert_eq!(fv(e.clone().matmul(e0.clone())), vec![0.0; 9]);
    assert!(fv(e0.clone().matmul(e.clone())).is_empty());
    assert_eq!(e0.clone().cumsum(0).dims(), [0, 3]);
    assert_eq!(e0.clone().sort(1).dims(), [0, 3]);
    assert_eq!(
        Tensor::<Xpu, 2>::zeros([0, 500], &d).sum_dim(1).dims(),
        [0, 1]
    );
    let b = Tensor::<Xpu, 2, Bool>::empty([0, 3], &d);
    assert_eq!(b.argwhere().dims(), [0, 2]);
}

fn host_mm(a: &[f32], b: &[f32], bat: usize, (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut o = vec![0f32; bat * m * n];
    for q in 0..bat {
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for p in 0..k {
                    s += a[q * m * k + i * k + p] as f64 * b[q * k * n + p * n + j] as f64;
                }
                o[q * m * n + i * n + j] = s as f32;
            }
        }
    }
    o
}

/// PASSES. Matmuls at CLBlast's sizes of views whose rows the BLAS call must not take as
/// they are: k = 1 and n = 1 (degenerate leading dimensions), flipped rows and batches,
/// broadcast (stride-0) rows and batches, overlapping `unfold` windows, stepped columns —
/// against a host reference.
#[test]
fn matmuls_of_degenerate_and_overlapping_views_match_the_host() {
    let d = dev();
    let r = |n: usize, s: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + s) % 19) as f32 * 0.25 - 2.0)
            .collect()
    };
    let t3 = |v: Vec<f32>, s: [usize; 3]| Tensor::<Xpu, 3>::from_data(TensorData::new(v, s), &d);
    let cases: Vec<(&str, Tensor<Xpu, 3>, Tensor<Xpu, 3>)> = vec![
        (
            "k = 1",
            t3(r(64, 1), [1, 1, 64]).swap_dims(1, 2),
            t3(r(512, 2), [1, 1, 512]),
        ),
        (
            "n = 1",
            t3(r(32768, 1), [1, 64, 512]),
            t3(r(512, 3), [1, 1, 512]).swap_dims(1, 2),
        ),
        (
            "n = 1 flipped",
            t3(r(32768, 1), [1, 64, 512]),
            t3(r(512, 3), [1, 512, 1]).flip([1]),
        ),
        (
            "m = 1 flipped",
            t3(r(512, 5), [1, 1, 512]).flip([2]),
            t3(r(32768, 3), [1, 512, 64]),
        ),
        (
            "batch flip",
            t3(r(4800, 1), [3, 40, 40]).flip([0]),
            t3(r(4800, 2), [3, 40, 40]).flip([0, 2]),
        ),
        (
            "batch expand",
            t3(r(1600, 1), [1, 40, 40]).expand([3, 40, 40]),
            t3(r(4800, 2), [3, 40, 40]),
        ),
        (
            "rows expand",
            t3(r(40, 1), [1, 1, 40]).expand([2, 40, 40]),
            t3(r(3200, 2), [2, 40, 40]),
        ),
        (
            "overlapping unfold",
            tf(r(200, 1)).unfold::<2, _>(0, 64, 2).unsqueeze_dim::<3>(0),
            t3(r(4096, 2), [1, 64, 64]),
        ),
        (
            "stepped columns",
            t3(r(8192, 1), [1, 64, 128]).slice_dim(2, burn_tensor::s![..;2]),
            t3(r(4096, 2), [1, 64, 64]),
        ),
    ];
    for (what, a, b) in cases {
        let [ba, m, k] = a.dims();
        let [bb, _, n] = b.dims();
        let bat = ba.max(bb);
        let ah = fv(a.clone().expand([bat, m, k]));
        let bh = fv(b.clone().expand([bat, k, n]));
        let want = host_mm(&ah, &bh, bat, (m, k, n));
        assert!(close(&fv(a.matmul(b)), &want), "{what}");
    }
    let ia = Tensor::<Xpu, 2, Int>::from_data(
        TensorData::new((0..12i64).map(|i| i - 6).collect::<Vec<_>>(), [3, 4]),
        &d,
    );
    assert_eq!(
        iv(ia.clone().flip([0, 1]).matmul(ia.transpose())),
        vec![-68, -12, 44, 4, -4, -12, 76, 4, -68]
    );
}

/// PASSES. A rank-10 tensor, permuted and flipped, through reductions, argmax, scans,
/// sorts, matmul and mask_where: the values of its contiguous copy.
#[test]
fn rank_ten_views_give_the_values_of_their_copies() {
    let d = dev();
    let shape = [2, 3, 1, 2, 2, 1, 3, 2, 1, 2];
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 31) % 17) as f32 - 8.0).collect();
    let t = Tensor::<Xpu, 10>::from_data(TensorData::new(v, shape), &d);
    let p = t.permute([9, 3, 0, 8, 6, 2, 4, 1, 7, 5]).flip([0, 4]);
    let pc = Tensor::<Xpu, 10>::from_data(p.clone().into_data(), &d);
    for dim in 0..10 {
        assert_eq!(
            fv(p.clone().sum_dim(dim)),
            fv(pc.clone().sum_dim(dim)),
            "sum {dim}"
        );
        assert_eq!(
            iv(p.clone().argmax(dim)),
            iv(pc.clone().argmax(dim)),
            "argmax {dim}"
        );
        assert_eq!(
            fv(p.clone().cumsum(dim)),
            fv(pc.clone().cumsum(dim)),
            "cumsum {dim}"
        );
        assert_eq!(
            fv(p.clone().sort(dim)),
            fv(pc.clone().sort(dim)),
            "sort {dim}"
        );
    }
    let mm = |x: Tensor<Xpu, 10>| fv(x.clone().matmul(x.swap_dims(8, 9)));
    assert_eq!(mm(p.clone()), mm(pc.clone()));
    let mw = |x: Tensor<Xpu, 10>| fv(x.clone().mask_where(x.clone().greater_elem(0.0), x.neg()));
    assert_eq!(mw(p), mw(pc));
}

/// PASSES. Inputs dropped right after their ops are issued (the outputs read later, other
/// allocations churning in between), and tensors allocated beside the outputs of every
/// kernel family keep their values.
#[test]
fn dropped_inputs_and_neighbouring_tensors_keep_results_intact() {
    let d = dev();
    let mut outs = Vec::new();
    for k in 0..4 {
        let a = t2((0..1024).map(|i| ((i + k) % 29) as f32).collect(), [32, 32]);
        let b = a.clone().transpose();
        outs.push(a.matmul(b.clone()).add(b.cumsum(1)).sort(1));
        let _churn = Tensor::<Xpu, 2>::ones([32, 32], &d).mul_scalar(-1.0);
    }
    for (k, o) in outs.into_iter().enumerate() {
        let a: Vec<f32> = (0..1024).map(|i| ((i + k) % 29) as f32).collect();
        let mut want = host_mm(&a, &transpose(&a, 32), 1, (32, 32, 32));
        for i in 0..32 {
            let mut c = 0f32;
            for j in 0..32 {
                c += a[j * 32 + i];
                want[i * 32 + j] += c;
            }
            want[i * 32..(i + 1) * 32].sort_by(|x, y| x.total_cmp(y));
        }
        assert!(close(&fv(o), &want), "output {k}");
    }
    let mut keep = Vec::new();
    let mut outs = Vec::new();
    for k in 0..12 {
        keep.push(Tensor::<Xpu, 1>::full([k * 7 + 1], 42.0, &d));
        let x = t2(
            (0..(k + 1) * 6).map(|i| i as f32 - 5.0).collect(),
            [k + 1, 6],
        );
        outs.push(x.clone().flip([0]).cumsum(0).sum_dim(1).flatten::<1>(0, 1));
        outs.push(x.clone().transpose().sort(1).flatten::<1>(0, 1));
        outs.push(Tensor::cat(vec![x.clone(), x.clone().flip([1])], 1).flatten::<1>(0, 1));
        let z = Tensor::zeros([1, 6], &d);
        outs.push(x.clone().slice_assign([0..1, 0..6], z).flatten::<1>(0, 1));
        outs.push(x.clone().argmax(0).float().flatten::<1>(0, 1));
        let rows: Vec<i64> = (0..k as i64 + 1).rev().collect();
        outs.push(x.clone().select(0, ti(rows)).flatten::<1>(0, 1));
        let gi = Tensor::<Xpu, 2, Int>::zeros([k + 1, 3], &d);
        outs.push(x.gather(1, gi).flatten::<1>(0, 1));
    }
    Xpu::sync(&d);
    for (k, nb) in keep.into_iter().enumerate() {
        assert!(fv(nb).iter().all(|&x| x == 42.0), "neighbour {k} changed");
    }
    assert_eq!(outs.len(), 84);
}

fn transpose(a: &[f32], n: usize) -> Vec<f32> {
    (0..n * n).map(|i| a[(i % n) * n + i / n]).collect()
}

/// PASSES. Deformable convolution with a zero batch, and with huge, NaN and hugely negative
/// offsets (every sample lands outside the image: zeros, no out-of-bounds read).
#[test]
fn deformable_convolution_with_extreme_offsets_samples_zeros() {
    use burn_tensor::module::deform_conv2d;
    use burn_tensor::ops::DeformConvOptions;
    let d = dev();
    let opts = || DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1);
    let w = Tensor::<Xpu, 4>::ones([3, 2, 3, 3], &d);
    let x0 = Tensor::<Xpu, 4>::ones([0, 2, 4, 4], &d);
    let off0 = Tensor::<Xpu, 4>::zeros([0, 18, 2, 2], &d);
    assert_eq!(
        deform_conv2d(x0, off0, w.clone(), None, None, opts()).dims(),
        [0, 3, 2, 2]
    );
    let x = Tensor::<Xpu, 4>::ones([1, 2, 4, 4], &d);
    for v in [1e9f32, f32::NAN, -1e30] {
        let off = Tensor::<Xpu, 4>::full([1, 18, 2, 2], v, &d);
        let out = fv(deform_conv2d(x.clone(), off, w.clone(), None, None, opts()));
        assert_eq!(out, vec![0.0; 12], "offsets {v}");
    }
}

/// PASSES. Backward passes (`Autodiff<Xpu>`) of the nn ops with empty tensors: zero batch
/// (conv2d with bias, conv1d, transposed conv2d, max/avg pooling, bicubic interpolation),
/// zero output or input channels, an empty output size of adaptive pooling and
/// interpolation (zero input gradients), and an embedding's backward with many entries.
#[test]
fn backward_passes_of_nn_ops_with_empty_tensors() {
    use burn_tensor::module::*;
    use burn_tensor::ops::{
        ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    };
    type A = burn_autodiff::Autodiff<Xpu>;
    let d = dev();
    let g4 = |s: [usize; 4]| Tensor::<A, 4>::ones(s, &d).require_grad();
    let sum = |t: Tensor<Xpu, 4>| -> f32 { t.into_data().to_vec::<f32>().unwrap().iter().sum() };
    let conv = |s, p| ConvOptions::new(s, p, [1, 1], 1);

    let (x, w) = (g4([0, 2, 5, 5]), g4([3, 2, 3, 3]));
    let b = Tensor::<A, 1>::ones([3], &d).require_grad();
    let y = conv2d(x.clone(), w.clone(), Some(b.clone()), conv([2, 2], [1, 1]));
    let gr = y.sum().backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [0, 2, 5, 5]);
    assert_eq!(sum(w.grad(&gr).unwrap()), 0.0);
    assert_eq!(
        b.grad(&gr).unwrap().into_data().to_vec::<f32>().unwrap(),
        vec![0.0; 3]
    );

    let (x, w) = (g4([1, 2, 5, 5]), g4([0, 2, 3, 3]));
    let gr = conv2d(x.clone(), w.clone(), None, conv([1, 1], [0, 0]))
        .sum()
        .backward();
    assert_eq!(sum(x.grad(&gr).unwrap()), 0.0);
    assert_eq!(w.grad(&gr).unwrap().dims(), [0, 2, 3, 3]);

    let (x, w) = (g4([1, 0, 5, 5]), g4([3, 0, 3, 3]));
    let gr = conv2d(x.clone(), w.clone(), None, conv([1, 1], [0, 0]))
        .sum()
        .backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [1, 0, 5, 5]);
    assert_eq!(w.grad(&gr).unwrap().dims(), [3, 0, 3, 3]);

    let (x, w) = (g4([0, 2, 3, 3]), g4([2, 3, 3, 3]));
    let ot = ConvTransposeOptions::new([2, 2], [1, 1], [1, 1], [1, 1], 1);
    let gr = conv_transpose2d(x.clone(), w.clone(), None, ot)
        .sum()
        .backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [0, 2, 3, 3]);
    assert_eq!(sum(w.grad(&gr).unwrap()), 0.0);

    let x1 = Tensor::<A, 3>::ones([0, 2, 5], &d).require_grad();
    let w1 = Tensor::<A, 3>::ones([3, 2, 2], &d).require_grad();
    let o1 = ConvOptions::new([1], [0], [1], 1);
    let gr = conv1d(x1.clone(), w1.clone(), None, o1).sum().backward();
    assert_eq!(x1.grad(&gr).unwrap().dims(), [0, 2, 5]);
    assert_eq!(w1.grad(&gr).unwrap().dims(), [3, 2, 2]);

    let x = g4([0, 2, 5, 5]);
    let gr = max_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], [1, 1])
        .sum()
        .backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [0, 2, 5, 5]);
    let gr = avg_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], true)
        .sum()
        .backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [0, 2, 5, 5]);
    let bicubic = InterpolateOptions::new(InterpolateMode::Bicubic);
    let gr = interpolate(x.clone(), [3, 3], bicubic).sum().backward();
    assert_eq!(x.grad(&gr).unwrap().dims(), [0, 2, 5, 5]);

    let x = g4([1, 2, 5, 5]);
    let gr = adaptive_avg_pool2d(x.clone(), [0, 3]).sum().backward();
    assert_eq!(sum(x.grad(&gr).unwrap()), 0.0);
    let bilinear = InterpolateOptions::new(InterpolateMode::Bilinear);
    let gr = interpolate(x.clone(), [0, 3], bilinear).sum().backward();
    assert_eq!(sum(x.grad(&gr).unwrap()), 0.0);

    let w = Tensor::<A, 2>::ones([10, 4], &d).require_grad();
    let ids: Vec<i64> = (0..60).map(|i| i % 10).collect();
    let idx = Tensor::<A, 2, Int>::from_data(TensorData::new(ids, [3, 20]), &d);
    let gr = embedding(w.clone(), idx).sum().backward();
    let g = w.grad(&gr).unwrap().into_data().to_vec::<f32>().unwrap();
    assert_eq!(g, vec![6.0; 40]);
}

/// PASSES. Non-default element types through the line, index and matmul kernels on views:
/// f64 sorts and scans with NaN and signed zeros; i32 scans (wrapping products), sorts,
/// gathers, scatters (with i64 values) and matmuls; bool ops on flipped, transposed and
/// broadcast views.
#[test]
fn f64_i32_and_bool_tensors_through_views() {
    use burn_tensor::FloatDType;
    let d = dev();
    let v = vec![1.0f32, f32::NAN, -0.0, 0.0, f32::INFINITY, -2.0];
    let t64 = tf(v).cast(FloatDType::F64);
    assert_eq!(
        iv(t64.clone().argsort_descending(0)),
        vec![1, 4, 0, 3, 2, 5]
    );
    let cm = fv(t64.clone().flip([0]).cummax(0));
    assert_eq!(cm[..4], [-2.0, f32::INFINITY, f32::INFINITY, f32::INFINITY]);
    assert!(cm[4].is_nan() && cm[5].is_nan());
    assert_eq!(iv(t64.argmin(0)), vec![1]);

    let vals: Vec<i64> = (0..12i64).map(|x| x * 1000 - 5000).collect();
    let i = Tensor::<Xpu, 2, Int>::from_data(TensorData::new(vals, [3, 4]), &d);
    let i32t = i.cast(IntDType::I32);
    let row0 = |v: Vec<i64>| v[..4].to_vec();
    assert_eq!(
        row0(iv(i32t.clone().flip([1]).cumsum(1))),
        vec![-2000, -5000, -9000, -14000]
    );
    assert_eq!(
        row0(iv(i32t.clone().add_scalar(7000).cumprod(1))),
        vec![2000, 6000000, -1769803776, -1386250240]
    );
    assert_eq!(
        iv(i32t.clone().transpose().sort_descending(1))[..3],
        [3000, -1000, -5000]
    );
    let gi =
        Tensor::<Xpu, 2, Int>::from_data(TensorData::new(vec![3i64, 0, 1, 2, 2, 2], [3, 2]), &d);
    assert_eq!(
        iv(i32t.clone().gather(1, gi)),
        vec![-2000, -5000, 0, 1000, 5000, 5000]
    );
    let zeros = Tensor::<Xpu, 2, Int>::zeros([3, 30], &d);
    let ones = Tensor::<Xpu, 2, Int>::ones([3, 30], &d);
    assert_eq!(
        iv(i32t.clone().scatter(1, zeros, ones))[..5],
        [-4970, -4000, -3000, -2000, -970]
    );
    assert_eq!(
        row0(iv(i32t.clone().matmul(i32t.transpose()))),
        vec![54000000, -2000000, -58000000, -2000000]
    );

    let bits = vec![true, false, false, true, true, false];
    let b = Tensor::<Xpu, 2, Bool>::from_data(TensorData::new(bits, [2, 3]), &d);
    let bv = |t: Tensor<Xpu, 2, Bool>| t.into_data().to_vec::<bool>().unwrap();
    assert_eq!(
        bv(b.clone().flip([1]).bool_not()),
        vec![true, true, false, true, false, false]
    );
    assert_eq!(
        b.clone()
            .transpose()
            .argwhere()
            .into_data()
            .to_vec::<i64>()
            .unwrap(),
        vec![0, 0, 0, 1, 1, 1]
    );
    let first = b.clone().slice([0..1, 0..3]).expand([2, 3]);
    assert_eq!(
        bv(first.bool_and(b.clone())),
        vec![true, false, false, true, false, false]
    );
    assert_eq!(iv(b.int().sum()), vec![3]);
}
