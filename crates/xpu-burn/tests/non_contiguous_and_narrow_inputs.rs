//! Kernel launches and tensor ops on non-contiguous, int, small-int and bool inputs against
//! burn-ndarray (by hand, or by the adjoint or a finite difference where NdArray cannot serve),
//! including a max-pool window entirely in the padding.
//!
//! Review h86 (fresh eyes on 46be37d: xpu-burn's kernel launches and tensor ops on
//! non-contiguous, int, small-int and bool inputs, against burn-ndarray, by hand or by the
//! adjoint / a finite difference where NdArray cannot serve).
//!
//! Finding (failed on 46be37d, 5 of 5 runs; fixed: the window gets index 0):
//! `max_pool2d_index_of_a_window_all_in_padding_differs_from_ndarray`: a max-pool window
//! entirely in the padding gets index -1 (`nn.rs` MAX_POOL, `long mi = -1`), NdArray and
//! burn-cubecl give 0.
//!
//! Every `probe_*` test held. Not xpu's: NdArray's `max_pool2d_with_indices` numbers a
//! position `ih * H + iw` (H, not W: wrong for non-square planes), its deform_conv2d offset
//! and mask gradients disagree with a finite difference (xpu's agree), its matmul panics on
//! an empty inner dimension, and its bilinear/bicubic interpolate backward is unimplemented.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_ndarray::{NdArray, NdArrayDevice};
use xpu_burn::{Xpu, XpuDevice};

fn nd() -> NdArrayDevice {
    NdArrayDevice::Cpu
}

fn xd() -> XpuDevice {
    XpuDevice::default()
}

/// The data as (shape, f64 values): every dtype converted (bools through ints).
fn flat(d: TensorData) -> (Vec<usize>, Vec<f64>) {
    let shape = d.shape.clone();
    let d = if d.dtype == burn::tensor::DType::Bool {
        let v: Vec<bool> = d.to_vec::<bool>().unwrap();
        return (shape, v.into_iter().map(|b| b as u8 as f64).collect());
    } else {
        d
    };
    (shape, d.convert::<f64>().to_vec::<f64>().unwrap())
}

fn close(what: &str, x: Vec<TensorData>, n: Vec<TensorData>, tol: f64) {
    assert_eq!(x.len(), n.len());
    for (k, (a, b)) in x.into_iter().zip(n).enumerate() {
        let (sa, va) = flat(a);
        let (sb, vb) = flat(b);
        assert_eq!(sa, sb, "{what} output {k}: shapes");
        for (i, (p, q)) in va.iter().zip(&vb).enumerate() {
            let ok = (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= tol * (1.0 + q.abs());
            assert!(
                ok,
                "{what} output {k}[{i}]: xpu {p} vs ndarray {q}\nxpu {va:?}\nnd  {vb:?}"
            );
        }
    }
}

/// Runs case `$f` (a generic fn of the backend returning Vec<TensorData>) on both backends.
macro_rules! diff {
    ($f:ident, $tol:expr) => {
        close(stringify!($f), $f::<Xpu>(&xd()), $f::<NdArray>(&nd()), $tol)
    };
}

fn iota<B: Backend, const D: usize>(shape: [usize; D], dev: &B::Device) -> Tensor<B, D> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 37 + 11) % 23) as f32 - 9.5).collect();
    Tensor::<B, 1>::from_floats(v.as_slice(), dev).reshape(shape)
}

fn iota_int<B: Backend, const D: usize>(shape: [usize; D], dev: &B::Device) -> Tensor<B, D, Int> {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n).map(|i| ((i * 37 + 11) % 23) as i64 - 9).collect();
    Tensor::<B, 1, Int>::from_ints(v.as_slice(), dev).reshape(shape)
}

// ---------------------------------------------------------------------------------------
// Probes (differential against NdArray).

fn c_gather_perm<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let t = iota::<B, 3>([4, 5, 6], d).permute([2, 0, 1]).flip([1]); // [6, 4, 5]
    let iv: Vec<i64> = (0..2 * 4 * 5).map(|i| (i * 7 % 6) as i64).collect();
    let idx = Tensor::<B, 1, Int>::from_ints(iv.as_slice(), d)
        .reshape([5, 4, 2])
        .permute([2, 1, 0])
        .flip([1]);
    let ti = iota_int::<B, 3>([4, 5, 6], d).permute([2, 0, 1]);
    vec![
        t.clone().gather(0, idx.clone()).into_data(),
        ti.clone().gather(0, idx.clone()).into_data(),
        t.clone()
            .select(2, Tensor::from_ints([4, 0, 0, 3], d))
            .into_data(),
        ti.select(1, Tensor::from_ints([3, 3, 1], d)).into_data(),
    ]
}

#[test]
fn probe_gather_select_views() {
    diff!(c_gather_perm, 0.0);
}

fn c_scatter_views<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let t = iota::<B, 2>([5, 7], d).transpose(); // [7, 5]
    let idx = Tensor::<B, 2, Int>::from_ints([[1, 6, 6, 0, 2], [3, 3, 1, 0, 6]], d);
    let v = iota::<B, 2>([5, 2], d).transpose().mul_scalar(3.0);
    let many: Vec<i64> = (0..40).map(|i| (i * 7 % 5) as i64).collect();
    let idx2 = Tensor::<B, 1, Int>::from_ints(many.as_slice(), d);
    let v2 = iota::<B, 2>([5, 40], d).transpose();
    let ti = iota_int::<B, 2>([5, 7], d).transpose();
    vec![
        t.clone().scatter(0, idx.clone(), v.clone()).into_data(),
        ti.clone()
            .scatter(0, idx.clone(), v.clone().int())
            .into_data(),
        t.clone()
            .select_assign(0, Tensor::from_ints([6, 0, 6], d), iota::<B, 2>([3, 5], d))
            .into_data(),
        iota::<B, 2>([5, 5], d)
            .flip([0])
            .select_assign(0, idx2, v2)
            .into_data(),
    ]
}

#[test]
fn probe_scatter_select_assign_views() {
    diff!(c_scatter_views, 1e-5);
}

fn c_slice_assign<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    use burn::tensor::s;
    let t = iota::<B, 3>([4, 6, 5], d).permute([1, 2, 0]); // [6, 5, 4]
    let v = iota::<B, 3>([3, 2, 4], d).flip([0]);
    let ti = iota_int::<B, 3>([4, 6, 5], d).permute([1, 2, 0]);
    let tb = iota_int::<B, 3>([4, 6, 5], d)
        .permute([1, 2, 0])
        .greater_elem(0);
    let vb = iota_int::<B, 3>([3, 2, 4], d).lower_elem(0);
    vec![
        t.clone()
            .slice_assign(s![0..6;2, 1..5;-2], v.clone())
            .into_data(),
        ti.slice_assign(s![1..6;-2, 3..5], v.clone().int())
            .into_data(),
        tb.slice_assign(s![..;-2, 0..2], vb).int().into_data(),
        t.slice(s![1..6;-2, ..;3, 2..]).into_data(),
    ]
}

#[test]
fn probe_slice_assign_steps() {
    diff!(c_slice_assign, 0.0);
}

fn c_cat_repeat<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let a = iota::<B, 3>([2, 3, 4], d).permute([2, 1, 0]); // [4, 3, 2]
    let b = iota::<B, 3>([4, 3, 5], d).flip([2]);
    let c = iota::<B, 3>([1, 3, 1], d).expand([4, 3, 3]);
    let ai = iota_int::<B, 3>([2, 3, 4], d).permute([2, 1, 0]);
    let bb = iota_int::<B, 3>([4, 3, 1], d).greater_elem(2);
    vec![
        Tensor::cat(vec![a.clone(), b, c], 2).into_data(),
        Tensor::cat(vec![ai.clone(), ai.clone().flip([0])], 0).into_data(),
        Tensor::cat(vec![bb.clone(), bb.clone().bool_not(), bb], 2)
            .int()
            .into_data(),
        a.clone().repeat_dim(1, 3).into_data(),
        a.repeat(&[2, 1, 2]).into_data(),
        ai.repeat_dim(0, 2).into_data(),
    ]
}

#[test]
fn probe_cat_repeat_views() {
    diff!(c_cat_repeat, 0.0);
}

fn c_reduce_dims<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let t = iota::<B, 3>([3, 4, 5], d).permute([2, 0, 1]).flip([0]); // [5, 3, 4]
    let ti = iota_int::<B, 3>([3, 4, 5], d).permute([2, 0, 1]).flip([2]);
    let tb = ti.clone().greater_elem(3);
    let mut out = vec![];
    for dim in 0..3 {
        out.push(t.clone().sum_dim(dim).into_data());
        out.push(t.clone().prod_dim(dim).into_data());
        out.push(t.clone().mean_dim(dim).into_data());
        out.push(t.clone().max_dim(dim).into_data());
        out.push(t.clone().min_dim(dim).into_data());
        out.push(t.clone().argmax(dim).into_data());
        out.push(t.clone().argmin(dim).into_data());
        out.push(ti.clone().sum_dim(dim).into_data());
        out.push(ti.clone().prod_dim(dim).into_data());
        out.push(ti.clone().mean_dim(dim).into_data());
        out.push(ti.clone().max_dim(dim).into_data());
        out.push(ti.clone().argmin(dim).into_data());
        out.push(tb.clone().any_dim(dim).int().into_data());
        out.push(tb.clone().all_dim(dim).int().into_data());
        let (v, i) = ti.clone().max_dim_with_indices(dim);
        out.push(v.into_data());
        out.push(i.into_data());
        out.push(t.clone().cumsum(dim).into_data());
        out.push(t.clone().cumprod(dim).into_data());
        out.push(ti.clone().cummax(dim).into_data());
        out.push(ti.clone().cummin(dim).into_data());
    }
    out.push(ti.clone().mean().into_data());
    out.push(t.clone().max_abs().into_data());
    out.push(ti.clone().max_abs().into_data());
    out.push(tb.clone().any().int().into_data());
    out.push(tb.all().int().into_data());
    out
}

#[test]
fn probe_reductions_along_dims_of_views() {
    diff!(c_reduce_dims, 1e-4);
}

fn c_long_lines<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    // Few long lines: the split paths (len > 1024).
    let n = 3000;
    let v: Vec<f32> = (0..2 * n)
        .map(|i| ((i * 7919) % 6000) as f32 / 100.0 - 5.0)
        .collect();
    let t = Tensor::<B, 1>::from_floats(v.as_slice(), d)
        .reshape([n, 2])
        .transpose(); // [2, n]
    let vi: Vec<i64> = (0..2 * n)
        .map(|i| ((i * 7919) % 6000) as i64 - 500)
        .collect();
    let ti = Tensor::<B, 1, Int>::from_ints(vi.as_slice(), d)
        .reshape([n, 2])
        .transpose();
    vec![
        t.clone().sum_dim(1).into_data(),
        t.clone().argmax(1).into_data(),
        t.clone().argmin(1).into_data(),
        t.clone().mean_dim(1).into_data(),
        t.clone().cumsum(1).into_data(),
        t.clone().cummax(1).into_data(),
        ti.clone().cummin(1).into_data(),
        ti.clone().cumsum(1).into_data(),
        ti.clone().sum().into_data(),
        ti.clone().mean_dim(1).into_data(),
        ti.clone().argmax(1).into_data(),
        t.clone().sort(1).into_data(),
        t.clone().argsort_descending(1).into_data(),
        ti.clone().argsort(1).into_data(),
        ti.sort_descending(1).into_data(),
    ]
}

#[test]
fn probe_long_lines_split_paths() {
    diff!(c_long_lines, 1e-3);
}

fn c_empty<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let e = Tensor::<B, 2>::zeros([0, 4], d);
    let ei = Tensor::<B, 2, Int>::zeros([3, 0], d);
    let a = iota::<B, 2>([3, 0], d);
    let b = iota::<B, 2>([0, 5], d);
    let _ = (a, b);
    vec![
        e.clone().sum_dim(0).into_data(),
        ei.clone().sum_dim(1).into_data(),
        ei.clone().prod_dim(1).into_data(),
        e.clone().cumsum(1).into_data(),
        ei.clone().cumsum(0).into_data(),
        e.clone().sort(0).into_data(),
        ei.clone().argsort(1).into_data(),
        Tensor::cat(vec![e.clone(), iota::<B, 2>([2, 4], d), e.clone()], 0).into_data(),
        Tensor::cat(vec![ei.clone(), ei.clone()], 1).into_data(),
        e.clone().repeat_dim(0, 3).into_data(),
        iota::<B, 2>([2, 4], d).repeat_dim(1, 0).into_data(),
        ei.clone().any_dim(1).int().into_data(),
        ei.clone().all_dim(1).int().into_data(),
        ei.clone().bool().all().int().into_data(),
        ei.sum().into_data(),
    ]
}

#[test]
fn probe_empty_tensors() {
    diff!(c_empty, 0.0);
}

fn c_matmul_views<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let a = iota::<B, 4>([2, 1, 70, 9], d).permute([0, 1, 3, 2]); // [2, 1, 9, 70]
    let b = iota::<B, 3>([3, 70, 66], d).flip([2]); // [3, 70, 66]
    let ai = iota_int::<B, 3>([3, 5, 4], d).swap_dims(1, 2); // [3, 4, 5]
    let bi = iota_int::<B, 2>([5, 3], d)
        .unsqueeze::<3>()
        .expand([3, 5, 3]);
    vec![
        a.clone().matmul(b.clone().unsqueeze::<4>()).into_data(),
        b.clone()
            .transpose()
            .matmul(b.clone().slice([0..3, 0..70, 0..65]))
            .into_data(),
        ai.matmul(bi).into_data(),
    ]
}

#[test]
fn probe_matmul_views() {
    diff!(c_matmul_views, 1e-4);
}

fn c_nn<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    use burn::tensor::module::{
        adaptive_avg_pool2d, avg_pool2d, conv2d, conv_transpose2d, interpolate, max_pool2d,
        max_pool2d_with_indices,
    };
    use burn::tensor::ops::{
        ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions,
    };
    let x = iota::<B, 4>([2, 7, 6, 4], d).permute([0, 3, 1, 2]); // [2, 4, 7, 6]
    let w = iota::<B, 4>([6, 2, 3, 2], d).mul_scalar(0.1);
    let bias = iota::<B, 1>([6], d);
    let mut out = vec![
        conv2d(
            x.clone(),
            w.clone(),
            Some(bias.clone()),
            ConvOptions::new([2, 1], [2, 1], [1, 2], 2),
        )
        .into_data(),
        conv_transpose2d(
            x.clone(),
            iota::<B, 4>([4, 3, 3, 2], d),
            None,
            ConvTransposeOptions::new([2, 3], [1, 1], [1, 2], [2, 1], 2),
        )
        .into_data(),
        avg_pool2d(x.clone(), [3, 2], [2, 3], [1, 1], true).into_data(),
        avg_pool2d(x.clone(), [3, 2], [2, 3], [1, 1], false).into_data(),
        max_pool2d(x.clone(), [3, 3], [1, 2], [1, 1], [2, 1]).into_data(),
        max_pool2d_with_indices(
            iota::<B, 4>([2, 4, 6, 6], d).flip([3]),
            [2, 3],
            [2, 1],
            [1, 1],
            [1, 1],
        )
        .1
        .into_data(),
        adaptive_avg_pool2d(x.clone(), [3, 4]).into_data(),
        adaptive_avg_pool2d(x.clone(), [9, 11]).into_data(),
    ];
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        out.push(
            interpolate(x.clone(), [5, 13], InterpolateOptions::new(mode.clone())).into_data(),
        );
        out.push(interpolate(x.clone(), [1, 1], InterpolateOptions::new(mode)).into_data());
    }
    out
}

#[test]
fn probe_nn_views() {
    diff!(c_nn, 1e-4);
}

#[test]
fn probe_matmul_with_empty_inner_dim_is_zeros() {
    let d = xd();
    // Leave garbage in the cache first.
    let g = Tensor::<Xpu, 2>::full([3, 5], 7.0, &d).into_data();
    drop(g);
    let a = Tensor::<Xpu, 2>::zeros([3, 0], &d);
    let b = Tensor::<Xpu, 2>::zeros([0, 5], &d);
    let m = a.matmul(b).into_data();
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![0.0; 15]);
    let ai = Tensor::<Xpu, 3, Int>::zeros([2, 3, 0], &d);
    let bi = Tensor::<Xpu, 3, Int>::zeros([2, 0, 5], &d);
    assert_eq!(
        ai.matmul(bi).into_data().to_vec::<i64>().unwrap(),
        vec![0; 30]
    );
}

/// FINDING (low severity): a max-pooling window that lies entirely in the padding (padding
/// larger than half the kernel, which burn accepts) gets the index -1 on xpu; burn's NdArray
/// backend (and burn-cubecl's kernel, which starts its index at 0) give 0. The values agree
/// (-inf). xpu's -1 is no position of the plane, so code that uses the indices (a gather, an
/// unpooling, burn's `max_pool2d_with_indices_backward` on another backend) diverges.
#[test]
fn max_pool2d_index_of_a_window_all_in_padding_differs_from_ndarray() {
    use burn::tensor::module::max_pool2d_with_indices;
    fn idx<B: Backend>(d: &B::Device) -> Vec<TensorData> {
        let x = iota::<B, 4>([1, 1, 4, 4], d);
        vec![max_pool2d_with_indices(x, [2, 2], [1, 1], [2, 2], [1, 1])
            .1
            .into_data()]
    }
    diff!(idx, 0.0);
}

fn c_pool_big_padding<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    use burn::tensor::module::{avg_pool2d, max_pool2d_with_indices};
    let x = iota::<B, 4>([1, 2, 4, 4], d);
    let (m, _) = max_pool2d_with_indices(x.clone(), [2, 2], [1, 1], [2, 2], [1, 1]);
    vec![
        m.into_data(),
        avg_pool2d(x.clone(), [2, 2], [1, 1], [2, 2], true).into_data(),
        avg_pool2d(x, [2, 2], [1, 1], [2, 2], false).into_data(),
    ]
}

#[test]
fn probe_pool_padding_past_half_kernel() {
    diff!(c_pool_big_padding, 1e-5);
}

fn c_small_int_dtypes<B: Backend>(d: &B::Device) -> Vec<TensorData> {
    let v32: Vec<i32> = (0..24).map(|i| ((i * 37 + 11) % 23) - 9).collect();
    let t = Tensor::<B, 1, Int>::from_data(TensorData::new(v32, [24]), d)
        .reshape([2, 3, 4])
        .permute([2, 0, 1]);
    let vu8: Vec<u8> = (0..24).map(|i| ((i * 37 + 11) % 23) as u8 * 11).collect();
    let u = Tensor::<B, 1, Int>::from_data(TensorData::new(vu8, [24]), d)
        .reshape([4, 6])
        .transpose();
    let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![2i32, 0, 3, 3], [4]), d);
    vec![
        t.clone().sum_dim(0).into_data(),
        t.clone().cumsum(2).into_data(),
        t.clone().argmax(1).into_data(),
        t.clone().sort(0).into_data(),
        t.clone().mean_dim(1).into_data(),
        t.clone().select(0, idx.clone()).into_data(),
        t.clone().abs().into_data(),
        t.clone().remainder_scalar(4).into_data(),
        t.clone().div_scalar(3).into_data(),
        t.clone().prod_dim(2).into_data(),
        u.clone().sum_dim(1).into_data(),
        u.clone().sum().into_data(),
        u.clone().cumsum(1).into_data(),
        u.clone().mean().into_data(),
        u.clone().sort_descending(0).into_data(),
        u.clone().argmin(0).into_data(),
        u.clone().max_dim(1).into_data(),
        u.clone().select(1, idx.clone()).into_data(),
        u.clone().matmul(u.clone().transpose()).into_data(),
    ]
}

#[test]
fn probe_small_int_dtypes() {
    diff!(c_small_int_dtypes, 0.0);
}

/// interpolate's backward (bilinear, bicubic, nearest) against the adjoint of its forward
/// (which matches NdArray): grad[j] = <interpolate(e_j), g> for each one-hot plane e_j.
#[test]
fn probe_interpolate_backward_is_the_adjoint_of_forward() {
    use burn::tensor::module::interpolate;
    use burn::tensor::ops::{InterpolateMode, InterpolateOptions};
    type XA = burn::backend::Autodiff<Xpu>;
    let d = xd();
    for (h, w, oh, ow) in [
        (7, 6, 5, 13),
        (40, 3, 3, 17),
        (2, 9, 1, 4),
        (5, 5, 23, 2),
        (1, 4, 6, 9),
        (30, 30, 4, 4),
    ] {
        for mode in [
            InterpolateMode::Nearest,
            InterpolateMode::Bilinear,
            InterpolateMode::Bicubic,
        ] {
            let g = iota::<Xpu, 4>([1, 1, oh, ow], &d);
            let x = iota::<XA, 4>([1, 1, h, w], &d).require_grad();
            let y = interpolate(x.clone(), [oh, ow], InterpolateOptions::new(mode.clone()));
            let gr = (y * Tensor::<XA, 4>::from_inner(g.clone()))
                .sum()
                .backward();
            let got = x.grad(&gr).unwrap().into_data().to_vec::<f32>().unwrap();
            let n = h * w;
            let eye = Tensor::<Xpu, 2>::eye(n, &d).reshape([n, 1, h, w]);
            let ys = interpolate(eye, [oh, ow], InterpolateOptions::new(mode.clone()));
            let want = (ys * g)
                .sum_dim(3)
                .sum_dim(2)
                .into_data()
                .to_vec::<f32>()
                .unwrap();
            for j in 0..n {
                assert!(
                    (got[j] - want[j]).abs() <= 1e-3 * (1.0 + want[j].abs()),
                    "{mode:?} {h}x{w} -> {oh}x{ow}: grad[{j}] {} vs adjoint {}",
                    got[j],
                    want[j]
                );
            }
        }
    }
}

fn c_deform<B: burn::tensor::backend::AutodiffBackend>(d: &B::Device) -> Vec<TensorData> {
    use burn::tensor::module::deform_conv2d;
    use burn::tensor::ops::DeformConvOptions;
    let x = iota::<B, 4>([2, 4, 5, 6], d).mul_scalar(0.1).require_grad();
    let w = iota::<B, 4>([6, 2, 3, 2], d)
        .mul_scalar(0.05)
        .require_grad();
    // offsets: [b, 2 * og * kh * kw, oh, ow] with og = 2; out = (5+2-2*2-1)/1+1 = 3? computed below
    let opts = DeformConvOptions::new([1, 2], [1, 1], [2, 1], 2, 2);
    // oh = (5 + 2 - 2*(3-1) - 1)/1 + 1 = 3; ow = (6 + 2 - 1*(2-1) - 1)/2 + 1 = 4
    let off = iota::<B, 4>([2, 2 * 2 * 3 * 2, 3, 4], d)
        .mul_scalar(0.37)
        .require_grad();
    let mask = iota::<B, 4>([2, 2 * 3 * 2, 3, 4], d)
        .mul_scalar(0.1)
        .require_grad();
    let b = iota::<B, 1>([6], d).require_grad();
    let y = deform_conv2d(
        x.clone(),
        off.clone(),
        w.clone(),
        Some(mask.clone()),
        Some(b.clone()),
        opts,
    );
    let g = y
        .clone()
        .mul(iota::<B, 4>([2, 6, 3, 4], d))
        .sum()
        .backward();
    vec![
        y.into_data(),
        x.grad(&g).unwrap().into_data(),
        off.grad(&g).unwrap().into_data(),
        w.grad(&g).unwrap().into_data(),
        mask.grad(&g).unwrap().into_data(),
        b.grad(&g).unwrap().into_data(),
    ]
}

/// NdArray's offset and mask gradients differ from xpu's at some positions: a finite
/// difference (`probe_deform_offset_grad_finite_difference`) agrees with xpu (NdArray's are
/// wrong), so only the output, input, weight and bias gradients are compared.
#[test]
fn probe_deform_conv2d() {
    type XA = burn::backend::Autodiff<Xpu>;
    type NA = burn::backend::Autodiff<NdArray>;
    let (mut a, mut b) = (c_deform::<XA>(&xd()), c_deform::<NA>(&nd()));
    for k in [4, 2] {
        a.remove(k);
        b.remove(k);
    }
    close("deform", a, b, 1e-3);
}

fn deform_loss<B: Backend>(d: &B::Device, k: usize, eps: f32, on_mask: bool) -> f64 {
    use burn::tensor::module::deform_conv2d;
    use burn::tensor::ops::DeformConvOptions;
    let x = iota::<B, 4>([2, 4, 5, 6], d).mul_scalar(0.1);
    let w = iota::<B, 4>([6, 2, 3, 2], d).mul_scalar(0.05);
    let opts = DeformConvOptions::new([1, 2], [1, 1], [2, 1], 2, 2);
    let mut ov = iota::<B, 4>([2, 24, 3, 4], d)
        .mul_scalar(0.37)
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap();
    let mut mv = iota::<B, 4>([2, 12, 3, 4], d)
        .mul_scalar(0.1)
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap();
    if on_mask {
        mv[k] += eps
    } else {
        ov[k] += eps
    }
    let off = Tensor::<B, 1>::from_floats(ov.as_slice(), d).reshape([2, 24, 3, 4]);
    let mask = Tensor::<B, 1>::from_floats(mv.as_slice(), d).reshape([2, 12, 3, 4]);
    let b = iota::<B, 1>([6], d);
    let y = deform_conv2d(x, off, w, Some(mask), Some(b), opts);
    y.mul(iota::<B, 4>([2, 6, 3, 4], d))
        .sum()
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap()[0]
}

#[test]
fn probe_deform_offset_grad_finite_difference() {
    let e = 1e-2;
    let grads = c_deform::<burn::backend::Autodiff<Xpu>>(&xd());
    for (on_mask, k) in [
        (false, 147usize),
        (false, 3),
        (false, 15),
        (true, 75),
        (true, 3),
    ] {
        let fd_nd = (deform_loss::<NdArray<f64>>(&nd(), k, e as f32, on_mask)
            - deform_loss::<NdArray<f64>>(&nd(), k, -e as f32, on_mask))
            / (2.0 * e);
        let xa = grads[if on_mask { 4 } else { 2 }]
            .clone()
            .to_vec::<f32>()
            .unwrap()[k] as f64;
        println!("k {k}: finite difference {fd_nd}, xpu {xa}");
        assert!((fd_nd - xa).abs() < 1e-3 * (1.0 + xa.abs()));
    }
}
